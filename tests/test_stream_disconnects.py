"""Clients that leave in the middle of a stream, one after another, on both bindings.

Each stream's generator must be stopped (its ``finally`` runs), and once they
have all gone no task, call or connection may be left on the server.  HTTP is
driven by raw sockets that close mid-stream; gRPC by the official grpcio client
cancelling its call.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator

import grpc
import pytest
from conftest import WAIT, RunningServer, make_config, start_server
from grpc_support import protos
from http_support import open_stream

from mcplite import Tools

ROUNDS = 50


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
