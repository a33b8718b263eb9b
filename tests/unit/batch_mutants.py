"""A mutant of the node's batch layer run by the simulators and the transcripts: the
compiled batch layer's methods cannot be patched on its class (compiled calls do not look
them up), so a mutant is a subclass put where the simulator builds its nodes' layers."""

from __future__ import annotations

import pytest

import atomickafka.node.standby
import atomickafka.verify.sim.node
import atomickafka.verify.sim.outages
import atomickafka.verify.sim.result
from atomickafka.node.batch import NodeBatch
from tests.unit import transcript_commands

#: Every module that builds a node's batch layer in a simulated run or a transcript.
_BUILDERS = (
    atomickafka.node.standby,
    atomickafka.verify.sim.node,
    atomickafka.verify.sim.outages,
    atomickafka.verify.sim.result,
    transcript_commands,
)


def use_batch_class(monkeypatch: pytest.MonkeyPatch, mutant: type[NodeBatch]) -> None:
    """Every node's batch layer this test builds is a ``mutant``."""
    for module in _BUILDERS:
        assert module.NodeBatch is NodeBatch, module
        monkeypatch.setattr(module, "NodeBatch", mutant)
