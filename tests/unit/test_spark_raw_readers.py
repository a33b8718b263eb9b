"""The two Spark jobs (the evaluation's metrics job, the audit's streaming job) read the
raw record form through one function, ``atomickafka/spark_raw.py::raw_as_json``, which
imports only pyspark so that ``spark-submit`` can ship it beside either job. This holds
it to the codec's header names (docs/DESIGN.md §3.8), checks both jobs use it, and runs
a job file where the atomickafka package cannot be imported, with ``spark_raw.py``
beside it (as ``--py-files`` puts it)."""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from atomickafka import spark_raw
from atomickafka.audit import spark_job
from atomickafka.core import raw
from atomickafka.core.compact import (
    MAGIC,
    decode_compact,
    encode_compact_bundle,
    encode_compact_tick,
)
from atomickafka.core.wire import Message
from atomickafka.evaluation.suite import metrics_job
from tests.unit.test_compact import bundled

_HEADER = re.compile(r'"(atomickafka-[a-z]+)"')


def test_the_raw_reader_reads_the_codecs_header_names() -> None:
    codec = {value for name, value in vars(raw).items() if name.startswith("H_")}
    assert spark_raw.RAW_FORMAT_HEADER == raw.H_FORMAT
    assert spark_raw.RAW_FORMAT.encode() == raw.RAW_FORMAT
    read = set(_HEADER.findall(inspect.getsource(spark_raw.raw_as_json)))
    assert read <= codec
    assert {raw.H_ID, raw.H_TYPE, raw.H_TO, raw.H_TS, raw.H_LAYER} <= read


def test_both_jobs_use_the_one_raw_reader() -> None:
    assert vars(metrics_job)["raw_as_json"] is spark_raw.raw_as_json
    assert vars(spark_job)["raw_as_json"] is spark_raw.raw_as_json


def test_a_job_file_runs_without_the_package_given_the_raw_reader_beside_it(
    tmp_path: Path,
) -> None:
    """``spark-submit JOB --py-files spark_raw.py`` on a cluster without atomickafka:
    the job's fallback import finds the shipped file (here: the job's folder)."""
    shutil.copy(inspect.getfile(metrics_job), tmp_path / "metrics_job.py")
    shutil.copy(inspect.getfile(spark_raw), tmp_path / "spark_raw.py")
    blocker = (
        "import sys, runpy\n"
        "class NoAtomicKafka:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'atomickafka' or name.startswith('atomickafka.'):\n"
        "            raise ImportError('no atomickafka here')\n"
        "sys.meta_path.insert(0, NoAtomicKafka())\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "sys.argv = ['metrics_job.py', '--help']\n"
        f"runpy.run_path({str(tmp_path / 'metrics_job.py')!r}, run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocker], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--runs" in done.stdout


# ---------------------------------------------------------------------------- compact form


@given(st.lists(bundled(), min_size=1, max_size=6), st.none() | st.integers(0, 2**31 - 1))
def test_the_compact_reader_reads_what_the_codec_writes(
    messages: list[Message], layer: int | None
) -> None:
    """The metrics job's own parser of the compact form (docs/DESIGN.md §3.9) finds each
    inner message's type, id and timestamp, and the writer, as the codec decodes them."""
    record = encode_compact_bundle(
        messages, sender_id="node-B", sent_from="B", protocol="direct", partition=layer
    )
    decoded = decode_compact(record)
    inner = [{"messageType": m.messageType.value, "messageID": m.messageID} | (
        {} if m.timeStamp is None else {"timeStamp": m.timeStamp}) for m in decoded]  # fmt: skip
    assert json.loads(spark_raw.compact_json(record) or "null") == {
        "messageType": "Bundle", "senderID": "node-B", "sentFromTopic": "B", "messages": inner,
    }  # fmt: skip
    tick = encode_compact_tick("merger-B", 7, layer)
    assert json.loads(spark_raw.compact_json(tick) or "null") == {
        "messageType": "TickMessage", "messageID": "tick-7", "senderID": "merger-B",
        "timeStamp": 7,
    }  # fmt: skip


@given(st.binary(max_size=200))
def test_the_compact_reader_never_raises(tail: bytes) -> None:
    for value in (tail, bytes([spark_raw.COMPACT_MAGIC, 1]) + tail):
        spark_raw.compact_json(value)
    assert spark_raw.compact_json(b'{"messageType":"Bundle"}') is None
    assert spark_raw.COMPACT_MAGIC == MAGIC
