"""Start, check and stop the servers under test, each as its own pinned process.

Every server listens on 127.0.0.1 on a free ephemeral port, is started as a
subprocess in its own session, is ready when a TCP connect succeeds (polled with
a bounded deadline, never a fixed sleep), and is always stopped (SIGTERM, then
SIGKILL) by :meth:`ServerProcess.stop`, which callers run in ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MCPLITE_LOOPS",
    "ROOT",
    "Pinning",
    "ServerProcess",
    "die_with_parent",
    "free_port",
    "rss_kib",
    "uvloop_missing",
    "wait_for_port",
]

ROOT = Path(__file__).resolve().parent.parent
ANCHORS = ROOT / "bench" / "anchors"

#: The mcplite servers and the event loop each runs (``--loop``): ``mcplite`` is
#: asyncio's whether or not uvloop is installed; ``mcplite_uvloop`` is the same
#: server on uvloop.
MCPLITE_LOOPS = {"mcplite": "asyncio", "mcplite_plain": "asyncio", "mcplite_uvloop": "uvloop"}


def uvloop_missing() -> str | None:
    """Why ``mcplite_uvloop`` cannot run here; None when uvloop can be imported."""
    try:
        import uvloop  # noqa: F401
    except ImportError as exc:
        return f"uvloop cannot be imported ({exc}); pip install -e '.[uvloop]' adds it"
    return None


@dataclass(frozen=True, slots=True)
class Pinning:
    """Server on one core, load generator on another (``taskset -c``), when possible."""

    server_cpu: int | None
    load_cpu: int | None

    @classmethod
    def detect(cls, enabled: bool = True) -> Pinning:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if not enabled or len(cpus) < 2 or shutil.which("taskset") is None:
            return cls(None, None)
        return cls(cpus[0], cpus[1])

    def describe(self) -> str:
        if self.server_cpu is None:
            return "none (taskset missing, fewer than 2 cores, or --no-pin)"
        return f"server: taskset -c {self.server_cpu}; load generator: taskset -c {self.load_cpu}"

    def server(self, argv: list[str]) -> list[str]:
        return argv if self.server_cpu is None else ["taskset", "-c", str(self.server_cpu), *argv]

    def load(self, argv: list[str]) -> list[str]:
        return argv if self.load_cpu is None else ["taskset", "-c", str(self.load_cpu), *argv]


def die_with_parent(argv: list[str]) -> list[str]:
    """Prefix ``argv`` so the server gets SIGTERM if the harness dies, even by SIGKILL.

    ``setpriv --pdeathsig`` (util-linux) sets it and execs, so no ``preexec_fn`` runs
    in a forked child of this (threaded) process; without setpriv, no such guard.
    """
    if shutil.which("setpriv") is None:
        return argv
    return ["setpriv", "--pdeathsig", "TERM", "--", *argv]


def free_port() -> int:
    """A port the kernel just gave out on 127.0.0.1 (then released for the server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Poll a TCP connect to 127.0.0.1:port until it succeeds or ``deadline`` (monotonic)."""
    delay = 0.01
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        time.sleep(delay)  # polling interval, not a wait for readiness
        delay = min(delay * 2, 0.2)
    return False


def rss_kib(pid: int, field: str = "VmRSS") -> int | None:
    """VmRSS (or another KiB ``field`` of /proc/PID/status, such as ``VmHWM``, the peak
    RSS) of ``pid`` in KiB (None if unavailable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


_POLL = 0.02  # seconds between two readings of a server's CPU time
_QUIET = 0.1  # seconds without CPU use that make a server settled


def cpu_ticks(pid: int) -> int | None:
    """User plus system CPU time of ``pid`` in clock ticks (None if unavailable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])


@dataclass(slots=True)
class ServerProcess:
    """One server under test: a subprocess with its ports, log file and state."""

    name: str
    argv: list[str]
    ports: list[int]
    log_path: Path
    startup_timeout: float = 30.0
    proc: subprocess.Popen[bytes] | None = None
    note: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    http_port: int | None = None
    grpc_port: int | None = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, pinning: Pinning) -> bool:
        """Start and wait until every port accepts; False (with ``note``) otherwise."""
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        try:
            with open(self.log_path, "wb") as log:  # the child keeps its own copy
                self.proc = subprocess.Popen(
                    die_with_parent(pinning.server(self.argv)),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=ROOT,
                    env=env,
                    start_new_session=True,
                )
        except OSError as exc:
            self.note = f"could not start: {exc}"
            return False
        deadline = time.monotonic() + self.startup_timeout
        for port in self.ports:
            if not wait_for_port(port, deadline, self.proc):
                state = "exited" if self.proc.poll() is not None else "not listening"
                last = self.log_tail().rsplit(" | ", 1)[-1]
                self.note = f"{state} within {self.startup_timeout:g} s: {last}"
                self.stop()
                return False
        return True

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def settle(self, limit: float = 2.0) -> float:
        """Wait until the server uses no CPU for a while (its backlog of a pass
        done: queued requests, closed connections, a collection), at most
        ``limit`` seconds, so that the next pass, maybe of another server on the
        same core, starts on a quiet core; the seconds waited."""
        started = time.monotonic()
        if self.proc is None:
            return 0.0
        quiet_for, last = 0.0, cpu_ticks(self.proc.pid)
        while last is not None and quiet_for < _QUIET and time.monotonic() - started < limit:
            time.sleep(_POLL)  # polling interval, not a wait for an event
            now = cpu_ticks(self.proc.pid)
            quiet_for = quiet_for + _POLL if now == last else 0.0
            last = now
        return time.monotonic() - started

    def log_tail(self, chars: int = 400, lines: int = 6) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip()
        except OSError:
            return ""
        return " | ".join(text[-chars:].splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it after 5 s."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def anchor_argv(script: str, *args: str) -> list[str]:
    return [sys.executable, str(ANCHORS / script), *args]
