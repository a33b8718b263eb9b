"""Rule 8 for every output, not only the deliveries: a node's control records (with
their ``seq`` and ``answers``) and deliveries, per topic written to, are the same
whether its final input log is read in one batch or in random batches.

Before the engine delivered as each record is applied (it delivered at the end of each
batch), a record about a decided message found it delivered and settled or still
pending depending on where a batch had ended, and answered with an Abort or not: over
runs with strays (``test_compact``'s), more than half of the nodes wrote other control
records, or other ``seq``, in another batching -- so a restart or a standby, whose
batches differ, wrote what its peers could not match (an Abort answering a ``seq`` the
replay numbered otherwise is set aside, and the version stays held)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomickafka.core.engine import Algorithm
from atomickafka.core.raw import decode_any
from atomickafka.node.batch import NodeBatch, OutKind, OutRecord
from tests.unit.test_compact import STRAYS, mixed_run


def said(records: list[OutRecord]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for record in records:
        if record.kind in (OutKind.CONTROL, OutKind.DELIVERY):
            for m in decode_any(record.value, record.key, list(record.headers)):
                out.setdefault(record.topic, []).append(
                    (m.messageType.value, m.messageID, m.seq, m.answers, m.timeStamp)
                )
    return out


@pytest.mark.parametrize("algorithm", list(Algorithm))
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cut=st.integers(0, 2**32 - 1))
def test_every_output_is_a_function_of_the_log(algorithm: Algorithm, seed: int, cut: int) -> None:
    result = mixed_run(algorithm, seed, STRAYS, (False, 0))
    rng = random.Random(cut)
    for topic in result.topics:
        spec, records = result.specs[topic], result.records[topic]
        whole = NodeBatch(spec, NodeBatch.fresh_engine(spec)).step(records, wall_s=0.0)
        batch = NodeBatch(spec, NodeBatch.fresh_engine(spec))
        pieces: list[OutRecord] = []
        i = 0
        while i < len(records):
            n = rng.randint(1, 5)
            pieces += batch.step(records[i : i + n], wall_s=0.0).records
            i += n
        assert said(pieces) == said(whole.records), topic
