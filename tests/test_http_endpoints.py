"""The HTTP endpoints and routes without a connection: a Request in, a response out.

Any server can drive the endpoint handlers (an ASGI app, a test): these build
:class:`~mcplite.bindings.http.messages.Request` objects by hand, call the
handlers, and read their responses, with no socket and no h11.  The route table's
own decisions (404, 405 with ``Allow``) are checked the same way; one test over a
real socket checks that a HEAD to a route that takes it gets no body.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import call_message, make_config, serve, start_server
from sse_client import RawHttp, connect, parse_events

from mcplite import Dispatcher, Tools
from mcplite.bindings.http.admission import Admission, Refusal
from mcplite.bindings.http.endpoints import JsonRpcCalls, ToolsList
from mcplite.bindings.http.hosts import AllowedHosts
from mcplite.bindings.http.mcp_endpoint import McpEndpoint
from mcplite.bindings.http.messages import Request, Response, StreamingResponse
from mcplite.bindings.http.routes import Route, Routes
from mcplite.protocols.jsonrpc import JsonRpc
from mcplite.protocols.mcp.server import McpServer
from mcplite.protocols.methods import mcplite_methods

JSON_REQUEST = {b"content-type": b"application/json", b"host": b"127.0.0.1"}


def _tools() -> Tools:
    tools = Tools()

    @tools.tool(promise_after=math.inf)
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @tools.tool(promise_after=math.inf)
    async def count(n: int) -> AsyncIterator[str]:
        """Count to n, one part each."""
        for i in range(n):
            yield str(i)

    return tools


def _post(path: bytes, message: Any, **headers: bytes) -> Request:
    extra = {name.replace("_", "-").encode(): value for name, value in headers.items()}
    return Request(b"POST", path, {**JSON_REQUEST, **extra}, body=json.dumps(message).encode())


def _calls(dispatcher: Dispatcher) -> JsonRpcCalls:
    return JsonRpcCalls(dispatcher, make_config(), JsonRpc(dispatcher, mcplite_methods(dispatcher)))


def _json(response: Response | StreamingResponse) -> Any:
    assert isinstance(response, Response)
    assert (b"content-type", b"application/json") in response.headers
    return json.loads(response.body)


async def test_the_mcplite_endpoints_answer_a_request_without_any_socket(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, _tools())
    calls = _calls(dispatcher)
    request = _post(b"/mcp-lite/v1/rpc?x=1", call_message("echo", {"text": "hi"}))
    response = await calls.handle(request)
    assert isinstance(response, Response) and response.status == 200
    assert _json(response)["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert request.path == b"/mcp-lite/v1/rpc" and request.tool == "echo"

    notification = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo"}}
    quiet = await calls.handle(_post(b"/rpc", notification))
    assert isinstance(quiet, Response) and (quiet.status, quiet.body) == (202, b"")

    listed = ToolsList(dispatcher).answer(_post(b"/tools", {}))
    assert {"echo", "count"} <= {tool["name"] for tool in _json(listed)["tools"]}
    broken = ToolsList(dispatcher).answer(Request(b"POST", b"/tools", JSON_REQUEST, body=b"{"))
    assert broken.status == 400 and _json(broken)["error"]["code"] == -32700


async def test_a_streamed_call_gives_its_events_without_any_socket(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, _tools())
    calls = _calls(dispatcher)
    request = _post(b"/rpc", call_message("count", {"n": 3}), accept=b"text/event-stream")
    response = await calls.handle(request)
    assert isinstance(response, StreamingResponse) and response.status == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in response.headers
    frames = b""
    try:
        async for frame in response.events:
            frames += frame
    finally:
        await response.events.aclose(disconnected=False)
    events = parse_events(frames)
    assert [e.event for e in events] == ["message", "message", "message", "done"]
    assert [e.json()["partial"] for e in events[:-1]] == ["0", "1", "2"]


async def test_the_mcp_endpoint_answers_initialize_and_a_call_without_any_socket(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, _tools())
    endpoint = McpEndpoint(dispatcher, make_config(), McpServer(dispatcher))
    accept = b"application/json, text/event-stream"
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "no-socket", "version": "1"},
        },
    }
    answer = await endpoint.handle(_post(b"/mcp", initialize, accept=accept))
    assert _json(answer)["result"]["protocolVersion"] == "2025-11-25"
    call = _post(
        b"/mcp",
        call_message("echo", {"text": "hi"}),
        accept=accept,
        mcp_protocol_version=b"2025-11-25",
    )
    answer = await endpoint.handle(call)
    assert _json(answer)["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert call.tool == "echo"
    refused = await endpoint.handle(_post(b"/mcp", initialize, accept=b"text/html"))
    assert isinstance(refused, Response) and refused.status == 406


def _answer(request: Request) -> Response:
    return Response(200, [], b"ok")


def test_the_route_table_derives_404_405_and_allow() -> None:
    routes = Routes(
        [
            Route(b"/rpc", (b"POST",), answer=_answer),
            Route(b"/meta", (b"GET", b"HEAD"), answer=_answer, public=True, json_body=False),
        ]
    )
    admission = Admission(AllowedHosts(None))

    def admit(method: bytes, path: bytes) -> Any:
        request = Request(method, path, dict(JSON_REQUEST))
        return admission.admit(request, routes.match(request.path))

    assert admit(b"POST", b"/rpc") is None
    assert admit(b"GET", b"/meta?x") is None
    missing = admit(b"POST", b"/nowhere")
    assert isinstance(missing, Refusal) and missing.status == 404
    for method, path, allow in [(b"GET", b"/rpc", b"POST"), (b"POST", b"/meta", b"GET, HEAD")]:
        refusal = admit(method, path)
        assert isinstance(refusal, Refusal) and refusal.status == 405
        assert refusal.headers == ((b"allow", allow),)
    unsupported = admission.admit(
        Request(b"POST", b"/rpc", {b"content-type": b"text/plain", b"content-length": b"2"}),
        routes.match(b"/rpc"),
    )
    assert isinstance(unsupported, Refusal) and unsupported.status == 415


def test_a_route_has_exactly_one_handler() -> None:
    async def handle(request: Request) -> Response:
        return _answer(request)

    with pytest.raises(ValueError, match="exactly one"):
        Route(b"/x", (b"POST",))
    with pytest.raises(ValueError, match="exactly one"):
        Route(b"/x", (b"POST",), answer=_answer, handle=handle)
    with pytest.raises(ValueError, match="no methods"):
        Route(b"/x", (), answer=_answer)


def test_a_head_request_gets_the_get_answers_headers_and_no_body() -> None:
    config = make_config(oauth_issuer="http://127.0.0.1:9/issuer", oauth_audience="https://t/mcp")
    server = start_server(Tools(), config)
    try:
        with connect(server.port, 5.0) as sock:
            # HEAD then GET on one connection: a body after the HEAD's head would
            # be read as the GET's status line.
            sock.sendall(
                b"".join(
                    b"%s /.well-known/oauth-protected-resource HTTP/1.1\r\n"
                    b"Host: 127.0.0.1\r\n\r\n" % method
                    for method in (b"HEAD", b"GET")
                )
            )
            reader = RawHttp(sock)
            head = reader.read_head()
            get = reader.read_response()
        assert head.status == get.head.status == 200
        assert head.headers == get.head.headers
        assert int(head.header("content-length") or 0) == len(get.body) > 0
        assert json.loads(get.body)["authorization_servers"] == ["http://127.0.0.1:9/issuer"]
    finally:
        server.stop()
