"""mcplite.client under broken connections and server limits it must not assume.

- A ``tools/call`` is never sent twice: a connection that fails once any byte of
  the request may have left raises TransportError, and the tool has run once.
- A pooled connection the server closed while idle is replaced before anything
  is written to it, even when the event loop has not yet read the server's FIN.
- ``Client.call`` long-polls ``redeem`` within the server's own bound (the
  ``maximum`` of redeem's ``wait`` in discovery), whatever that bound is.

Servers run on 127.0.0.1 with ephemeral ports: mcplite's own (conftest) or a
raw asyncio server written here that counts requests.  Nothing sleeps: waits are
events, bounded by WAIT.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import BASE, WAIT, RunningServer, make_config, start_server

from mcplite import Tools
from mcplite.client import Client, InvalidArgumentsError, TransportError
from mcplite.client.http import HttpTransport

# --- a raw HTTP/1.1 server that counts requests ------------------------------------

_ANSWER = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "content": [{"type": "text", "text": "ok"}],
            "_meta": {"response_type": "answer"},
        },
    }
).encode()


@dataclass
class RawServer:
    """Answers the first request of each connection; reads the next one whole and
    closes the connection without answering (``reset``: with a TCP RST)."""

    reset: bool
    requests: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                self.requests.append(body)
                if len(self.requests) == 1:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(_ANSWER), _ANSWER)
                    )
                    continue
                if self.reset:
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                else:
                    writer.close()
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture(params=["fin", "rst"])
async def raw_server(request: pytest.FixtureRequest) -> AsyncIterator[RawServer]:
    raw = RawServer(reset=request.param == "rst")
    raw.server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    try:
        yield raw
    finally:
        raw.server.close()
        await raw.server.wait_closed()


# Small, and big enough that the client's writes must wait for the server to read.
@pytest.mark.parametrize("size", [10, 512 * 1024])
async def test_a_call_whose_reused_connection_closes_unanswered_is_not_sent_again(
    raw_server: RawServer, size: int
) -> None:
    async with Client(f"http://127.0.0.1:{raw_server.port}{BASE}", timeout=WAIT) as client:
        assert (await client.call("work", {})).text == "ok"
        with pytest.raises(TransportError) as caught:
            await client.call("work", {"payload": "x" * size})
        assert isinstance(client.transport, HttpTransport)
        assert client.transport.connections_opened == 1
    assert "without answering" in str(caught.value) or "broken" in str(caught.value)
    assert len(raw_server.requests) == 2  # the second call reached the server once
    assert json.loads(raw_server.requests[1])["params"]["name"] == "work"


async def test_an_idempotent_request_is_sent_again_when_a_reused_connection_closes_unanswered(
    raw_server: RawServer,
) -> None:
    async with Client(f"http://127.0.0.1:{raw_server.port}{BASE}", timeout=WAIT) as client:
        assert (await client.call("work", {})).text == "ok"
        with pytest.raises(TransportError):  # the raw server drops the resent one too
            await client.redeem("prom_x")
        assert isinstance(client.transport, HttpTransport)
        assert client.transport.connections_opened == 2
    assert [json.loads(r)["params"]["name"] for r in raw_server.requests] == [
        "work",
        "redeem",
        "redeem",
    ]


# --- mcplite's own server -----------------------------------------------------------


@dataclass
class Tally:
    """What the counting tools share with the test (server loop <-> test thread)."""

    runs: int = 0
    started: threading.Event = field(default_factory=threading.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)


def counting_tools(counter: Tally) -> Tools:
    tools = Tools()

    @tools.tool
    async def count() -> int:
        """Counts its runs."""
        counter.runs += 1
        return counter.runs

    @tools.tool(promise_after=float("inf"))
    async def hold() -> str:
        """Counts its runs, then holds its call open until the gate opens."""
        counter.runs += 1
        counter.started.set()
        await counter.gate.wait()
        return "released"

    @tools.tool(promise_after=0.05)
    async def slow() -> dict[str, Any]:
        """Becomes a promise; finishes on a timer of the server's loop after 0.6 s."""
        counter.runs += 1
        done = asyncio.Event()
        asyncio.get_running_loop().call_later(0.6, done.set)
        await done.wait()
        return {"finished": True}

    return tools


@pytest.fixture
def counted() -> Iterator[tuple[RunningServer, Tally]]:
    counter = Tally()
    server = start_server(
        counting_tools(counter), make_config(keepalive_timeout=0.2, max_redeem_wait=0.25)
    )
    try:
        yield server, counter
    finally:
        server.call_soon(counter.gate.set)
        server.stop()


def abort_all(server: RunningServer) -> None:
    def abort() -> None:
        for conn in list(server.http.connections):
            assert conn.transport is not None
            conn.transport.abort()

    server.call_soon(abort)


async def test_a_tool_whose_connection_breaks_mid_call_ran_once_and_the_call_raises(
    counted: tuple[RunningServer, Tally],
) -> None:
    server, counter = counted
    async with Client(f"http://127.0.0.1:{server.port}{BASE}", timeout=WAIT) as client:
        assert (await client.call("count")).text == "1"  # a pooled connection now
        call = asyncio.create_task(client.call("hold"))
        assert await asyncio.to_thread(counter.started.wait, WAIT)
        abort_all(server)
        with pytest.raises(TransportError):
            await asyncio.wait_for(call, WAIT)
        assert isinstance(client.transport, HttpTransport)
        assert client.transport.connections_opened == 1
    assert counter.runs == 2  # count once, hold once


def on_server_close(server: RunningServer) -> threading.Event:
    """An event set once the server has closed (its sockets too) each connection it
    has now."""
    closed = threading.Event()

    def hook() -> None:
        conns = list(server.http.connections)
        if not conns:
            closed.set()
        left = len(conns)
        for conn in conns:
            lost = conn.connection_lost

            def wrapped(exc: Exception | None, lost: Any = lost) -> None:
                nonlocal left
                lost(exc)
                left -= 1
                if left == 0:
                    # asyncio closes the socket right after connection_lost returns.
                    asyncio.get_running_loop().call_soon(closed.set)

            conn.connection_lost = wrapped  # type: ignore[method-assign]

    server.call_soon(hook)
    return closed


@pytest.mark.parametrize("loop_saw_the_close", [False, True])
async def test_a_pooled_connection_the_server_closed_while_idle_is_replaced_before_writing(
    counted: tuple[RunningServer, Tally], loop_saw_the_close: bool
) -> None:
    server, counter = counted
    async with Client(f"http://127.0.0.1:{server.port}{BASE}", timeout=WAIT) as client:
        assert isinstance(client.transport, HttpTransport)
        assert (await client.call("count")).text == "1"
        closed = on_server_close(server)  # by its 0.2 s keep-alive timeout
        if loop_saw_the_close:
            assert await asyncio.to_thread(closed.wait, WAIT)
            await asyncio.sleep(0)  # let the loop deliver the EOF it has
        else:
            # Block this loop: the FIN is in the socket, unread by the transport.
            assert closed.wait(WAIT)
        assert (await client.call("count")).text == "2"
        assert client.transport.connections_opened == 2
    assert counter.runs == 2


# --- redeem's wait is the server's to bound -----------------------------------------


@pytest.mark.parametrize("transport", ["http", "grpc"])
async def test_call_redeems_within_a_short_server_bound_over_both_transports(
    transport: str,
) -> None:
    counter = Tally()
    server = start_server(counting_tools(counter), make_config(max_redeem_wait=0.25), grpc=True)
    url = (
        f"grpc://127.0.0.1:{server.grpc_port}"
        if transport == "grpc"
        else f"http://127.0.0.1:{server.port}{BASE}"
    )
    try:
        async with Client(url, timeout=WAIT) as client:
            promised = await client.call("slow", wait=False)
            assert promised.response_type == "promise"
            response = await client.call("slow")
            assert response.response_type == "answer"
            assert response.content == [{"finished": True}]
            [redeem] = [t for t in await client.list_tools() if t.name == "redeem"]
            assert redeem.input_schema["properties"]["wait"]["maximum"] == 0.25
    finally:
        server.stop()
    assert counter.runs == 2


async def test_call_learns_a_lowered_bound_when_the_server_refuses_its_wait(
    counted: tuple[RunningServer, Tally],
) -> None:
    server, counter = counted
    async with Client(f"http://127.0.0.1:{server.port}{BASE}", timeout=WAIT) as client:
        promised = await client.call("slow", wait=False)
        token = promised.promise_token
        assert token is not None
        with pytest.raises(InvalidArgumentsError) as caught:
            await client.redeem(token, wait=30)
        assert [e["field"] for e in caught.value.errors] == ["wait"]
        client._redeem_wait = 30.0  # as if discovered before the server was reconfigured
        response = await client.call("slow")
        assert response.content == [{"finished": True}]
        assert client._redeem_wait == 0.25
    assert counter.runs == 2  # a refused redeem does not run the tool again


# --- what JSON can carry, the client sends ------------------------------------------


async def test_a_lone_surrogate_in_the_arguments_is_sent_as_a_json_escape() -> None:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        return text

    server = start_server(tools)
    try:
        async with Client(f"http://127.0.0.1:{server.port}{BASE}", timeout=WAIT) as client:
            assert (await client.call("echo", {"text": "a\ud800é"})).text == "a\ud800é"
    finally:
        server.stop()


async def test_a_lone_surrogate_that_grpc_cannot_carry_raises_transport_error() -> None:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        return text

    server = start_server(tools, grpc=True)
    try:
        async with Client(f"grpc://127.0.0.1:{server.grpc_port}", timeout=WAIT) as client:
            with pytest.raises(TransportError, match="lone surrogate"):
                await client.call("echo", {"text": "a\ud800"})
            assert (await client.call("echo", {"text": "still fine"})).text == "still fine"
    finally:
        server.stop()
