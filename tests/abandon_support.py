"""What the stream-abandonment tests share (``test_stream_abandon*.py``).

The tools hold deterministically (an ``asyncio.Event`` the test sets on the
server's loop) and count how many started and how many reached their
``finally``; the promise store is slow when asked (every call waits before it
answers, as a remote store would) and remembers the promises it made, so that
a test can ask which are still running.  A client leaves in one of three ways
(:data:`HOWS`): a plain close (FIN), a reset (``SO_LINGER`` 0, then close: RST),
or a half-close (``SHUT_WR``, then reading to the end).

After each abandonment the server must be as it was: no task left and no call
slot held (``RunningServer.settle``), no connection, no promise still running
that nobody can reach, and, once garbage is collected and the loop has turned,
no ERROR from asyncio (an unretrieved task exception), grpclib, uvicorn or mcplite
(besides the one line of a tool that raised, which is the server's to log).
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import logging
import queue
import re
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import pytest
from conftest import (
    WAIT,
    DelegatingStore,
    RunningServer,
    make_config,
    run_in_thread,
)
from sse_client import Head, RawHttp, connect, request_bytes

from mcplite import (
    Config,
    Context,
    Dispatcher,
    MemoryStore,
    PromiseRecord,
    PromiseStatus,
    PromiseStore,
    Tools,
)
from mcplite.bindings.http import HttpServer
from mcplite.core.errors import UnknownPromise
from mcplite.protocols.mcp.protocol import CAPABILITIES_KEY, VERSION_KEY

#: Where a client leaves a stream whose tool says something, then is held: also
#: after its first event, and once the tool waits (on the gate) mid-stream.
HELD_POINTS = ("before-head", "after-head", "after-first", "held")
#: How a client leaves: FIN, RST, or FIN while it goes on reading.
HOWS = ("fin", "reset", "half-close")
#: Where a client leaves a stream that answers at once: before reading anything,
#: once it has the response's head, once it has read the whole answer.
POINTS = ("before-head", "after-head", "after-end")
#: The seconds each call to the promise store takes (a store over a network).
STORE_DELAY = 0.005
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
SSE_ONLY = {"Accept": "text/event-stream"}
#: What an abandoned call may log at ERROR: the traceback of a tool that raised.
TOOL_RAISED = re.compile(r"^tool '[a-z_]+' raised \(error id [0-9a-f]+\)$")


class Probe:
    """What the tools wait on and report through (one per server)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()  # set on the server's loop (RunningServer.call_soon)
        self.entered: queue.Queue[str] = queue.Queue()  # a tool is about to wait on the gate
        self._counts = threading.Condition()
        self.started = 0
        self.finished = 0

    def start(self) -> None:
        with self._counts:
            self.started += 1
            self._counts.notify_all()

    def finish(self) -> None:
        with self._counts:
            self.finished += 1
            self._counts.notify_all()

    def all_finished(self) -> bool:
        """Wait (bounded) until every tool that started has reached its ``finally``."""
        with self._counts:
            return self._counts.wait_for(lambda: self.finished == self.started, WAIT)

    def started_beyond(self, count: int) -> bool:
        """Wait (bounded) until more than ``count`` tools have started."""
        with self._counts:
            return self._counts.wait_for(lambda: self.started > count, WAIT)

    def forget(self) -> None:
        """Drop what earlier calls said of entering (each case waits for its own)."""
        while not self.entered.empty():
            self.entered.get_nowait()

    def held(self) -> str:
        """Wait (bounded) until a tool waits on the gate; its name."""
        return self.entered.get(timeout=WAIT)


def make_tools(probe: Probe) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        return text

    @tools.tool
    async def ticks() -> AsyncIterator[str]:
        """A part, then held until the gate opens."""
        probe.start()
        try:
            yield "first"
            probe.entered.put("ticks")
            await probe.gate.wait()
            yield "second"
        finally:
            probe.finish()

    @tools.tool
    async def raises_first() -> AsyncIterator[str]:
        raise RuntimeError("broken before its first part")
        yield "never"  # an async generator all the same

    @tools.tool
    async def raises_mid() -> AsyncIterator[str]:
        yield "first"
        raise RuntimeError("broken mid-stream")

    @tools.tool
    async def held(ctx: Context) -> str:
        """Says it started (progress), then held until the gate opens."""
        probe.start()
        try:
            ctx.report_progress(1, None, "holding")
            probe.entered.put("held")
            await probe.gate.wait()
            return "released"
        finally:
            probe.finish()

    @tools.tool
    async def quiet_first(ctx: Context) -> str:
        """Held silent until the gate opens, then says it goes on, and goes on."""
        probe.start()
        try:
            probe.entered.put("quiet_first")
            await probe.gate.wait()
            ctx.report_progress(1, None, "going on")
            await asyncio.Event().wait()
            return "never"
        finally:
            probe.finish()

    @tools.tool
    async def raises_after_progress(ctx: Context) -> str:
        ctx.report_progress(1, None, "starting")
        raise RuntimeError("broken after its progress")

    @tools.tool(promise_after=0.05)
    async def promised(ctx: Context) -> str:
        """Outlives its promise deadline: held until the gate opens."""
        probe.start()
        try:
            ctx.report_progress(1, None, "holding")
            probe.entered.put("promised")
            await probe.gate.wait()
            return "kept"
        finally:
            probe.finish()

    return tools


class WatchedStore(DelegatingStore):
    """A promise store that takes :data:`STORE_DELAY` to answer each call and
    remembers the promises it made."""

    def __init__(self, inner: PromiseStore) -> None:
        super().__init__(inner)
        self.created: list[bytes] = []
        self.made: queue.Queue[bytes] = queue.Queue()  # each promise, as it is made

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        await asyncio.sleep(STORE_DELAY)
        record = await self.inner.create(tool, owner)
        self.created.append(record.promise_id)
        self.made.put(record.promise_id)
        return record

    async def get(self, promise_id: bytes) -> PromiseRecord:
        await asyncio.sleep(STORE_DELAY)
        return await self.inner.get(promise_id)

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        await asyncio.sleep(STORE_DELAY)
        return await self.inner.wait(promise_id, timeout)

    async def request_cancel(self, promise_id: bytes) -> bool:
        await asyncio.sleep(STORE_DELAY)
        return await self.inner.request_cancel(promise_id)

    async def running(self) -> list[bytes]:
        """The promises made here that are still running (an unknown one, dropped
        at its expiry, is not)."""
        left = []
        for promise_id in self.created:
            try:
                record = await self.inner.get(promise_id)
            except UnknownPromise:
                continue
            if record.status is PromiseStatus.RUNNING:
                left.append(promise_id)
        return left


def watched_dispatcher(probe: Probe, config: Config) -> Dispatcher:
    """A dispatcher of :func:`make_tools` over a :class:`WatchedStore`, assembled
    as ``mcplite serve`` assembles it (auth as ``config`` asks for it)."""
    from mcplite.auth import auth_from_config
    from mcplite.ops.logs import ACCESS
    from mcplite.ops.metrics import METRICS

    inner = MemoryStore(
        ttl=config.promise_ttl, max_entries=config.max_promises, retry_after=config.retry_after
    )
    auth = auth_from_config(config, {})
    return Dispatcher(
        make_tools(probe),
        config,
        promises=WatchedStore(inner),
        auth=auth,
        metrics=METRICS,
        access_log=ACCESS,
    )


def store_of(dispatcher: Dispatcher) -> WatchedStore:
    store = dispatcher.promises
    assert isinstance(store, WatchedStore)
    return store


def start(probe: Probe, *, grpc: bool = False, **overrides: Any) -> RunningServer:
    """HTTP (and gRPC) for :func:`make_tools` on ephemeral ports."""
    config = make_config(heartbeat=WAIT, **overrides)

    async def boot() -> tuple[Dispatcher, HttpServer, Any]:
        dispatcher = watched_dispatcher(probe, config)
        http = HttpServer(dispatcher, config)
        await http.start("127.0.0.1", 0)
        grpc_server = None
        if grpc:
            from mcplite.bindings.grpc.service import GrpcServer

            grpc_server = GrpcServer(dispatcher, config)
            await grpc_server.start("127.0.0.1", 0)
        return dispatcher, http, grpc_server

    return run_in_thread(boot)


# --- what the server logs -----------------------------------------------------------


class Heard(logging.Handler):
    """Every record at ERROR or above from asyncio, grpclib, mcplite and uvicorn."""

    NAMES = ("asyncio", "grpclib", "mcplite", "uvicorn")

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def unexpected(self) -> list[str]:
        """What was heard besides the line of a tool that raised (mcplite's own)."""
        return [
            f"{r.name}: {r.getMessage()}"
            for r in self.records
            if not (r.name == "mcplite" and TOOL_RAISED.match(r.getMessage()))
        ]


@pytest.fixture
def heard() -> Iterator[Heard]:
    handler = Heard()
    for name in Heard.NAMES:
        logging.getLogger(name).addHandler(handler)
    try:
        yield handler
    finally:
        for name in Heard.NAMES:
            logging.getLogger(name).removeHandler(handler)


async def collected() -> None:
    """Collect garbage and let the loop turn: a task abandoned with an exception
    nobody retrieved is reported now, if there is one."""
    gc.collect()
    for _ in range(3):
        await asyncio.sleep(0)  # loop turns: the exception handler's calls run


class Target(Protocol):
    """A server under test, as the checks see it (``conftest.RunningServer``, or
    an ASGI server's stand-in)."""

    @property
    def port(self) -> int: ...

    @property
    def dispatcher(self) -> Dispatcher: ...

    def run(self, coro: Any) -> Any: ...

    def tasks(self) -> set[asyncio.Task[Any]]: ...

    def settle(self, baseline: set[asyncio.Task[Any]], timeout: float) -> list[str]: ...

    def http_connections(self) -> int: ...


def assert_released(server: Target, baseline: set[asyncio.Task[Any]], heard: Heard) -> None:
    """No task beyond ``baseline``, no call, connection or running promise left;
    nothing heard at ERROR so far but a tool's own failure."""
    left = server.settle(baseline, WAIT)
    assert left == [], left
    # A connection closed in the last loop turn goes in the next: a bounded poll.
    deadline = time.monotonic() + WAIT
    while server.http_connections() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert server.http_connections() == 0, "connections left open"
    running = server.run(store_of(server.dispatcher).running())
    assert running == [], f"{len(running)} promises left running"
    unexpected = heard.unexpected()
    assert unexpected == [], unexpected


def assert_quiet(server: Target, heard: Heard) -> None:
    """Once garbage is collected and the loop has turned, still nothing heard at
    ERROR but a tool's own failure (a test's last check: collecting takes a while)."""
    server.run(collected())
    unexpected = heard.unexpected()
    assert unexpected == [], unexpected


# --- a client that leaves -----------------------------------------------------------


def taken_in(port: int) -> None:
    """One request on a new connection, answered at once (``404``) and read to its
    end: a connection made before it has been accepted and its bytes read by
    now (one loop takes connections and their bytes in order), so that a check
    after a client that left before any answer sees what it left."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request("POST", "/nowhere", body=b"{}", headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        assert response.status == 404, response.status
    finally:
        conn.close()


def leave(sock: socket.socket, how: str) -> None:
    """The client goes (see :data:`HOWS`); a half-closing client reads to the end,
    which must come (the server closes its side)."""
    try:
        if how == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif how == "half-close":
            sock.shutdown(socket.SHUT_WR)
            assert at_eof(sock), "the server did not close its side"
    finally:
        sock.close()


def at_eof(sock: socket.socket) -> bool:
    """Read until the peer closes: True, or False if it has not within ``WAIT``
    seconds (however much it sends meanwhile, heartbeats included)."""
    deadline = time.monotonic() + WAIT
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            break
    return False


def outcome(head: Head, reader: RawHttp) -> list[str]:
    """What an answer said, read to its end, in short: an SSE answer as its
    events (MCP-lite: the event name, and an error's code; MCP: each message's
    method, or ``error CODE``, or ``result`` / ``isError``); a JSON answer as
    ``json`` and its error code, if any."""
    if (head.header("content-type") or "").startswith("text/event-stream"):
        said = []
        for event in reader.events(head):
            data = event.json()
            if event.event == "error":
                reason = (data.get("data") or {}).get("reason")
                said.append(f"error {data['code']}" + (f" {reason}" if reason else ""))
            elif event.event != "message" or "jsonrpc" not in data:
                said.append(event.event)
            else:
                said.append(_mcp_message(data))
        return said
    body = b"".join(reader.body_parts(head))
    if head.status == 202:
        return ["202"]
    reply = json.loads(body)
    return [f"json {_mcp_message(reply)}"]


def _mcp_message(message: dict[str, Any]) -> str:
    if "method" in message:
        return str(message["method"])
    if "error" in message:
        return f"error {message['error']['code']}"
    result = message["result"]
    return "isError" if result.get("isError") else "result"


def post_and_leave(port: int, data: bytes, point: str, how: str) -> list[str] | None:
    """Send a request on a new connection and leave at ``point`` (see
    :data:`POINTS`); what the whole answer said when it was read (``after-end``)."""
    sock = connect(port, WAIT)
    said = None
    try:
        sock.sendall(data)
        if point != "before-head":
            reader = RawHttp(sock)
            head = reader.read_head()
            if point == "after-end":
                said = outcome(head, reader)
    finally:
        leave(sock, how)
    if point == "before-head":
        taken_in(port)
    return said


def each_way(
    server: Target,
    probe: Probe,
    heard: Heard,
    request: bytes,
    expected: list[str],
) -> None:
    """Send ``request`` once per point and way of leaving; the whole answer is
    ``expected`` (when read), and nothing is left behind each time."""
    baseline = server.tasks()
    for point in POINTS:
        for how in HOWS:
            said = post_and_leave(server.port, request, point, how)
            assert said is None or said == expected, (point, how)
            assert probe.all_finished(), (point, how)
            try:
                assert_released(server, baseline, heard)
            except AssertionError as exc:
                raise AssertionError(f"left at {point} by {how}: {exc}") from None
    assert_quiet(server, heard)


def open_and_leave(
    server: Target,
    probe: Probe,
    request: bytes,
    point: str,
    how: str,
    *,
    made: queue.Queue[bytes] | None = None,
) -> list[str]:
    """Send ``request`` (a stream whose tool says something, then is held) and leave at
    ``point`` (see :data:`HELD_POINTS`), once the call is a promise if ``made``
    (a :class:`WatchedStore`'s) is given; the events read of it."""
    probe.forget()
    sock = connect(server.port, WAIT)
    said: list[str] = []
    try:
        sock.sendall(request)
        if point != "before-head":
            reader = RawHttp(sock)
            head = reader.read_head()
            assert head.status == 200, head
            if point != "after-head":
                first = next(reader.events(head))
                said.append(first.event)
                if point == "held":
                    probe.held()
        if made is not None:
            made.get(timeout=WAIT)
    finally:
        leave(sock, how)
    if point == "before-head":
        taken_in(server.port)
    return said


def sse(path: str, message: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    """A request that takes only an event stream, byte for byte."""
    return request_bytes(path, message, headers={**SSE_ONLY, **(headers or {})})


def sealed_unknown(server: Target) -> str:
    """A token this server sealed, for a promise its store never made."""
    return server.dispatcher.sealer.seal(b"\x01" * 16, time.time() + 60)


#: MCP-lite calls answered with an error (the tool, its arguments, the whole answer).
LITE_ERRORS: dict[str, tuple[str, dict[str, Any] | None, list[str]]] = {
    "forged-token": ("redeem", {"promise": "prom_forged"}, ["error -32602 invalid"]),
    "unknown-promise": ("redeem", None, ["error -32602 unknown"]),
    "unknown-tool": ("no_such_tool", {}, ["json error -32601"]),
    "invalid-arguments": ("echo", {"text": 5}, ["json error -32602"]),
    "raises-before-its-first-part": ("raises_first", {}, ["error -32603"]),
    "raises-mid-stream": ("raises_mid", {}, ["message", "error -32603"]),
}


def mcp_request(
    revision: str, name: str, arguments: dict[str, Any], **params: Any
) -> tuple[bytes, dict[str, Any]]:
    message, headers = mcp_call(revision, name, arguments)
    message["params"].update(params)
    return sse("/mcp", message, headers), message


#: MCP calls answered with an error, or an error result, on an SSE answer.
MCP_ERRORS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "forged-token": ("redeem", {"promise": "prom_forged"}, ["error -32602"]),
    "unknown-tool": ("no_such_tool", {}, ["error -32602"]),
    "invalid-arguments": ("echo", {"text": 5}, ["isError"]),
    "raises-at-once": ("raises_first", {}, ["isError"]),
    "raises-after-progress": ("raises_after_progress", {}, ["notifications/progress", "isError"]),
}


def modern_call(
    name: str, arguments: dict[str, Any], *, capabilities: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 ``tools/call`` asking for progress, and the headers it goes with."""
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                VERSION_KEY: MODERN,
                CAPABILITIES_KEY: capabilities or {},
                "progressToken": "p7",
            },
        },
    }
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
    return message, headers


def legacy_call(name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2025-11-25 ``tools/call`` asking for progress, and its headers."""
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": {"progressToken": "p7"}},
    }
    return message, {"MCP-Protocol-Version": LEGACY}


def mcp_call(
    revision: str, name: str, arguments: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    return (modern_call if revision == MODERN else legacy_call)(name, arguments)
