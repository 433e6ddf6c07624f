"""The gRPC binding end to end: mcplite's grpclib server, driven by grpcio clients
built from our proto and from the spec's own proto (tests/grpc_support.py).

The server runs on its own event loop in a thread (127.0.0.1, ephemeral port), so
the blocking grpcio client can be used as users use it.  Every call has a timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Annotated, Any, TypeVar

import grpc
import pytest
from grpc_support import Protos, Stub, close_connections_left_open, protos, to_python

from mcplite import (
    ALWAYS,
    NEVER,
    Answer,
    Config,
    Dispatcher,
    Field,
    MoreResources,
    Tools,
    __version__,
)
from mcplite.bindings.grpc import create_server
from mcplite.bindings.grpc.service import (
    ERROR_DATA_KEY,
    ERROR_DATA_LIMIT,
    GrpcServer,
    MCPLiteService,
    listen_socket,
)
from mcplite.core.authorize import Gate
from mcplite.core.observe import QUIET, AccessLog, Metrics
from mcplite.protocols.protobuf import encode_tool_request

TIMEOUT = 10.0  # seconds: the bound of every wait in this file
MAX_MESSAGE_SIZE = 64 * 1024
T = TypeVar("T")


class Signals:
    """Cross-thread events set by the tools, which run on the server's loop."""

    def __init__(self) -> None:
        self.slow_started = threading.Event()
        self.slow_cancelled = threading.Event()
        self.gate_reached = threading.Event()
        self.gate = threading.Event()


def make_tools(signals: Signals) -> Tools:
    tools = Tools()

    @tools.tool(type="query")
    async def search_documents(
        query: str, limit: Annotated[int, Field(ge=1, le=100)] = 10
    ) -> list[dict[str, Any]]:
        """Search through available documents"""
        return [{"document_id": "doc_123", "title": query, "limit": limit}]

    @tools.tool
    async def echo(text: str) -> str:
        """Say it back"""
        return text

    @tools.tool
    def boom() -> None:
        raise RuntimeError("secret detail of the crash")

    @tools.tool
    async def unencodable() -> Answer:
        return Answer([{"type": "text", "text": "fine"}], structured={"a set": {1, 2}})

    @tools.tool(promise_after=NEVER)
    async def slow() -> str:
        signals.slow_started.set()
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            signals.slow_cancelled.set()
            raise
        return "never"

    @tools.tool(promise_after=NEVER)
    async def gated() -> str:
        signals.gate_reached.set()
        opened = await asyncio.get_running_loop().run_in_executor(None, signals.gate.wait, TIMEOUT)
        return "through" if opened else "timed out"

    @tools.tool(promise_after=ALWAYS)
    async def analyze_dataset(dataset_id: str) -> str:
        return f"analysis of {dataset_id}"

    @tools.tool
    async def needs_more() -> MoreResources:
        return MoreResources("give me a minute", time_seconds=60)

    @tools.tool
    async def generate_report(topic: str) -> AsyncIterator[str]:
        yield f"{topic}\n\nExecutive Summary"
        yield "\n\nRevenue for Q4 increased by 15%..."

    @tools.tool
    async def breaks_midway() -> AsyncIterator[str]:
        yield "first part"
        raise RuntimeError("secret detail of the stream")

    return tools


class ServerThread:
    """:class:`GrpcServer` (as the CLI runs it) with the real Dispatcher, on its own
    event loop in a thread."""

    def __init__(self) -> None:
        self.signals = Signals()
        self.grpc: GrpcServer | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="grpc-server", daemon=True)

    @property
    def port(self) -> int:
        assert self.grpc is not None
        return self.grpc.port

    def run(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the server's loop."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        assert self._ready.wait(TIMEOUT), "the server did not start"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive(), "the server did not stop"
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the test thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        config = Config(secret=b"k" * 32, grpc_max_message_size=MAX_MESSAGE_SIZE, grace=TIMEOUT)
        dispatcher = Dispatcher(make_tools(self.signals), config)
        self.grpc = GrpcServer(dispatcher, config)
        await self.grpc.start("127.0.0.1", 0)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.grpc.shutdown(0)
            close_connections_left_open()
            await dispatcher.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread() as running:
        yield running


@pytest.fixture(scope="module")
def channel(server: ServerThread) -> Iterator[grpc.Channel]:
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}", options=options) as chan:
        grpc.channel_ready_future(chan).result(timeout=TIMEOUT)
        yield chan


@pytest.fixture(params=["ours", "spec"])
def proto(request: pytest.FixtureRequest) -> Protos:
    """The classes generated from our proto, then from the spec's own."""
    return protos()[request.param]


@pytest.fixture
def stub(proto: Protos, channel: grpc.Channel) -> Stub:
    return proto.stub(channel)


def call_error(stub: Stub, proto: Protos, name: str, arguments: dict[str, Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        stub.CallTool(proto.request(name, arguments), timeout=TIMEOUT)
    return caught.value


def error_data(error: grpc.RpcError) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(dict(error.trailing_metadata())[ERROR_DATA_KEY])
    return data


def error_info(error: grpc.RpcError) -> tuple[Any, Any]:
    """The google.rpc.Status of grpc-status-details-bin and its one ErrorInfo."""
    rpc = protos()["rpc"]
    status = rpc.cls("google.rpc.Status").FromString(
        dict(error.trailing_metadata())["grpc-status-details-bin"]
    )
    (detail,) = status.details
    assert detail.type_url == "type.googleapis.com/google.rpc.ErrorInfo"
    return status, rpc.cls("google.rpc.ErrorInfo").FromString(detail.value)


# --- GetTools and CallTool -------------------------------------------------------------


def test_get_tools_lists_every_tool_with_its_type_and_schema(stub: Stub, proto: Protos) -> None:
    tools = {t.name: t for t in stub.GetTools(proto.cls("Empty")(), timeout=TIMEOUT).tools}
    assert {"redeem", "cancel", "search_documents", "echo", "generate_report"} <= set(tools)
    assert tools["redeem"].type == "system"
    search = tools["search_documents"]
    assert (search.type, search.description) == ("query", "Search through available documents")
    schema = to_python(search.input_schema)
    assert schema["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 10,
    }


def test_call_tool_answers_with_the_result_and_its_meta(stub: Stub, proto: Protos) -> None:
    before = int(time.time() * 1000)
    response = stub.CallTool(proto.request("echo", {"text": "hello"}), timeout=TIMEOUT)
    assert to_python(response.result) == {"content": [{"type": "text", "text": "hello"}]}
    assert response.HasField("meta")
    assert response.meta.response_type == proto.enum_value("ResponseType", "ANSWER")
    assert before <= response.meta.timestamp <= int(time.time() * 1000)
    assert response.meta.processing_time_ms >= 0
    if proto.name == "ours":
        assert response.meta.server_version == __version__


def test_numbers_arrive_as_ints_for_the_tool(stub: Stub, proto: Protos) -> None:
    request = proto.request("search_documents", {"query": "MCP specification", "limit": 5})
    response = stub.CallTool(request, timeout=TIMEOUT)
    (item,) = to_python(response.result)["content"]
    assert item == {"document_id": "doc_123", "title": "MCP specification", "limit": 5}


def test_a_promise_carries_its_token_and_can_be_redeemed(stub: Stub, proto: Protos) -> None:
    response = stub.CallTool(
        proto.request("analyze_dataset", {"dataset_id": "large_dataset_001"}), timeout=TIMEOUT
    )
    meta = response.meta
    assert meta.response_type == proto.enum_value("ResponseType", "PROMISE")
    assert meta.promise_token
    if proto.name == "ours":
        assert meta.expires_at > int(time.time() * 1000)
    redeemed = stub.CallTool(
        proto.request("redeem", {"promise": meta.promise_token, "wait": TIMEOUT / 2}),
        timeout=TIMEOUT,
    )
    assert redeemed.meta.response_type == proto.enum_value("ResponseType", "ANSWER")
    assert to_python(redeemed.result)["content"] == [
        {"type": "text", "text": "analysis of large_dataset_001"}
    ]


def test_request_for_more_resource_is_response_type_4(stub: Stub, proto: Protos) -> None:
    response = stub.CallTool(proto.request("needs_more", {}), timeout=TIMEOUT)
    assert response.meta.response_type == 4
    assert to_python(response.result)["resources"] == {
        "message": "give me a minute",
        "time_seconds": 60,
    }


# --- errors ------------------------------------------------------------------------------


def test_an_unknown_tool_is_not_found_with_the_tools_and_a_suggestion(
    stub: Stub, proto: Protos
) -> None:
    error = call_error(stub, proto, "search_document", {})
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == "Tool not found: search_document"
    data = error_data(error)
    assert data["requested_tool"] == "search_document"
    assert {"redeem", "search_documents"} <= set(data["available_tools"])
    assert data["suggestion"] == "Did you mean 'search_documents'?"
    status, info = error_info(error)
    assert (status.code, status.message) == (5, "Tool not found: search_document")
    assert (info.reason, info.domain) == ("TOOL_NOT_FOUND", "mcplite")
    assert info.metadata["suggestion"] == "Did you mean 'search_documents'?"
    assert json.loads(info.metadata["available_tools"]) == data["available_tools"]


def test_invalid_arguments_name_each_field(stub: Stub, proto: Protos) -> None:
    error = call_error(stub, proto, "search_documents", {"query": "q", "limit": 500})
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "limit: 500 is greater than the maximum of 100" in error.details()
    assert error_data(error)["errors"] == [
        {"field": "limit", "message": "500 is greater than the maximum of 100"}
    ]


def test_a_crashing_tool_is_internal_with_an_error_id_and_no_traceback(
    stub: Stub, proto: Protos
) -> None:
    error = call_error(stub, proto, "boom", {})
    assert error.code() == grpc.StatusCode.INTERNAL
    error_id = error_data(error)["error_id"]
    assert error_id in error.details()
    wire = error.details() + repr(error.trailing_metadata())
    assert "secret detail" not in wire and "Traceback" not in wire


def test_an_unencodable_result_is_internal_and_logged_with_its_id(
    stub: Stub, proto: Protos, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="mcplite.bindings.grpc"):
        error = call_error(stub, proto, "unencodable", {})
    assert error.code() == grpc.StatusCode.INTERNAL
    error_id = error_data(error)["error_id"]
    assert any(error_id in record.getMessage() for record in caplog.records)
    assert "set" not in error.details()


def test_malformed_request_bytes_are_invalid_argument(channel: grpc.Channel) -> None:
    call = channel.unary_unary("/mcplite.MCPLite/CallTool")  # bytes in, bytes out
    with pytest.raises(grpc.RpcError) as caught:
        call(b"\x0a\x05ab", timeout=TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed ToolRequest" in caught.value.details()


def test_a_request_over_the_size_limit_is_resource_exhausted(stub: Stub, proto: Protos) -> None:
    big = proto.request("echo", {"text": "x" * MAX_MESSAGE_SIZE})
    with pytest.raises(grpc.RpcError) as caught:
        stub.CallTool(big, timeout=TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(MAX_MESSAGE_SIZE) in caught.value.details()
    # and the server goes on serving
    response = stub.CallTool(proto.request("echo", {"text": "still here"}), timeout=TIMEOUT)
    assert to_python(response.result)["content"][0]["text"] == "still here"


def test_a_deadline_that_passes_first_is_deadline_exceeded_and_cancels_the_tool(
    server: ServerThread, stub: Stub, proto: Protos
) -> None:
    server.signals.slow_started.clear()
    server.signals.slow_cancelled.clear()
    with pytest.raises(grpc.RpcError) as caught:
        stub.CallTool(proto.request("slow", {}), timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert server.signals.slow_started.is_set()
    assert server.signals.slow_cancelled.wait(TIMEOUT), "the tool was not cancelled"


def test_large_error_data_is_cut_down_to_fit_in_trailers() -> None:
    from mcplite.bindings.grpc.status import _error_data_json

    data = {"requested_tool": "x", "available_tools": [f"tool_{n:05d}" for n in range(5000)]}
    text, sent = _error_data_json(data)
    assert len(text) <= ERROR_DATA_LIMIT
    assert sent["truncated"] is True and sent["requested_tool"] == "x"
    assert 0 < len(sent["available_tools"]) < 5000
    assert json.loads(text) == sent


# --- CallToolStream ----------------------------------------------------------------------


def test_a_stream_sends_parts_without_meta_then_one_final_message_with_meta(
    stub: Stub, proto: Protos
) -> None:
    request = proto.request("generate_report", {"topic": "quarterly results"})
    responses = list(stub.CallToolStream(request, timeout=TIMEOUT))
    *parts, final = responses
    assert [to_python(p.result) for p in parts] == [
        {"partial": "quarterly results\n\nExecutive Summary"},
        {"partial": "\n\nRevenue for Q4 increased by 15%..."},
    ]
    assert not any(p.HasField("meta") for p in parts)
    assert final.HasField("meta")
    assert final.meta.response_type == proto.enum_value("ResponseType", "ANSWER")
    assert final.meta.timestamp > 0
    text = "quarterly results\n\nExecutive Summary\n\nRevenue for Q4 increased by 15%..."
    assert to_python(final.result) == {"content": [{"type": "text", "text": text}]}


def test_a_stream_of_a_plain_tool_is_its_final_message_alone(stub: Stub, proto: Protos) -> None:
    responses = list(stub.CallToolStream(proto.request("echo", {"text": "hi"}), timeout=TIMEOUT))
    assert len(responses) == 1 and responses[0].HasField("meta")


def test_a_stream_of_an_unknown_tool_is_not_found(stub: Stub, proto: Protos) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.CallToolStream(proto.request("generate_reprot", {}), timeout=TIMEOUT))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_data(caught.value)["suggestion"] == "Did you mean 'generate_report'?"


def test_a_stream_that_fails_midway_ends_internal_after_its_parts(
    stub: Stub, proto: Protos
) -> None:
    received = []
    with pytest.raises(grpc.RpcError) as caught:
        for response in stub.CallToolStream(proto.request("breaks_midway", {}), timeout=TIMEOUT):
            received.append(to_python(response.result))
    assert received == [{"partial": "first part"}]
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "secret detail" not in caught.value.details()
    assert "error_id" in error_data(caught.value)


# --- the committed betterproto messages and the service object ----------------------------


async def unary(channel: Any, method: str, request: Any, reply: type[Any]) -> Any:
    """One unary call of the MCPLite service by grpclib's own client, with
    betterproto messages (the generated code has messages only)."""
    from grpclib.const import Cardinality

    path = f"/mcplite.MCPLite/{method}"
    async with asyncio.timeout(TIMEOUT):
        async with channel.request(path, Cardinality.UNARY_UNARY, type(request), reply) as call:
            await call.send_message(request, end=True)
            return await call.recv_message()


async def test_the_committed_betterproto_messages_work_with_grpclibs_client(
    server: ServerThread,
) -> None:
    from betterproto.lib.google.protobuf import Struct, Value
    from grpclib.client import Channel

    from mcplite.protocols.generated import mcplite as generated

    channel = Channel("127.0.0.1", server.port)
    try:
        tools = await unary(channel, "GetTools", generated.Empty(), generated.ToolsList)
        assert "echo" in [t.name for t in tools.tools]
        arguments = Struct(fields={"text": Value(string_value="hi")})
        request = generated.ToolRequest("echo", arguments)
        response = await unary(channel, "CallTool", request, generated.ToolResponse)
        assert response.meta.response_type == generated.ResponseType.ANSWER
        assert response.meta.server_version == __version__
        (item,) = response.result.fields["content"].list_value.values
        assert item.struct_value.fields["text"].string_value == "hi"
    finally:
        channel.close()


def test_the_service_maps_the_three_spec_methods() -> None:
    class NoDispatcher:
        auth: Gate | None = None
        metrics: Metrics = QUIET
        access_log: AccessLog = QUIET

        def tool_definitions(self, context: Any = None) -> list[dict[str, Any]]:
            return []

        async def call(
            self, name: str, arguments: dict[str, Any] | None, context: Any = None
        ) -> Any:
            raise AssertionError

        def stream(
            self, name: str, arguments: dict[str, Any] | None, context: Any = None, **_: Any
        ) -> Any:
            raise AssertionError

    mapping = MCPLiteService(NoDispatcher()).__mapping__()
    assert sorted(mapping) == [
        "/mcplite.MCPLite/CallTool",
        "/mcplite.MCPLite/CallToolStream",
        "/mcplite.MCPLite/GetTools",
    ]
    assert mapping["/mcplite.MCPLite/CallToolStream"].cardinality.server_streaming
    with pytest.raises(ValueError):
        MCPLiteService(NoDispatcher(), max_message_size=-1)


def test_a_request_of_exactly_the_limit_is_accepted(stub: Stub, proto: Protos) -> None:
    size = MAX_MESSAGE_SIZE - len(encode_tool_request("echo", {"text": ""}))
    while len(encode_tool_request("echo", {"text": "y" * size})) > MAX_MESSAGE_SIZE:
        size -= 1  # the length prefixes grow with the text
    text = "y" * size
    request = proto.request("echo", {"text": text})
    assert len(request.SerializeToString()) == MAX_MESSAGE_SIZE
    response = stub.CallTool(request, timeout=TIMEOUT)
    assert to_python(response.result)["content"][0]["text"] == text


# --- serving: GrpcServer's shutdown and create_server --------------------------------------


async def draining(server: GrpcServer) -> bool:
    """Whether ``server`` refuses new calls now (asked on its loop after the steps
    scheduled before, so after a shutdown's first one)."""
    return server.service.draining


def test_shutdown_lets_calls_in_flight_finish_and_refuses_new_ones() -> None:
    with ServerThread() as server:
        spec = protos()["spec"]
        options = [("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(f"127.0.0.1:{server.port}", options=options) as chan:
            stub = spec.stub(chan)
            in_flight = stub.CallTool.future(spec.request("gated", {}), timeout=TIMEOUT)
            assert server.signals.gate_reached.wait(TIMEOUT)
            assert server.grpc is not None
            shutdown = server.run(server.grpc.shutdown(TIMEOUT))
            # The drain has begun before the late call leaves: the loop may otherwise
            # read that call before it runs the shutdown (uvloop's does).
            assert server.run(draining(server.grpc)).result(TIMEOUT)
            with pytest.raises(grpc.RpcError) as caught:
                stub.CallTool(spec.request("echo", {"text": "late"}), timeout=TIMEOUT)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert not shutdown.done()
            server.signals.gate.set()
            response = in_flight.result(timeout=TIMEOUT)
            assert to_python(response.result)["content"][0]["text"] == "through"
            shutdown.result(timeout=TIMEOUT)


def test_shutdown_cancels_the_calls_still_running_after_the_grace_period() -> None:
    with ServerThread() as server:
        spec = protos()["spec"]
        options = [("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(f"127.0.0.1:{server.port}", options=options) as chan:
            stub = spec.stub(chan)
            in_flight = stub.CallTool.future(spec.request("slow", {}), timeout=TIMEOUT)
            assert server.signals.slow_started.wait(TIMEOUT)
            assert server.grpc is not None
            server.run(server.grpc.shutdown(0.1)).result(timeout=TIMEOUT)
            assert server.signals.slow_cancelled.wait(TIMEOUT)
            with pytest.raises(grpc.RpcError):
                in_flight.result(timeout=TIMEOUT)


async def test_create_server_serves_the_service_on_the_running_loop() -> None:
    from grpclib.client import Channel

    from mcplite.protocols.generated import mcplite as generated

    dispatcher = Dispatcher(make_tools(Signals()), Config(secret=b"k" * 32))
    server = create_server(dispatcher)
    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    await server.start(sock=sock)
    try:
        channel = Channel("127.0.0.1", port)
        try:
            tools = await unary(channel, "GetTools", generated.Empty(), generated.ToolsList)
            assert "search_documents" in [t.name for t in tools.tools]
        finally:
            channel.close()
    finally:
        server.close()
        close_connections_left_open()
        await asyncio.wait_for(server.wait_closed(), TIMEOUT)
        await dispatcher.close()
