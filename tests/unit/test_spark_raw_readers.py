"""The two Spark jobs (the evaluation's metrics job, the audit's streaming job) each
read the raw record form with their own copy of ``raw_as_json``: ``spark-submit`` runs
each as one file that imports nothing of ours (tests/unit/test_eval_job.py,
test_audit_parts.py). This holds both copies to the codec's header names and to each
other, so that neither can drift from the wire format (docs/DESIGN.md §3.8)."""

from __future__ import annotations

import ast
import inspect
import re
from typing import Any

from atomickafka.audit import spark_job
from atomickafka.core import raw
from atomickafka.evaluation import metrics_job

_HEADER = re.compile(r'"(atomickafka-[a-z]+)"')


def _headers_read(module: Any) -> set[str]:
    return set(_HEADER.findall(inspect.getsource(module.raw_as_json)))


def _fields_built(module: Any) -> list[str]:
    """The JSON fields ``raw_as_json`` builds, in order (its ``.alias(...)`` names)."""
    tree = ast.parse(inspect.getsource(module.raw_as_json).strip())
    return [
        str(node.args[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "alias"
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value not in ("k", "v")
    ]


def test_both_jobs_read_the_raw_form_by_the_codecs_header_names() -> None:
    codec = {value for name, value in vars(raw).items() if name.startswith("H_")}
    for job in (metrics_job, spark_job):
        assert job.RAW_FORMAT_HEADER == raw.H_FORMAT
        assert job.RAW_FORMAT.encode() == raw.RAW_FORMAT
        assert _headers_read(job) <= codec, job.__name__


def test_both_copies_build_the_same_fields_from_the_same_headers() -> None:
    assert _headers_read(metrics_job) == _headers_read(spark_job)
    assert _fields_built(metrics_job) == _fields_built(spark_job)
