"""Clients that leave in the middle of a stream, one after another, on both bindings.

Each stream's generator must be stopped (its ``finally`` runs), and once they
have all gone no task, call or connection may be left on the server.  HTTP is
driven by raw sockets that close mid-stream; gRPC by the official grpcio client
cancelling its call.  A call dropped so leaves a trace: an access line that
says ``client-gone``, and a count (``disconnected``, or the request's status).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import struct
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import (
    BASE,
    WAIT,
    RunningServer,
    call_message,
    make_config,
    serve_process,
    start_server,
)
from grpc_support import protos
from http_support import open_stream
from sse_client import RawHttp, connect, request_bytes

from mcplite import Tools
from mcplite.ops.metrics import METRICS, Registry

ROUNDS = 50
SSE = "text/event-stream"


class Counter:
    """Counts generators started and finished, thread-safely."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.finished = 0
        self.all_finished = threading.Event()
        self.expected = 0

    def start(self) -> None:
        with self.lock:
            self.started += 1

    def finish(self) -> None:
        with self.lock:
            self.finished += 1
            if self.finished >= self.expected:
                self.all_finished.set()


def ticking_tools(counter: Counter) -> Tools:
    tools = Tools()

    @tools.tool
    async def ticks() -> AsyncIterator[str]:
        counter.start()
        try:
            yield "tick"
            await asyncio.Event().wait()  # then silent until the client leaves
            yield "never"
        finally:
            counter.finish()

    return tools


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture
def server(counter: Counter) -> RunningServer:
    return start_server(ticking_tools(counter), make_config(heartbeat=WAIT), grpc=True)


def open_sse(server: RunningServer) -> socket.socket:
    sock, reader, head = open_stream(server, "ticks", timeout=WAIT)
    first = next(reader.events(head))
    assert first.json() == {"partial": "tick"}
    return sock


def test_many_sse_clients_leaving_mid_stream_leave_no_task_call_or_connection(
    server: RunningServer, counter: Counter
) -> None:
    try:
        baseline = server.tasks()
        counter.expected = ROUNDS
        for _ in range(ROUNDS):
            open_sse(server).close()  # gone mid-stream, the tool still silent
        assert counter.all_finished.wait(WAIT), f"{counter.finished}/{ROUNDS} finally blocks ran"
        assert server.settle(baseline, WAIT) == []
        assert server.http_connections() == 0
    finally:
        server.stop()


def test_many_grpc_clients_cancelling_mid_stream_leave_no_task_or_call(
    server: RunningServer, counter: Counter
) -> None:
    messages = protos()["spec"]
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    try:
        stub = messages.stub(channel)
        stub.GetTools(messages.cls("Empty")(), timeout=WAIT)  # the connection is up
        baseline = server.tasks()
        counter.expected = ROUNDS
        for _ in range(ROUNDS):
            call = stub.CallToolStream(messages.request("ticks"), timeout=WAIT)
            assert next(call).result.fields["partial"].string_value == "tick"
            call.cancel()  # the official client's way to leave
        assert counter.all_finished.wait(WAIT), f"{counter.finished}/{ROUNDS} finally blocks ran"
        assert server.settle(baseline, WAIT) == []
    finally:
        channel.close()
        server.stop()


# --- a dropped call leaves a trace: its access line, and a count ------------------------


class AccessLines(logging.Handler):
    """The access log's records (``mcplite.access``), heard while installed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.logger = logging.getLogger("mcplite.access")

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def fields(self) -> list[dict[str, Any]]:
        keys = ("binding", "path", "tool", "status", "outcome")
        return [{key: getattr(r, key, None) for key in keys} for r in self.records]


@pytest.fixture
def access_lines() -> Iterator[AccessLines]:
    lines = AccessLines()
    level = lines.logger.level
    lines.logger.setLevel(logging.INFO)
    lines.logger.addHandler(lines)
    try:
        yield lines
    finally:
        lines.logger.removeHandler(lines)
        lines.logger.setLevel(level)


@pytest.fixture
def counting() -> Iterator[Registry]:
    """The process's metrics, counting for the test (as ``--metrics`` turns them on)."""
    was = METRICS.on
    METRICS.on = True
    try:
        yield METRICS
    finally:
        METRICS.on = was


@pytest.fixture
def entered() -> threading.Event:
    """Set when the ``held`` tool runs."""
    return threading.Event()


@pytest.fixture
def logged_server(counter: Counter, entered: threading.Event) -> Iterator[RunningServer]:
    tools = ticking_tools(counter)

    @tools.tool
    async def held() -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    config = make_config(heartbeat=WAIT, access_log=True)
    server = start_server(tools, config, grpc=True)
    try:
        yield server
    finally:
        server.stop()


def test_an_sse_stream_whose_client_leaves_is_logged_client_gone_and_counted_disconnected(
    logged_server: RunningServer,
    counter: Counter,
    access_lines: AccessLines,
    counting: Registry,
) -> None:
    server = logged_server
    baseline = server.tasks()
    key = ("http", "ticks", "disconnected")
    before = counting.calls.get(key, 0)
    counter.expected = 1
    open_sse(server).close()
    assert counter.all_finished.wait(WAIT)
    assert server.settle(baseline, WAIT) == []
    assert access_lines.fields() == [
        {
            "binding": "http",
            "path": f"{BASE}/rpc",
            "tool": "ticks",
            "status": 200,  # as sent: the stream's head was out
            "outcome": "client-gone",
        }
    ]
    assert "client-gone" in access_lines.records[0].getMessage()
    assert counting.calls.get(key, 0) == before + 1


def test_a_plain_call_whose_client_resets_is_logged_499_client_gone(
    logged_server: RunningServer,
    entered: threading.Event,
    access_lines: AccessLines,
    counting: Registry,
) -> None:
    server = logged_server
    baseline = server.tasks()
    before = counting.requests.get(("http", "499"), 0)
    sock = connect(server.port, WAIT)
    sock.sendall(request_bytes(BASE + "/rpc", call_message("held")))
    assert entered.wait(WAIT)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # a reset, the answer not begun
    assert server.settle(baseline, WAIT) == []
    (line,) = access_lines.fields()
    assert line == {
        "binding": "http",
        "path": f"{BASE}/rpc",
        "tool": None,
        "status": 499,
        "outcome": "client-gone",
    }
    assert counting.requests.get(("http", "499"), 0) == before + 1


def test_a_grpc_stream_the_client_cancels_is_logged_client_gone_and_counted_disconnected(
    logged_server: RunningServer,
    counter: Counter,
    access_lines: AccessLines,
    counting: Registry,
) -> None:
    server = logged_server
    messages = protos()["ours"]
    key = ("grpc", "ticks", "disconnected")
    before = counting.calls.get(key, 0)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = messages.stub(channel)
        stub.GetTools(messages.cls("Empty")(), timeout=WAIT)
        baseline = server.tasks()
        access_lines.records.clear()
        counter.expected = 1
        call = stub.CallToolStream(messages.request("ticks"), timeout=WAIT)
        assert next(call).result.fields["partial"].string_value == "tick"
        call.cancel()
        assert counter.all_finished.wait(WAIT)
        assert server.settle(baseline, WAIT) == []
    assert access_lines.fields() == [
        {
            "binding": "grpc",
            "path": "/mcplite.MCPLite/CallToolStream",
            "tool": "ticks",
            "status": "CANCELLED",
            "outcome": "client-gone",
        }
    ]
    assert counting.calls.get(key, 0) == before + 1


def test_an_answered_call_has_no_outcome_and_nothing_is_counted_disconnected(
    logged_server: RunningServer, access_lines: AccessLines, counting: Registry
) -> None:
    server = logged_server
    before = dict(counting.calls)
    reply = server.call("held_not")  # an unknown tool: an ordinary error reply
    assert reply["error"]["code"] == -32601
    server.call_soon(lambda: None)  # the loop step that answered (and logged) is over
    (line,) = access_lines.fields()
    assert line["status"] == 200 and line["outcome"] is None
    assert not [k for k in counting.calls if k[2] == "disconnected" and k not in before]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_access_line_of_a_dropped_stream_ends_client_gone_in_either_format(
    tmp_path: Path, log_format: str
) -> None:
    never = str(tmp_path / "never-created")
    with serve_process(
        "tests.ops_tools",
        *("--http", "127.0.0.1:0", "--no-grpc", "--log-format", log_format),
        *("--secret", "a-long-enough-test-secret"),
    ) as process:
        sock = connect(process.http_port, WAIT)
        try:
            message = call_message("trickle", {"path": never, "seconds": WAIT})
            sock.sendall(request_bytes(BASE + "/rpc", message, headers={"Accept": SSE}))
            reader = RawHttp(sock)
            head = reader.read_head()
            assert next(reader.events(head)).json() == {"partial": "started "}
        finally:
            sock.close()  # gone mid-stream
        line = process.wait_for("client-gone", timeout=WAIT).string
    if log_format == "json":
        record = json.loads(line)
        assert record["logger"] == "mcplite.access"
        assert (record["path"], record["tool"], record["status"], record["outcome"]) == (
            f"{BASE}/rpc",
            "trickle",
            200,
            "client-gone",
        )
    else:
        pattern = rf"INFO mcplite\.access: POST {BASE}/rpc trickle 200 [0-9.]+ms client-gone$"
        assert re.search(pattern, line), line
