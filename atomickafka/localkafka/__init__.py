"""The embedded local Apache Kafka: a KRaft broker (or three) from Maven jars, no Docker.

Everything a broker needs ships inside this package: the Maven POMs naming the jars
(``poms/``) and the config templates (``templates/``), read with :mod:`importlib.resources`,
so a wheel install starts a broker as well as a source checkout does. Needs Java 17+ and,
once per Kafka version, Maven (to download the jars into ``$ATOMICKAFKA_HOME``, default
``~/.cache/atomickafka``). Brokers bind to 127.0.0.1 only and outlive the process that
started them; :func:`stop_broker` ends them::

    from atomickafka.localkafka import ensure_broker, stop_broker

    bootstrap = ensure_broker()          # "127.0.0.1:19092", started if not running
    ...
    stop_broker()                        # the default data dir, <cache>/run

Modules, each owning one thing:

- :mod:`~atomickafka.localkafka.broker` -- start, stop and inspect a cluster in a data dir.
- :mod:`~atomickafka.localkafka.jars` -- the jar cache, Java and Maven, ``fetch_kafka``.
- :mod:`~atomickafka.localkafka.configs` -- rendering the packaged config templates.
- :mod:`~atomickafka.localkafka.state` -- a data dir's layout and its ``state.json``.
- :mod:`~atomickafka.localkafka.processes` -- the broker JVMs: spawn, format, terminate.
- :mod:`~atomickafka.localkafka.ports` -- free and listening ports on 127.0.0.1.
- :mod:`~atomickafka.localkafka.locks` and :mod:`~atomickafka.localkafka.errors` --
  inter-process locks; :class:`BrokerError` and progress messages.
"""

from __future__ import annotations

from atomickafka.localkafka.broker import (
    DEFAULT_PORT,
    SUPPORTED_SIZES,
    BrokerStatus,
    broker_status,
    ensure_broker,
    purge_data_dir,
    running_bootstrap,
    stop_broker,
)
from atomickafka.localkafka.configs import render_template
from atomickafka.localkafka.errors import BrokerError, Log, log_stderr
from atomickafka.localkafka.jars import (
    MIN_JAVA,
    cache_dir,
    default_spark_version,
    fetch_kafka,
    fetch_spark_kafka,
    find_java,
    find_maven,
    kafka_lib_dir,
    kafka_version,
    spark_kafka_lib_dir,
)
from atomickafka.localkafka.ports import free_port_block
from atomickafka.localkafka.state import (
    SASL_USERS,
    BrokerSpec,
    ClusterState,
    default_data_dir,
    new_cluster_id,
)

__all__ = [
    "DEFAULT_PORT",
    "MIN_JAVA",
    "SASL_USERS",
    "SUPPORTED_SIZES",
    "BrokerError",
    "BrokerSpec",
    "BrokerStatus",
    "ClusterState",
    "Log",
    "broker_status",
    "cache_dir",
    "default_data_dir",
    "default_spark_version",
    "ensure_broker",
    "fetch_kafka",
    "fetch_spark_kafka",
    "find_java",
    "find_maven",
    "free_port_block",
    "kafka_lib_dir",
    "kafka_version",
    "log_stderr",
    "new_cluster_id",
    "purge_data_dir",
    "render_template",
    "running_bootstrap",
    "spark_kafka_lib_dir",
    "stop_broker",
]
