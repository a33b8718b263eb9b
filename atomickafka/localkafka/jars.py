"""The jars on this machine: the Kafka broker's, Spark's Kafka connector and the Kafka
Streams baseline's, plus Java and Maven.

All come from Maven's default repository. The POMs naming them are package data
(``poms/kafka.xml``, ``poms/spark.xml``, ``poms/streams-fanout.xml``), so an installed
wheel can fetch them too; ``mvn dependency:copy-dependencies`` copies the runtime jars
once into ``$ATOMICKAFKA_HOME/kafka-<version>/lib`` or ``.../spark-kafka-<version>/lib``
(default ``$ATOMICKAFKA_HOME``: ``~/.cache/atomickafka``). The Streams baseline is also
compiled: its Java source (``java/StreamsFanOut.java``, package data) is built with
Maven against the broker's Kafka version into
``$ATOMICKAFKA_HOME/streams-fanout-<version>-<digest of POM and source>/lib``.
``$ATOMICKAFKA_MAVEN_ARGS`` adds Maven arguments (e.g. ``-s settings.xml`` for a
mirror). Nothing here starts a broker.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

from atomickafka.localkafka.errors import BrokerError, Log, log_stderr
from atomickafka.localkafka.locks import file_lock

__all__ = [
    "MIN_JAVA",
    "cache_dir",
    "default_spark_version",
    "fetch_kafka",
    "fetch_kafka_tools",
    "fetch_spark_kafka",
    "fetch_streams_app",
    "find_java",
    "find_maven",
    "kafka_lib_dir",
    "kafka_tools_dir",
    "kafka_version",
    "spark_kafka_lib_dir",
    "streams_app_dir",
]

#: Oldest Java that runs a Kafka 4 broker.
MIN_JAVA = 17
#: Bound on one Maven download run (a cold fetch takes well under a minute).
MAVEN_TIMEOUT_S = 900.0
KAFKA_POM = "kafka.xml"
#: Kafka's command-line tools (``kafka-tools``, which the broker's jars lack).
KAFKA_TOOLS_POM = "kafka-tools.xml"
SPARK_POM = "spark.xml"
#: The Kafka Streams baseline: its POM, and its Java source as laid out in a Maven project.
STREAMS_POM = "streams-fanout.xml"
STREAMS_SOURCES: Final = {
    "src/main/java/io/atomickafka/baseline/StreamsFanOut.java": "java/StreamsFanOut.java"
}


def cache_dir() -> Path:
    """Jar cache and default data dir root: ``$ATOMICKAFKA_HOME`` or ``~/.cache/atomickafka``."""
    override = os.environ.get("ATOMICKAFKA_HOME")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "atomickafka"


def _packaged(path: str) -> Traversable:
    return resources.files(__package__ or "atomickafka.localkafka") / path


def _pom(name: str) -> Traversable:
    return _packaged(f"poms/{name}")


def _pom_property(name: str, prop: str) -> str:
    pom = _pom(name)
    try:
        text = pom.read_text(encoding="utf-8")
    except OSError as exc:
        raise BrokerError(
            f"cannot read {pom}: {exc}; is the atomickafka installation complete?"
        ) from exc
    match = re.search(rf"<{re.escape(prop)}>\s*([^<\s]+)\s*</{re.escape(prop)}>", text)
    if match is None:
        raise BrokerError(f"{pom} defines no <{prop}> property")
    return match.group(1)


def kafka_version() -> str:
    """The Kafka version pinned in the broker POM, ``poms/kafka.xml`` (``kafka.version``)."""
    return _pom_property(KAFKA_POM, "kafka.version")


def default_spark_version() -> str:
    """The Spark version the connector POM, ``poms/spark.xml``, names when given none."""
    return _pom_property(SPARK_POM, "spark.version")


def kafka_lib_dir(version: str | None = None) -> Path:
    """Where the jars of Kafka ``version`` (default: the pinned one) live once fetched."""
    return cache_dir() / f"kafka-{version or kafka_version()}" / "lib"


def kafka_tools_dir(version: str | None = None) -> Path:
    """Where the jars of Kafka ``version``'s command-line tools live once fetched."""
    return cache_dir() / f"kafka-{version or kafka_version()}" / "tools"


def spark_kafka_lib_dir(spark_version: str) -> Path:
    """Where Spark's Kafka connector jars for ``spark_version`` live once fetched."""
    return cache_dir() / f"spark-kafka-{spark_version}" / "lib"


def find_java() -> str:
    """Return the ``java`` executable (``$JAVA_HOME/bin/java`` first), checking it is >= 17."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else None
    if candidate is None or not os.access(candidate, os.X_OK):
        candidate = shutil.which("java")
    if candidate is None:
        raise BrokerError(
            f"Java not found: install a JDK or JRE {MIN_JAVA}+ "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
        )
    try:
        out = subprocess.run(
            [candidate, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerError(f"cannot run {candidate} -version: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        raise BrokerError(f"cannot tell the version of {candidate}: {out.stderr.strip()!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise BrokerError(
            f"{candidate} is Java {major}; Kafka 4 needs Java {MIN_JAVA}+ "
            "(install openjdk-17 and put it first on PATH or set JAVA_HOME)"
        )
    return candidate


def find_maven() -> str:
    """Return the ``mvn`` executable or explain how to get one."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            "Maven (`mvn`) not found; it is needed once to download the Kafka jars: "
            "install it (e.g. `apt-get install maven`) or copy the jars into "
            f"{kafka_lib_dir()}"
        )
    return mvn


def _maven_copy(
    pom_name: str,
    dest: Path,
    properties: Mapping[str, str],
    log: Log,
    sources: Mapping[str, Traversable] | None = None,
) -> Path:
    """Copy the runtime dependencies of POM ``pom_name`` into ``dest`` unless already
    there. With ``sources`` (path in a Maven project -> packaged file), the POM is a
    project of its own: it and the sources are copied into a build folder, Maven
    compiles and packages them, and their jar joins the dependencies in ``dest``."""
    if dest.is_dir():
        return dest
    with file_lock(dest.parent / ".fetch.lock", MAVEN_TIMEOUT_S, f"fetching into {dest}"):
        if dest.is_dir():  # another process fetched while we waited
            return dest
        mvn = find_maven()
        staging = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
        build = dest.with_name(f"{dest.name}.build-{os.getpid()}")
        for folder in (staging, build):
            shutil.rmtree(folder, ignore_errors=True)
        goals = ["dependency:copy-dependencies"]
        if sources is not None:
            goals = ["package", *goals]
            _lay_out_project(build, _pom(pom_name), sources)
        try:
            # as_file: Maven needs a real file, even if the package were imported from a zip.
            with resources.as_file(_pom(pom_name)) as packaged_pom:
                pom = packaged_pom if sources is None else build / "pom.xml"
                done = _run_maven(mvn, pom, goals, staging, properties, dest, log)
            if sources is not None and done.returncode == 0:
                for jar in (build / "target").glob("*.jar"):
                    shutil.copy2(jar, staging / jar.name)
        finally:
            shutil.rmtree(build, ignore_errors=True)
        jars = list(staging.glob("*.jar")) if staging.is_dir() else []
        if done.returncode != 0 or not jars:
            shutil.rmtree(staging, ignore_errors=True)
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BrokerError(
                f"Maven could not fetch the jars (exit {done.returncode}); "
                f"check network access to the Maven repository.\n$ {shlex.join(done.args)}\n{tail}"
            )
        staging.rename(dest)
        log(f"{len(jars)} jars in {dest}")
    return dest


def _lay_out_project(build: Path, pom: Traversable, sources: Mapping[str, Traversable]) -> None:
    """A Maven project in ``build``: ``pom`` as its ``pom.xml``, each source at its path."""
    build.mkdir(parents=True)
    (build / "pom.xml").write_bytes(pom.read_bytes())
    for relative, source in sources.items():
        target = build / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())


def _run_maven(
    mvn: str,
    pom: Path,
    goals: list[str],
    output: Path,
    properties: Mapping[str, str],
    dest: Path,
    log: Log,
) -> subprocess.CompletedProcess[str]:
    """Run Maven's ``goals`` on ``pom``, the runtime dependencies copied to ``output``
    (bounded by :data:`MAVEN_TIMEOUT_S`)."""
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(pom),
        *goals,
        "-DincludeScope=runtime",
        f"-DoutputDirectory={output}",
        *(f"-D{key}={value}" for key, value in properties.items()),
        *shlex.split(os.environ.get("ATOMICKAFKA_MAVEN_ARGS", "")),
    ]
    log(f"downloading jars with Maven into {dest} (once; takes a minute)")
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(output, ignore_errors=True)
        raise BrokerError(f"Maven did not finish within {MAVEN_TIMEOUT_S:.0f} s") from exc


def fetch_kafka(log: Log = log_stderr) -> Path:
    """Make sure the broker jars are cached (download with Maven if not); return their folder."""
    return _maven_copy(KAFKA_POM, kafka_lib_dir(kafka_version()), {}, log)


def fetch_kafka_tools(log: Log = log_stderr) -> Path:
    """Make sure Kafka's command-line tools are cached beside the broker's jars (their
    runtime jars, ``kafka-tools`` and what it needs); return their folder."""
    version = kafka_version()
    return _maven_copy(KAFKA_TOOLS_POM, kafka_tools_dir(version), {"kafka.version": version}, log)


def fetch_spark_kafka(spark_version: str, log: Log = log_stderr) -> Path:
    """Cache ``spark-sql-kafka-0-10_2.13:<spark_version>`` and its runtime jars.

    The jars go to :func:`spark_kafka_lib_dir`; pass them to Spark with ``spark.jars``.
    ``spark_version`` must match the installed pyspark (see :func:`default_spark_version`).
    """
    if not re.fullmatch(r"[0-9][0-9A-Za-z.\-]*", spark_version):
        raise BrokerError(f"not a Spark version: {spark_version!r}")
    properties = {"spark.version": spark_version}
    return _maven_copy(SPARK_POM, spark_kafka_lib_dir(spark_version), properties, log)


def _streams_sources() -> dict[str, Traversable]:
    return {target: _packaged(source) for target, source in STREAMS_SOURCES.items()}


def streams_app_dir() -> Path:
    """Where the Kafka Streams baseline's jars (its own and its dependencies) live once
    built: named after the broker's Kafka version and a digest of its POM and source,
    so that a changed source is built again."""
    digest = hashlib.blake2b(digest_size=4)
    for item in (_pom(STREAMS_POM), *_streams_sources().values()):
        try:
            digest.update(item.read_bytes())
        except OSError as exc:
            raise BrokerError(
                f"cannot read {item}: {exc}; is the atomickafka installation complete?"
            ) from exc
    return cache_dir() / f"streams-fanout-{kafka_version()}-{digest.hexdigest()}" / "lib"


def fetch_streams_app(log: Log = log_stderr) -> Path:
    """Make sure the Kafka Streams baseline is built (Maven compiles its Java source
    against ``kafka-streams`` of the broker's version, once); return its jars' folder."""
    properties = {"kafka.version": kafka_version()}
    return _maven_copy(STREAMS_POM, streams_app_dir(), properties, log, _streams_sources())
