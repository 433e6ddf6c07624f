"""Streams whose call fails while (or just before) its client goes away.

Whatever ends a stream, no task may be left with an exception nobody retrieves:
asyncio logs those as ``ERROR asyncio: Task exception was never retrieved``, with
a traceback, once per request, so any client could fill the error log.  Each test
drives the server with real peers (raw sockets that half-close or reset, grpcio),
then collects garbage and turns the server's loop so that such a task would be
reported, and checks the ``asyncio`` logger heard nothing at ERROR.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from conftest import (
    BASE,
    WAIT,
    DelegatingStore,
    RunningServer,
    call_message,
    make_config,
    run_in_thread,
    start_server,
)
from grpc_support import protos
from sse_client import RawHttp, connect, request_bytes

from mcplite import Dispatcher, MemoryStore, PromiseRecord, Tools
from mcplite.bindings.grpc.service import GrpcServer
from mcplite.bindings.http import HttpServer

ROUNDS = 20
BOGUS = {"promise": "prom_not-a-real-token"}


class Records(logging.Handler):
    """Every record a logger (and its children) hears at ``level`` or above."""

    def __init__(self, name: str, level: int = logging.ERROR) -> None:
        super().__init__(level)
        self.logger = logging.getLogger(name)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [record.getMessage() for record in self.records]


@pytest.fixture
def asyncio_errors() -> Iterator[Records]:
    records = Records("asyncio")
    records.logger.addHandler(records)
    try:
        yield records
    finally:
        records.logger.removeHandler(records)


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        return text

    return tools


@pytest.fixture
def server() -> Iterator[RunningServer]:
    running = start_server(make_tools(), make_config(heartbeat=WAIT), grpc=True)
    try:
        yield running
    finally:
        running.stop()


def collect(server: RunningServer) -> None:
    """Collect garbage on the server's loop and let it turn: an abandoned task
    with an exception is reported now, if there is one."""

    async def turn() -> None:
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)  # one loop turn: the exception handler's call runs

    server.run(turn())


def settled(server: RunningServer, baseline: set[asyncio.Task[Any]]) -> None:
    assert server.settle(baseline, WAIT) == []
    collect(server)


def sse_request(path: str, message: dict[str, Any]) -> bytes:
    return request_bytes(path, message, headers={"Accept": "text/event-stream"})


def leave(sock: socket.socket, how: str) -> None:
    """The client goes: ``half-close`` (FIN, then read to the end) or ``reset``."""
    if how == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        return
    sock.shutdown(socket.SHUT_WR)
    try:
        RawHttp(sock).at_eof()
    finally:
        sock.close()


@pytest.mark.parametrize("how", ["half-close", "reset"])
@pytest.mark.parametrize("name", ["redeem", "cancel"])
def test_redeeming_a_bogus_token_as_a_stream_whose_client_leaves_logs_no_asyncio_error(
    server: RunningServer, asyncio_errors: Records, name: str, how: str
) -> None:
    baseline = server.tasks()
    for _ in range(ROUNDS):
        sock = connect(server.port, WAIT)
        sock.sendall(sse_request(BASE + "/calltools", call_message(name, BOGUS)))
        leave(sock, how)
    settled(server, baseline)
    assert asyncio_errors.messages() == []
    assert server.http_connections() == 0


@pytest.mark.parametrize("how", ["half-close", "reset"])
@pytest.mark.parametrize("name", ["redeem", "nonexistent_tool"])
def test_an_mcp_stream_answering_an_error_to_a_client_that_leaves_logs_no_asyncio_error(
    server: RunningServer, asyncio_errors: Records, name: str, how: str
) -> None:
    baseline = server.tasks()
    for _ in range(ROUNDS):
        sock = connect(server.port, WAIT)
        sock.sendall(sse_request("/mcp", call_message(name, BOGUS)))
        leave(sock, how)
    settled(server, baseline)
    assert asyncio_errors.messages() == []


def test_an_mcp_call_that_fails_after_its_client_left_is_logged_by_mcplite_not_asyncio(
    server: RunningServer, asyncio_errors: Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failure nobody can be told of (a bug of the server's, here made on purpose):
    # the call says something first, so its stream is open, then fails when stopped.
    async def failing(message: Any, context: Any, headers: Any, notify: Any, **_: Any) -> Any:
        notify("notifications/message", {"level": "info", "data": "started"})
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("failed while being stopped") from None

    monkeypatch.setattr(server.http.mcp, "handle", failing)
    ours = Records("mcplite")
    ours.logger.addHandler(ours)
    try:
        baseline = server.tasks()
        sock = connect(server.port, WAIT)
        sock.sendall(sse_request("/mcp", call_message("echo", {"text": "hi"})))
        reader = RawHttp(sock)
        head = reader.read_head()
        assert head.status == 200
        first = next(reader.events(head))
        assert first.json()["method"] == "notifications/message"
        leave(sock, "reset")
        settled(server, baseline)
    finally:
        ours.logger.removeHandler(ours)
    assert asyncio_errors.messages() == []
    failures = [r for r in ours.records if r.exc_info and r.exc_info[0] is RuntimeError]
    assert len(failures) == 1, ours.messages()


@pytest.mark.parametrize("leaves", [False, True])
@pytest.mark.parametrize("name", ["redeem", "nonexistent_tool"])
def test_a_grpc_stream_of_a_bogus_token_or_unknown_tool_logs_no_asyncio_error(
    server: RunningServer, asyncio_errors: Records, name: str, leaves: bool
) -> None:
    messages = protos()["ours"]
    options = [("grpc.enable_http_proxy", 0)]
    grpclib_errors = Records("grpclib")
    grpclib_errors.logger.addHandler(grpclib_errors)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
            stub = messages.stub(channel)
            stub.GetTools(messages.cls("Empty")(), timeout=WAIT)  # the connection is up
            baseline = server.tasks()
            for _ in range(ROUNDS):
                call = stub.CallToolStream(messages.request(name, BOGUS), timeout=WAIT)
                if leaves:
                    call.cancel()
                    continue
                with pytest.raises(grpc.RpcError) as caught:
                    list(call)
                expected = "INVALID_ARGUMENT" if name == "redeem" else "NOT_FOUND"
                assert caught.value.code().name == expected
            settled(server, baseline)
    finally:
        grpclib_errors.logger.removeHandler(grpclib_errors)
    assert asyncio_errors.messages() == []
    assert grpclib_errors.messages() == []


# --- a system tool whose store fails --------------------------------------------------


class FailingStore(DelegatingStore):
    """A promise store whose reads fail as a broken database would."""

    async def get(self, promise_id: bytes) -> PromiseRecord:
        raise RuntimeError("the promise store is down")


def start_with_failing_store() -> RunningServer:
    config = make_config(heartbeat=WAIT)

    async def boot() -> tuple[Dispatcher, HttpServer, Any]:
        store = FailingStore(MemoryStore(ttl=60, max_entries=10))
        dispatcher = Dispatcher(make_tools(), config, promises=store)
        http = HttpServer(dispatcher, config)
        await http.start("127.0.0.1", 0)
        grpc_server = GrpcServer(dispatcher, config)
        await grpc_server.start("127.0.0.1", 0)
        return dispatcher, http, grpc_server

    return run_in_thread(boot)


def test_a_redeem_stream_whose_store_fails_ends_with_an_internal_error_event(
    asyncio_errors: Records,
) -> None:
    server = start_with_failing_store()
    try:
        token = server.dispatcher.sealer.seal(b"\x01" * 16, time.time() + 60)
        baseline = server.tasks()
        sock = connect(server.port, WAIT)
        try:
            message = call_message("redeem", {"promise": token})
            sock.sendall(sse_request(BASE + "/calltools", message))
            reader = RawHttp(sock)
            head = reader.read_head()
            assert head.status == 200
            events = list(reader.events(head))
        finally:
            sock.close()
        assert [event.event for event in events] == ["error"], events
        error = json.loads(events[0].data)
        assert error["code"] == -32603 and "error_id" in error["data"], error
        settled(server, baseline)
        assert asyncio_errors.messages() == []
    finally:
        server.stop()


def test_a_grpc_redeem_stream_whose_store_fails_ends_internal(asyncio_errors: Records) -> None:
    server = start_with_failing_store()
    try:
        token = server.dispatcher.sealer.seal(b"\x01" * 16, time.time() + 60)
        messages = protos()["ours"]
        options = [("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
            stub = messages.stub(channel)
            call = stub.CallToolStream(messages.request("redeem", {"promise": token}), timeout=WAIT)
            with pytest.raises(grpc.RpcError) as caught:
                list(call)
        assert caught.value.code() is grpc.StatusCode.INTERNAL
        assert "error id" in (caught.value.details() or "")
        collect(server)
        assert asyncio_errors.messages() == []
    finally:
        server.stop()
