"""Loopback ports: is one taken, does one accept connections, where is a free block."""

from __future__ import annotations

import random
import socket

from atomickafka.localkafka.errors import BrokerError

__all__ = ["free_port_block", "port_accepts", "port_taken"]


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
