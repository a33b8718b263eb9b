"""``atomickafka status``: every node's and merger's pending work, rates and liveness,
and the messages that hold a queue's head with what they wait for.

It serves as a health check: the exit status is 0 when every node and merger shown is
live and none has held its queue head longer than ``--stuck-after``, 1 when one is
stale, stuck, stopped or missing (or none has published), 2 for bad usage. Without
``--topics``, nodes that stopped cleanly are forgotten (a retired topic); ``--all``
shows them, and then a stopped one fails the check, as ``doctor`` fails it. With
``--topics`` every node of each topic named is expected: one that stopped is shown and
fails the check, and a topic none of whose nodes ever published is listed as
``missing`` (so is a layer or merger of a partitioned topic that never published).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import orjson

from atomickafka.cli.options import (
    EXIT_FAILURE,
    add_bootstrap,
    add_overrides,
    connection,
    fail,
    guarded,
    reach,
)
from atomickafka.kafka.status import Role, Status, odd_signers, read_statuses
from atomickafka.kafka.topics import dead_letter_topic, merger_key, node_key

__all__ = ["register", "status_entry"]


def register(subparsers: Any) -> None:
    """Add the ``status`` sub-command."""
    parser = subparsers.add_parser(
        "status", help="show every node's pending work, rates and stuck messages"
    )
    add_bootstrap(parser)
    add_overrides(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per node: its status record, statusAgeSeconds and health",
    )
    parser.add_argument(
        "--stuck-after",
        type=float,
        default=5.0,
        help="a head waiting longer is stuck: listed, and the exit status is 1 (seconds)",
    )
    parser.add_argument(
        "--all", action="store_true", help="also show the nodes that stopped cleanly"
    )
    parser.add_argument(
        "--topics",
        default=None,
        metavar="T1,T2,...",
        help="only these topics' nodes and mergers (default: every one that published)",
    )
    parser.set_defaults(func=guarded("status", _run))


def status_entry(status: Status, now: float, health: str) -> dict[str, Any]:
    """What ``status --json`` prints of one node: its status record, how old it is
    (``statusAgeSeconds``) and the ``health`` computed from it (``live``, ``replaying``,
    ``stuck``, ``stale``, ``stopped``)."""
    return status.to_dict() | {"statusAgeSeconds": round(status.age_s(now), 1), "health": health}


def _state(status: Status, now: float, stuck_after_s: float) -> str:
    """``stopped``, ``stale``, ``stuck``, ``replaying`` or ``live``."""
    if status.is_stopped:
        return "stopped"
    if not status.live(now):
        return "stale"
    if (status.oldest_pending_age_s or 0.0) >= stuck_after_s and status.head is not None:
        return "stuck"
    return "replaying" if status.replaying else "live"


#: States that make the exit status 1 (``stopped`` only where the node is expected:
#: named by ``--topics``, or shown by ``--all``).
_UNHEALTHY = frozenset({"stale", "stuck", "stopped", "missing"})
#: The health of an expected node that never published a status.
MISSING = "missing"


def _held_head(status: Status, stuck_after_s: float) -> str | None:
    """What holds the head of ``status``'s queue, when it has held it long enough to
    matter (a merger: whenever a layer holds it)."""
    head = status.head
    head_age = status.oldest_pending_age_s or 0.0
    merging = status.role is Role.MERGER
    if head is None or not (head_age >= stuck_after_s or (merging and status.blocked_by)):
        return None
    what = ", ".join(head.waiting_for) or "its decision"
    if merging and status.watermark is not None:
        what += f" (watermark lag {head.timestamp - status.watermark})"
    return f"{head.message_id} holds the head for {head_age:.0f}s, waiting for {what}"


def _wanted(args: argparse.Namespace) -> tuple[str, ...]:
    """The topics of ``--topics``, in order (empty: every one that published)."""
    return tuple(dict.fromkeys(t.strip() for t in (args.topics or "").split(",") if t.strip()))


def _chosen(args: argparse.Namespace, statuses: dict[str, Status]) -> dict[str, Status] | str:
    """The statuses ``args`` asks for (``--topics``), or why there are none."""
    if not statuses:
        return "no node has published a status yet"
    wanted = _wanted(args)
    if wanted:
        statuses = {k: s for k, s in statuses.items() if s.topic in wanted}
        if not statuses:
            return f"no node of {args.topics} has published"
    return statuses


def missing_keys(topics: tuple[str, ...], statuses: dict[str, Status]) -> list[tuple[str, str]]:
    """``(key, topic)`` of every node and merger of ``topics`` that never published: a
    topic without any status, and the layers and merger of a partitioned topic that its
    published statuses name but that did not publish themselves."""
    out: list[tuple[str, str]] = []
    for topic in topics:
        mine = [s for s in statuses.values() if s.topic == topic]
        layers = max((s.partitions for s in mine), default=1)
        keys = [node_key(topic)]
        if layers > 1:
            keys = [node_key(topic, p) for p in range(layers)] + [merger_key(topic)]
        out += [(key, topic) for key in keys if key not in statuses]
    return out


def _print_table(statuses: dict[str, Status], states: dict[str, str], args: argparse.Namespace,
                 now: float) -> list[str]:  # fmt: skip
    """One line per node; return what waits (stuck heads, other protocols)."""
    print(
        f"{'NODE':<28} {'PROTOCOL':<9} {'PENDING':>8} {'HEAD AGE':>9} {'DELIV/S':>9} "
        f"{'IN/S':>9} {'DLQ':>5} {'WATERMARK':>10}  SEEN"
    )
    stuck: list[str] = []
    for key, (theirs, usual) in sorted(odd_signers(statuses.values()).items()):
        stuck.append(
            f"{key}: signs with another secret than the other nodes (key id {theirs}, "
            f"theirs {usual}): each side sets the other's records aside and the messages "
            "they share wait; restart it with the deployment's --secret-file"
        )
    for key in sorted(statuses):
        s = statuses[key]
        age = "-" if s.oldest_pending_age_s is None else f"{s.oldest_pending_age_s:.1f}s"
        mark = "-" if s.watermark is None else str(s.watermark)
        if s.layers:
            marks = [state.watermark for state in s.layers]
            mark = f"{min(marks)}..{max(marks)}"
        print(
            f"{key:<28} {s.algorithm:<9} {s.pending:>8} {age:>9} {s.deliveries_per_s:>9.1f} "
            f"{s.records_in_per_s:>9.1f} {s.dead_letters:>5} {mark:>10}  "
            f"{s.age_s(now):.0f}s ago ({states[key]})"
        )
        for sender, count in sorted(s.bad_signatures.items()):
            stuck.append(
                f"{key}: {count} records claiming to come from {sender} failed the signature "
                f"check: signed with a secret this node does not hold (is {sender}'s "
                "--secret-file the deployment's? or this node's?)"
            )
        for sender, count in sorted(s.newer_formats.items()):
            stuck.append(
                f"{key}: {count} records from {sender} are of a newer format than this node "
                "reads: upgrade this node (messages shared with it wait until then)"
            )
        if s.protocol_mismatches:
            stuck.append(
                f"{key}: {s.protocol_mismatches} records of another protocol set aside "
                f"(see {dead_letter_topic(s.topic)})"
            )
        line = _held_head(s, args.stuck_after)
        if line is not None:
            stuck.append(f"{key}: {line}")
    return stuck


def _run(args: argparse.Namespace) -> int:
    reach(args)
    chosen = _chosen(args, read_statuses(connection(args)))
    if isinstance(chosen, str):
        return fail("status", chosen, EXIT_FAILURE)
    statuses = chosen
    now = time.time()
    states = {key: _state(s, now, args.stuck_after) for key, s in statuses.items()}
    missing = missing_keys(_wanted(args), statuses)
    if not args.all and not args.topics:  # retired topics' nodes stopped for good
        statuses = {k: s for k, s in statuses.items() if states[k] != "stopped"}
        if not statuses:
            return fail("status", "every node has stopped (--all shows them)", EXIT_FAILURE)
    states.update((key, MISSING) for key, _ in missing)
    shown = sorted([*statuses, *(key for key, _ in missing)])
    unhealthy = [k for k in shown if states[k] in _UNHEALTHY]
    code = EXIT_FAILURE if unhealthy else 0
    if args.json:
        for key, topic in missing:
            print(orjson.dumps({"key": key, "topic": topic, "health": MISSING}).decode())
        for key in sorted(statuses):
            print(orjson.dumps(status_entry(statuses[key], now, states[key])).decode())
        return code
    stuck = _print_table(statuses, states, args, now)
    for key, _ in missing:
        print(f"{key:<28} {'-':<9} {'-':>8} {'-':>9} {'-':>9} {'-':>9} {'-':>5} {'-':>10}  "
              "never (missing: no status published)")  # fmt: skip
    if stuck:
        print("\nwaiting:")
        for line in stuck:
            print(f"  {line}")
    if unhealthy:
        print(f"\nunhealthy: {', '.join(f'{k} ({states[k]})' for k in unhealthy)}")
    return code
