"""Loopback ports: is one taken, does one accept connections, where is a free block."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from atomickafka.localkafka.errors import BrokerError

__all__ = ["ephemeral_range", "free_port_block", "in_ephemeral_range", "port_accepts", "port_taken"]

#: Linux's default ephemeral port range, used where it cannot be read.
DEFAULT_EPHEMERAL: tuple[int, int] = (32768, 60999)
_EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(source: Path = _EPHEMERAL_FILE) -> tuple[int, int]:
    """The ports the kernel hands out to outgoing connections (``ip_local_port_range``;
    Linux's default where it cannot be read)."""
    try:
        low, high = (int(v) for v in source.read_text(encoding="ascii").split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return low, high


def in_ephemeral_range(ports: list[int], source: Path = _EPHEMERAL_FILE) -> list[int]:
    """Those of ``ports`` in the ephemeral range: a client's connection may hold one
    while its broker is down, and the broker then cannot listen there again."""
    low, high = ephemeral_range(source)
    return [p for p in ports if low <= p <= high]


def port_taken(port: int) -> bool:
    """True when ``port`` on 127.0.0.1 cannot be bound (as the JVM binds, SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def port_accepts(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port`` (0.5 s timeout)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_port_block(count: int, low: int = 20000, high: int = 32000) -> int:
    """Return a base port ``p`` such that ``p .. p+count-1`` are all free on 127.0.0.1.

    The default range stays below Linux's ephemeral ports (32768+), which clients use.
    """
    bases = list(range(low, high - count, count))
    random.shuffle(bases)
    for base in bases[:500]:
        if not any(port_taken(p) for p in range(base, base + count)):
            return base
    raise BrokerError(f"no {count} consecutive free ports between {low} and {high}")
