"""mcplite.testing: the in-memory client sees what a client on a socket sees.

Each exchange is made twice: over TCP to a server on 127.0.0.1 (started as
``start_server`` starts it, read back byte by byte by ``sse_client.RawHttp``, or by
grpclib's own channel), and in memory through :func:`mcplite.testing.connect`; the
status, headers, bodies, SSE events and gRPC metadata and trailers must be the same,
once the clock's fields (``timestamp``, ``processing_time_ms``) are set aside.
Then the in-memory transports themselves: flow control, half-close, resets, and
the bindings' backpressure and disconnect handling through them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Literal, cast

import pytest
from conftest import BASE, WAIT, RunningServer, make_config, start_server
from grpc_support import ACCEL
from grpclib.client import Channel, Stream
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, ResponseReceived, StreamEnded, TrailersReceived
from sse_client import RawHttp, parse_events, request_bytes
from sse_client import connect as tcp_connect

from mcplite import Context, Tools
from mcplite.client import (
    InvalidArgumentsError,
    Partial,
    Response,
    ToolNotFoundError,
    TransportError,
)
from mcplite.client.grpc import BytesCodec
from mcplite.protocols.protobuf import decode_tool_response, encode_tool_request
from mcplite.testing import InMemoryClient, connect, transport_pair
from mcplite.testing.http import Message

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
#: What the clock puts in an answer: set aside when comparing.
CLOCK_FIELDS = frozenset({"timestamp", "processing_time_ms"})
#: Turns of the event loop given to a deterministic in-memory exchange.
TURNS = 200


@dataclass
class Flood:
    """How far the ``flood`` tool got, and when it stopped."""

    produced: int = 0
    stopped: asyncio.Event | None = None


def make_tools(progress: Flood | None = None) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @tools.tool
    async def report(topic: str) -> AsyncIterator[str]:
        """A report in two parts."""
        yield f"{topic}: part one. "
        yield "Part two."

    @tools.tool
    async def count(steps: int = 2, ctx: Context | None = None) -> str:
        """Report progress once per step, then finish."""
        assert ctx is not None
        for step in range(1, steps + 1):
            ctx.report_progress(step, steps, f"step {step}")
            await asyncio.sleep(0)
        return f"counted {steps}"

    @tools.tool
    async def flood(parts: int, size: int) -> AsyncIterator[str]:
        """``parts`` parts of ``size`` characters, as fast as they are taken."""
        try:
            for _ in range(parts):
                if progress is not None:
                    progress.produced += 1
                yield "x" * size
        finally:
            if progress is not None and progress.stopped is not None:
                progress.stopped.set()

    return tools


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    running = start_server(make_tools(), make_config(), grpc=True)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
async def client() -> AsyncIterator[InMemoryClient]:
    async with connect(make_tools(), make_config(), timeout=WAIT) as in_memory:
        yield in_memory


# --- what each side saw -----------------------------------------------------------------


def without_clock(value: Any) -> Any:
    """``value`` (JSON) with the clock's fields set to None."""
    if isinstance(value, dict):
        return {k: None if k in CLOCK_FIELDS else without_clock(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_clock(v) for v in value]
    return value


@dataclass(frozen=True)
class Seen:
    """An HTTP response as compared: the clock set aside, Content-Length checked apart."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: Any


def seen(status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> Seen:
    headers = [(name.lower(), value) for name, value in headers]
    length = dict(headers).get("content-length")
    if length is not None:
        assert int(length) == len(body)
    kept = [(name, value) for name, value in headers if name != "content-length"]
    if dict(headers).get("content-type", "").startswith("text/event-stream"):
        events = [(e.event, without_clock(json.loads(e.data))) for e in parse_events(body)]
        return Seen(status, reason, kept, events)
    try:
        decoded: Any = without_clock(json.loads(body))
    except ValueError:
        decoded = body
    return Seen(status, reason, kept, decoded)


def over_tcp(
    server: RunningServer, path: str, payload: Any, headers: dict[str, str] | None = None
) -> Seen:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    sock = tcp_connect(server.port, WAIT)
    try:
        sock.sendall(request_bytes(path, body, headers=headers))
        response = RawHttp(sock).read_response()
    finally:
        sock.close()
    head = response.head
    return seen(head.status, head.reason.decode("latin-1"), head.headers, response.body)


async def in_memory(
    client: InMemoryClient, path: str, payload: Any, headers: dict[str, str] | None = None
) -> Seen:
    response = await client.post(path, payload, headers=headers or {})
    return seen(response.status, response.reason, response.headers, response.body)


async def both(
    server: RunningServer,
    client: InMemoryClient,
    path: str,
    payload: Any,
    headers: dict[str, str] | None = None,
) -> Seen:
    """The response both ways, asserted the same."""
    tcp = over_tcp(server, path, payload, headers)
    memory = await in_memory(client, path, payload, headers)
    assert memory == tcp
    return memory


def rpc(method: str, params: Any, request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


# --- HTTP: the same bytes ------------------------------------------------------------------


async def test_a_tool_call_is_answered_alike_in_memory_and_over_tcp(
    server: RunningServer, client: InMemoryClient
) -> None:
    answer = await both(
        server,
        client,
        BASE + "/rpc",
        rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}),
    )
    assert answer.status == 200
    assert answer.body["result"]["content"] == [{"type": "text", "text": "hi"}]


async def test_an_invalid_argument_is_refused_alike(
    server: RunningServer, client: InMemoryClient
) -> None:
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": 5}})
    refused = await both(server, client, BASE + "/rpc", call)
    assert refused.body["error"]["code"] == -32602


async def test_a_stream_sends_the_same_events(
    server: RunningServer, client: InMemoryClient
) -> None:
    call = rpc("tools/call", {"name": "report", "arguments": {"topic": "Q3"}})
    streamed = await both(server, client, BASE + "/rpc", call, {"Accept": "text/event-stream"})
    assert [event for event, _ in streamed.body] == ["message", "message", "done"]
    assert dict(streamed.headers)["transfer-encoding"] == "chunked"


async def test_an_unknown_route_and_a_bad_body_are_answered_alike(
    server: RunningServer, client: InMemoryClient
) -> None:
    assert (await both(server, client, "/nowhere", {})).status == 404
    assert (await both(server, client, BASE + "/rpc", b"{not json")).body["error"]["code"] == -32700
    tools = await both(server, client, BASE + "/tools", {})
    assert [tool["name"] for tool in tools.body["tools"]][:2] == ["redeem", "cancel"]


@pytest.mark.parametrize("version", [MODERN, LEGACY])
async def test_an_mcp_call_is_answered_alike_in_both_revisions(
    server: RunningServer, client: InMemoryClient, version: str
) -> None:
    for method, params in [
        ("tools/list", {}),
        ("tools/call", {"name": "echo", "arguments": {"text": "mcp"}}),
        ("tools/call", {"name": "count", "arguments": {}, "_meta": {"progressToken": "p"}}),
    ]:
        message, headers = client.mcp_message(method, params, version=version)
        answer = await both(server, client, "/mcp", message, dict(headers))
        assert answer.status == 200, answer


async def test_the_mcp_handshake_and_refusals_are_answered_alike(
    server: RunningServer, client: InMemoryClient
) -> None:
    init = {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    message, headers = client.mcp_message("initialize", init, version=LEGACY)
    assert (await both(server, client, "/mcp", message, dict(headers))).status == 200
    message, headers = client.mcp_message("tools/call", {"name": "echo", "arguments": {}})
    headers = [(k, v) for k, v in headers if k != "Mcp-Name"]  # a header the body contradicts
    assert (await both(server, client, "/mcp", message, dict(headers))).status == 400


# --- gRPC: the same frames ------------------------------------------------------------------


@dataclass(frozen=True)
class GrpcSeen:
    initial: list[tuple[str, Any]]
    messages: list[Any]
    status: Status
    message: str | None
    trailing: list[tuple[str, Any]]


async def grpc_exchange(channel: Channel, method: str, payload: bytes, stream: bool) -> GrpcSeen:
    cardinality = Cardinality.UNARY_STREAM if stream else Cardinality.UNARY_UNARY
    call: Stream[bytes, bytes] = channel.request(
        "/mcplite.MCPLite/" + method, cardinality, bytes, bytes, timeout=WAIT
    )
    messages: list[Any] = []
    status, text = Status.OK, None
    try:
        async with call:
            await call.send_message(payload, end=True)
            while (data := await call.recv_message()) is not None:
                result, meta = decode_tool_response(data)
                messages.append((without_clock(result), meta and meta.response_type))
    except GRPCError as exc:
        status, text = exc.status, exc.message
    return GrpcSeen(
        list((call.initial_metadata or {}).items()),
        messages,
        status,
        text,
        list((call.trailing_metadata or {}).items()),
    )


@pytest.mark.parametrize(
    ("method", "name", "arguments", "status"),
    [
        ("CallTool", "echo", {"text": "grpc"}, Status.OK),
        ("CallTool", "echo", {"text": 5}, Status.INVALID_ARGUMENT),
        ("CallTool", "ehco", {}, Status.NOT_FOUND),
        ("CallToolStream", "report", {"topic": "Q3"}, Status.OK),
    ],
)
async def test_a_grpc_call_gets_the_same_metadata_messages_and_trailers(
    server: RunningServer,
    client: InMemoryClient,
    method: str,
    name: str,
    arguments: dict[str, Any],
    status: Status,
) -> None:
    payload = encode_tool_request(name, arguments)
    stream = method == "CallToolStream"
    assert server.grpc_port is not None
    tcp_channel = Channel("127.0.0.1", server.grpc_port, codec=BytesCodec())
    try:
        tcp = await grpc_exchange(tcp_channel, method, payload, stream)
    finally:
        tcp_channel.close()
    memory = await grpc_exchange(client.grpc_channel(codec=BytesCodec()), method, payload, stream)
    assert memory == tcp
    assert memory.status is status
    assert len(memory.messages) == (3 if stream else status is Status.OK)


class H2Reader(asyncio.Protocol):
    """One gRPC request written with h2 itself; every event of its answer, as h2 reads it."""

    def __init__(self, method: str, payload: bytes) -> None:
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/mcplite.MCPLite/" + method),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        self.h2.send_headers(1, headers)
        self.h2.send_data(1, b"\x00" + len(payload).to_bytes(4, "big") + payload, end_stream=True)
        self.seen: list[tuple[str, Any]] = []
        self.done = asyncio.Event()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport of any loop (uvloop's are not asyncio.Transport subclasses).
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.h2.data_to_send())

    def data_received(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, ResponseReceived | TrailersReceived):
                self.seen.append((type(event).__name__, event.headers))
            elif isinstance(event, DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, 1)
                self.seen.append(("DataReceived", event.data))
            elif isinstance(event, StreamEnded):
                self.done.set()
        assert self.transport is not None
        self.transport.write(self.h2.data_to_send())

    def messages(self) -> list[tuple[str, Any]]:
        """What was seen, each gRPC message decoded and its clock set aside."""
        out: list[tuple[str, Any]] = []
        for kind, value in self.seen:
            if kind == "DataReceived":
                result, meta = decode_tool_response(value[5:])
                value = (without_clock(result), meta and meta.response_type)
            out.append((kind, value))
        return out


@pytest.mark.parametrize(
    ("method", "name", "arguments"),
    [
        ("CallTool", "echo", {"text": "grpc"}),
        ("CallTool", "echo", {"text": 5}),
        ("CallToolStream", "report", {"topic": "Q3"}),
        ("NoSuchMethod", "echo", {}),
    ],
)
async def test_a_grpc_answer_is_the_same_in_h2_frames(
    server: RunningServer, client: InMemoryClient, method: str, name: str, arguments: Any
) -> None:
    payload = encode_tool_request(name, arguments)
    assert server.grpc_port is not None
    loop = asyncio.get_running_loop()
    tcp = H2Reader(method, payload)
    transport, _ = await loop.create_connection(lambda: tcp, "127.0.0.1", server.grpc_port)
    try:
        await asyncio.wait_for(tcp.done.wait(), WAIT)
    finally:
        transport.close()
    memory = H2Reader(method, payload)
    near, _ = transport_pair(memory, client.grpc_server.connection())
    try:
        await asyncio.wait_for(memory.done.wait(), WAIT)
    finally:
        near.close()
    assert memory.messages() == tcp.messages()
    head = dict(memory.seen[0][1])
    assert head[":status"] == "200"
    if ACCEL or method != "NoSuchMethod":  # grpclib's own answer to it has none (docs/grpc.md)
        assert head["content-type"].startswith("application/grpc")


# --- the client interface over each binding -------------------------------------------------


@pytest.mark.parametrize("binding", ["http", "grpc"])
async def test_the_client_interface_runs_over_either_binding(
    binding: Literal["http", "grpc"],
) -> None:
    async with connect(make_tools(), make_config(), binding=binding, timeout=WAIT) as c:
        assert (await c.call("echo", {"text": "x"})).text == "x"
        items = [item async for item in c.stream("report", {"topic": "T"})]
        assert items[:2] == [Partial("T: part one. "), Partial("Part two.")]
        assert isinstance(items[2], Response)
        with pytest.raises(InvalidArgumentsError):
            await c.call("echo", {"text": 1})
        with pytest.raises(ToolNotFoundError):
            await c.call("ehco", {})
        assert "echo" in [tool.name for tool in await c.list_tools()]


async def test_mcp_results_come_back_with_what_was_said_before_them(
    client: InMemoryClient,
) -> None:
    said: list[dict[str, Any]] = []
    params = {"name": "count", "arguments": {"steps": 2}, "_meta": {"progressToken": 9}}
    result = await client.mcp("tools/call", params, version=LEGACY, on_message=said.append)
    assert result["content"] == [{"type": "text", "text": "counted 2"}]
    assert [m["params"]["progress"] for m in said] == [1, 2]
    with pytest.raises(Exception) as refused:
        await client.mcp("no/such/method")
    assert getattr(refused.value, "code", None) == -32601


# --- the transports -------------------------------------------------------------------------


class Recorder(asyncio.Protocol):
    """Records what a transport gives it; answers EOF as ``keep_open`` says."""

    def __init__(self, keep_open: bool = False) -> None:
        self.data = bytearray()
        self.eof = asyncio.Event()
        self.lost = asyncio.Event()
        self.lost_with: Exception | None = None
        self.paused = asyncio.Event()
        self.resumed = asyncio.Event()
        self.keep_open = keep_open

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> bool:
        self.eof.set()
        return self.keep_open

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost_with = exc
        self.lost.set()

    def pause_writing(self) -> None:
        self.paused.set()

    def resume_writing(self) -> None:
        self.resumed.set()


async def test_a_reader_that_pauses_makes_its_writer_pause_and_then_resume() -> None:
    writer, reader = Recorder(), Recorder()
    near, far = transport_pair(writer, reader, socket_buffer=1024)
    far.pause_reading()
    near.set_write_buffer_limits(high=4096)
    near.write(b"a" * 4000)  # the socket buffer and the write buffer hold it
    assert not writer.paused.is_set()
    near.write(b"b" * 2000)
    assert writer.paused.is_set() and near.get_write_buffer_size() == 6000 - 1024
    for _ in range(TURNS):
        await asyncio.sleep(0)  # turns of the loop: nothing may arrive while paused
    assert reader.data == b"" and not writer.resumed.is_set()
    far.resume_reading()
    await asyncio.wait_for(writer.resumed.wait(), WAIT)
    assert near.get_write_buffer_size() == 0
    assert bytes(reader.data) == b"a" * 4000 + b"b" * 2000


async def test_a_half_close_is_seen_after_the_data_and_the_other_side_may_still_write() -> None:
    client, server = Recorder(), Recorder(keep_open=True)
    near, far = transport_pair(client, server)
    near.write(b"request")
    near.write_eof()
    with pytest.raises(RuntimeError):
        near.write(b"more")
    await asyncio.wait_for(server.eof.wait(), WAIT)
    assert server.data == b"request" and not far.is_closing()
    far.write(b"answer")
    far.close()
    await asyncio.wait_for(client.lost.wait(), WAIT)
    assert client.data == b"answer" and client.eof.is_set() and client.lost_with is None
    await asyncio.wait_for(server.lost.wait(), WAIT)
    assert server.lost_with is None


async def test_an_abort_resets_the_peer_and_a_write_to_a_closed_peer_is_reset() -> None:
    client, server = Recorder(), Recorder()
    near, _ = transport_pair(client, server)
    near.write(b"never read")
    near.abort()
    await asyncio.wait_for(server.lost.wait(), WAIT)
    assert isinstance(server.lost_with, ConnectionResetError) and server.data == b""
    client2, server2 = Recorder(), Recorder(keep_open=True)
    near2, far2 = transport_pair(client2, server2)
    near2.close()
    await asyncio.wait_for(server2.eof.wait(), WAIT)
    far2.write(b"too late")
    await asyncio.wait_for(server2.lost.wait(), WAIT)
    assert isinstance(server2.lost_with, ConnectionResetError)


async def test_a_protocol_that_raises_goes_to_the_loop_and_resets_its_peer() -> None:
    class Broken(Recorder):
        def data_received(self, data: bytes) -> None:
            raise ValueError("a bug in the protocol")

    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        client, broken = Recorder(), Broken()
        near, far = transport_pair(client, broken)
        near.write(b"anything")
        await asyncio.wait_for(client.lost.wait(), WAIT)
    finally:
        loop.set_exception_handler(previous)
    assert isinstance(client.lost_with, ConnectionResetError)
    assert [type(c["exception"]) for c in reported] == [ValueError]
    assert far.is_closing() and near.get_extra_info("peername") == far.get_extra_info("sockname")


async def test_a_stream_nobody_reads_holds_its_tool_back_until_it_is_read() -> None:
    flood = Flood()
    parts, size = 64, 16 * 1024
    async with connect(make_tools(flood), make_config(), timeout=WAIT) as c:
        call = rpc("tools/call", {"name": "flood", "arguments": {"parts": parts, "size": size}})
        headers = [("Content-Type", "application/json"), ("Accept", "text/event-stream")]
        async with c.open(
            "POST", BASE + "/rpc", headers=headers, body=json.dumps(call).encode()
        ) as r:
            assert r.status == 200
            for _ in range(TURNS):
                await asyncio.sleep(0)  # the tool runs as far as backpressure lets it
            held = flood.produced
            assert held < parts // 2, held
            events = [event async for event in r.events()]
        assert [kind for kind, _ in events] == ["message"] * parts + ["done"]
        assert flood.produced == parts


async def test_a_client_that_goes_away_mid_stream_stops_the_tool() -> None:
    stopped = asyncio.Event()
    flood = Flood(stopped=stopped)
    async with connect(make_tools(flood), make_config(), timeout=WAIT) as c:
        items = c.stream("flood", {"parts": 10_000, "size": 1024})
        first = await anext(items)
        assert isinstance(first, Partial)
        await items.aclose()  # leaves with the stream open: the connection is closed
        await asyncio.wait_for(stopped.wait(), WAIT)
        assert flood.produced < 10_000
        assert (await c.call("echo", {"text": "still here"})).text == "still here"


async def test_connect_is_the_in_memory_client_and_a_request_takes_only_headers_and_body() -> None:
    assert connect is InMemoryClient
    message: Any = {"header": [("Accept", "application/json")]}  # not ``headers``
    async with connect(make_tools(), make_config(), timeout=WAIT) as c:
        with pytest.raises(TypeError, match="unexpected keyword argument 'header'"):
            await c.request("GET", "/", **message)
        json_body: Message = {"headers": [("Content-Type", "application/json")], "body": b"{}"}
        assert (await c.request("POST", BASE + "/tools", **json_body)).status == 200


async def test_a_closed_client_cannot_be_used() -> None:
    c = connect(make_tools(), make_config(), timeout=WAIT)
    async with c:
        assert (await c.call("echo", {"text": "x"})).text == "x"
    with pytest.raises(TransportError):
        await c.call("echo", {"text": "x"})
