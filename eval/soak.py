"""Soak and recovery benchmark: memory over a long run, recovery after a crash, standby
takeover, and the two delivery modes (issue 16). What each phase measures, and how, is
in docs/soak.md; the phases live in ``atomickafka/evaluation/soak/``.

1. ``soak``: 1,000,000 messages through 5 topics (one node each), 50 % multicast to 2
   topics, paced; each node's RSS sampled against the messages delivered; a plot.
2. ``recovery``: after a fill of 100,000 and 1,000,000 messages, SIGKILL a node (the
   supervisor restarts it), with snapshots and without: kill to live, kill to the next
   delivery.
3. ``takeover``: ``cluster --standby``; SIGKILL the active node, 3 times, with
   ``--takeover-after`` 6 s (the default) and 2 s.
4. ``modes``: ``atomickafka bench`` with exactly-once and with at-least-once nodes:
   capacity and latency at 1,000 msg/s, and the project's rule on them.

Without ``--bootstrap-server`` it starts the embedded broker on loopback (its own data
dir, removed at the end). Loopback only. Writes ``results.json``, ``summary.md`` and
``soak-memory.png`` to ``--out``. Usage::

    flock /tmp/atomickafka-heavy.lock .venv/bin/python eval/soak.py [--phases soak,modes]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from atomickafka.cli.options import parse_fanout
from atomickafka.errors import AtomicKafkaError
from atomickafka.evaluation.soak.common import LoadShape, load_average
from atomickafka.evaluation.soak.faults import FaultSettings, run_recovery, run_takeover
from atomickafka.evaluation.soak.memory import SoakSettings, run_soak
from atomickafka.evaluation.soak.modes import ModeSettings, run_modes
from atomickafka.evaluation.soak.report import markdown, plot_memory, write_json
from atomickafka.kafka.connection import Connection
from atomickafka.localkafka import ensure_broker, free_port_block, purge_data_dir, stop_broker

PHASES = ("soak", "recovery", "takeover", "modes")
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def _numbers(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    return lambda text: [kind(x.replace("_", "")) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-server", default=None, help="default: start the embedded one")
    p.add_argument("--out", type=Path, default=None, help="default eval/results/soak-<UTC time>")
    p.add_argument("--phases", default=",".join(PHASES), help="any of " + ",".join(PHASES))
    p.add_argument("--topics", type=int, default=5, help="topics, one node each")
    p.add_argument("--share", type=float, default=0.5, help="share of messages multicast")
    p.add_argument("--fanout", type=parse_fanout, default=(2, 2), help="multicast size LO-HI")
    p.add_argument("--record-size", type=int, default=200, help="bytes of each value")
    p.add_argument("--no-check", action="store_true", help="skip the order checker")
    g = p.add_argument_group("soak")
    g.add_argument("--soak-messages", type=int, default=1_000_000)
    g.add_argument("--soak-rate", type=float, default=1000.0, help="msg/s (0: unpaced)")
    g.add_argument("--soak-senders", type=int, default=2, help="client processes")
    g.add_argument("--sample-interval", type=float, default=2.0, help="seconds")
    g.add_argument("--warmup-seconds", type=float, default=90.0, help="before 'start'")
    g.add_argument("--soak-timeout", type=float, default=3600.0, help="seconds")
    g = p.add_argument_group("recovery and takeover")
    g.add_argument("--recovery-sizes", type=_numbers(int), default=[100_000, 1_000_000])
    g.add_argument("--recovery-snapshots", default="on,off", help="on, off or on,off")
    g.add_argument("--fill-senders", type=int, default=2, help="client processes of a fill")
    g.add_argument("--trickle-rate", type=float, default=100.0, help="msg/s around a kill")
    g.add_argument("--steady-seconds", type=float, default=5.0, help="trickle before a kill")
    g.add_argument("--kill-timeout", type=float, default=600.0, help="seconds per kill")
    g.add_argument("--takeover-after", type=_numbers(float), default=[6.0, 2.0])
    g.add_argument("--takeover-repeats", type=int, default=3)
    g.add_argument("--settle-seconds", type=float, default=15.0, help="between takeovers")
    g = p.add_argument_group("modes")
    g.add_argument("--modes-messages", type=int, default=20_000, help="per bench run")
    g.add_argument("--modes-rate", type=float, default=1000.0, help="paced msg/s")
    g.add_argument("--modes-repeats", type=int, default=2, help="bench runs per mode")
    g.add_argument("--modes-fanout", type=parse_fanout, default=None, help="default: every topic")
    args = p.parse_args(argv)
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    unknown = set(args.phases) - set(PHASES)
    if unknown:
        p.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if args.bootstrap_server and not all(
        hp.strip().rsplit(":", 1)[0] in LOOPBACK for hp in args.bootstrap_server.split(",")
    ):
        p.error("the soak sends load: give a broker on loopback (127.0.0.1) only")
    return args


@contextlib.contextmanager
def _broker(bootstrap: str | None) -> Iterator[str]:
    """``bootstrap``, or an embedded broker of its own for the block (stopped, and its
    data removed, at the end)."""
    if bootstrap:
        yield bootstrap
        return
    data_dir = Path(tempfile.mkdtemp(prefix="atomickafka-soak-"))
    try:
        yield ensure_broker(1, data_dir, port=free_port_block(2), timeout=180)
    finally:
        stop_broker(data_dir)
        purge_data_dir(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _run_phases(
    args: argparse.Namespace, connection: Connection, out: Path, results: dict[str, Any]
) -> None:
    shape = LoadShape(args.topics, args.share, args.fanout, args.record_size)
    faults = FaultSettings(
        args.trickle_rate,
        args.steady_seconds,
        args.kill_timeout,
        args.fill_senders,
        settle_s=args.settle_seconds,
        check=not args.no_check,
    )
    phases: dict[str, Any] = results["phases"]

    def save() -> None:  # after every run: a later failure keeps what was measured
        write_json(out / "results.json", results)

    if "soak" in args.phases:
        settings = SoakSettings(
            args.soak_messages,
            args.soak_rate or None,
            args.soak_senders,
            args.sample_interval,
            args.warmup_seconds,
            args.soak_timeout,
            check=not args.no_check,
        )
        phases["soak"] = run_soak(connection, shape, settings, out)
        save()
    if "recovery" in args.phases:
        phases["recovery"] = []
        snapshots = [x.strip() == "on" for x in args.recovery_snapshots.split(",") if x.strip()]
        for size in args.recovery_sizes:
            for with_snapshots in snapshots:
                phases["recovery"].append(
                    run_recovery(connection, shape, size, with_snapshots, faults, out)
                )
                save()
    if "takeover" in args.phases:
        phases["takeover"] = []
        for after in args.takeover_after:
            phases["takeover"].append(
                run_takeover(connection, shape, after, args.takeover_repeats, faults, out)
            )
            save()
    if "modes" in args.phases:
        modes = ModeSettings(
            args.modes_messages,
            args.modes_rate,
            args.share,
            args.topics,
            args.modes_fanout,
            args.record_size,
            args.modes_repeats,
        )
        phases["modes"] = run_modes(connection, modes)
        save()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected phases; write the results; 0 when every phase completed and
    every order check passed."""
    args = parse_args(argv)
    started = datetime.now(UTC)
    out = args.out or Path("eval/results") / f"soak-{started:%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "load_before": load_average(),
        "phases": {},
    }
    failed: str | None = None
    try:
        with _broker(args.bootstrap_server) as bootstrap:
            _run_phases(args, Connection(bootstrap), out, results)  # loopback: no -X
    except AtomicKafkaError as exc:  # one line, what was measured so far is kept
        failed = f"{type(exc).__name__}: {exc}"
        results["failed"] = failed
    finally:
        results["load_after"] = load_average()
        write_json(out / "results.json", results)
        plot = None
        soak = results["phases"].get("soak")
        if soak is not None:
            plot = str(out / "soak-memory.png")
            title = f"Node memory over {soak['latency']['delivered']:,} messages: {soak['shape']}"
            plot_memory(soak["samples"], args.warmup_seconds, title, Path(plot))
        if results["phases"]:
            (out / "summary.md").write_text(markdown(results, plot))
        print(f"results in {out}")
    if failed is not None:
        print(f"soak: a phase failed: {failed}", file=sys.stderr)
        return 1
    return 0 if _all_good(results["phases"]) else 1


def _all_good(phases: dict[str, Any]) -> bool:
    runs: list[dict[str, Any]] = []
    for phase in phases.values():
        runs += phase if isinstance(phase, list) else [phase]
    checks_ok = all(r.get("check", {}).get("ok", True) for r in runs)
    soak = phases.get("soak")
    return checks_ok and (soak is None or bool(soak.get("complete")))


if __name__ == "__main__":
    sys.exit(main())
