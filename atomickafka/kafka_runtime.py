"""The Apache Kafka runtime on this machine: Java, the broker jars and the config templates.

The broker comes as jars from Maven's default repository (``deploy/pom.xml``), copied into
``$ATOMICKAFKA_HOME/kafka-<version>/lib`` (default ``~/.cache/atomickafka``) on first use.
:mod:`atomickafka.broker` builds on this module to run brokers; nothing here starts one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

Log = Callable[[str], None]

#: Oldest Java that runs a Kafka 4 broker.
MIN_JAVA = 17
#: Bound on one Maven download run (a cold fetch takes well under a minute).
MAVEN_TIMEOUT_S = 900.0


class BrokerError(Exception):
    """A problem the user can act on; the message says what went wrong and what to do."""


def log_stderr(message: str) -> None:
    """Default progress sink: one line on stderr, prefixed with the command name."""
    print(f"atomickafka broker: {message}", file=sys.stderr, flush=True)


def deploy_dir() -> Path:
    """Folder holding ``pom.xml`` and ``templates/`` (``$ATOMICKAFKA_DEPLOY_DIR`` overrides)."""
    override = os.environ.get("ATOMICKAFKA_DEPLOY_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "deploy"


def cache_dir() -> Path:
    """Jar cache and default data dir root: ``$ATOMICKAFKA_HOME`` or ``~/.cache/atomickafka``."""
    override = os.environ.get("ATOMICKAFKA_HOME")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "atomickafka"


def _pom_property(pom: Path, name: str) -> str:
    try:
        text = pom.read_text(encoding="utf-8")
    except OSError as exc:
        raise BrokerError(f"cannot read {pom}: {exc}; is the source tree complete?") from exc
    match = re.search(rf"<{re.escape(name)}>\s*([^<\s]+)\s*</{re.escape(name)}>", text)
    if match is None:
        raise BrokerError(f"{pom} defines no <{name}> property")
    return match.group(1)


def kafka_version() -> str:
    """The Kafka version pinned in ``deploy/pom.xml`` (property ``kafka.version``)."""
    return _pom_property(deploy_dir() / "pom.xml", "kafka.version")


def kafka_lib_dir(version: str | None = None) -> Path:
    """Where the jars of Kafka ``version`` (default: the pinned one) live once fetched."""
    return cache_dir() / f"kafka-{version or kafka_version()}" / "lib"


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


@contextlib.contextmanager
def file_lock(path: Path, timeout: float, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` body."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BrokerError(
                        f"{what} is busy (another atomickafka process holds {path}); "
                        "try again when it has finished"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _maven_copy(pom: Path, dest: Path, properties: Mapping[str, str], log: Log) -> Path:
    """Copy the runtime dependencies of ``pom`` into ``dest`` unless already there."""
    if dest.is_dir():
        return dest
    with file_lock(dest.parent / ".fetch.lock", MAVEN_TIMEOUT_S, f"fetching into {dest}"):
        if dest.is_dir():  # another process fetched while we waited
            return dest
        mvn = find_maven()
        staging = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
            *(f"-D{key}={value}" for key, value in properties.items()),
            *shlex.split(os.environ.get("ATOMICKAFKA_MAVEN_ARGS", "")),
        ]
        log(f"downloading jars with Maven into {dest} (once; takes a minute)")
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise BrokerError(f"Maven did not finish within {MAVEN_TIMEOUT_S:.0f} s") from exc
        jars = list(staging.glob("*.jar")) if staging.is_dir() else []
        if done.returncode != 0 or not jars:
            shutil.rmtree(staging, ignore_errors=True)
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BrokerError(
                f"Maven could not fetch the jars (exit {done.returncode}); "
                f"check network access to the Maven repository.\n$ {shlex.join(cmd)}\n{tail}"
            )
        staging.rename(dest)
        log(f"{len(jars)} jars in {dest}")
    return dest


def fetch_kafka(log: Log = log_stderr) -> Path:
    """Make sure the broker jars are cached (download with Maven if not); return their folder."""
    version = kafka_version()
    return _maven_copy(deploy_dir() / "pom.xml", kafka_lib_dir(version), {}, log)


def fetch_spark_kafka(spark_version: str, log: Log = log_stderr) -> Path:
    """Cache ``spark-sql-kafka-0-10_2.13:<spark_version>`` and its runtime jars.

    The jars go to ``<cache>/spark-kafka-<version>/lib``; pass them to Spark with ``spark.jars``.
    """
    if not re.fullmatch(r"[0-9][0-9A-Za-z.\-]*", spark_version):
        raise BrokerError(f"not a Spark version: {spark_version!r}")
    dest = cache_dir() / f"spark-kafka-{spark_version}" / "lib"
    pom = deploy_dir() / "spark" / "pom.xml"
    return _maven_copy(pom, dest, {"spark.version": spark_version}, log)


_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def render_template(name: str, values: Mapping[str, object]) -> str:
    """Fill the ``@NAME@`` placeholders of ``deploy/templates/<name>``; all must be given."""
    path = deploy_dir() / "templates" / name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BrokerError(f"cannot read template {path}: {exc}") from exc

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise BrokerError(f"template {path} uses @{key}@, which has no value")
        return str(values[key])

    return _PLACEHOLDER.sub(fill, text)
