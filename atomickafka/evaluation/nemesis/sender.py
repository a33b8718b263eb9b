"""The nemesis's client: sends at a steady rate from a host of its own and records what
the broker acknowledged (``python -m atomickafka.evaluation.nemesis.sender``).

Each tick it sends one message: to one topic, or (``--share`` of them) to two or more
drawn from the seed. Every send is a JSON line of ``--out`` at the end: its id, its
destinations, when it was sent, and when the broker acknowledged all of its copies
(``ack``) or why it did not (``error``: refused, failed, or never answered by the end).
A send the client refused before writing anything (no live node for a destination, the
back-pressure's wait used up) is recorded with ``id`` ``null``: nothing of it exists.
An acknowledged send must be delivered at every destination; one never acknowledged at
all of them or at none (docs/DESIGN.md §4.9). Sends are not retried: a retry would be
another message.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atomickafka.client import AtomicKafkaClient, SentMessage
from atomickafka.errors import AtomicKafkaError

__all__ = ["main", "run_sender"]

#: How long the client waits at the end for the last acknowledgements (s).
FLUSH_S = 90.0


def _destinations(rng: random.Random, topics: Sequence[str], share: float) -> list[str]:
    if len(topics) > 1 and rng.random() < share:
        return sorted(rng.sample(list(topics), rng.randint(2, len(topics))))
    return [rng.choice(list(topics))]


def run_sender(
    bootstrap: str,
    topics: Sequence[str],
    rate: float,
    seconds: float,
    seed: int,
    out: Path,
    *,
    share: float = 0.5,
    client_id: str = "nemesis",
) -> dict[str, int]:
    """Send for ``seconds`` at ``rate`` msg/s and write every send to ``out``; counts."""
    rng = random.Random(f"sender-{seed}")
    sends: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}

    def acked(err: Any, sent: SentMessage) -> None:
        entry = by_id.get(sent.messageID)
        if entry is not None:
            if err is None:
                entry["ack"] = time.time()
            else:
                entry["error"] = str(err)

    with AtomicKafkaClient(bootstrap, client_id=client_id, failover_wait_s=10.0) as client:
        started = time.monotonic()
        next_at = started
        n = 0
        while (now := time.monotonic()) < started + seconds:
            if now < next_at:
                time.sleep(min(next_at - now, 0.05))
                continue
            next_at = max(next_at + 1.0 / rate, now - 1.0)  # a stall drops its backlog
            to = _destinations(rng, topics, share)
            value = {"n": n, "c": client_id}
            entry: dict[str, Any] = {"id": None, "to": to, "value": value, "t": time.time()}
            entry["ack"] = None
            try:
                entry["id"] = mid = client.send(value, to, on_delivery=acked)
                by_id[mid] = entry
            except AtomicKafkaError as exc:
                entry["error"] = f"refused: {exc}"
            sends.append(entry)
            n += 1
        try:
            client.flush(FLUSH_S)
        except AtomicKafkaError as exc:
            print(f"sender: not every send was acknowledged: {exc}", flush=True)
    for entry in sends:
        if entry["id"] is not None and entry["ack"] is None and "error" not in entry:
            entry["error"] = "not acknowledged by the end"
    out.write_text("".join(json.dumps(e) + "\n" for e in sends), encoding="utf-8")
    return {
        "sent": sum(e["id"] is not None for e in sends),
        "acknowledged": sum(e["ack"] is not None for e in sends),
        "refused": sum(e["id"] is None for e in sends),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (run inside the client's host by the nemesis)."""
    p = argparse.ArgumentParser(description="the nemesis's steady client")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--topics", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--share", type=float, default=0.5)
    p.add_argument("--client-id", default="nemesis")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    counts = run_sender(
        a.bootstrap_server,
        a.topics.split(","),
        a.rate,
        a.seconds,
        a.seed,
        a.out,
        share=a.share,
        client_id=a.client_id,
    )
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
