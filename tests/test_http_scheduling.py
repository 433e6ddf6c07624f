"""When an HTTP request's handler runs: at once for a lone request, in turn under load.

On Python 3.12+ the first request of an event-loop turn starts its handler as
an eager task (answered before ``data_received`` returns); the others of that
turn are scheduled, which under load keeps each phase of the loop's work
together (mcplite/bindings/http/connection.py says why, docs/benchmarks.md has the
figures).  Python 3.11 schedules them all.

These tests drive the protocol objects directly with a transport that records
what is written: "arrived in the same loop turn" is not something a client on a
real socket can arrange.  Every other HTTP test uses real sockets.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mcplite import Config, Dispatcher, Tools
from mcplite.bindings.http.connection import HttpConnection
from mcplite.bindings.http.server import HttpServer
from mcplite.core.runner import EAGER_TASKS

TIMEOUT = 10.0
BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}},
    }
).encode()
REQUEST = (
    b"POST /mcp-lite/v1/calltools HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


class RecordingTransport(asyncio.Transport):
    """What a connection wrote; ``answered`` is set on the first write."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.answered = asyncio.Event()

    def write(self, data: Any) -> None:
        self.written += bytes(data)
        self.answered.set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _tools() -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        """Answers without suspending."""
        return text

    return tools


def _answer(transport: RecordingTransport) -> dict[str, Any]:
    head, _, body = transport.written.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    answer: dict[str, Any] = json.loads(body)
    return answer


async def test_requests_of_one_loop_turn_are_all_answered_the_first_at_once_on_3_12() -> None:
    dispatcher = Dispatcher(_tools(), Config(secret=b"k" * 32))
    server = HttpServer(dispatcher)
    transports = [RecordingTransport() for _ in range(3)]
    connections = [HttpConnection(server) for _ in transports]
    for connection, transport in zip(connections, transports, strict=True):
        connection.connection_made(transport)
    try:
        for connection in connections:  # one loop turn: no await in between
            connection.data_received(REQUEST)
        at_once = [transport.answered.is_set() for transport in transports]
        assert at_once == ([True, False, False] if EAGER_TASKS else [False, False, False])

        waits = [transport.answered.wait() for transport in transports]
        await asyncio.wait_for(asyncio.gather(*waits), TIMEOUT)
        for transport in transports:
            assert _answer(transport)["result"]["content"] == [{"type": "text", "text": "hi"}]

        # A later turn with one request: at once again (3.12+), on a kept-alive connection.
        for transport in transports:
            transport.written = b""
            transport.answered.clear()
        connections[1].data_received(REQUEST)
        assert transports[1].answered.is_set() is EAGER_TASKS
        await asyncio.wait_for(transports[1].answered.wait(), TIMEOUT)
        assert _answer(transports[1])["id"] == 7
        assert not transports[0].written and not transports[2].written
    finally:
        for connection in connections:
            connection.connection_lost(None)
        await dispatcher.close()
