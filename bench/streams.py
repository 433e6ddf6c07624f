"""Many streams: ``python -m bench.streams [--quick] [--streams N] [--cpus S,L | --no-pin]``.

Open streams held by one client, and what they cost a fresh mcplite server
(``mcplite serve bench.payloadtools``, its own process on the server core):

- **SSE**: ``--streams`` MCP-lite ``tools/call`` of ``hold_stream`` with ``Accept:
  text/event-stream`` on as many connections (the server runs with ``--heartbeat
  1``: the tool yields one part, then stays silent, so each stream gets a
  ``heartbeat`` event a second).  The client holds them on raw asyncio
  connections in this process (a ``Protocol`` per socket that counts what
  arrives), pinned to the load core.
- **gRPC**: as many ``CallToolStream`` calls of ``hold_stream``, made with
  grpcio's asyncio client over ``ceil(streams / 80)`` channels, each its own
  HTTP/2 connection (mcplite's gRPC binding allows 100 concurrent streams per
  connection, as h2 does), each call read up to its first message and held.

For each: ``VmRSS`` of the server before the streams and once they are all open
(plus two heartbeat periods), and the growth per stream (KiB); the latency of
an ``echo`` call (``--calls`` of them, one at a time from a process of their
own on the load core: ``http.client`` keep-alive for SSE, a grpcio channel for
gRPC) with no stream open, then beside the open streams.  At the end every
stream is closed (sockets closed, calls cancelled) and the server stopped.
The server's limits are raised to fit: ``--max-connections``,
``--max-concurrent-calls``, ``--grpc-max-connections``; the open-file limit of
this process (and so of the server) is raised to its hard limit.

Prints one JSON line last: ``{"sse": {...}, "grpc": {...}, ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.memory import raise_fd_limit
from bench.payload import add_pinning_arguments, pinning_of
from bench.pyload import percentile
from bench.servers import ROOT, Pinning, ServerProcess, free_port, rss_kib

__all__ = ["main", "run"]

HEARTBEAT_S = 1.0
#: Streams per gRPC connection: under the 100 concurrent streams mcplite allows on one.
STREAMS_PER_CHANNEL = 80
#: Streams being opened at once (connecting, or waiting for their first event).
OPENING = 200
CALL_STREAM = "/mcplite.MCPLite/CallToolStream"
CALL = "/mcplite.MCPLite/CallTool"
HOLD_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "hold_stream", "arguments": {"seconds": 3600.0}},
}


@dataclass(slots=True)
class Settings:
    quick: bool
    streams: int
    calls: int
    open_timeout: float
    pinning: Pinning
    startup_timeout: float
    workdir: Path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# --- the echo probe: a process of its own ---------------------------------------------


def probe_http(port: int, calls: int) -> list[float]:
    """Latencies (s) of ``calls`` echo calls, one at a time on one keep-alive connection."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hello world"}},
        }
    ).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies = []
    try:
        for i in range(calls + 10):  # ten first, untimed
            started = time.perf_counter()
            conn.request("POST", "/mcp-lite/v1/rpc", body, headers)
            response = conn.getresponse()
            data = response.read()
            if response.status != 200 or b"hello world" not in data:
                raise RuntimeError(f"echo answered {response.status}: {data[:200]!r}")
            if i >= 10:
                latencies.append(time.perf_counter() - started)
    finally:
        conn.close()
    return latencies


def probe_grpc(port: int, calls: int) -> list[float]:
    import grpc

    from mcplite.protocols.protobuf import decode_tool_response, encode_tool_request

    request = encode_tool_request("echo", {"text": "hello world"})
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    latencies = []
    try:
        call = channel.unary_unary(CALL)
        for i in range(calls + 10):
            started = time.perf_counter()
            result, _ = decode_tool_response(call(request, timeout=30))
            if result["content"][0]["text"] != "hello world":
                raise RuntimeError(f"echo answered {result}")
            if i >= 10:
                latencies.append(time.perf_counter() - started)
    finally:
        channel.close()
    return latencies


def probe(settings: Settings, wire: str, port: int) -> dict[str, Any]:
    """The echo latencies measured by a probe process on the load core."""
    argv = [sys.executable, "-m", "bench.streams", "--probe", wire, "--port", str(port)]
    argv += ["--calls", str(settings.calls)]
    try:
        done = subprocess.run(
            settings.pinning.load(argv),
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(),
            cwd=ROOT,
            check=False,
        )
        latencies = json.loads(done.stdout.strip().splitlines()[-1])["latencies_us"]
    except (subprocess.TimeoutExpired, ValueError, IndexError, KeyError) as exc:
        tail = locals().get("done")
        err = tail.stderr[-300:] if isinstance(tail, subprocess.CompletedProcess) else ""
        return {"status": "n/a", "note": f"{exc!r} {err}"}
    ordered = sorted(latencies)
    return {
        "status": "ok",
        "n": len(ordered),
        "p50_ms": round(percentile(ordered, 50) / 1000, 3),
        "p99_ms": round(percentile(ordered, 99) / 1000, 3),
        "max_ms": round(ordered[-1] / 1000, 3) if ordered else None,
    }


# --- the streams, held by this process ---------------------------------------------------


class SseStream(asyncio.Protocol):
    """One SSE call held open: reads everything, notes its first event and the
    heartbeats after it."""

    def __init__(self, request: bytes, opened: asyncio.Future[None]) -> None:
        self.request = request
        self.opened = opened
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.heartbeats = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if self.opened.done():
            self.heartbeats += data.count(b"event: heartbeat")
            return
        self.head += data
        if not self.head.startswith(b"HTTP/1.1 200"):
            if len(self.head) >= 12:
                self.opened.set_exception(ConnectionError(f"answered {self.head[:200]!r}"))
        elif b"event: message" in self.head:
            self.opened.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(ConnectionError(f"closed before its first event: {exc}"))


async def open_all(
    count: int, open_one: Callable[[], Awaitable[Any]], timeout: float
) -> tuple[list[Any], int, str, float]:
    """Open ``count`` streams, ``OPENING`` at a time, within ``timeout`` seconds: the
    streams held, how many failed, the last failure, and the seconds it took."""
    held: list[Any] = []
    failed = 0
    last = ""
    slots = asyncio.Semaphore(OPENING)
    started = time.monotonic()
    deadline = started + timeout

    async def one() -> None:
        nonlocal failed, last
        async with slots:
            left = deadline - time.monotonic()
            if left <= 0:
                failed += 1
                return
            try:
                held.append(await asyncio.wait_for(open_one(), left))
            except Exception as exc:  # counted and reported, the rest goes on
                failed += 1
                last = repr(exc)[:200]

    await asyncio.gather(*(one() for _ in range(count)))
    return held, failed, last, time.monotonic() - started


def new_server(settings: Settings, name: str, binding: list[str], port: int) -> ServerProcess:
    extra = settings.streams + 200
    argv = [sys.executable, "-m", "mcplite", "serve", "bench.payloadtools", *binding]
    argv += ["--heartbeat", str(HEARTBEAT_S), "--max-concurrent-calls", str(extra)]
    argv += ["--max-connections", str(extra)]
    argv += ["--grpc-max-connections", str(math.ceil(extra / STREAMS_PER_CHANNEL) + 20)]
    return ServerProcess(
        name=name,
        argv=argv,
        ports=[port],
        log_path=settings.workdir / f"{name}.log",
        startup_timeout=settings.startup_timeout,
        extra_env={"MCPLITE_SECRET": os.urandom(32).hex()},
    )


async def hold_sse(settings: Settings, server: ServerProcess, port: int) -> dict[str, Any]:
    assert server.pid is not None
    loop = asyncio.get_running_loop()
    body = json.dumps(HOLD_CALL).encode()
    request = (
        b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (port, len(body), body)
    )

    async def open_one() -> SseStream:
        opened: asyncio.Future[None] = loop.create_future()
        transport, stream = await loop.create_connection(
            lambda: SseStream(request, opened), "127.0.0.1", port
        )
        try:
            await opened
        except BaseException:
            transport.abort()
            raise
        return stream

    out: dict[str, Any] = {}
    streams: list[SseStream] = []
    try:
        streams, failed, last, seconds = await open_all(
            settings.streams, open_one, settings.open_timeout
        )
        out.update(opened=len(streams), failed=failed, open_seconds=round(seconds, 2))
        if last:
            out["last_failure"] = last
        heard, since = sum(s.heartbeats for s in streams), time.monotonic()
        await asyncio.sleep(2 * HEARTBEAT_S + 0.5)  # heartbeats flow on every stream
        out["rss_open_kib"] = rss_kib(server.pid)
        out["echo_beside"] = await asyncio.to_thread(probe, settings, "http", port)
        heard = sum(s.heartbeats for s in streams) - heard
        out["heartbeats_per_s"] = round(heard / (time.monotonic() - since), 1)
    finally:
        for stream in streams:
            if stream.transport is not None:
                stream.transport.close()
    await asyncio.sleep(0.5)  # the closes reach the server before it is stopped
    return out


async def hold_grpc(settings: Settings, server: ServerProcess, port: int) -> dict[str, Any]:
    import grpc

    from mcplite.protocols.protobuf import decode_tool_response, encode_tool_request

    assert server.pid is not None
    request = encode_tool_request("hold_stream", {"seconds": 3600.0})
    count = math.ceil(settings.streams / STREAMS_PER_CHANNEL)
    channels = [
        grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        for _ in range(count)
    ]
    methods = [channel.unary_stream(CALL_STREAM) for channel in channels]
    next_channel = [0]

    async def open_one() -> Any:
        method = methods[next_channel[0] % count]
        next_channel[0] += 1
        call = method(request)
        try:
            first = await call.read()
            if first is grpc.aio.EOF or decode_tool_response(first)[0] != {"partial": "open"}:
                raise RuntimeError(f"first message: {first!r}")
        except BaseException:
            call.cancel()
            raise
        return call

    out: dict[str, Any] = {"channels": count}
    calls: list[Any] = []
    try:
        calls, failed, last, seconds = await open_all(
            settings.streams, open_one, settings.open_timeout
        )
        out.update(opened=len(calls), failed=failed, open_seconds=round(seconds, 2))
        if last:
            out["last_failure"] = last
        await asyncio.sleep(2 * HEARTBEAT_S + 0.5)
        out["rss_open_kib"] = rss_kib(server.pid)
        out["echo_beside"] = await asyncio.to_thread(probe, settings, "grpc", port)
    finally:
        for call in calls:
            call.cancel()
        for channel in channels:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(channel.close(), 5)
    return out


def measure(settings: Settings, wire: str) -> dict[str, Any]:
    """A fresh server: echo alone, the streams opened, echo beside them, all closed."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    binding = (
        ["--http", address, "--no-grpc"] if wire == "sse" else ["--no-http", "--grpc", address]
    )
    server = new_server(settings, f"mcplite-{wire}", binding, port)
    client_before = rss_kib(os.getpid())
    try:
        if not server.start(settings.pinning):
            return {"status": "skipped", "note": server.note, "log_tail": server.log_tail()}
        assert server.pid is not None
        out: dict[str, Any] = {"status": "ok", "streams_requested": settings.streams}
        out["echo_alone"] = probe(settings, "http" if wire == "sse" else "grpc", port)
        out["rss_before_kib"] = rss_kib(server.pid)
        hold = hold_sse if wire == "sse" else hold_grpc
        out.update(asyncio.run(hold(settings, server, port)))
        out["client_rss_growth_kib"] = _growth(client_before, rss_kib(os.getpid()))
        before, after = out.get("rss_before_kib"), out.get("rss_open_kib")
        if before and after and out.get("opened"):
            out["per_stream_kib"] = round((after - before) / out["opened"], 2)
        if not server.alive():
            out["note"] = f"the server died: {server.log_tail()}"
        return out
    finally:
        server.stop()


def _growth(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else after - before


def run(settings: Settings) -> dict[str, Any]:
    limit = raise_fd_limit(settings.streams + 1024)
    out: dict[str, Any] = {
        "quick": settings.quick,
        "streams": settings.streams,
        "calls": settings.calls,
        "heartbeat_s": HEARTBEAT_S,
        "pinning": settings.pinning.describe(),
        "fd_limit": limit,
        "clients": {
            "sse": "asyncio Protocol per connection (this process)",
            "grpc": f"grpcio asyncio, {STREAMS_PER_CHANNEL} streams per channel (connection)",
            "echo": "http.client keep-alive / grpcio, in a process of its own",
        },
        "notes": [],
    }
    if limit < settings.streams + 64:
        out["notes"].append(f"the open-file limit ({limit}) holds fewer than the streams asked")
    for wire in ("sse", "grpc"):
        print(f"streams: {wire}, {settings.streams} ...", file=sys.stderr, flush=True)
        try:
            out[wire] = measure(settings, wire)
        except Exception as exc:  # one wire failing is reported; the other still runs
            out[wire] = {"status": "n/a", "note": repr(exc)[:300]}
    return out


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="500 streams, 50 echo calls")
    parser.add_argument("--streams", type=int, help="streams to hold (10,000; quick 500)")
    parser.add_argument("--calls", type=int, help="echo calls timed (200; quick 50)")
    parser.add_argument("--open-timeout", type=float, help="seconds to open them (120; quick 30)")
    add_pinning_arguments(parser)
    parser.add_argument("--startup-timeout", type=float, default=30.0)
    parser.add_argument("--probe", choices=("http", "grpc"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    settings = Settings(
        quick=quick,
        streams=min(max(args.streams or (500 if quick else 10_000), 1), 15_000),
        calls=min(max(args.calls or (50 if quick else 200), 1), 10_000),
        open_timeout=min(max(args.open_timeout or (30.0 if quick else 120.0), 1.0), 600.0),
        pinning=pinning_of(args, parser),
        startup_timeout=args.startup_timeout,
        workdir=Path(tempfile.mkdtemp(prefix="mcplite-bench-streams-")),
    )
    return args, settings


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)  # unwinds through the finally blocks that stop the server


def main(argv: list[str] | None = None) -> int:
    args, settings = parse_args(argv)
    if args.probe:  # the echo probe, run by this module as a process of its own
        shutil.rmtree(settings.workdir, ignore_errors=True)
        probe_of = probe_http if args.probe == "http" else probe_grpc
        latencies = probe_of(args.port, settings.calls)
        print(json.dumps({"latencies_us": [round(s * 1e6) for s in latencies]}))
        return 0
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    load_cpu = settings.pinning.load_cpu
    if load_cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {load_cpu})  # this process holds the streams: load side
    started = time.monotonic()
    try:
        results = run(settings)
    finally:
        shutil.rmtree(settings.workdir, ignore_errors=True)
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
