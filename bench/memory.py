"""Memory figures read from /proc/PID/status (VmRSS) of a freshly started server.

- idle keep-alive connections: open N connections, make one request on each so
  the server has surely accepted it and built its per-connection state, keep
  them open, and divide the RSS growth by N.
- pending promises: N calls of a tool that always answers with a promise and
  holds no data of its own (``bench.tools:hold``), sent over
  a bounded number of keep-alive connections with a bounded deadline; the RSS
  growth is reported as measured and scaled to 10,000.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import socket
import time
from typing import Any

from bench.pyload import build_request
from bench.servers import rss_kib

__all__ = ["idle_connections", "pending_promises", "raise_fd_limit"]


def raise_fd_limit(wanted: int = 8192) -> int:
    """Raise this process's soft RLIMIT_NOFILE (children inherit it); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside the response body")
        body += chunk
    return status, body


def idle_connections(
    pid: int, port: int, path: str, body: bytes, headers: list[str], count: int
) -> dict[str, Any]:
    """RSS growth per idle keep-alive connection after one request on each."""
    request = build_request("127.0.0.1", port, path, body, headers)
    socks: list[socket.socket] = []
    try:
        with socket.create_connection(("127.0.0.1", port), 5) as warm:
            for _ in range(20):
                warm.sendall(request)
                _read_response(warm)
        before = rss_kib(pid)
        failures = 0
        for _ in range(count):
            try:
                sock = socket.create_connection(("127.0.0.1", port), 5)
                sock.settimeout(5)
                socks.append(sock)
                sock.sendall(request)
                status, _ = _read_response(sock)
                if status != 200:
                    failures += 1
            except OSError:
                failures += 1
                if failures > count // 10:
                    break
        after = rss_kib(pid)
        opened = len(socks) - failures
    finally:
        for sock in socks:
            sock.close()
    if before is None or after is None or opened <= 0:
        return {"status": "n/a", "note": f"no RSS or no connection held (failures: {failures})"}
    return {
        "status": "ok",
        "connections": opened,
        "failures": failures,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "per_connection_kib": round((after - before) / opened, 2),
    }


async def _promise_worker(
    port: int,
    request: bytes,
    quota: list[int],
    deadline: float,
    seen: dict[str, Any],
) -> None:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    try:
        while quota[0] > 0 and time.monotonic() < deadline and not seen["stop"]:
            quota[0] -= 1
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await asyncio.wait_for(reader.readexactly(length), 30)
            try:
                reply = json.loads(body)
                kind = reply["result"]["_meta"]["response_type"]
            except (ValueError, KeyError, TypeError):
                seen["other"] += 1
                seen["last_other"] = body[:300].decode(errors="replace")
                if "error" in body.decode(errors="replace"):
                    seen["stop"] = True  # e.g. the promise table is full: do not hammer it
                continue
            if kind == "promise":
                seen["promises"] += 1
            else:
                seen["other"] += 1
                seen["last_other"] = body[:300].decode(errors="replace")
    finally:
        writer.close()


def pending_promises(
    pid: int,
    port: int,
    path: str,
    body: bytes,
    count: int,
    conns: int,
    timeout: float,
) -> dict[str, Any]:
    """RSS growth with ``count`` pending promises (fewer if the deadline passes)."""
    request = build_request("127.0.0.1", port, path, body, [])
    before = rss_kib(pid)
    seen: dict[str, Any] = {"promises": 0, "other": 0, "last_other": "", "stop": False}
    quota = [count]
    deadline = time.monotonic() + timeout

    async def drive() -> None:
        await asyncio.gather(
            *(_promise_worker(port, request, quota, deadline, seen) for _ in range(conns)),
            return_exceptions=True,
        )

    started = time.monotonic()
    asyncio.run(drive())
    elapsed = time.monotonic() - started
    after = rss_kib(pid)
    promises = int(seen["promises"])
    if before is None or after is None or promises == 0:
        note = "no promise answered"
        if seen["last_other"]:
            note += f"; last answer: {seen['last_other']}"
        return {"status": "n/a", "note": note}
    delta_mib = (after - before) / 1024
    return {
        "status": "ok",
        "promises": promises,
        "other_answers": seen["other"],
        "last_other": seen["last_other"],
        "seconds": round(elapsed, 2),
        "rss_before_kib": before,
        "rss_after_kib": after,
        "delta_mib": round(delta_mib, 2),
        "per_10k_mib": round(delta_mib * 10_000 / promises, 2),
        "per_promise_bytes": round((after - before) * 1024 / promises),
    }
