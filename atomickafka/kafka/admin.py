"""Creating the topics AtomicKafka needs, with the configs it relies on."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from atomickafka.errors import ConfigError, TimedOutError
from atomickafka.kafka.connection import Where, connection_of
from atomickafka.kafka.consumer import retry_transient
from atomickafka.kafka.settings import LIBRDKAFKA_LOGGER

__all__ = [
    "MIN_MESSAGE_BYTES",
    "VISIBLE_TIMEOUT_S",
    "BrokerView",
    "ConfigLag",
    "TopicSpec",
    "admin_client",
    "await_configs",
    "config_lag",
    "ensure_topics",
    "partition_count",
    "too_small",
    "wait_visible",
]

log = logging.getLogger(__name__)

#: The input log is what recovery replays: it must not expire under the node.
KEEP_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
#: Topics AtomicKafka writes must take record batches of 1 MiB (Kafka's default
#: ``max.message.bytes`` is 1,048,588): its records and producer batches go up to
#: 1,000,000 bytes plus batch headers.
MIN_MESSAGE_BYTES = 1_048_576


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic AtomicKafka needs: how many partitions, and configs it must have."""

    partitions: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


def admin_client(where: Where) -> AdminClient:
    """An AdminClient of the connection ``where`` (or of a bare bootstrap string),
    logging through :data:`~atomickafka.kafka.settings.LIBRDKAFKA_LOGGER`."""
    return AdminClient(connection_of(where).admin_config(), logger=LIBRDKAFKA_LOGGER)


def _replication_factor(admin: AdminClient) -> int:
    brokers = len(admin.list_topics(timeout=10).brokers)
    return max(1, min(3, brokers))


def _enforce_configs(admin: AdminClient, specs: Mapping[str, TopicSpec]) -> None:
    """Set ``specs``' configs on topics that exist already (e.g. auto-created by a client
    that wrote before the node started: an input log must not keep the 7-day default)."""
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                for key, value in spec.configs.items()
            ],
        )
        for name, spec in specs.items()
        if spec.configs
    ]
    if not resources:
        return
    for resource, future in admin.incremental_alter_configs(resources).items():
        future.result(timeout=60)
        log.debug("configs of %s enforced", resource.name)


def too_small(admin: AdminClient, topics: Iterable[str]) -> dict[str, int]:
    """The topics of ``topics`` whose ``max.message.bytes`` is below
    :data:`MIN_MESSAGE_BYTES`, with their value."""
    out: dict[str, int] = {}
    for name in dict.fromkeys(topics):
        # a topic another process has just created may be unknown here for a moment
        entry = retry_transient(
            lambda name=name: _describe(admin, name).get("max.message.bytes"),  # type: ignore[misc]
            f"configs of {name}",
        )
        if entry is not None and entry.value is not None and int(entry.value) < MIN_MESSAGE_BYTES:
            out[name] = int(entry.value)
    return out


def _describe(admin: AdminClient, topic: str) -> dict[str, Any]:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    configs: dict[str, Any] = future.result(timeout=30)
    return configs


def partition_count(admin: AdminClient, topic: str) -> int | None:
    """How many partitions ``topic`` has, or ``None`` if it does not exist."""
    meta = admin.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None:
        return None
    return len(meta.partitions)


def ensure_topics(
    admin: AdminClient,
    wanted: Mapping[str, TopicSpec] | Iterable[str],
    *,
    replication_factor: int | None = None,
) -> list[str]:
    """Create the missing topics of ``wanted``; return the names created.

    Topics get a replication factor of ``replication_factor``, by default
    ``min(3, brokers)``; with three or more replicas ``min.insync.replicas`` is 2 unless
    the spec says otherwise, so acks=all writes survive one loss. An existing topic
    gets the configs it must have; one with fewer partitions than wanted is an error
    (raised as :class:`~atomickafka.errors.ConfigError`: a layer without its partition
    would stall).
    """
    specs = dict(wanted) if isinstance(wanted, Mapping) else {n: TopicSpec() for n in wanted}
    existing = retry_transient(lambda: admin.list_topics(timeout=10).topics, "topic metadata")
    for name, spec in specs.items():
        meta = existing.get(name)
        if meta is not None and meta.error is None and len(meta.partitions) < spec.partitions:
            raise ConfigError(
                f"topic {name} has {len(meta.partitions)} partitions, {spec.partitions} are "
                "needed (one per layer); add partitions with kafka-topics --alter"
            )
    _enforce_configs(admin, {n: s for n, s in specs.items() if n in existing})
    missing = [name for name in specs if name not in existing]
    if not missing:
        return []
    rf = replication_factor or _replication_factor(admin)
    new = []
    for name in missing:
        config = dict(specs[name].configs)
        if rf >= 3:
            config.setdefault("min.insync.replicas", "2")
        new.append(NewTopic(name, specs[name].partitions, rf, config=config))
    created = []
    for name, future in admin.create_topics(new, operation_timeout=30).items():
        try:
            future.result(timeout=60)
            created.append(name)
            log.info("created topic %s", name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    if created:
        retry_transient(lambda: _ready(admin, created), "new topics' metadata", 30.0)
    return created


def _ready(admin: AdminClient, names: list[str]) -> None:
    """Raise a transient error until every topic of ``names`` has a leader for each
    partition and its configs can be described: on several brokers a new topic's
    metadata spreads for a while, and a request that reaches a broker without it is
    answered "unknown topic or partition" (seen in the three-broker doctor test)."""
    topics = admin.list_topics(timeout=10).topics
    for name in names:
        meta = topics.get(name)
        if (
            meta is None
            or meta.error is not None
            or not meta.partitions
            or any(p.leader < 0 for p in meta.partitions.values())
        ):
            raise KafkaException(
                KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"{name}: no leader yet")
            )
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    for future in admin.describe_configs(resources).values():
        future.result(timeout=10)


#: How long :func:`await_configs` waits for every broker to show the configs just set.
VISIBLE_TIMEOUT_S: Final = 30.0

#: One broker's view of some topics' configs: each topic's ``key -> value``, or the
#: text of the error that kept it from being read (a topic the broker does not know
#: yet, a broker that did not answer).
BrokerView = Mapping[str, Mapping[str, str | None] | str]


@dataclass(frozen=True, slots=True)
class ConfigLag:
    """A config of ``topic`` that ``broker`` does not show as set (yet): ``stale`` when
    it shows another value, else it could not be read (``what`` says why)."""

    broker: int
    topic: str
    what: str
    stale: bool

    def __str__(self) -> str:
        return f"broker {self.broker}: {self.topic} {self.what}"


def _same(shown: str | None, wanted: str) -> bool:
    """Whether a value read back is the one set: Kafka answers its canonical form (lists
    joined by ``,`` without spaces), so case and spaces do not count."""
    if shown is None:
        return False
    return shown.replace(" ", "").lower() == wanted.replace(" ", "").lower()


def config_lag(
    wanted: Mapping[str, Mapping[str, str]], views: Mapping[int, BrokerView]
) -> list[ConfigLag]:
    """What of ``wanted`` (topic -> key -> value) the brokers of ``views`` do not show:
    empty when every broker reads back every value set."""
    out = []
    for broker, view in sorted(views.items()):
        for topic, configs in wanted.items():
            if not configs:
                continue
            seen = view.get(topic, "not described")
            if isinstance(seen, str):
                out.append(ConfigLag(broker, topic, f"unreadable ({seen})", stale=False))
                continue
            for key, value in configs.items():
                if not _same(seen.get(key), value):
                    what = f"{key}={seen.get(key, '(unset)')} (set: {value})"
                    out.append(ConfigLag(broker, topic, what, stale=True))
    return out


def wait_visible(
    read: Callable[[], Mapping[int, BrokerView]],
    wanted: Mapping[str, Mapping[str, str]],
    timeout_s: float = VISIBLE_TIMEOUT_S,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[ConfigLag]:
    """Read the brokers' views (``read``) until each shows every config of ``wanted``.

    Kafka accepts a config change once its controller has committed it; each broker
    applies it from the metadata log a moment later and until then describes the old
    value (one describe, served by a broker that lags, then contradicts the change).
    Raise :class:`~atomickafka.errors.TimedOutError` when a broker still shows another
    value after ``timeout_s``; return what could not be read then (a broker that does
    not answer is not one that disagrees: the caller may warn of it).
    """
    deadline = clock() + timeout_s
    delay = 0.05
    while True:
        lag = config_lag(wanted, read())
        if not lag:
            return []
        if clock() + delay > deadline:
            stale = [x for x in lag if x.stale]
            if stale:
                raise TimedOutError(
                    f"configs set, but after {timeout_s:g} s not every broker shows them: "
                    + "; ".join(map(str, stale))
                )
            return lag
        sleep(delay)
        delay = min(1.0, delay * 2)


def _views(admin: AdminClient, topics: Iterable[str]) -> dict[int, BrokerView]:
    """Each live broker's own view of ``topics``' configs: a describe that names a broker
    resource goes to that broker, and it answers the topics of the same request from its
    metadata (a describe without one goes to whichever broker the client picks)."""
    names = list(dict.fromkeys(topics))
    views: dict[int, BrokerView] = {}
    for broker in sorted(admin.list_topics(timeout=10).brokers):
        resources = [ConfigResource(ResourceType.BROKER, str(broker))]
        resources += [ConfigResource(ResourceType.TOPIC, name) for name in names]
        futures = admin.describe_configs(resources, request_timeout=10)
        view: dict[str, Mapping[str, str | None] | str] = {}
        for resource, future in futures.items():
            if resource.restype != ResourceType.TOPIC:
                continue
            try:
                entries = future.result(timeout=15)
            except (KafkaException, TimeoutError) as exc:
                view[resource.name] = str(exc) or type(exc).__name__
                continue
            view[resource.name] = {
                key: None if entry.value is None else str(entry.value)
                for key, entry in entries.items()
            }
        views[broker] = view
    return views


def await_configs(
    admin: AdminClient,
    wanted: Mapping[str, Mapping[str, str]],
    timeout_s: float = VISIBLE_TIMEOUT_S,
) -> None:
    """Return once every live broker describes each topic of ``wanted`` with the configs
    set (``topic -> key -> value``), so that a check run next reads them wherever it
    lands; :class:`~atomickafka.errors.TimedOutError` if one still shows another value
    after ``timeout_s``. Brokers that could not be read are logged, not waited for."""
    todo = {topic: configs for topic, configs in wanted.items() if configs}
    if not todo:
        return
    unread = wait_visible(lambda: _views(admin, todo), todo, timeout_s)
    for lag in unread:
        log.warning("configs not confirmed on %s", lag)
