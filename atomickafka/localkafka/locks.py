"""Inter-process exclusion: one ``flock`` per jar download or data dir."""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path

from atomickafka.localkafka.errors import BrokerError

__all__ = ["file_lock"]


@contextlib.contextmanager
def file_lock(path: Path, timeout: float, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` body.

    Waits up to ``timeout`` seconds, then raises :class:`BrokerError` naming ``what``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BrokerError(
                        f"{what} is busy (another atomickafka process holds {path}); "
                        "try again when it has finished"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
