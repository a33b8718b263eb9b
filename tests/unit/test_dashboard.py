"""The Grafana dashboard (deploy/grafana/dashboards/atomickafka.json) is well-formed and
built on exactly the metric names the nodes, mergers and cluster export; docs/operators.md
documents every one of them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from atomickafka.metrics.cluster import RestartsCollector
from atomickafka.metrics.shell import ShellMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "atomickafka.json"
#: What a family of each type shows as samples.
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def exported() -> dict[str, list[str]]:
    """Each exported family's exposition name (``_total`` on counters) -> its sample names."""
    registry = CollectorRegistry()
    ShellMetrics("node", "T", registry=registry)
    ShellMetrics("merger", "T", registry=registry)
    registry.register(RestartsCollector(dict))
    out: dict[str, list[str]] = {}
    for family in registry.collect():
        shown = family.name + ("_total" if family.type == "counter" else "")
        out[shown] = [family.name + suffix for suffix in SUFFIXES[family.type]]
    return out


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def expressions(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(board) for t in p.get("targets", [])]


def used_names(board: dict[str, Any]) -> set[str]:
    return {n for e in expressions(board) for n in re.findall(r"\batomickafka_\w+", e)}


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] == "atomickafka" and board["title"] == "AtomicKafka"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["x"] + box["w"] <= 24 and box["h"] > 0
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["description"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


def test_every_metric_the_dashboard_uses_is_exported() -> None:
    samples = {name for names in exported().values() for name in names}
    assert used_names(dashboard()) <= samples, used_names(dashboard()) - samples


def test_the_dashboard_shows_every_exported_family() -> None:
    used = used_names(dashboard())
    missing = [shown for shown, names in exported().items() if not set(names) & used]
    assert not missing


def test_every_exported_metric_is_in_the_readmes_table() -> None:
    text = (ROOT / "docs" / "operators.md").read_text(encoding="utf-8")
    missing = [shown for shown in exported() if f"`{shown}`" not in text]
    assert not missing
