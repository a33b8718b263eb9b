"""The ``/metrics`` endpoint of a process: prometheus-client's HTTP server on a port
given by the operator (``--metrics-port``; 0 takes any free port, which the log names).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from atomickafka.errors import ConfigError

__all__ = ["MetricsPortError", "MetricsServer", "serve"]


class MetricsPortError(ConfigError):
    """The metrics endpoint cannot listen where it was told to (the port is taken)."""


@dataclass(slots=True)
class MetricsServer:
    """A running ``/metrics`` endpoint."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """Where to scrape it."""
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(registry: CollectorRegistry, port: int, host: str = "0.0.0.0") -> MetricsServer:
    """Serve ``registry`` on ``host:port`` from a daemon thread; a port that cannot be
    had is a :class:`MetricsPortError` naming it."""
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise MetricsPortError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; each process "
            "on a host (a standby too) needs a --metrics-port of its own"
        ) from exc
    return MetricsServer(host, int(server.server_port), server, thread)
