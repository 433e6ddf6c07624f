"""Graceful termination with streams still open: each gets a final word, then closes.

The server is stopped (as SIGTERM does, through the same shutdown path) while a
streaming tool is silent; within the grace period the stream ends with a
message saying the server is closing, on both bindings, and the tool's
``finally`` runs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import grpc
import pytest
from conftest import WAIT, make_config, start_server
from grpc_support import protos
from http_support import open_stream

from mcplite import Config, Tools

GRACE = 0.3


def endless_tools(finished: threading.Event) -> Tools:
    tools = Tools()

    @tools.tool
    async def endless() -> AsyncIterator[str]:
        try:
            yield "first"
            await asyncio.Event().wait()  # silent until the server closes
            yield "never"
        finally:
            finished.set()

    return tools


def config() -> Config:
    # Heartbeats far apart, so the only events are the part and the final word.
    return make_config(heartbeat=WAIT)


def test_an_open_sse_stream_ends_with_a_shutting_down_error_event() -> None:
    finished = threading.Event()
    server = start_server(endless_tools(finished), config())
    stopper = threading.Thread(target=server.stop, kwargs={"grace": GRACE})
    try:
        sock, reader, head = open_stream(server, "endless", timeout=WAIT)
        with sock:
            events = reader.events(head)
            assert next(events).json() == {"partial": "first"}
            stopper.start()
            rest = list(events)  # ends: the server sends its last event and the final chunk
    finally:
        if stopper.is_alive():
            stopper.join(WAIT)
        server.stop()
    assert [e.event for e in rest] == ["error"]
    assert rest[0].json() == {"code": -32000, "message": "Server is shutting down"}
    assert finished.wait(WAIT), "the tool's finally did not run"


@pytest.mark.parametrize("proto", ["ours", "spec"])
def test_an_open_grpc_stream_ends_with_unavailable_shutting_down(proto: str) -> None:
    messages = protos()[proto]
    finished = threading.Event()
    server = start_server(endless_tools(finished), config(), grpc=True)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    stopper = threading.Thread(target=server.stop, kwargs={"grace": GRACE})
    try:
        call = messages.stub(channel).CallToolStream(messages.request("endless"), timeout=WAIT)
        first = next(call)
        assert first.result.fields["partial"].string_value == "first"
        stopper.start()
        with pytest.raises(grpc.RpcError) as caught:
            next(call)
    finally:
        channel.close()
        if stopper.is_alive():
            stopper.join(WAIT)
        server.stop()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == "Server is shutting down"
    assert finished.wait(WAIT), "the tool's finally did not run"
