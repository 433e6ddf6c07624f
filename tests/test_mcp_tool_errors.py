"""Errors on the MCP endpoint as clients and models read them, on the wire.

What the official server does and clients in the wild rely on, pinned over real
sockets (``http.client``, raw sockets, the official ``mcp`` client), a stdio
subprocess and one gRPC call:

- the HTTP status of a JSON-RPC error by revision: on 2025 a method's errors go
  out with 200 (only an unparsable body or an invalid request is 400); on
  2026-07-28 the official table (-32602/-32020/-32021/-32022 400, -32601 404);
- invalid arguments and a raising tool are results with ``isError: true`` that
  name each field or give an error id (the exception only with
  ``show_tool_errors``), while MCP-lite and gRPC keep their protocol errors;
- MCP-lite's system tools ``redeem`` and ``cancel`` are never listed or
  suggested on MCP (a client that knows them may still call them);
- ``tasks/*`` may leave out ``Mcp-Name``, but not send a wrong one;
- ``notifications/cancelled`` over HTTP stops the one call it names;
- ``inputResponses``: only what a sealed round asked is taken, each answer of
  the shape its request returns;
- ``structuredContent`` is the value itself on 2026, an object on 2025.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import grpc
import pytest
from conftest import WAIT, RunningServer, make_config, rpc_message, start_server
from grpc_support import protos
from sse_client import parse_events
from test_mcp_client import connected
from test_mcp_http import (
    ACCEPT_BOTH,
    LEGACY,
    MODERN,
    WITH_TASKS,
    assert_error,
    assert_one_compact_line,
    exchange,
    modern_headers,
    modern_message,
    open_sse,
    post,
    task_status,
    wait_for_end,
)
from test_stdio import StdioProcess, request, stdio_process

from mcplite import ALWAYS, Context, Elicitation, InternalError, Tools
from mcplite.core.hints import Field
from mcplite.core.outcomes import InputRequired
from mcplite.ops.cli import build_parser, config_from_args

LEGACY_HEADERS = {"MCP-Protocol-Version": LEGACY}
#: Every capability an input request may need (elicitation, roots, sampling).
ASKS_ALL: dict[str, Any] = {"elicitation": {}, "roots": {}, "sampling": {}}
ERROR_ID = re.compile(r"\(error id ([0-9a-f]{12})\)")
SECRET_TEXT = "the secret text"

#: The requests ``profile`` asks in its first round, by key.
PROFILE_REQUESTS: dict[str, dict[str, Any]] = {
    "user_name": {
        "method": "elicitation/create",
        "params": {
            "message": "Your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    },
    "folders": {"method": "roots/list", "params": {}},
    "draft": {
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "Draft a bio"}}],
            "maxTokens": 50,
        },
    },
}
#: Answers of the right shape to each of ``profile``'s requests.
PROFILE_ANSWERS: dict[str, Any] = {
    "user_name": {"action": "accept", "content": {"name": "Ada"}},
    "folders": {"roots": [{"uri": "file:///home/ada"}]},
    "draft": {"role": "assistant", "content": {"type": "text", "text": "Ada writes code."}},
}


# --- the tools -----------------------------------------------------------------------


@dataclass
class Gates:
    """What the tools here wait on and report through (one set per server)."""

    release: asyncio.Event = field(default_factory=asyncio.Event)  # set on the server loop
    entered: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    cancelled: threading.Event = field(default_factory=threading.Event)  # saw CancelledError
    finished: threading.Event = field(default_factory=threading.Event)  # a finally ran
    answered: threading.Event = field(default_factory=threading.Event)  # confirm got its answer
    seen: list[Any] = field(default_factory=list)


def make_tools(gates: Gates) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @tools.tool
    async def lookup(city: str, days: Annotated[int, Field(ge=1, le=7)] = 1) -> str:
        """A forecast: two fields its schema checks."""
        return f"{city}: sunny for {days} days"

    @tools.tool
    async def explode() -> str:
        """A tool with a bug."""
        raise ValueError(SECRET_TEXT)

    @tools.tool
    async def give_up() -> str:
        """A tool that ends as a server fault on purpose."""
        raise InternalError("the ledger is unreachable")

    @tools.tool(requires={"sampling": {}})
    async def needs_sampling() -> str:
        """A tool only a 2026 client that can sample may call."""
        return "sampled"

    @tools.tool
    async def numbers() -> list[int]:
        """Plain data that is not an object."""
        return [1, 2, 3]

    @tools.tool
    async def summary() -> dict[str, int]:
        """Plain data that is an object."""
        return {"count": 3}

    @tools.tool(promise_after=ALWAYS)
    async def numbers_later() -> list[int]:
        """The same list, as a task."""
        return [4, 5]

    @tools.tool
    async def park(ctx: Context | None = None) -> str:
        """Say so, then wait until released (or cancelled)."""
        assert ctx is not None
        try:
            ctx.report_progress(0, 1, "parked")
            gates.entered.release()
            await gates.release.wait()
            return "released"
        except asyncio.CancelledError:
            gates.cancelled.set()
            raise
        finally:
            gates.finished.set()

    @tools.tool(promise_after=ALWAYS)
    async def job() -> str:
        """A task that runs until released (or cancelled)."""
        try:
            gates.entered.release()
            await gates.release.wait()
            return "job done"
        finally:
            gates.finished.set()

    @tools.tool(promise_after=ALWAYS)
    async def confirm(ok: bool | None = None) -> str | Elicitation:
        """A task that asks before it goes on."""
        if ok is None:
            return Elicitation(
                "Go on?",
                {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
            )
        gates.seen.append(ok)
        gates.answered.set()
        return "went on" if ok else "stopped"

    @tools.tool
    async def greet(name: str | None = None, ctx: Context | None = None) -> str | Elicitation:
        """Asks for the name when it is missing; records what the client answered."""
        assert ctx is not None
        gates.seen.append(dict(ctx.input_responses))
        if name is None:
            return Elicitation(
                "What is your name?",
                {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            )
        return f"Hello, {name}!"

    @tools.tool
    async def profile(ctx: Context | None = None) -> Any:
        """Asks three things at once; records what the client answered."""
        assert ctx is not None
        gates.seen.append(dict(ctx.input_responses))
        if ctx.request_state is None:
            return InputRequired(PROFILE_REQUESTS, state="round-1")
        return f"profile done after {ctx.request_state}"

    return tools


@pytest.fixture
def gates() -> Gates:
    return Gates()


def release(server: RunningServer, gates: Gates) -> None:
    server.call_soon(gates.release.set)


@pytest.fixture
def server(gates: Gates) -> Iterator[RunningServer]:
    running = start_server(make_tools(gates))
    try:
        yield running
    finally:
        release(running, gates)
        running.stop()


# --- the wire --------------------------------------------------------------------------


def call_params(name: Any, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, **extra}
    if arguments is not None:
        params["arguments"] = arguments
    return params


def legacy_message(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    """A 2025 request: no ``_meta`` envelope (the header says the version)."""
    return rpc_message(method, params, request_id)


def reply_of(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """The one JSON-RPC response in an answer: its JSON body, or the response event
    of its SSE stream (a 2025 tools/call may be answered either way)."""
    content_type = headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        values = [event.json() for event in parse_events(body)]
        responses = [value for value in values if "method" not in value]
        assert len(responses) == 1, values
        response: dict[str, Any] = responses[0]
        return response
    assert content_type.startswith("application/json"), (headers, body)
    reply: dict[str, Any] = json.loads(body)
    return reply


def legacy_exchange(
    server: RunningServer,
    message: Any,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST a 2025 message (the 2025 version header unless ``headers`` are given):
    the status and the JSON-RPC response, whether JSON or SSE."""
    status, response_headers, body = post(
        server, message, LEGACY_HEADERS if headers is None else headers
    )
    return status, reply_of(response_headers, body)


def modern_call(
    server: RunningServer,
    params: dict[str, Any],
    request_id: Any = 1,
    capabilities: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    return exchange(
        server, modern_message("tools/call", params, request_id, capabilities=capabilities)
    )


def call_result(
    server: RunningServer, era: str, name: str, arguments: Any = None, request_id: Any = 1
) -> dict[str, Any]:
    """A tools/call in ``era`` that must answer a result with 200: the result."""
    params = call_params(name, arguments if arguments is not None else {})
    if era == "2026":
        status, reply = modern_call(server, params, request_id)
    else:
        status, reply = legacy_exchange(server, legacy_message("tools/call", params, request_id))
    assert status == 200, reply
    assert reply["id"] == request_id, reply
    assert "error" not in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def only_text(result: dict[str, Any]) -> str:
    content = result["content"]
    assert isinstance(content, list) and len(content) == 1, result
    assert content[0]["type"] == "text", content
    text: str = content[0]["text"]
    return text


ERAS = ["2026", "2025"]


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# --- 1. the HTTP status of an error, by revision -----------------------------------------


LEGACY_METHOD_ERRORS = [
    pytest.param("prompts/list", {}, -32601, id="unknown method"),
    pytest.param("tasks/get", {"taskId": "t"}, -32601, id="a 2026-only method"),
    pytest.param("tools/call", call_params("no_such_tool", {}), -32602, id="unknown tool"),
    pytest.param("tools/call", call_params(5, {}), -32602, id="name not a string"),
    pytest.param("tools/call", {"arguments": {}}, -32602, id="no name"),
    pytest.param("tools/call", call_params("echo", ["x"]), -32602, id="arguments not an object"),
]


@pytest.mark.parametrize("headers", [LEGACY_HEADERS, {}], ids=["2025 header", "no header"])
@pytest.mark.parametrize(("method", "params", "code"), LEGACY_METHOD_ERRORS)
def test_a_2025_methods_json_rpc_errors_go_out_with_200(
    server: RunningServer,
    headers: dict[str, str],
    method: str,
    params: dict[str, Any],
    code: int,
) -> None:
    message = legacy_message(method, params, request_id=31)
    status, reply = legacy_exchange(server, message, headers)
    assert_error(status, reply, 200, code, 31)


@pytest.mark.parametrize("headers", [LEGACY_HEADERS, {}], ids=["2025 header", "no header"])
def test_a_2025_request_whose_params_are_not_an_object_is_invalid_params_with_200(
    server: RunningServer, headers: dict[str, str]
) -> None:
    message = {"jsonrpc": "2.0", "id": 32, "method": "tools/list", "params": [1, 2]}
    status, reply = legacy_exchange(server, message, headers)
    assert_error(status, reply, 200, -32602, 32)


@pytest.mark.parametrize("headers", [LEGACY_HEADERS, {}], ids=["2025 header", "no header"])
def test_a_2025_body_the_transport_cannot_take_is_still_400(
    server: RunningServer, headers: dict[str, str]
) -> None:
    status, response_headers, body = post(server, b'{"jsonrpc": "2.0", "id": 1,', headers)
    assert_error(status, reply_of(response_headers, body), 400, -32700, None)

    one = legacy_message("tools/list", request_id=1)
    status, reply = legacy_exchange(server, [one, {**one, "id": 2}], headers)
    assert_error(status, reply, 400, -32600, None)

    status, reply = legacy_exchange(server, {**one, "jsonrpc": "1.0"}, headers)
    assert_error(status, reply, 400, -32600, 1)

    status, reply = legacy_exchange(server, {**one, "id": None}, headers)
    assert_error(status, reply, 400, -32600, None)


def test_the_2026_errors_do_not_apply_to_a_2025_request(server: RunningServer) -> None:
    # No capability check (-32021) and no header check (-32020) on 2025: the call runs.
    result = call_result(server, "2025", "needs_sampling", request_id=33)
    assert only_text(result) == "sampled"
    message = legacy_message("tools/call", call_params("echo", {"text": "hi"}), 34)
    headers = {**LEGACY_HEADERS, "Mcp-Method": "tasks/get", "Mcp-Name": "someone-else"}
    status, reply = legacy_exchange(server, message, headers)
    assert status == 200, reply
    assert only_text(reply["result"]) == "hi"


def test_the_issues_repro_is_200_and_a_tool_error_result(demo_server: RunningServer) -> None:
    body = (
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"analyze_dataset",'
        b'"arguments":{"dataset_id":""}}}'
    )
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    status, response_headers, raw = post(demo_server, body, headers)
    assert status == 200, raw
    reply = reply_of(response_headers, raw)
    assert reply["id"] == 3 and "error" not in reply, reply
    result = reply["result"]
    assert result["isError"] is True
    text = only_text(result)
    assert text.startswith("Error executing tool analyze_dataset: Invalid arguments"), text
    assert "dataset_id" in text
    error = result["_meta"]["mcplite/error"]
    assert error["code"] == -32602
    assert [e["field"] for e in error["data"]["errors"]] == ["dataset_id"]


def test_a_2026_unknown_method_is_404(server: RunningServer) -> None:
    status, reply = exchange(server, modern_message("prompts/list", request_id=41))
    assert_error(status, reply, 404, -32601, 41)


def test_2026_invalid_params_is_400(server: RunningServer) -> None:
    status, reply = modern_call(server, call_params("no_such_tool", {}), 42)
    assert_error(status, reply, 400, -32602, 42)
    status, reply = modern_call(server, call_params("echo", ["x"]), 43)
    assert_error(status, reply, 400, -32602, 43)


def test_2026_header_capability_and_version_errors_are_400(server: RunningServer) -> None:
    message = modern_message("tools/call", call_params("echo", {"text": "x"}), 44)
    status, reply = exchange(server, message, {**modern_headers(message), "Mcp-Name": "other"})
    assert_error(status, reply, 400, -32020, 44)

    status, reply = modern_call(server, call_params("needs_sampling", {}), 45)
    assert_error(status, reply, 400, -32021, 45)

    message = modern_message("server/discover", request_id=46, version="v999.0.0")
    status, reply = exchange(server, message, modern_headers(message, "v999.0.0"))
    assert_error(status, reply, 400, -32022, 46)


def test_a_2026_error_outside_the_table_is_200(gates: Gates) -> None:
    # One call in flight of at most one: the next is refused as overloaded (-32000).
    running = start_server(make_tools(gates), make_config(max_concurrent_calls=1))
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(
                legacy_exchange, running, legacy_message("tools/call", call_params("park", {}), 1)
            )
            assert gates.entered.acquire(timeout=WAIT)
            status, reply = modern_call(running, call_params("echo", {"text": "x"}), 47)
            error = assert_error(status, reply, 200, -32000, 47)
            assert error["message"]
            release(running, gates)
            status, parked = first.result(WAIT)
        assert status == 200 and only_text(parked["result"]) == "released", parked
    finally:
        release(running, gates)
        running.stop()


# --- 2. invalid arguments: a result the model reads ---------------------------------------


BAD_LOOKUP = {"city": 5, "days": 99}


def assert_invalid_arguments_result(result: dict[str, Any], tool: str) -> None:
    assert result["isError"] is True, result
    text = only_text(result)
    assert text.startswith(f"Error executing tool {tool}: Invalid arguments"), text
    assert "city" in text and "days" in text, text
    error = result["_meta"]["mcplite/error"]
    assert error["code"] == -32602
    assert error["message"] in text
    fields = {entry["field"] for entry in error["data"]["errors"]}
    assert fields == {"city", "days"}, error
    assert all(
        isinstance(entry["message"], str) and entry["message"] for entry in error["data"]["errors"]
    )


def test_invalid_arguments_are_a_tool_error_result_naming_each_field(
    server: RunningServer, era: str
) -> None:
    result = call_result(server, era, "lookup", BAD_LOOKUP, request_id=51)
    assert_invalid_arguments_result(result, "lookup")
    if era == "2026":
        assert result["resultType"] == "complete"
    else:
        assert "resultType" not in result


def test_a_missing_required_argument_is_a_tool_error_result(
    server: RunningServer, era: str
) -> None:
    result = call_result(server, era, "lookup", {}, request_id=52)
    assert result["isError"] is True
    assert "city" in only_text(result)
    errors = result["_meta"]["mcplite/error"]["data"]["errors"]
    assert [entry["field"] for entry in errors] == ["city"]


async def test_the_official_client_reads_invalid_arguments_as_a_tool_error(
    server: RunningServer, era: str
) -> None:
    async with connected(server.port, era) as client:
        result = await client.call_tool("lookup", BAD_LOOKUP)
    assert result.is_error is True
    block = result.content[0]
    assert block.type == "text"
    assert block.text.startswith("Error executing tool lookup: Invalid arguments")


def test_mcp_lite_keeps_invalid_arguments_a_protocol_error(server: RunningServer) -> None:
    for path in ("/calltools", "/rpc"):
        status, _, body = server.post(
            path, rpc_message("tools/call", call_params("lookup", BAD_LOOKUP), 53)
        )
        assert status == 200, body
        reply = json.loads(body)
        assert "result" not in reply, reply
        assert reply["error"]["code"] == -32602
        fields = {entry["field"] for entry in reply["error"]["data"]["errors"]}
        assert fields == {"city", "days"}


def test_grpc_keeps_invalid_arguments_invalid_argument(gates: Gates) -> None:
    running = start_server(make_tools(gates), make_config(), grpc=True)
    try:
        proto = protos()["ours"]
        options = [("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}", options=options) as channel:
            stub = proto.stub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.CallTool(proto.request("lookup", BAD_LOOKUP), timeout=WAIT)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "city" in caught.value.details() and "days" in caught.value.details()
    finally:
        running.stop()


# --- stdio -----------------------------------------------------------------------------

STDIO_TOOLS = '''
"""Tools for the stdio tool-error tests."""

from typing import Annotated

from mcplite import Tools
from mcplite.core.hints import Field

tools = Tools()


@tools.tool
async def lookup(city: str, days: Annotated[int, Field(ge=1, le=7)] = 1) -> str:
    return f"{city}: sunny for {days} days"


@tools.tool
async def explode() -> str:
    raise ValueError("the secret text")
'''

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture
def stdio_tools(tmp_path: Path) -> Path:
    (tmp_path / "stdio_error_tools.py").write_text(STDIO_TOOLS)
    return tmp_path


def stdio_call(server: StdioProcess, era: str, name: str, arguments: Any, request_id: int) -> Any:
    params: dict[str, Any] = call_params(name, arguments)
    if era == "2026":
        params["_meta"] = MODERN_META
    server.send(request("tools/call", params, request_id))
    reply = server.receive()
    assert reply["id"] == request_id, reply
    return reply


def stdio_initialize(server: StdioProcess) -> None:
    init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "errors"}}
    server.send(request("initialize", init, 0))
    assert server.receive()["result"]["protocolVersion"] == LEGACY


def test_invalid_arguments_over_stdio_are_a_tool_error_result(stdio_tools: Path) -> None:
    with stdio_process("stdio_error_tools", extra_path=stdio_tools) as server:
        stdio_initialize(server)
        for request_id, era in enumerate(ERAS, start=1):
            reply = stdio_call(server, era, "lookup", BAD_LOOKUP, request_id)
            assert "error" not in reply, reply
            assert_invalid_arguments_result(reply["result"], "lookup")


@pytest.mark.parametrize("show", [False, True], ids=["default", "--show-tool-errors"])
def test_a_raising_tool_over_stdio_shows_its_exception_only_when_told(
    stdio_tools: Path, show: bool
) -> None:
    flags = ["--show-tool-errors"] if show else []
    with stdio_process("stdio_error_tools", *flags, extra_path=stdio_tools) as server:
        stdio_initialize(server)
        for request_id, era in enumerate(ERAS, start=1):
            reply = stdio_call(server, era, "explode", {}, request_id)
            result = reply["result"]
            assert result["isError"] is True
            text = only_text(result)
            assert "Internal error in tool 'explode'" in text
            assert ERROR_ID.search(text), text
            assert (f"ValueError: {SECRET_TEXT}" in text) is show
            assert (SECRET_TEXT in text) is show


# --- 3. a tool that raises ---------------------------------------------------------------


def test_a_raising_tool_is_a_tool_error_with_an_error_id_and_not_its_exception(
    server: RunningServer, era: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="mcplite"):
        result = call_result(server, era, "explode", {}, request_id=61)
    assert result["isError"] is True
    text = only_text(result)
    assert text.startswith("Error executing tool explode: Internal error in tool 'explode'"), text
    found = ERROR_ID.search(text)
    assert found is not None, text
    error_id = found.group(1)
    assert SECRET_TEXT not in json.dumps(result)
    assert "ValueError" not in json.dumps(result)
    error = result["_meta"]["mcplite/error"]
    assert error["code"] == -32603
    assert error["data"]["error_id"] == error_id
    # The server's own log has the traceback under the same id.
    logged = [
        r for r in caplog.records if r.levelno == logging.ERROR and error_id in r.getMessage()
    ]
    assert len(logged) == 1, caplog.records
    assert logged[0].exc_info is not None
    assert isinstance(logged[0].exc_info[1], ValueError)
    assert str(logged[0].exc_info[1]) == SECRET_TEXT


def test_show_tool_errors_adds_the_exceptions_type_and_text(gates: Gates, era: str) -> None:
    running = start_server(make_tools(gates), make_config(show_tool_errors=True))
    try:
        result = call_result(running, era, "explode", {}, request_id=62)
    finally:
        running.stop()
    assert result["isError"] is True
    text = only_text(result)
    assert text.startswith("Error executing tool explode: Internal error in tool 'explode'"), text
    assert ERROR_ID.search(text), text
    assert f"ValueError: {SECRET_TEXT}" in text


def test_a_tool_that_raises_internal_error_itself_is_a_tool_error_result(
    server: RunningServer, era: str
) -> None:
    result = call_result(server, era, "give_up", {}, request_id=63)
    assert result["isError"] is True
    assert only_text(result) == "Error executing tool give_up: the ledger is unreachable"
    assert result["_meta"]["mcplite/error"]["code"] == -32603


def test_mcp_lite_keeps_a_raising_tool_an_internal_error(server: RunningServer) -> None:
    status, _, body = server.post("/rpc", rpc_message("tools/call", call_params("explode", {}), 64))
    reply = json.loads(body)
    assert status == 200 and "result" not in reply, reply
    assert reply["error"]["code"] == -32603
    assert SECRET_TEXT not in body.decode()


@pytest.mark.parametrize("command", ["serve", "stdio"])
def test_show_tool_errors_on_the_command_line_sets_the_config(command: str) -> None:
    parser = build_parser()
    plain = parser.parse_args([command, "mcplite.demo"])
    assert plain.show_tool_errors is False
    assert config_from_args(plain).show_tool_errors is False
    shown = parser.parse_args([command, "mcplite.demo", "--show-tool-errors"])
    assert shown.show_tool_errors is True
    assert config_from_args(shown).show_tool_errors is True


# --- 4. unknown tools, and MCP-lite's system tools ---------------------------------------


def unknown_tool_error(server: RunningServer, era: str, name: str) -> dict[str, Any]:
    params = call_params(name, {})
    if era == "2026":
        status, reply = modern_call(server, params, 71)
        return assert_error(status, reply, 400, -32602, 71)
    status, reply = legacy_exchange(server, legacy_message("tools/call", params, 71))
    return assert_error(status, reply, 200, -32602, 71)


@pytest.mark.parametrize("name", ["cancl", "redeeem", "no_such_tool"])
def test_an_unknown_tool_on_mcp_never_lists_or_suggests_the_system_tools(
    server: RunningServer, era: str, name: str
) -> None:
    error = unknown_tool_error(server, era, name)
    assert error["message"] == f"Unknown tool: {name}"
    available = error["data"]["available_tools"]
    assert "echo" in available and "lookup" in available
    assert "redeem" not in available and "cancel" not in available
    assert "cancel" not in error["data"].get("suggestion", "")
    assert "redeem" not in error["data"].get("suggestion", "")


def test_a_client_that_knows_redeem_may_still_call_it_on_mcp(
    server: RunningServer, era: str
) -> None:
    params = call_params("redeem", {"promise": "not-a-token"})
    if era == "2026":
        status, reply = modern_call(server, params, 72)
    else:
        status, reply = legacy_exchange(server, legacy_message("tools/call", params, 72))
    assert (status, reply["error"]["code"]) == (400 if era == "2026" else 200, -32602), reply
    assert "Unknown tool" not in reply["error"]["message"], reply


def test_a_name_close_to_a_users_tool_is_still_suggested_on_mcp(server: RunningServer) -> None:
    error = unknown_tool_error(server, "2026", "lookp")
    assert error["data"]["suggestion"] == "Did you mean 'lookup'?"


def test_mcp_lite_still_lists_and_serves_its_system_tools(server: RunningServer) -> None:
    status, _, body = server.post("/listtools", {})
    assert status == 200, body
    types = {tool["name"]: tool.get("@type") for tool in json.loads(body)["tools"]}
    assert types["redeem"] == "system" and types["cancel"] == "system"

    near = server.rpc("tools/call", call_params("cancl", {}))
    assert near["error"]["data"]["suggestion"] == "Did you mean 'cancel'?"
    assert "cancel" in near["error"]["data"]["available_tools"]
    # cancel exists there: a bad token is its own error, not an unknown tool.
    for name in ("cancel", "redeem"):
        reply = server.rpc("tools/call", call_params(name, {"token": "not-a-token"}))
        assert reply["error"]["code"] == -32602, reply
        assert "not found" not in reply["error"]["message"].lower(), reply


# --- 5. Mcp-Name on tasks/* --------------------------------------------------------------


def without_name(message: dict[str, Any]) -> dict[str, str]:
    headers = modern_headers(message)
    del headers["Mcp-Name"]
    return headers


def start_task(server: RunningServer, name: str, capabilities: dict[str, Any]) -> str:
    status, reply = modern_call(server, call_params(name, {}), 81, capabilities)
    assert status == 200, reply
    assert reply["result"]["resultType"] == "task", reply
    task_id: str = reply["result"]["taskId"]
    return task_id


def test_tasks_get_and_cancel_may_leave_out_mcp_name(server: RunningServer, gates: Gates) -> None:
    task_id = start_task(server, "job", WITH_TASKS)
    assert gates.entered.acquire(timeout=WAIT)
    message = modern_message("tasks/get", {"taskId": task_id}, 82, capabilities=WITH_TASKS)
    status, reply = exchange(server, message, without_name(message))
    assert status == 200, reply
    assert reply["result"]["taskId"] == task_id
    assert reply["result"]["status"] == "working"

    message = modern_message("tasks/cancel", {"taskId": task_id}, 83, capabilities=WITH_TASKS)
    status, reply = exchange(server, message, without_name(message))
    assert status == 200, reply
    assert reply["result"]["resultType"] == "complete"
    assert gates.finished.wait(WAIT)  # the cancel reached the tool
    wait_for_end(server, task_id)
    assert task_status(server, task_id)["status"] in ("cancelled", "failed")


def test_tasks_update_may_leave_out_mcp_name(server: RunningServer, gates: Gates) -> None:
    caps = {**WITH_TASKS, "elicitation": {}}
    task_id = start_task(server, "confirm", caps)
    wait_for_end(server, task_id)
    assert task_status(server, task_id)["status"] == "input_required"
    params = {
        "taskId": task_id,
        "inputResponses": {"elicitation": {"action": "accept", "content": {"ok": True}}},
    }
    message = modern_message("tasks/update", params, 84, capabilities=caps)
    status, reply = exchange(server, message, without_name(message))
    assert status == 200, reply
    assert reply["result"]["resultType"] == "complete"
    assert gates.answered.wait(WAIT)
    assert gates.seen == [True]


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
def test_a_task_methods_mcp_name_that_does_not_match_is_a_header_mismatch(
    server: RunningServer, method: str
) -> None:
    params = {"taskId": "some-task", "inputResponses": {}}
    message = modern_message(method, params, 85, capabilities=WITH_TASKS)
    status, reply = exchange(server, message, {**modern_headers(message), "Mcp-Name": "other-task"})
    assert_error(status, reply, 400, -32020, 85)


def test_tools_call_without_mcp_name_is_still_a_header_mismatch(server: RunningServer) -> None:
    message = modern_message("tools/call", call_params("echo", {"text": "x"}), 86)
    status, reply = exchange(server, message, without_name(message))
    assert_error(status, reply, 400, -32020, 86)


# --- 6. notifications/cancelled over HTTP ------------------------------------------------


def cancel_notification(request_id: Any) -> dict[str, Any]:
    params = {"requestId": request_id, "reason": "user"}
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


def send_cancel(server: RunningServer, request_id: Any) -> None:
    status, _, body = post(server, cancel_notification(request_id), LEGACY_HEADERS)
    assert (status, body) == (202, b"")


def park_call(request_id: Any, progress_token: str | None = None) -> dict[str, Any]:
    params = call_params("park", {})
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    return legacy_message("tools/call", params, request_id)


def test_notifications_cancelled_stops_the_call_it_names_and_it_gets_no_answer(
    server: RunningServer, gates: Gates
) -> None:
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(post, server, park_call(7), LEGACY_HEADERS)
        assert gates.entered.acquire(timeout=WAIT)
        send_cancel(server, 7)
        assert gates.cancelled.wait(WAIT)
        assert gates.finished.wait(WAIT)
        status, _, body = pending.result(WAIT)
    assert (status, body) == (202, b"")
    assert only_text(call_result(server, "2025", "echo", {"text": "still here"})) == "still here"


def test_a_cancelled_call_streaming_as_sse_ends_its_stream_without_a_response(
    server: RunningServer, gates: Gates
) -> None:
    headers = {"Accept": ACCEPT_BOTH, **LEGACY_HEADERS}
    sock, reader, head = open_sse(server, park_call(7, progress_token="tok"), headers)
    with sock:
        assert head.status == 200
        assert (head.header("content-type") or "").startswith("text/event-stream")
        events = reader.events(head)
        first = assert_one_compact_line(next(events))
        assert first["method"] == "notifications/progress"
        assert gates.entered.acquire(timeout=WAIT)
        send_cancel(server, 7)
        rest = [assert_one_compact_line(event) for event in events]  # to the stream's end
    assert all("method" in value for value in rest), rest  # no response, no result
    assert gates.cancelled.wait(WAIT)


def test_a_cancel_naming_no_call_in_flight_is_a_harmless_202(
    server: RunningServer, gates: Gates
) -> None:
    send_cancel(server, 12345)
    send_cancel(server, "nobody")
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(legacy_exchange, server, park_call(7))
        assert gates.entered.acquire(timeout=WAIT)
        send_cancel(server, 8)  # another id: the call in flight goes on
        release(server, gates)
        status, reply = pending.result(WAIT)
    assert status == 200, reply
    assert reply["id"] == 7 and only_text(reply["result"]) == "released"
    assert not gates.cancelled.is_set()


def test_a_cancel_naming_two_calls_with_the_same_id_stops_neither(
    server: RunningServer, gates: Gates
) -> None:
    # Two anonymous clients, each with its own id 7: the cancel cannot tell them apart.
    with ThreadPoolExecutor(2) as pool:
        pending = [pool.submit(legacy_exchange, server, park_call(7)) for _ in range(2)]
        assert gates.entered.acquire(timeout=WAIT)
        assert gates.entered.acquire(timeout=WAIT)
        send_cancel(server, 7)
        release(server, gates)
        replies = [future.result(WAIT) for future in pending]
    for status, reply in replies:
        assert status == 200, reply
        assert reply["id"] == 7 and only_text(reply["result"]) == "released"
    assert not gates.cancelled.is_set()


# --- 7. inputResponses -----------------------------------------------------------------


def greet_call(server: RunningServer, request_id: Any, **extra: Any) -> tuple[int, dict[str, Any]]:
    return modern_call(server, call_params("greet", {}, **extra), request_id, {"elicitation": {}})


def profile_call(
    server: RunningServer, request_id: Any, **extra: Any
) -> tuple[int, dict[str, Any]]:
    return modern_call(server, call_params("profile", {}, **extra), request_id, ASKS_ALL)


def profile_state(server: RunningServer) -> str:
    status, reply = profile_call(server, 90)
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "input_required", result
    assert set(result["inputRequests"]) == set(PROFILE_REQUESTS)
    state: str = result["requestState"]
    return state


def test_an_unsolicited_declined_elicitation_leaves_a_tool_that_never_asked_alone(
    server: RunningServer,
) -> None:
    answer = {"elicitation": {"action": "decline"}}
    status, reply = modern_call(
        server, call_params("echo", {"text": "as usual"}, inputResponses=answer), 91
    )
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "complete"
    assert result["isError"] is False
    assert only_text(result) == "as usual"


def test_answers_without_a_request_state_reach_the_tool_as_they_are_but_never_as_arguments(
    server: RunningServer, gates: Gates
) -> None:
    answer = {"elicitation": {"action": "accept", "content": {"name": "Bo"}}}
    status, reply = greet_call(server, 92, inputResponses=answer)
    assert status == 200, reply
    assert reply["result"]["resultType"] == "input_required"  # not merged: asked again
    assert gates.seen == [answer]


def test_keys_the_round_did_not_ask_are_ignored(server: RunningServer, gates: Gates) -> None:
    state = profile_state(server)
    answers = {**PROFILE_ANSWERS, "not_asked": 12345, "also_not": {"action": "accept"}}
    status, reply = profile_call(server, 93, inputResponses=answers, requestState=state)
    assert status == 200, reply
    assert reply["result"]["resultType"] == "complete"
    assert only_text(reply["result"]) == "profile done after round-1"
    assert gates.seen[-1] == PROFILE_ANSWERS


def test_keys_an_elicitation_round_did_not_ask_do_not_reach_the_tool(
    server: RunningServer, gates: Gates
) -> None:
    status, reply = greet_call(server, 94)
    state = reply["result"]["requestState"]
    asked = {"elicitation": {"action": "accept", "content": {"name": "Ada"}}}
    status, reply = greet_call(
        server, 95, inputResponses={**asked, "extra": {"roots": []}, "junk": 7}, requestState=state
    )
    assert status == 200, reply
    assert only_text(reply["result"]) == "Hello, Ada!"
    assert gates.seen[-1] == asked


WRONG_SHAPES = [
    pytest.param("user_name", 12345, id="a number for an elicitation"),
    pytest.param("user_name", {"content": {"name": "Ada"}}, id="an elicitation without action"),
    pytest.param("user_name", {"action": "maybe"}, id="an elicitation with a bad action"),
    pytest.param("user_name", {"action": "accept", "content": "Ada"}, id="content not an object"),
    pytest.param("folders", {"roots": [{"name": "home"}]}, id="roots without uris"),
    pytest.param("folders", {"uris": ["file:///"]}, id="no roots list"),
    pytest.param("draft", {"role": "assistant"}, id="sampling without content"),
    pytest.param("draft", {"action": "accept"}, id="an elicitation for a sampling request"),
]


@pytest.mark.parametrize(("key", "value"), WRONG_SHAPES)
def test_an_answer_of_the_wrong_shape_for_its_request_is_invalid_params_naming_the_key(
    server: RunningServer, gates: Gates, key: str, value: Any
) -> None:
    state = profile_state(server)
    answers = {**PROFILE_ANSWERS, key: value}
    status, reply = profile_call(server, 96, inputResponses=answers, requestState=state)
    error = assert_error(status, reply, 400, -32602, 96)
    assert f"inputResponses[{key!r}]" in error["message"], error
    assert len(gates.seen) == 1  # the tool did not run again


@pytest.mark.parametrize(
    "answers",
    [
        pytest.param({"anything": 12345}, id="a number"),
        pytest.param({"anything": "accept"}, id="a string"),
        pytest.param({"anything": {"content": {}}}, id="no input result"),
    ],
)
def test_without_a_request_state_an_answer_that_is_no_input_result_is_invalid_params(
    server: RunningServer, answers: dict[str, Any]
) -> None:
    status, reply = modern_call(
        server, call_params("echo", {"text": "x"}, inputResponses=answers), 97
    )
    error = assert_error(status, reply, 400, -32602, 97)
    assert "inputResponses['anything']" in error["message"], error


@pytest.mark.parametrize("value", [None, 12345, [], "yes"], ids=repr)
def test_input_responses_that_are_not_an_object_are_invalid_params(
    server: RunningServer, value: Any
) -> None:
    status, reply = modern_call(
        server, call_params("echo", {"text": "x"}, inputResponses=value), 98
    )
    assert_error(status, reply, 400, -32602, 98)


@pytest.mark.parametrize(
    "value", [None, 12345, {"elicitation": {"action": "decline"}}, {"x": 1}], ids=repr
)
def test_2025_ignores_input_responses(server: RunningServer, gates: Gates, value: Any) -> None:
    params = call_params("greet", {"name": "Cy"}, inputResponses=value)
    status, reply = legacy_exchange(server, legacy_message("tools/call", params, 99))
    assert status == 200, reply
    assert only_text(reply["result"]) == "Hello, Cy!"
    assert gates.seen == [{}]


def test_tasks_update_with_an_answer_of_the_wrong_shape_is_invalid_params(
    server: RunningServer, gates: Gates
) -> None:
    caps = {**WITH_TASKS, "elicitation": {}}
    task_id = start_task(server, "confirm", caps)
    wait_for_end(server, task_id)
    assert task_status(server, task_id)["status"] == "input_required"
    for bad in (12345, {"action": "maybe"}, {"content": {"ok": True}}):
        params = {"taskId": task_id, "inputResponses": {"elicitation": bad}}
        status, reply = exchange(
            server, modern_message("tasks/update", params, 100, capabilities=caps)
        )
        error = assert_error(status, reply, 400, -32602, 100)
        assert "inputResponses['elicitation']" in error["message"], error
    assert task_status(server, task_id)["status"] == "input_required"
    assert not gates.answered.is_set()


# --- 8. structuredContent by revision --------------------------------------------------------


def test_a_list_is_structured_content_itself_on_2026_and_wrapped_on_2025(
    server: RunningServer,
) -> None:
    modern = call_result(server, "2026", "numbers")
    assert modern["structuredContent"] == [1, 2, 3]
    assert json.loads(only_text(modern)) == [1, 2, 3]
    legacy = call_result(server, "2025", "numbers")
    assert legacy["structuredContent"] == {"result": [1, 2, 3]}
    assert json.loads(only_text(legacy)) == [1, 2, 3]


def test_a_dict_is_structured_content_itself_on_both(server: RunningServer, era: str) -> None:
    result = call_result(server, era, "summary")
    assert result["structuredContent"] == {"count": 3}


def test_a_tasks_list_result_is_structured_content_itself(server: RunningServer) -> None:
    task_id = start_task(server, "numbers_later", WITH_TASKS)
    wait_for_end(server, task_id)
    done = task_status(server, task_id)
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"] == [4, 5]
