"""Hosts on one machine: a bridge, a network namespace per host, links cut and healed.

A :class:`Lab` owns what it creates and removes it in :meth:`Lab.close` (also on an
exception: use it as a context manager); :func:`remove_stale` removes what a run that
was killed left behind, and every new lab calls it first. See :mod:`atomickafka.netlab`.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from atomickafka.errors import AtomicKafkaError

__all__ = [
    "NETWORK",
    "STATE_DIR",
    "Host",
    "Lab",
    "LabError",
    "remove_stale",
]

#: Where each lab records what it created, with its owner's pid (for :func:`remove_stale`).
STATE_DIR: Final = Path("/tmp/atomickafka-netlab")
#: The range labs take their /24 from; one /24 per lab, not used by any other route.
NETWORK: Final = ipaddress.IPv4Network("10.239.0.0/16")
#: Every namespace a lab creates is ``akn-<tag>-<host>``, every interface ``akn<tag>…``.
PREFIX: Final = "akn"
#: How long one ``ip`` command may take (s).
_IP_TIMEOUT_S: Final = 20.0
#: The first host address in a lab's /24 (``.1`` is the bridge's, the root namespace's).
_FIRST_HOST: Final = 10


class LabError(AtomicKafkaError):
    """A lab could not be created or changed (not root, no ``ip``, a name taken)."""


def _ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS``; its output. Raises :class:`LabError` when it fails and ``check``."""
    try:
        done = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"ip {' '.join(args)}: {exc}") from exc
    if check and done.returncode != 0:
        raise LabError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class Host:
    """One host of a lab: its namespace, its address and the bridge port that links it."""

    name: str
    namespace: str
    address: str
    #: The root end of the host's veth pair, a port of the bridge: down cuts the host.
    port: str
    #: The host's end, inside its namespace.
    inner: str


def _pid_alive(pid: int, started: int | None) -> bool:
    """``pid`` runs and is the process that started at ``started`` (clock ticks after
    boot, ``/proc/PID/stat`` field 22: a pid reused since is not the owner)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    if fields[0] in ("Z", "X"):
        return False
    return started is None or int(fields[19]) == started


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _kill_namespace_processes(namespace: str) -> None:
    """SIGKILL every process inside ``namespace`` (a lab's hosts run nothing else)."""
    for text in _ip("netns", "pids", namespace, check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(text), signal.SIGKILL)


def _remove(namespaces: Sequence[str], links: Sequence[str]) -> None:
    """Remove ``namespaces`` (their processes first) and ``links`` if present."""
    for namespace in namespaces:
        _kill_namespace_processes(namespace)
    deadline = time.monotonic() + 10
    for namespace in namespaces:  # a namespace whose processes still exit stays busy
        while namespace in _namespaces() and time.monotonic() < deadline:
            _ip("netns", "del", namespace, check=False)
            if namespace in _namespaces():
                time.sleep(0.1)
    present = _links()
    for link in links:
        if link in present:
            _ip("link", "del", link, check=False)


def _namespaces() -> set[str]:
    return {line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line}


def _links() -> set[str]:
    out = _ip("-o", "link", "show", check=False)
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


@contextlib.contextmanager
def _state_lock() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _states() -> list[tuple[Path, dict[str, object]]]:
    out = []
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            out.append((path, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            out.append((path, {}))
    return out


def _live(state: dict[str, object]) -> bool:
    pid, started = state.get("pid"), state.get("started")
    return isinstance(pid, int) and _pid_alive(pid, started if isinstance(started, int) else None)


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def remove_stale() -> list[str]:
    """Remove what labs whose process is gone left behind (a run killed with SIGKILL
    cannot clean up), and any ``akn-`` namespace no live lab lists; return the names
    removed."""
    removed: list[str] = []
    with _state_lock():
        owned: set[str] = set()
        for path, state in _states():
            namespaces, links = _strings(state.get("namespaces")), _strings(state.get("links"))
            if _live(state):
                owned.update(namespaces)
                continue
            _remove(namespaces, links)
            removed += [*namespaces, *links]
            path.unlink(missing_ok=True)
        for namespace in sorted(_namespaces()):
            if namespace.startswith(f"{PREFIX}-") and namespace not in owned:
                _remove([namespace], [])
                removed.append(namespace)
    return removed


class Lab:
    """A bridge and one namespace per host; see :mod:`atomickafka.netlab`.

    ``Lab(["b1", "b2", "n1", "c1"])`` creates the hosts (names of 1-3 letters and
    digits); use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, names: Sequence[str]) -> None:
        if os.geteuid() != 0:
            raise LabError("network namespaces need root")
        if len(set(names)) != len(names) or not all(
            re.fullmatch(r"[a-z0-9]{1,3}", n) and n != "br" for n in names
        ):
            raise LabError(f"host names must be distinct, 1-3 lower-case letters/digits: {names}")
        remove_stale()
        self.tag = secrets.token_hex(2)
        self.bridge = f"{PREFIX}{self.tag}br"
        self.hosts: dict[str, Host] = {}
        self._closed = False
        with _state_lock():
            self.network = self._free_network()
            self.gateway = str(self.network.network_address + 1)
            for i, name in enumerate(names):
                address = str(self.network.network_address + _FIRST_HOST + i)
                self.hosts[name] = Host(
                    name,
                    f"{PREFIX}-{self.tag}-{name}",
                    address,
                    f"{PREFIX}{self.tag}{name}",
                    f"{PREFIX}{self.tag}{name}i",
                )
            self._save()
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ creating

    def _free_network(self) -> ipaddress.IPv4Network:
        taken = {str(state.get("network")) for _, state in _states() if _live(state)} | {
            str(ipaddress.ip_interface(word).network)
            for line in _ip("-4", "-o", "addr", "show", check=False).splitlines()
            for word in line.split()
            if "/" in word and word[0].isdigit()
        }
        for network in NETWORK.subnets(new_prefix=24):
            if network.network_address.packed[2] >= 10 and str(network) not in taken:
                return network
        raise LabError(f"no free /24 left in {NETWORK}")

    def _save(self) -> None:
        state = {
            "pid": os.getpid(),
            "started": _start_time(os.getpid()),
            "network": str(self.network),
            "namespaces": [h.namespace for h in self.hosts.values()],
            "links": [self.bridge, *(h.port for h in self.hosts.values())],
        }
        (STATE_DIR / f"{self.tag}.json").write_text(json.dumps(state), encoding="utf-8")

    def _create(self) -> None:
        prefix = self.network.prefixlen
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{prefix}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for host in self.hosts.values():
            _ip("netns", "add", host.namespace)
            _ip("link", "add", host.port, "type", "veth", "peer", "name", host.inner)
            _ip("link", "set", host.inner, "netns", host.namespace)
            _ip("link", "set", host.port, "master", self.bridge)
            _ip("link", "set", host.port, "up")
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/{prefix}", "dev", host.inner)
            _ip("-n", host.namespace, "link", "set", host.inner, "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")

    # ------------------------------------------------------------------ using

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        return self.hosts[name]

    def address(self, name: str) -> str:
        """The address of host ``name``."""
        return self.hosts[name].address

    def run_in(self, name: str) -> list[str]:
        """The command prefix that runs a program inside host ``name``."""
        return ["ip", "netns", "exec", self.hosts[name].namespace]

    def pids(self, name: str) -> list[int]:
        """The processes running inside host ``name``."""
        out = _ip("netns", "pids", self.hosts[name].namespace, check=False)
        return [int(word) for word in out.split()]

    # ------------------------------------------------------------------ faults

    def cut(self, name: str) -> None:
        """Cut host ``name`` off from every other (its bridge port down)."""
        _ip("link", "set", self.hosts[name].port, "down")

    def heal(self, name: str) -> None:
        """Link host ``name`` again (its bridge port up)."""
        _ip("link", "set", self.hosts[name].port, "up")

    def block(self, name: str, others: Sequence[str]) -> None:
        """Drop what host ``name`` sends to ``others`` (a blackhole route to each inside
        its namespace): cut from them, not from the rest."""
        for other in others:
            _ip("-n", self.hosts[name].namespace, "route", "replace", "blackhole",
                f"{self.hosts[other].address}/32")  # fmt: skip

    def unblock(self, name: str) -> None:
        """Remove every blackhole route of host ``name``."""
        namespace = self.hosts[name].namespace
        for line in _ip("-n", namespace, "route", "show", "type", "blackhole").splitlines():
            words = line.split()
            target = words[1] if words and words[0] == "blackhole" else None
            if target is not None:
                _ip("-n", namespace, "route", "del", "blackhole", target, check=False)

    def heal_all(self) -> None:
        """Every host linked, no host blocked."""
        for name in self.hosts:
            self.heal(name)
            self.unblock(name)

    # ------------------------------------------------------------------ removing

    def close(self) -> None:
        """Remove the namespaces (killing what runs in them), the veths and the bridge.
        Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        with _state_lock():
            _remove([h.namespace for h in self.hosts.values()],
                    [self.bridge, *(h.port for h in self.hosts.values())])  # fmt: skip
            (STATE_DIR / f"{self.tag}.json").unlink(missing_ok=True)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
