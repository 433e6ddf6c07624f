"""mcplite.client against a real server on both transports, plus the sync and
in-memory clients.

Every server runs on 127.0.0.1 with ephemeral ports (conftest.start_server), in
its own thread and loop.  Tools that must wait are held by events that the test
sets on the server's loop; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import math
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from conftest import BASE, WAIT, RunningServer, make_config, start_server

from mcplite import Config, Failure, Field, Tools
from mcplite.client import (
    Client,
    InternalServerError,
    InvalidArgumentsError,
    InvalidTokenError,
    OverloadedError,
    Partial,
    PromiseTimeout,
    Response,
    RPCError,
    ToolNotFoundError,
    TransportError,
)

# Private on purpose: the pool tests narrow ``client.transport`` to read its (public)
# connection counts, and the parser test feeds the client's SSE parser byte by byte,
# which no call through the public client can do.  There is no public name for either.
from mcplite.client.http import HttpTransport, SseParser
from mcplite.client.sync import SyncClient
from mcplite.testing import InMemoryClient

TRANSPORTS = ["http", "grpc"]


@dataclass
class State:
    """What the test tools wait on; the asyncio events live on the server's loop."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    started: threading.Event = field(default_factory=threading.Event)
    arrived: int = 0
    all_here: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: threading.Event = field(default_factory=threading.Event)


def make_tools(state: State) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        """Return the text.

        A second line that the table leaves out."""
        return text

    @tools.tool(type="query")
    async def search(
        query: Annotated[str, Field(description="What to look for")],
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
    ) -> list[dict[str, Any]]:
        """Search nothing, politely."""
        return [{"query": query, "limit": limit}]

    @tools.tool(promise_after=0)
    async def soon() -> dict[str, Any]:
        """Answers with a promise, then finishes on a short timer of the server's loop."""
        done = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, done.set)
        await done.wait()
        return {"finished": True}

    @tools.tool(promise_after=0)
    async def gated() -> str:
        """Answers with a promise; finishes when the test opens the gate."""
        await state.gate.wait()
        return "opened"

    @tools.tool(promise_after=math.inf)
    async def hold() -> str:
        """Holds its call open until the test opens the gate."""
        state.started.set()
        await state.gate.wait()
        return "released"

    @tools.tool(promise_after=math.inf)
    async def rendezvous(count: int) -> str:
        """Answers once ``count`` calls are in flight together."""
        state.arrived += 1
        if state.arrived >= count:
            state.all_here.set()
        await state.all_here.wait()
        return "together"

    @tools.tool
    async def crash() -> str:
        raise RuntimeError("boom")

    @tools.tool
    async def refuse(dataset_id: str) -> str:
        raise Failure(f"dataset '{dataset_id}' does not exist", reason="not_found")

    @tools.tool(type="generation")
    async def report(topic: str) -> AsyncIterator[Any]:
        """Streams two text parts."""
        yield f"{topic}: part one. "
        yield "Part two."

    @tools.tool
    async def mixed() -> AsyncIterator[Any]:
        yield "text"
        yield {"n": 1}

    @tools.tool
    async def endless() -> AsyncIterator[str]:
        """Yields one part, then waits for the gate; says when it is stopped."""
        try:
            yield "first"
            await state.gate.wait()
            yield "never read"
        finally:
            state.stopped.set()

    @tools.tool
    async def broken_stream() -> AsyncIterator[str]:
        yield "first"
        raise RuntimeError("mid-stream")

    return tools


@dataclass
class Kit:
    server: RunningServer
    state: State
    url: str
    transport: str


def url_of(server: RunningServer, transport: str) -> str:
    if transport == "grpc":
        return f"grpc://127.0.0.1:{server.grpc_port}"
    return f"http://127.0.0.1:{server.port}{BASE}"


@contextmanager
def serving(transport: str, config: Config | None = None) -> Iterator[Kit]:
    """The test tools served on ``transport``; stopped when the block ends."""
    state = State()
    server = start_server(make_tools(state), config, grpc=transport == "grpc")
    try:
        yield Kit(server, state, url_of(server, transport), transport)
    finally:
        server.call_soon(state.gate.set)  # let no tool hang the shutdown
        server.stop()


@pytest.fixture(params=TRANSPORTS)
def kit(request: pytest.FixtureRequest) -> Iterator[Kit]:
    with serving(request.param) as kit:
        yield kit


@pytest.fixture
def http_kit() -> Iterator[Kit]:
    with serving("http") as kit:
        yield kit


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- discovery and calls ------------------------------------------------------------


async def test_listing_tools_gives_names_types_descriptions_and_schemas(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        tools = {t.name: t for t in await client.list_tools()}
    assert list(tools)[:2] == ["redeem", "cancel"]
    assert tools["redeem"].type == "system"
    assert tools["echo"].type is None
    assert tools["search"].type == "query"
    assert tools["search"].description == "Search nothing, politely."
    schema = tools["search"].input_schema
    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 10,
    }


async def test_a_call_answers_with_content_meta_and_text(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        response = await client.call("echo", {"text": "héllo"})
        structured = await client.call("search", {"query": "q", "limit": 3})
    assert response.response_type == "answer"
    assert response.content == [{"type": "text", "text": "héllo"}]
    assert response.text == "héllo"
    assert not response.is_error
    assert response.promise_token is None
    assert response.meta["server_version"]
    assert response.meta["timestamp"].endswith("Z")
    assert response.raw["_meta"] == response.meta
    assert structured.content == [{"query": "q", "limit": 3}]
    assert structured.text == ""


async def test_a_failure_is_a_response_not_an_exception(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        response = await client.call("refuse", {"dataset_id": "missing_x"})
    assert response.response_type == "failure"
    assert response.is_error
    assert response.text == "dataset 'missing_x' does not exist"
    assert response.raw["failure"]["reason"] == "not_found"


# --- errors -------------------------------------------------------------------------


async def test_an_unknown_tool_raises_tool_not_found_with_the_suggestion(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        with pytest.raises(ToolNotFoundError) as caught:
            await client.call("ech", {"text": "x"})
    error = caught.value
    assert error.code == -32601
    assert error.message == "Tool not found"
    assert error.requested_tool == "ech"
    assert error.suggestion == "Did you mean 'echo'?"
    assert "echo" in error.available_tools
    if kit.transport == "grpc":
        assert error.grpc_status == 5  # NOT_FOUND


async def test_invalid_arguments_raise_with_each_field(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        with pytest.raises(InvalidArgumentsError) as caught:
            await client.call("search", {"limit": 500})
    assert caught.value.code == -32602
    assert caught.value.errors == [
        {"field": "query", "message": "is required"},
        {"field": "limit", "message": "500 is greater than the maximum of 100"},
    ]


async def test_a_bad_promise_token_raises_invalid_token(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        with pytest.raises(InvalidTokenError) as caught:
            await client.redeem("prom_forged")
    assert caught.value.code == -32602
    assert caught.value.reason == "invalid"


async def test_a_crashing_tool_raises_internal_server_error_with_an_error_id(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        with pytest.raises(InternalServerError) as caught:
            await client.call("crash")
    assert caught.value.code == -32603
    assert caught.value.error_id
    assert "boom" not in str(caught.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_call_over_the_concurrency_limit_raises_overloaded(transport: str) -> None:
    with serving(transport, make_config(max_concurrent_calls=1)) as kit:
        async with Client(kit.url, timeout=WAIT) as client:
            held = asyncio.create_task(client.call("hold"))
            assert await asyncio.to_thread(kit.state.started.wait, WAIT)
            with pytest.raises(OverloadedError) as caught:
                await client.call("echo", {"text": "one too many"})
            kit.server.call_soon(kit.state.gate.set)
            assert (await asyncio.wait_for(held, WAIT)).text == "released"
    assert caught.value.code == -32000
    assert caught.value.retry_after == 1.0


async def test_a_refused_connection_raises_transport_error() -> None:
    port = closed_port()
    for url in (f"http://127.0.0.1:{port}{BASE}", f"grpc://127.0.0.1:{port}"):
        async with Client(url, timeout=WAIT) as client:
            with pytest.raises(TransportError, match="Connection refused"):
                await client.call("echo", {"text": "x"})


async def test_an_http_status_without_json_raises_transport_error() -> None:
    handled = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 4\r\n\r\noops")
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        finally:
            handled.set()

    proxy = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    try:
        async with Client(f"http://127.0.0.1:{port}{BASE}", timeout=WAIT) as client:
            with pytest.raises(TransportError, match="HTTP 502: oops"):
                await client.call("echo", {"text": "x"})
        await asyncio.wait_for(handled.wait(), WAIT)
    finally:
        proxy.close()
        await proxy.wait_closed()


async def test_an_http_error_with_a_json_body_raises_an_rpc_error_with_its_data(
    http_kit: Kit,
) -> None:
    url = f"http://127.0.0.1:{http_kit.server.port}/wrong/base"
    async with Client(url, timeout=WAIT) as client:
        with pytest.raises(RPCError) as caught:
            await client.call("echo", {"text": "x"})
    assert caught.value.code == -32600
    assert caught.value.data["http_status"] == 404


# --- streams ------------------------------------------------------------------------


async def test_a_stream_yields_partials_then_the_final_response(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        items = [item async for item in client.stream("report", {"topic": "Q3"})]
        mixed = [item async for item in client.stream("mixed")]
        plain = [item async for item in client.stream("echo", {"text": "alone"})]
    assert items[:2] == [Partial("Q3: part one. "), Partial("Part two.")]
    final = items[2]
    assert isinstance(final, Response)
    assert final.response_type == "answer"
    assert final.text == "Q3: part one. Part two."
    assert len(items) == 3
    assert mixed[:2] == [Partial("text"), Partial({"n": 1})]
    assert isinstance(mixed[2], Response)
    assert mixed[2].content == [{"type": "text", "text": "text"}, {"n": 1}]
    assert len(plain) == 1
    assert isinstance(plain[0], Response)
    assert plain[0].text == "alone"


async def test_a_stream_of_an_unknown_tool_raises_before_any_part(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        with pytest.raises(ToolNotFoundError):
            async for _ in client.stream("repor", {"topic": "x"}):
                pytest.fail("no part should arrive")
        # The connection is still good for the next call.
        assert (await client.call("echo", {"text": "after"})).text == "after"


async def test_a_tool_failing_mid_stream_raises_internal_server_error_after_its_parts(
    kit: Kit,
) -> None:
    received: list[Any] = []
    async with Client(kit.url, timeout=WAIT) as client:
        with pytest.raises(InternalServerError) as caught:
            async for item in client.stream("broken_stream"):
                received.append(item)
    assert received == [Partial("first")]
    assert caught.value.error_id


async def test_leaving_a_stream_early_stops_the_tool_on_the_server(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        stream = client.stream("endless")
        assert await anext(stream) == Partial("first")
        await stream.aclose()
        assert await asyncio.to_thread(kit.state.stopped.wait, WAIT)
        assert (await client.call("echo", {"text": "still here"})).text == "still here"


# --- promises -----------------------------------------------------------------------


async def test_a_promise_is_redeemed_automatically_until_its_outcome(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        response = await client.call("soon")
    assert response.response_type == "answer"
    assert response.content == [{"finished": True}]


async def test_wait_false_returns_the_promise_and_redeem_gets_the_outcome(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        promise = await client.call("gated", wait=False)
        assert promise.response_type == "promise"
        token = promise.promise_token
        assert token is not None and token.startswith("prom_")
        assert promise.meta["expires_at"].endswith("Z")
        pending = await client.redeem(token)
        assert pending.response_type == "promise"
        assert pending.promise_token == token
        kit.server.call_soon(kit.state.gate.set)
        outcome = await client.redeem(token, wait=WAIT)
        again = await client.redeem(token)
    assert outcome.response_type == "answer"
    assert outcome.text == "opened"
    assert again.content == outcome.content  # a finished result stays redeemable


async def test_a_promise_without_an_outcome_in_time_raises_promise_timeout(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        with pytest.raises(PromiseTimeout) as caught:
            await client.call("gated", timeout=0.2)
        assert isinstance(caught.value, TimeoutError)
        token = caught.value.token
        assert token in str(caught.value)
        kit.server.call_soon(kit.state.gate.set)
        assert (await client.redeem(token, wait=WAIT)).text == "opened"


async def test_cancel_stops_the_operation_and_redeem_then_reports_cancelled(kit: Kit) -> None:
    async with Client(kit.url, timeout=WAIT) as client:
        promise = await client.call("gated", wait=False)
        assert promise.promise_token is not None
        cancelled = await client.cancel(promise.promise_token)
        outcome = await client.redeem(promise.promise_token, wait=WAIT)
        twice = await client.cancel(promise.promise_token)
    assert cancelled.text == "cancelled"
    assert outcome.response_type == "failure"
    assert outcome.is_error
    assert outcome.raw["failure"]["reason"] == "cancelled"
    assert twice.text == "already finished"


# --- the HTTP connection pool -------------------------------------------------------


async def test_several_calls_reuse_one_http_connection(http_kit: Kit) -> None:
    async with Client(http_kit.url, timeout=WAIT) as client:
        assert isinstance(client.transport, HttpTransport)
        for n in range(5):
            assert (await client.call("echo", {"text": str(n)})).text == str(n)
        await client.list_tools()
        assert [i async for i in client.stream("report", {"topic": "t"})][-1]
        assert client.transport.connections_opened == 1
        assert http_kit.server.http_connections() == 1


async def test_the_pool_keeps_at_most_pool_size_idle_connections(http_kit: Kit) -> None:
    async with Client(http_kit.url, timeout=WAIT, pool_size=2) as client:
        assert isinstance(client.transport, HttpTransport)
        answers = await asyncio.gather(*(client.call("rendezvous", {"count": 4}) for _ in range(4)))
        assert [a.text for a in answers] == ["together"] * 4
        assert client.transport.connections_opened == 4
        assert client.transport.idle_connections == 2


async def test_a_pooled_connection_the_server_closed_is_replaced(http_kit: Kit) -> None:
    server = http_kit.server
    async with Client(http_kit.url, timeout=WAIT) as client:
        assert isinstance(client.transport, HttpTransport)
        await client.call("echo", {"text": "first"})

        def close_all() -> None:
            for conn in list(server.http.connections):
                conn.abort()

        server.call_soon(close_all)
        assert len(await client.list_tools()) > 2
        assert client.transport.connections_opened == 2
        assert (await client.call("echo", {"text": "again"})).text == "again"


# --- SSE parsing --------------------------------------------------------------------


def test_the_sse_parser_reads_events_fed_whole_or_one_byte_at_a_time() -> None:
    stream = (
        b": a comment\r\n"
        b'event: message\r\ndata: {"partial":1}\r\n\r\n'
        b"event: heartbeat\rdata: {}\r\r"
        b"data: line one\ndata: line two\n\n"
        b'event: done\ndata:{"x":"\xc3\xa9"}\n\n'
    )
    expected = [
        ("message", '{"partial":1}'),
        ("heartbeat", "{}"),
        ("message", "line one\nline two"),
        ("done", '{"x":"é"}'),
    ]
    assert SseParser().feed(stream) == expected
    parser = SseParser()
    events = []
    for i in range(len(stream)):
        events.extend(parser.feed(stream[i : i + 1]))
    assert events == expected


# --- the sync and in-memory clients --------------------------------------------------


def test_the_sync_client_lists_calls_and_streams(http_kit: Kit) -> None:
    with SyncClient(http_kit.url, timeout=WAIT) as client:
        assert "echo" in [t.name for t in client.list_tools()]
        assert client.call("echo", {"text": "sync"}).text == "sync"
        assert client.call("soon").content == [{"finished": True}]
        items = list(client.stream("report", {"topic": "S"}))
        assert items[0] == Partial("S: part one. ")
        assert isinstance(items[-1], Response)
        for item in client.stream("report", {"topic": "S"}):
            assert item == Partial("S: part one. ")
            break  # leaving early closes the stream
        with pytest.raises(ToolNotFoundError):
            client.call("nope")
        promise = client.call("gated", wait=False)
        assert promise.promise_token is not None
        assert client.cancel(promise.promise_token).text == "cancelled"
        assert client.redeem(promise.promise_token).is_error


def test_client_and_sync_client_refuse_an_option_they_do_not_take() -> None:
    options: Any = {"tokn": "x"}  # a misspelt ``token``: a type checker says so too
    with pytest.raises(TypeError, match="unexpected keyword argument 'tokn'"):
        Client("http://127.0.0.1:1", **options)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tokn'"):
        SyncClient("http://127.0.0.1:1", **options)


async def test_the_in_memory_client_calls_a_dispatcher_without_sockets() -> None:
    state = State()
    async with InMemoryClient(make_tools(state), timeout=WAIT) as client:
        assert "search" in [t.name for t in await client.list_tools()]
        assert (await client.call("echo", {"text": "mem"})).text == "mem"
        assert (await client.call("soon")).content == [{"finished": True}]
        items = [i async for i in client.stream("report", {"topic": "M"})]
        assert items[0] == Partial("M: part one. ")
        assert isinstance(items[-1], Response)
        assert items[-1].text == "M: part one. Part two."
        with pytest.raises(ToolNotFoundError) as caught:
            await client.call("serch", {"query": "x"})
        assert caught.value.suggestion == "Did you mean 'search'?"
        with pytest.raises(InvalidArgumentsError) as invalid:
            await client.call("search", {"query": 5})
        assert invalid.value.errors[0]["field"] == "query"
        with pytest.raises(InternalServerError):
            await client.call("crash")
        promise = await client.call("gated", wait=False)
        assert promise.promise_token is not None
        state.gate.set()  # the dispatcher runs on this very loop
        assert (await client.redeem(promise.promise_token, wait=WAIT)).text == "opened"
