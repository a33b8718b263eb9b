"""The fault proxy: a TCP relay that delays, stalls and holds bytes by connecting host.

The kernel here has no ``tc netem``, so what a slow or lossy link does to TCP is done in
user space, where it shows: each connection a host opens to a proxied address is relayed
to its upstream (a broker's listener) chunk by chunk, in order, each direction through a
bounded queue (a full queue stops reading, and TCP's window then holds the sender back,
as on a slow link). Per connecting host (known by its source address) it may

- *delay* every chunk by ``delay_ms`` plus up to ``jitter_ms`` (order kept);
- *lose* a chunk with probability ``loss``: TCP never loses bytes, so a loss is what the
  sender then sees, the chunk and everything after it stalled for one retransmission
  timeout, drawn from 200 ms to 1 s (Linux's minimum RTO is 200 ms);
- *hold* what its open connections send upstream (:meth:`FaultProxy.hold`): nothing is
  forwarded until :meth:`FaultProxy.release`, and bytes held on a connection that its
  client has closed meanwhile still reach the broker then -- a request the client gave
  up on arriving late, as a request queued on a partitioned path does once the path
  heals (the delayed commit of Jepsen's 2024 Kafka analysis). Connections opened while
  a hold is on pass.

It runs as a process of its own (``python -m atomickafka.netlab.proxy``) in the root
namespace, so that a busy test process never slows a link by accident; a
:class:`ProxyControl` talks to it over a loopback port with one JSON line each way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from atomickafka.errors import AtomicKafkaError, ConfigError

__all__ = ["FaultProxy", "LinkFaults", "ProxyControl", "ProxyError", "start_proxy"]

#: Bytes read at once, and chunks a direction's queue holds before reading stops.
_CHUNK: Final = 65536
_QUEUE_CHUNKS: Final = 64
#: A lost segment's retransmission timeout, drawn from this range (s).
_RTO_S: Final = (0.2, 1.0)
#: How long connecting upstream may take (s).
_CONNECT_S: Final = 10.0


class ProxyError(AtomicKafkaError):
    """The fault proxy could not start or did not answer."""


@dataclass
class LinkFaults:
    """What the proxy does to one host's connections."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0

    def lag_s(self, rng: random.Random) -> float:
        """The extra time one chunk takes."""
        lag = (self.delay_ms + rng.random() * self.jitter_ms) / 1000
        if self.loss and rng.random() < self.loss:
            lag += rng.uniform(*_RTO_S)
        return lag


@dataclass(eq=False)
class _Connection:
    host: str
    released: asyncio.Event = field(default_factory=asyncio.Event)
    #: Held from the first request with one of these API keys on (``None``: at once).
    hold_keys: frozenset[int] | None = None
    holding: bool = False


class _Frames:
    """Cuts what a Kafka client sends into requests (a 4-byte size, then the request,
    whose first two bytes are its API key), so that a hold can start at a request."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The whole requests ``data`` completes, with their API keys."""
        self._pending += data
        out = []
        while len(self._pending) >= 6:
            size = int.from_bytes(self._pending[:4], "big")
            if len(self._pending) < 4 + size:
                break
            frame = bytes(self._pending[: 4 + size])
            del self._pending[: 4 + size]
            out.append((int.from_bytes(frame[4:6], "big", signed=True), frame))
        return out


@dataclass
class _Stats:
    connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    stalls: int = 0
    held_bytes: int = 0


class FaultProxy:
    """The relay (runs on an asyncio loop): ``routes`` maps a listening (address, port)
    to its upstream; ``names`` a source address to a host name."""

    def __init__(
        self,
        routes: Mapping[tuple[str, int], tuple[str, int]],
        names: Mapping[str, str],
        seed: int = 0,
    ) -> None:
        self.routes = dict(routes)
        self.names = dict(names)
        self.faults: dict[str, LinkFaults] = {}
        self.stats: dict[str, _Stats] = {}
        self._rng = random.Random(seed)
        self._open: set[_Connection] = set()
        self._servers: list[asyncio.Server] = []

    async def start(self) -> None:
        """Listen on every route's address."""
        for (address, port), upstream in self.routes.items():
            serve = functools.partial(self._serve, upstream=upstream)
            server = await asyncio.start_server(serve, address, port, reuse_address=True)
            self._servers.append(server)

    def _stats(self, host: str) -> _Stats:
        return self.stats.setdefault(host, _Stats())

    # ------------------------------------------------------------------ faults

    def set_faults(self, host: str, faults: LinkFaults) -> None:
        """Delay and lose ``host``'s chunks from now on (both directions)."""
        self.faults[host] = faults

    def hold(self, host: str, api_keys: frozenset[int] | None = None) -> int:
        """Hold what ``host``'s open connections send upstream (with ``api_keys``: from
        the first request with one of those Kafka API keys on, per connection); how many
        connections the hold covers."""
        held = [c for c in self._open if c.host == host]
        for connection in held:
            connection.hold_keys = api_keys
            connection.holding = True
            if api_keys is None:
                connection.released.clear()
        return len(held)

    def release(self, host: str | None = None) -> None:
        """Forward what is held (for ``host``, or for every host)."""
        for connection in self._open:
            if host is None or connection.host == host:
                connection.holding = False
                connection.released.set()

    def clear(self) -> None:
        """No faults, nothing held."""
        self.faults.clear()
        self.release()

    # ------------------------------------------------------------------ relaying

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: tuple[str, int],
    ) -> None:
        peer = writer.get_extra_info("peername")
        host = self.names.get(peer[0] if peer else "?", peer[0] if peer else "?")
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*upstream), _CONNECT_S
            )
        except (OSError, TimeoutError):
            writer.close()
            return
        connection = _Connection(host)
        connection.released.set()
        self._open.add(connection)
        self._stats(host).connections += 1
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, connection, upward=True),
                self._pipe(up_reader, writer, connection, upward=False),
            )
        finally:
            self._open.discard(connection)
            for w in (writer, up_writer):
                w.close()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: _Connection,
        *,
        upward: bool,
    ) -> None:
        chunks: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(_QUEUE_CHUNKS)
        stats = self._stats(connection.host)
        frames = _Frames() if upward else None

        async def read() -> None:
            due = 0.0
            try:
                while data := await reader.read(_CHUNK):
                    faults = self.faults.get(connection.host)
                    lag = 0.0 if faults is None else faults.lag_s(self._rng)
                    if faults is not None and lag > (faults.delay_ms + faults.jitter_ms) / 1000:
                        stats.stalls += 1
                    due = max(due, time.monotonic() + lag)
                    if frames is None:
                        await chunks.put((due, data))
                        continue
                    for key, frame in frames.feed(data):
                        keys = connection.hold_keys
                        if connection.holding and keys is not None and key in keys:
                            connection.released.clear()  # this request and all after it
                        await chunks.put((due, frame))
            except OSError:
                pass
            finally:
                await chunks.put(None)

        async def write() -> None:
            while (item := await chunks.get()) is not None:
                due, data = item
                if upward and not connection.released.is_set():
                    stats.held_bytes += len(data)
                    await connection.released.wait()
                    stats.held_bytes -= len(data)
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
                if upward:
                    stats.bytes_up += len(data)
                else:
                    stats.bytes_down += len(data)
            with contextlib.suppress(OSError):
                writer.write_eof()

        reading = asyncio.create_task(read())
        try:
            await write()
        except OSError:  # the other side is gone: stop reading this direction too
            reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)

    # ------------------------------------------------------------------ control

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve :class:`ProxyControl` requests, one JSON object a line."""
        while line := await reader.readline():
            try:
                reply = self._command(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                reply = {"error": str(exc)}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        writer.close()

    def _command(self, request: Mapping[str, object]) -> dict[str, object]:
        op, host = request["op"], request.get("host")
        if op == "faults":
            self.set_faults(
                str(host),
                LinkFaults(
                    float(str(request.get("delay_ms", 0))),
                    float(str(request.get("jitter_ms", 0))),
                    float(str(request.get("loss", 0))),
                ),
            )
        elif op == "hold":
            keys = request.get("api_keys")
            api_keys = None if keys is None else frozenset(int(str(k)) for k in keys)  # type: ignore[attr-defined]
            return {"held": self.hold(str(host), api_keys)}
        elif op == "release":
            self.release(None if host is None else str(host))
        elif op == "clear":
            self.clear()
        elif op != "stats":
            raise ConfigError(f"unknown op {op!r}")
        return {"stats": {h: vars(s) for h, s in self.stats.items()}}


class ProxyControl:
    """Talks to a proxy process over its loopback control port."""

    def __init__(self, port: int, process: subprocess.Popen[str] | None = None) -> None:
        self.port = port
        self.process = process
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self._file = self._sock.makefile("rwb")

    def _ask(self, **request: object) -> dict[str, object]:
        try:
            self._file.write(json.dumps(request).encode() + b"\n")
            self._file.flush()
            line = self._file.readline()
        except OSError as exc:
            raise ProxyError(f"the fault proxy did not answer: {exc}") from exc
        reply: dict[str, object] = json.loads(line or b"{}")
        if "error" in reply or not line:
            raise ProxyError(f"the fault proxy refused {request}: {reply.get('error', 'gone')}")
        return reply

    def faults(self, host: str, delay_ms: float = 0, jitter_ms: float = 0, loss: float = 0) -> None:
        """Delay and lose ``host``'s traffic through the proxy."""
        self._ask(op="faults", host=host, delay_ms=delay_ms, jitter_ms=jitter_ms, loss=loss)

    def hold(self, host: str, api_keys: Sequence[int] | None = None) -> int:
        """Hold what ``host``'s open connections send (with ``api_keys``: from the first
        request with one of those Kafka API keys on); how many connections are held."""
        keys = None if api_keys is None else list(api_keys)
        held = self._ask(op="hold", host=host, api_keys=keys)["held"]
        return int(str(held))

    def release(self, host: str | None = None) -> None:
        """Forward what is held."""
        self._ask(op="release", host=host)

    def clear(self) -> None:
        """No faults anywhere, nothing held."""
        self._ask(op="clear")

    def stats(self) -> dict[str, dict[str, int]]:
        """Per host: connections, bytes each way, stalls, bytes held now."""
        stats = self._ask(op="stats")["stats"]
        assert isinstance(stats, dict)
        return stats

    def close(self) -> None:
        """Stop the proxy process (if this control started it) and disconnect."""
        with contextlib.suppress(OSError):
            self._file.close()
            self._sock.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_proxy(
    routes: Mapping[tuple[str, int], tuple[str, int]],
    names: Mapping[str, str],
    seed: int = 0,
    log_path: str | None = None,
) -> ProxyControl:
    """Start a proxy process and connect to it."""
    args = [sys.executable, "-m", "atomickafka.netlab.proxy", "--seed", str(seed)]
    for (address, port), (up_address, up_port) in routes.items():
        args += ["--route", f"{address}:{port}={up_address}:{up_port}"]
    for address, name in names.items():
        args += ["--name", f"{address}={name}"]
    err = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True
        )
    finally:
        if log_path:
            err.close()  # type: ignore[union-attr]
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("control "):
        process.kill()
        raise ProxyError(f"the fault proxy did not start: {line!r}")
    return ProxyControl(int(line.split()[1]), process)


def _endpoint(text: str) -> tuple[str, int]:
    address, _, port = text.rpartition(":")
    return address, int(port)


async def _main(args: argparse.Namespace) -> None:
    routes = dict(
        (_endpoint(listen), _endpoint(up)) for listen, up in (r.split("=", 1) for r in args.route)
    )
    names = dict(n.split("=", 1) for n in args.name)
    proxy = FaultProxy(routes, names, args.seed)
    await proxy.start()
    control = await asyncio.start_server(proxy.control, "127.0.0.1", 0)
    port = control.sockets[0].getsockname()[1]
    print(f"control {port}", flush=True)
    parent = os.getppid()
    while os.getppid() == parent:  # the process that started it is gone: so is the lab
        await asyncio.sleep(1.0)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m atomickafka.netlab.proxy --route A:P=B:Q ... --name ADDR=HOST ...``"""
    parser = argparse.ArgumentParser(description="the fault proxy (atomickafka.netlab)")
    parser.add_argument("--route", action="append", default=[], help="LISTEN:PORT=UP:PORT")
    parser.add_argument("--name", action="append", default=[], help="ADDRESS=HOST")
    parser.add_argument("--seed", type=int, default=0)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
