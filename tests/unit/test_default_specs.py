"""Issue 37, item 3: the simulators run what production runs. Both specs are built here
from the same settings -- the defaults of ``atomickafka node --topic A`` and of the
client library -- and must name the same path: control logs with markers, the direct
lane and back-pressure as the client decides them, JSON deliveries, compact control
records, the same protocol."""

from __future__ import annotations

import inspect

from atomickafka.cli import build_parser
from atomickafka.cli.node_cmd import _node_config
from atomickafka.node.batch import Ordering
from atomickafka.node.batch_types import NodeSpec
from atomickafka.node.runtime import node_spec
from atomickafka.verify.layered import LayeredSimulator
from atomickafka.verify.simulator import Simulator
from client.client import AtomicKafkaClient


def _production_spec() -> NodeSpec:
    args = build_parser().parse_args(["node", "--bootstrap-server", "127.0.0.1:9", "--topic", "A"])
    return node_spec(_node_config(args, "A", None), None)


def test_the_simulator_default_is_the_production_default() -> None:
    production = _production_spec()
    simulated = Simulator(["A"]).nodes["A"].spec
    for field in (
        "algorithm",
        "delivery_format",
        "control_format",
        "input_prefix",
        "control_prefix",
        "control_topic",
        "input_topic",
        "signer",
        "layer",
    ):
        assert getattr(simulated, field) == getattr(production, field), field
    assert Ordering.of(simulated) == Ordering.of(production)
    assert Ordering.of(production).marked  # control logs, with apply markers


def test_the_simulated_clients_decide_as_the_client_library_by_default() -> None:
    defaults = inspect.signature(AtomicKafkaClient).parameters
    sim = Simulator(["A"])
    assert sim.direct_lane[0] == defaults["direct_rate"].default
    assert sim.max_lag_s == defaults["max_lag_s"].default


def test_the_layered_simulator_default_is_the_production_default() -> None:
    production = _production_spec()
    layered = LayeredSimulator(["A"], layers=2)
    spec = layered.sims[0].nodes["A"].spec
    assert spec.control_topic is not None and production.control_topic is not None
    for field in ("algorithm", "delivery_format", "control_format"):
        assert getattr(spec, field) == getattr(production, field), field
