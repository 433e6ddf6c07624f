"""The MCP endpoint (``POST /mcp``) on the wire, driven by ``http.client`` and raw sockets.

What a client of either MCP revision relies on, byte for byte: the 2026-07-28
``server/discover`` and its validation ladder (``_meta`` -> headers -> version ->
method -> capabilities -> handler, each with its HTTP status and JSON-RPC code),
the 2025-11-25 handshake, HTTP-level answers (405, 406, 400), DNS-rebinding
protection, SSE for calls that say something before their result (and a client
that leaves cancelling the tool), promises as tasks (``tasks/get``, ``tasks/update``,
``tasks/cancel``), elicitation as ``input_required`` results on 2026, and as a
request on the call's stream, answered by a POST, on 2025.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import WAIT, RunningServer, make_config, serve_process, start_server
from sse_client import Event, Head, RawHttp, SseParser, connect, request_bytes

from mcplite import ALWAYS, Context, Elicitation, Failure, MCPLiteError, Tools, __version__, content
from mcplite.core.outcomes import InputRequired

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
TASKS = "io.modelcontextprotocol/tasks"
WITH_TASKS: dict[str, Any] = {"extensions": {TASKS: {}}}
ASKS_BOTH: dict[str, Any] = {"elicitation": {}, "roots": {}}
ACCEPT_BOTH = "application/json, text/event-stream"
#: Which param ``Mcp-Name`` repeats, per method (the spec's table).
NAME_PARAMS = {
    "tools/call": "name",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
POLLS = 400  # bound of the one tasks/get polling loop
POLL_INTERVAL = 0.005


# --- the tools -----------------------------------------------------------------------


@dataclass
class Gates:
    """What the test tools wait on and report through (one set per server)."""

    release: asyncio.Event = field(default_factory=asyncio.Event)  # set on the server loop
    entered: threading.Event = field(default_factory=threading.Event)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)  # a tool's finally ran
    seen: list[Any] = field(default_factory=list)


def make_tools(gates: Gates) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @tools.tool
    async def circular() -> dict[str, Any]:
        """A result that contains itself: JSON cannot hold it."""
        loop: dict[str, Any] = {}
        loop["self"] = loop
        return loop

    @tools.tool
    async def not_a_number() -> dict[str, float]:
        """Another result JSON cannot hold."""
        return {"ratio": float("nan")}

    @tools.tool
    async def count(steps: int = 3, ctx: Context | None = None) -> str:
        """Report progress once per step, then finish."""
        assert ctx is not None
        for step in range(1, steps + 1):
            ctx.report_progress(step, steps, f"step {step} of {steps}")
            await asyncio.sleep(0)
        return f"counted {steps}"

    @tools.tool
    async def hold(ctx: Context | None = None) -> str:
        """Report progress once, then wait until cancelled."""
        assert ctx is not None
        try:
            ctx.report_progress(0, 1, "holding")
            await asyncio.Event().wait()
            return "never"
        finally:
            gates.stopped.set()

    @tools.tool
    async def pause(ctx: Context | None = None) -> str:
        """Report progress once, then wait until the test releases it."""
        assert ctx is not None
        ctx.report_progress(0, 1, "waiting")
        await gates.release.wait()
        return "released"

    @tools.tool(requires={"sampling": {}})
    async def needs_sampling() -> str:
        """A tool only a client that can sample may call."""
        return "sampled"

    @tools.tool(promise_after=ALWAYS)
    async def job(label: str = "job") -> str:
        """A task: runs until the test releases it."""
        gates.entered.set()
        await gates.release.wait()
        return f"{label} finished"

    @tools.tool(promise_after=ALWAYS)
    async def endless() -> str:
        """A task that only ends when cancelled."""
        try:
            gates.entered.set()
            await asyncio.Event().wait()
            return "never"
        finally:
            gates.stopped.set()

    @tools.tool(promise_after=ALWAYS)
    async def refuse() -> str:
        """A task that ends in a business failure."""
        raise Failure("no, not today", reason="refused")

    @tools.tool(promise_after=ALWAYS)
    async def crash() -> str:
        """A task whose tool has a bug."""
        raise RuntimeError("a bug in the tool")

    @tools.tool(promise_after=ALWAYS)
    async def confirm(filename: str, ok: bool | None = None) -> str | Elicitation:
        """A task that asks before it deletes."""
        if ok is None:
            return Elicitation(
                f"Delete {filename}?",
                {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
            )
        gates.seen.append(ok)
        return f"{filename} deleted" if ok else f"{filename} kept"

    @tools.tool
    async def greet(name: str | None = None) -> str | Elicitation:
        """Greet someone; asks for the name when it is missing."""
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
    async def survey(ctx: Context | None = None) -> Any:
        """Asks two questions at once and keeps a state between the rounds."""
        assert ctx is not None
        answers = ctx.input_responses
        if "color" not in answers or "size" not in answers:
            return InputRequired(
                {
                    "color": {
                        "method": "elicitation/create",
                        "params": {
                            "message": "Favourite colour?",
                            "requestedSchema": {
                                "type": "object",
                                "properties": {"color": {"type": "string"}},
                            },
                        },
                    },
                    "size": {"method": "roots/list", "params": {}},
                },
                state="round-1",
            )
        gates.seen.append(ctx.request_state)
        color = answers["color"]["content"]["color"]
        roots = answers["size"]["roots"]
        return [content.text(f"{color} with {len(roots)} roots after {ctx.request_state}")]

    @tools.tool
    async def rows(count: int, note: str = "") -> dict[str, Any]:
        """Plain data: ``count`` rows (about 60 bytes of JSON each) and a note."""
        return {
            "rows": [{"id": i, "name": f"row {i}", "city": "Zürich"} for i in range(count)],
            "note": note,
        }

    return tools


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def server(gates: Gates) -> Iterator[RunningServer]:
    running = start_server(make_tools(gates))
    try:
        yield running
    finally:
        running.call_soon(gates.release.set)
        running.stop()


# --- the wire, by hand -----------------------------------------------------------------


def modern_message(
    method: str,
    params: dict[str, Any] | None = None,
    request_id: Any = 1,
    *,
    capabilities: dict[str, Any] | None = None,
    version: str = MODERN,
    **meta: Any,
) -> dict[str, Any]:
    """A 2026-07-28 request: ``params._meta`` carries the version and capabilities."""
    params = dict(params or {})
    params["_meta"] = {
        VERSION_KEY: version,
        CAPABILITIES_KEY: capabilities if capabilities is not None else {},
        **meta,
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def modern_headers(message: dict[str, Any], version: str = MODERN) -> dict[str, str]:
    """The headers a 2026 client sends with ``message``: they repeat what the body says."""
    method = message["method"]
    headers = {"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": version, "Mcp-Method": method}
    name_param = NAME_PARAMS.get(method)
    if name_param is not None:
        headers["Mcp-Name"] = str(message["params"][name_param])
    return headers


def post(
    server: RunningServer,
    payload: Any,
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    path: str = "/mcp",
) -> tuple[int, dict[str, str], bytes]:
    """One request to the MCP endpoint with ``http.client``: status, headers, body."""
    return post_to(server.port, payload, headers, method=method, path=path)


def post_to(
    port: int,
    payload: Any,
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    path: str = "/mcp",
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        all_headers = {"Content-Type": "application/json", "Accept": ACCEPT_BOTH}
        all_headers.update(headers or {})
        conn.request(method, path, body=body if method == "POST" else None, headers=all_headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def exchange(
    server: RunningServer, message: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """POST ``message`` (with the 2026 headers unless ``headers`` are given); the status
    and the decoded JSON reply, which must be plain JSON."""
    if headers is None:
        headers = modern_headers(message)
    status, response_headers, body = post(server, message, headers)
    assert response_headers["content-type"].startswith("application/json"), (status, body)
    reply: dict[str, Any] = json.loads(body)
    return status, reply


def modern(
    server: RunningServer,
    method: str,
    params: dict[str, Any] | None = None,
    request_id: Any = 1,
    *,
    capabilities: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A 2026 request that must succeed: its ``result``."""
    message = modern_message(method, params, request_id, capabilities=capabilities)
    status, reply = exchange(server, message)
    assert status == 200, reply
    assert reply["id"] == request_id, reply
    result: dict[str, Any] = reply["result"]
    return result


def assert_error(
    status: int, reply: dict[str, Any], http_status: int, code: int, request_id: Any
) -> dict[str, Any]:
    """An error answer: its status, its code, and the request's id echoed."""
    assert status == http_status, reply
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == request_id, reply
    assert "result" not in reply
    error: dict[str, Any] = reply["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error


def legacy(
    server: RunningServer, method: str, params: dict[str, Any] | None = None, request_id: Any = 1
) -> tuple[int, dict[str, str], bytes]:
    """A 2025-11-25 request (after the handshake: the version header, no ``_meta``)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return post(server, message, {"MCP-Protocol-Version": LEGACY})


def legacy_result(
    server: RunningServer, method: str, params: dict[str, Any] | None = None, request_id: Any = 1
) -> dict[str, Any]:
    status, headers, body = legacy(server, method, params, request_id)
    assert status == 200, body
    assert headers["content-type"].startswith("application/json")
    reply = json.loads(body)
    assert reply["id"] == request_id, reply
    result: dict[str, Any] = reply["result"]
    return result


def parse_time(value: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert moment.tzinfo is not None, value
    return moment


# --- 2026-07-28: discovery and results ---------------------------------------------------


def test_discover_names_the_version_capabilities_caching_and_the_server(
    server: RunningServer,
) -> None:
    result = modern(server, "server/discover", request_id=201)
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [MODERN]
    capabilities = result["capabilities"]
    assert "tools" in capabilities
    assert capabilities["extensions"][TASKS] == {}
    assert "tasks" not in capabilities  # the extension, not the old capability
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
    assert result["cacheScope"] in ("public", "private")
    assert result["_meta"][SERVER_INFO_KEY] == {"name": "mcplite", "version": __version__}


def test_tools_list_carries_result_type_caching_hints_and_only_the_users_tools(
    server: RunningServer,
) -> None:
    result = modern(server, "tools/list")
    assert result["resultType"] == "complete"
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
    assert result["cacheScope"] in ("public", "private")
    assert result["_meta"][SERVER_INFO_KEY]["name"] == "mcplite"
    names = [tool["name"] for tool in result["tools"]]
    assert names == [
        "echo",
        "circular",
        "not_a_number",
        "count",
        "hold",
        "pause",
        "needs_sampling",
        "job",
        "endless",
        "refuse",
        "crash",
        "confirm",
        "greet",
        "survey",
        "rows",
    ]
    echo = result["tools"][0]
    assert echo["description"] == "Return the text unchanged."
    assert echo["inputSchema"]["properties"]["text"]["type"] == "string"
    assert all("@type" not in tool for tool in result["tools"])


def test_a_tool_call_answers_a_complete_result_with_content_blocks(server: RunningServer) -> None:
    result = modern(server, "tools/call", {"name": "echo", "arguments": {"text": "héllo"}})
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "héllo"}]
    assert result["isError"] is False
    assert result["_meta"][SERVER_INFO_KEY]["version"] == __version__


@pytest.mark.parametrize(("count", "note"), [(3, "é"), (20_000, "é"), (3, "a\ud800b")])
def test_plain_data_is_one_text_block_of_its_json_and_the_data_itself(
    server: RunningServer, count: int, note: str
) -> None:
    # 20,000 rows: over a MiB of JSON; a lone surrogate: JSON text that cannot be UTF-8,
    # written with its escape (the text block stays ASCII).
    result = modern(
        server, "tools/call", {"name": "rows", "arguments": {"count": count, "note": note}}
    )
    data = result["structuredContent"]
    assert len(data["rows"]) == count and data["note"] == note
    assert data["rows"][-1] == {"id": count - 1, "name": f"row {count - 1}", "city": "Zürich"}
    [block] = result["content"]
    assert block["type"] == "text"
    assert json.loads(block["text"]) == data
    assert block["text"].isascii() == ("\ud800" in note)


def test_a_notification_is_accepted_with_202_and_no_body(server: RunningServer) -> None:
    message = modern_message("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    del message["id"]
    status, _, body = post(server, message, modern_headers(message))
    assert (status, body) == (202, b"")


# --- 2026-07-28: the validation ladder --------------------------------------------------


@pytest.mark.parametrize(
    "strip",
    [
        pytest.param(lambda p: p.pop("_meta"), id="no _meta"),
        pytest.param(lambda p: p["_meta"].pop(VERSION_KEY), id="no version"),
        pytest.param(lambda p: p["_meta"].pop(CAPABILITIES_KEY), id="no capabilities"),
    ],
)
def test_a_request_without_its_meta_envelope_is_invalid_params(
    server: RunningServer, strip: Any
) -> None:
    message = modern_message("tools/list", request_id="meta-1")
    strip(message["params"])
    status, reply = exchange(server, message, modern_headers(message))
    assert_error(status, reply, 400, -32602, "meta-1")


def test_missing_meta_is_reported_before_a_header_mismatch(server: RunningServer) -> None:
    message = modern_message("tools/list", request_id=7)
    del message["params"]["_meta"]
    headers = {**modern_headers(message), "Mcp-Method": "tasks/get"}
    status, reply = exchange(server, message, headers)
    assert_error(status, reply, 400, -32602, 7)


@pytest.mark.parametrize(
    ("change", "header", "value"),
    [
        pytest.param("set", "Mcp-Method", "tasks/get", id="method mismatch"),
        pytest.param("set", "Mcp-Method", "TOOLS/CALL", id="method is case-sensitive"),
        pytest.param("drop", "Mcp-Method", "", id="method missing"),
        pytest.param("set", "Mcp-Name", "other", id="name mismatch"),
        pytest.param("drop", "Mcp-Name", "", id="name missing"),
        pytest.param("set", "Mcp-Name", "=?base64?ZWNobw?=", id="base64 without padding"),
        pytest.param("set", "Mcp-Name", "=?base64?ZW!!Nobw==?=", id="base64 bad alphabet"),
        pytest.param("set", "Mcp-Name", "=?base64?b3RoZXI=?=", id="base64 of another name"),
    ],
)
def test_headers_that_disagree_with_the_body_are_a_header_mismatch(
    server: RunningServer, change: str, header: str, value: str
) -> None:
    message = modern_message("tools/call", {"name": "echo", "arguments": {"text": "x"}}, 302)
    headers = modern_headers(message)
    if change == "drop":
        del headers[header]
    else:
        headers[header] = value
    status, reply = exchange(server, message, headers)
    assert_error(status, reply, 400, -32020, 302)


def test_a_2026_body_without_the_version_header_is_a_header_mismatch(
    server: RunningServer,
) -> None:
    message = modern_message("tools/list", request_id="no-header")
    headers = modern_headers(message)
    del headers["MCP-Protocol-Version"]
    status, reply = exchange(server, message, headers)
    assert_error(status, reply, 400, -32020, "no-header")


def test_a_version_header_that_disagrees_with_meta_is_a_header_mismatch_first(
    server: RunningServer,
) -> None:
    # The header says 2026-07-28, _meta an unknown version: the mismatch wins over -32022.
    message = modern_message("server/discover", request_id=303, version="v999.0.0")
    status, reply = exchange(server, message, modern_headers(message, MODERN))
    assert_error(status, reply, 400, -32020, 303)


@pytest.mark.parametrize(
    "name",
    [pytest.param("=?base64?ZWNobw==?=", id="base64"), pytest.param("  echo  ", id="spaces")],
)
def test_the_name_header_may_be_base64_encoded_or_padded_with_spaces(
    server: RunningServer, name: str
) -> None:
    message = modern_message("tools/call", {"name": "echo", "arguments": {"text": "ok"}})
    status, reply = exchange(server, message, {**modern_headers(message), "Mcp-Name": name})
    assert status == 200, reply
    assert reply["result"]["content"] == [{"type": "text", "text": "ok"}]


def test_a_name_header_only_half_in_the_base64_form_is_literal(server: RunningServer) -> None:
    # "=?base64?...": no closing "?=", so it is compared as it is, and matches the body.
    literal = "=?base64?ZWNobw=="
    message = modern_message("tools/call", {"name": literal, "arguments": {}}, 9)
    status, reply = exchange(server, message, {**modern_headers(message), "Mcp-Name": literal})
    assert_error(status, reply, 400, -32602, 9)  # past the header check: no such tool


def test_header_names_are_case_insensitive(server: RunningServer) -> None:
    message = modern_message("tools/call", {"name": "echo", "arguments": {"text": "ok"}})
    headers = {
        "Accept": ACCEPT_BOTH,
        "mcp-protocol-version": MODERN,
        "MCP-METHOD": "tools/call",
        "mcp-name": "echo",
    }
    status, reply = exchange(server, message, headers)
    assert status == 200, reply
    assert reply["result"]["content"][0]["text"] == "ok"


def test_an_unsupported_version_names_the_supported_and_the_requested_ones(
    server: RunningServer,
) -> None:
    message = modern_message("server/discover", request_id=301, version="v999.0.0")
    status, reply = exchange(server, message, modern_headers(message, "v999.0.0"))
    error = assert_error(status, reply, 400, -32022, 301)
    assert error["data"]["requested"] == "v999.0.0"
    assert MODERN in error["data"]["supported"]
    assert set(error["data"]["supported"]) <= {MODERN}  # within discover's supportedVersions


def test_an_unsupported_version_is_reported_before_an_unknown_method(
    server: RunningServer,
) -> None:
    message = modern_message("initialize", request_id=304, version="v999.0.0")
    status, reply = exchange(server, message, modern_headers(message, "v999.0.0"))
    assert_error(status, reply, 400, -32022, 304)


@pytest.mark.parametrize("method", ["initialize", "ping", "logging/setLevel", "tasks/list"])
def test_methods_removed_in_2026_are_method_not_found_with_404(
    server: RunningServer, method: str
) -> None:
    message = modern_message(method, {"protocolVersion": LEGACY}, request_id="gone")
    status, reply = exchange(server, message)
    error = assert_error(status, reply, 404, -32601, "gone")
    assert method in error["message"]


def test_a_tool_that_needs_a_capability_the_request_lacks_is_refused(
    server: RunningServer,
) -> None:
    message = modern_message("tools/call", {"name": "needs_sampling"}, 401)
    status, reply = exchange(server, message)
    error = assert_error(status, reply, 400, -32021, 401)
    assert error["data"]["requiredCapabilities"] == {"sampling": {}}

    # The same call declaring the capability runs the tool.
    result = modern(server, "tools/call", {"name": "needs_sampling"}, capabilities={"sampling": {}})
    assert result["content"] == [{"type": "text", "text": "sampled"}]


def test_an_unknown_tool_is_invalid_params(server: RunningServer) -> None:
    message = modern_message("tools/call", {"name": "no_such_tool", "arguments": {}}, 55)
    status, reply = exchange(server, message)
    error = assert_error(status, reply, 400, -32602, 55)
    assert "no_such_tool" in error["message"]


@pytest.mark.parametrize("tool", ["circular", "not_a_number"])
def test_a_result_json_cannot_hold_is_a_tool_error_the_model_reads(
    server: RunningServer, tool: str
) -> None:
    message = modern_message("tools/call", {"name": tool, "arguments": {}}, "bad")
    status, reply = exchange(server, message)
    assert status == 200, reply
    result = reply["result"]
    assert result["isError"] is True
    assert "not valid JSON" in result["content"][0]["text"], result
    assert result["_meta"]["mcplite/error"]["code"] == -32603
    assert modern(server, "tools/call", {"name": "echo", "arguments": {"text": "still here"}})


def test_invalid_arguments_are_a_tool_error_naming_the_field(server: RunningServer) -> None:
    message = modern_message("tools/call", {"name": "echo", "arguments": {"text": 5}}, "args")
    status, reply = exchange(server, message)
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "complete"
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("Error executing tool echo: Invalid arguments")
    assert "text" in result["content"][0]["text"]
    assert result["_meta"]["mcplite/error"]["data"]["errors"][0]["field"] == "text"


# --- 2025-11-25 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "answered"),
    [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("1999-01-01", "2025-11-25")],
)
def test_initialize_negotiates_the_version_and_names_the_server(
    server: RunningServer, asked: str, answered: str
) -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": asked,
            "capabilities": {"sampling": {}, "elicitation": {}},
            "clientInfo": {"name": "raw-test", "version": "1.0.0"},
        },
    }
    status, reply = exchange(server, message, {})  # no version header on the handshake
    assert status == 200, reply
    assert reply["id"] == 0
    result = reply["result"]
    assert result["protocolVersion"] == answered
    assert result["serverInfo"] == {"name": "mcplite", "version": __version__}
    assert "tools" in result["capabilities"]
    assert "resultType" not in result  # a 2026 field; the 2025 schema has none


def test_the_initialized_notification_is_accepted_with_202_and_no_body(
    server: RunningServer,
) -> None:
    message = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, _, body = post(server, message, {"MCP-Protocol-Version": LEGACY})
    assert (status, body) == (202, b"")


@pytest.mark.parametrize(
    ("method", "params"), [("ping", None), ("logging/setLevel", {"level": "info"})]
)
def test_ping_and_set_level_answer_an_empty_result(
    server: RunningServer, method: str, params: dict[str, Any] | None
) -> None:
    assert legacy_result(server, method, params, request_id=11) == {}


def test_a_2025_tool_call_answers_plain_json_with_content(server: RunningServer) -> None:
    result = legacy_result(server, "tools/call", {"name": "echo", "arguments": {"text": "old"}})
    assert result["content"] == [{"type": "text", "text": "old"}]
    assert result["isError"] is False
    assert "resultType" not in result


def test_a_2025_unknown_tool_is_invalid_params_with_200(server: RunningServer) -> None:
    # 2025 keeps HTTP statuses for what the transport cannot take: a method's
    # errors go out with 200, as the official server sends them.
    status, _, body = legacy(server, "tools/call", {"name": "nope", "arguments": {}}, 12)
    assert_error(status, json.loads(body), 200, -32602, 12)


# --- HTTP-level answers -----------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_get_and_delete_are_method_not_allowed_with_allow_post(
    server: RunningServer, method: str
) -> None:
    status, headers, _ = post(server, b"", {"Accept": "text/event-stream"}, method=method)
    assert status == 405
    assert headers["allow"] == "POST"


def test_a_client_that_accepts_neither_json_nor_sse_gets_406(server: RunningServer) -> None:
    message = modern_message("tools/list")
    status, _, _ = post(server, message, {**modern_headers(message), "Accept": "text/html"})
    assert status == 406


def test_an_unparsable_body_is_a_parse_error(server: RunningServer) -> None:
    status, headers, body = post(
        server, b'{"jsonrpc": "2.0", "id": 1,', modern_headers(modern_message("tools/list"))
    )
    assert headers["content-type"].startswith("application/json")
    assert_error(status, json.loads(body), 400, -32700, None)


def test_a_batch_is_an_invalid_request(server: RunningServer) -> None:
    one = modern_message("tools/list", request_id=1)
    two = modern_message("tools/list", request_id=2)
    status, headers, body = post(server, [one, two], modern_headers(one))
    assert headers["content-type"].startswith("application/json")
    assert_error(status, json.loads(body), 400, -32600, None)


# --- DNS rebinding ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"Host": "evil.example.com"}, id="host"),
        pytest.param({"Origin": "http://evil.example.com"}, id="origin"),
        pytest.param({"Host": "evil.example.com", "Origin": "http://evil.example.com"}, id="both"),
    ],
)
def test_a_foreign_host_or_origin_is_forbidden_on_a_loopback_server(
    server: RunningServer, extra: dict[str, str]
) -> None:
    message = modern_message("server/discover")
    status, _, _ = post(server, message, {**modern_headers(message), **extra})
    assert status == 403


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "127.0.0.1"])
def test_the_loopback_host_and_origin_are_accepted(server: RunningServer, host: str) -> None:
    host = host.format(port=server.port)
    message = modern_message("server/discover")
    headers = {**modern_headers(message), "Host": host, "Origin": f"http://{host}"}
    status, _, _ = post(server, message, headers)
    assert status == 200


def test_hosts_are_told_apart_request_after_request(server: RunningServer) -> None:
    # The server keeps the answer for each Host it has checked: it must stay that
    # Host's, whatever came before, with or without an Origin beside it.
    message = modern_message("server/discover")
    good, bad = f"127.0.0.1:{server.port}", "evil.example.com"
    for host, origin, status in [
        (good, None, 200),
        (bad, None, 403),
        (good, None, 200),
        (good, "http://evil.example.com", 403),
        (good, None, 200),
        (bad, None, 403),
        (bad, f"http://{good}", 403),
    ]:
        headers = {**modern_headers(message), "Host": host}
        if origin is not None:
            headers["Origin"] = origin
        assert post(server, message, headers)[0] == status, (host, origin)


def test_an_allow_list_replaces_the_loopback_names(gates: Gates) -> None:
    running = start_server(make_tools(gates), make_config(mcp_allowed_hosts=("example.test",)))
    try:
        message = modern_message("server/discover")
        headers = modern_headers(message)
        allowed = {**headers, "Host": "example.test", "Origin": "http://example.test"}
        assert post(running, message, allowed)[0] == 200
        loopback = {**headers, "Host": f"127.0.0.1:{running.port}"}
        assert post(running, message, loopback)[0] == 403
    finally:
        running.stop()


def test_the_endpoint_can_be_turned_off(gates: Gates) -> None:
    running = start_server(make_tools(gates), make_config(mcp_path=None))
    try:
        message = modern_message("server/discover")
        assert post(running, message, modern_headers(message))[0] == 404
    finally:
        running.stop()


def test_serve_with_no_mcp_answers_404_on_the_mcp_path() -> None:
    message = modern_message("server/discover")
    headers = modern_headers(message)
    with serve_process("mcplite.demo", "--http", "127.0.0.1:0", "--no-grpc", "--no-mcp") as proc:
        assert post_to(proc.http_port, message, headers)[0] == 404
    with serve_process("mcplite.demo", "--http", "127.0.0.1:0", "--no-grpc") as proc:
        assert post_to(proc.http_port, message, headers)[0] == 200


# --- SSE ---------------------------------------------------------------------------------


def open_sse(
    server: RunningServer, message: dict[str, Any], headers: dict[str, str]
) -> tuple[socket.socket, RawHttp, Head]:
    """POST ``message`` on a raw socket: the socket (closed by the caller), its reader
    and the response head."""
    sock = connect(server.port, WAIT)
    try:
        sock.sendall(request_bytes("/mcp", message, headers=headers))
        reader = RawHttp(sock)
        return sock, reader, reader.read_head()
    except BaseException:
        sock.close()
        raise


def assert_one_compact_line(event: Event) -> Any:
    """An ``event: message`` whose JSON sits on one ``data:`` line, compact; its value."""
    assert event.event == "message"
    data_lines = [line for line in event.lines if line.startswith(b"data:")]
    assert len(data_lines) == 1, event.lines
    value = event.json()
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert event.data == compact
    return value


def call_with_progress(
    era: str, name: str, arguments: dict[str, Any], request_id: int, token: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """A ``tools/call`` asking for progress (under ``token``), in the 2026 or the
    2025 revision, with the headers its client sends: the message and headers."""
    params = {"name": name, "arguments": arguments}
    if era == "2026":
        message = modern_message("tools/call", params, request_id, progressToken=token)
        return message, modern_headers(message)
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {**params, "_meta": {"progressToken": token}},
    }
    return message, {"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": LEGACY}


@pytest.mark.parametrize("era", ["2026", "2025"])
def test_progress_streams_as_sse_notifications_before_the_response(
    server: RunningServer, era: str
) -> None:
    message, headers = call_with_progress(era, "count", {"steps": 3}, 21, "tok-1")
    sock, reader, head = open_sse(server, message, headers)
    with sock:
        assert head.status == 200
        assert (head.header("content-type") or "").startswith("text/event-stream")
        values = [assert_one_compact_line(event) for event in reader.events(head)]
    *notes, response = values
    assert [note["method"] for note in notes] == ["notifications/progress"] * 3
    assert [note["params"] for note in notes] == [
        {"progressToken": "tok-1", "progress": step, "total": 3, "message": f"step {step} of 3"}
        for step in (1, 2, 3)
    ]
    assert all("id" not in note for note in notes)
    assert response["id"] == 21
    assert response["result"]["content"] == [{"type": "text", "text": "counted 3"}]


@pytest.mark.parametrize("era", ["2026", "2025"])
def test_a_call_silent_after_it_spoke_keeps_its_stream_alive_with_pings(
    gates: Gates, era: str
) -> None:
    running = start_server(make_tools(gates), make_config(heartbeat=0.05))
    message, headers = call_with_progress(era, "pause", {}, 8, "p")
    parser = SseParser()
    seen: list[Any] = []  # each message, and "ping" for each keep-alive comment
    try:
        sock, reader, head = open_sse(running, message, headers)
        with sock:
            assert head.status == 200
            for part in reader.body_parts(head):
                seen += [assert_one_compact_line(event) for event in parser.feed(part)]
                if b": ping\n\n" in part:
                    seen.append("ping")
                    if not gates.release.is_set():  # silent until pinged: now let it answer
                        running.call_soon(gates.release.set)
    finally:
        running.call_soon(gates.release.set)
        running.stop()
    progress, *pings, response = seen
    assert progress["method"] == "notifications/progress"
    assert pings and set(pings) == {"ping"}, seen
    assert response["id"] == 8
    assert response["result"]["content"] == [{"type": "text", "text": "released"}]


def test_a_numeric_progress_token_is_echoed_as_a_number(server: RunningServer) -> None:
    message = modern_message(
        "tools/call", {"name": "count", "arguments": {"steps": 1}}, 3, progressToken=77
    )
    sock, reader, head = open_sse(server, message, modern_headers(message))
    with sock:
        values = [assert_one_compact_line(event) for event in reader.events(head)]
    assert values[0]["params"]["progressToken"] == 77
    assert values[-1]["id"] == 3


def test_the_same_call_without_a_progress_token_answers_plain_json(
    server: RunningServer,
) -> None:
    message = modern_message("tools/call", {"name": "count", "arguments": {"steps": 3}}, 22)
    status, headers, body = post(server, message, modern_headers(message))
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    reply = json.loads(body)
    assert reply["id"] == 22
    assert reply["result"]["content"] == [{"type": "text", "text": "counted 3"}]


def test_a_client_that_accepts_only_json_gets_json_even_with_a_progress_token(
    server: RunningServer,
) -> None:
    message = modern_message("tools/call", {"name": "count"}, 24, progressToken="tok")
    headers = {**modern_headers(message), "Accept": "application/json"}
    status, response_headers, body = post(server, message, headers)
    assert status == 200
    assert response_headers["content-type"].startswith("application/json")
    assert json.loads(body)["result"]["content"] == [{"type": "text", "text": "counted 3"}]


def test_a_client_that_closes_the_stream_cancels_the_tool(
    server: RunningServer, gates: Gates
) -> None:
    message = modern_message("tools/call", {"name": "hold"}, 23, progressToken="p")
    sock, reader, head = open_sse(server, message, modern_headers(message))
    with sock:
        assert head.status == 200
        first = next(reader.events(head))
        assert assert_one_compact_line(first)["method"] == "notifications/progress"
    server.run(asyncio.wait_for(gates.stopped.wait(), WAIT))
    after = modern(server, "tools/call", {"name": "echo", "arguments": {"text": "on"}})
    assert after["content"] == [{"type": "text", "text": "on"}]


# --- tasks --------------------------------------------------------------------------------


def task_request(
    server: RunningServer, method: str, task_id: str, request_id: Any = 1
) -> tuple[int, dict[str, Any]]:
    message = modern_message(method, {"taskId": task_id}, request_id, capabilities=WITH_TASKS)
    return exchange(server, message)


def task_status(server: RunningServer, task_id: str) -> dict[str, Any]:
    status, reply = task_request(server, "tasks/get", task_id)
    assert status == 200, reply
    result: dict[str, Any] = reply["result"]
    assert result["resultType"] == "complete"
    assert result["taskId"] == task_id
    return result


def wait_for_end(server: RunningServer, task_id: str) -> None:
    """Wait (bounded) on the server until the task's call has ended: the core's own
    long-poll, so that the next tasks/get sees the end without polling."""

    async def wait() -> None:
        with contextlib.suppress(MCPLiteError):
            await server.dispatcher.redeem(task_id, WAIT)

    server.run(wait())


def create_task(server: RunningServer, name: str, request_id: Any = 5) -> dict[str, Any]:
    params = {"name": name, "arguments": {}}
    return modern(server, "tools/call", params, request_id, capabilities=WITH_TASKS)


def test_a_promise_is_a_task_for_a_client_with_the_tasks_extension(
    server: RunningServer, gates: Gates
) -> None:
    created = create_task(server, "job")
    assert created["resultType"] == "task"
    task_id = created["taskId"]
    assert isinstance(task_id, str) and task_id.isascii() and task_id.isprintable()
    assert " " not in task_id
    assert created["status"] == "working"
    assert parse_time(created["createdAt"]) <= parse_time(created["lastUpdatedAt"])
    assert isinstance(created["ttlMs"], int) and created["ttlMs"] > 0
    assert isinstance(created["pollIntervalMs"], int) and created["pollIntervalMs"] > 0
    for absent in ("result", "error", "inputRequests", "requestState", "content", "ttl"):
        assert absent not in created

    assert gates.entered.wait(WAIT)
    working = task_status(server, task_id)
    assert working["status"] == "working"

    server.call_soon(gates.release.set)
    wait_for_end(server, task_id)
    done = task_status(server, task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "job finished"}]
    assert done["result"]["isError"] is False
    assert "requestState" not in done

    # Cancelling a finished task is acknowledged the same way, and changes nothing.
    status, reply = task_request(server, "tasks/cancel", task_id, 6)
    assert status == 200, reply
    assert set(reply["result"]) - {"_meta"} == {"resultType"}
    assert task_status(server, task_id)["status"] == "completed"


def test_cancelling_a_task_stops_its_tool_and_the_task_ends(
    server: RunningServer, gates: Gates
) -> None:
    task_id = create_task(server, "endless")["taskId"]
    assert gates.entered.wait(WAIT)
    status, reply = task_request(server, "tasks/cancel", task_id, 61)
    assert status == 200, reply
    assert reply["id"] == 61
    ack = reply["result"]
    assert ack["resultType"] == "complete"
    for absent in ("taskId", "status", "result", "error", "inputRequests"):
        assert absent not in ack
    server.run(asyncio.wait_for(gates.stopped.wait(), WAIT))
    wait_for_end(server, task_id)
    ended = task_status(server, task_id)
    assert ended["status"] in ("cancelled", "failed"), ended


def test_a_task_whose_tool_fails_completes_with_a_tool_error(server: RunningServer) -> None:
    task_id = create_task(server, "refuse")["taskId"]
    wait_for_end(server, task_id)
    ended = task_status(server, task_id)
    assert ended["status"] == "completed"
    assert ended["result"]["isError"] is True
    assert ended["result"]["content"] == [{"type": "text", "text": "no, not today"}]
    assert "error" not in ended


def test_a_task_whose_tool_crashes_fails_with_an_error_and_no_result(
    server: RunningServer,
) -> None:
    task_id = create_task(server, "crash")["taskId"]
    wait_for_end(server, task_id)
    ended = task_status(server, task_id)
    assert ended["status"] == "failed"
    assert ended["error"]["code"] == -32603
    assert isinstance(ended["error"]["message"], str)
    assert "a bug in the tool" not in json.dumps(ended)  # no internals on the wire
    assert "result" not in ended


def poll_status(server: RunningServer, task_id: str, leaving: str) -> dict[str, Any]:
    """tasks/get until the task leaves the status ``leaving`` (bounded): for a tool run
    again after tasks/update, which has no promise of its own to wait on yet."""
    for _ in range(POLLS):
        task = task_status(server, task_id)
        if task["status"] != leaving:
            return task
        time.sleep(POLL_INTERVAL)
    pytest.fail(f"task {task_id} stayed {leaving!r}")


def test_a_task_that_needs_input_waits_for_tasks_update_then_completes(
    server: RunningServer, gates: Gates
) -> None:
    params = {"name": "confirm", "arguments": {"filename": "a.txt"}}
    caps = {**WITH_TASKS, "elicitation": {}}
    created = modern(server, "tools/call", params, 71, capabilities=caps)
    assert created["resultType"] == "task"
    task_id = created["taskId"]
    wait_for_end(server, task_id)
    waiting = task_status(server, task_id)
    assert waiting["status"] == "input_required"
    assert waiting["inputRequests"]["elicitation"]["method"] == "elicitation/create"
    assert waiting["inputRequests"]["elicitation"]["params"]["message"] == "Delete a.txt?"
    assert "requestState" not in waiting

    def update(responses: dict[str, Any]) -> None:
        params = {"taskId": task_id, "inputResponses": responses}
        status, reply = exchange(server, modern_message("tasks/update", params, capabilities=caps))
        assert status == 200, reply
        assert set(reply["result"]) - {"_meta"} == {"resultType"}  # a bare ack
        assert reply["result"]["resultType"] == "complete"

    # An answer under a key nobody asked for is acknowledged and changes nothing.
    update({"unknown-key": {"ignored": True}})
    assert task_status(server, task_id)["status"] == "input_required"

    update({"elicitation": {"action": "accept", "content": {"ok": True}}})
    done = poll_status(server, task_id, "working")
    assert done["status"] == "completed", done
    assert done["result"]["content"] == [{"type": "text", "text": "a.txt deleted"}]
    assert gates.seen == [True]


def test_task_methods_need_the_tasks_extension(server: RunningServer) -> None:
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        params = {"taskId": "gate-test", "inputResponses": {}}
        message = modern_message(method, params, "t1")
        status, reply = exchange(server, message)
        error = assert_error(status, reply, 400, -32021, "t1")
        assert error["data"]["requiredCapabilities"] == {"extensions": {TASKS: {}}}


def test_an_unknown_task_is_invalid_params(server: RunningServer) -> None:
    for method in ("tasks/get", "tasks/cancel"):
        status, reply = task_request(server, method, "tasks-nonexistent-12345", "t2")
        assert_error(status, reply, 400, -32602, "t2")


def test_a_task_method_header_must_name_the_task(server: RunningServer) -> None:
    message = modern_message("tasks/get", {"taskId": "abc"}, "t3", capabilities=WITH_TASKS)
    headers = {**modern_headers(message), "Mcp-Name": "xyz"}
    status, reply = exchange(server, message, headers)
    assert_error(status, reply, 400, -32020, "t3")


def test_without_the_extension_a_promise_is_answered_on_the_same_request(
    server: RunningServer, gates: Gates
) -> None:
    message = modern_message("tools/call", {"name": "job", "arguments": {"label": "wait"}}, 8)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(exchange, server, message)
        assert gates.entered.wait(WAIT)
        server.call_soon(gates.release.set)
        status, reply = pending.result(WAIT)
    assert status == 200, reply
    assert reply["id"] == 8
    result = reply["result"]
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "wait finished"}]


# --- input required -----------------------------------------------------------------------


def call_greet(server: RunningServer, request_id: Any, **extra: Any) -> tuple[int, dict[str, Any]]:
    params = {"name": "greet", "arguments": {}, **extra}
    message = modern_message("tools/call", params, request_id, capabilities={"elicitation": {}})
    return exchange(server, message)


def test_an_elicitation_is_an_input_required_result(server: RunningServer) -> None:
    status, reply = call_greet(server, 31)
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "input_required"
    assert result["inputRequests"] == {
        "elicitation": {
            "method": "elicitation/create",
            "params": {
                "message": "What is your name?",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            },
        }
    }
    assert isinstance(result["requestState"], str) and result["requestState"]
    for absent in ("content", "isError", "ttlMs", "cacheScope"):
        assert absent not in result


def test_accepted_content_is_merged_into_the_arguments_and_the_call_completes(
    server: RunningServer,
) -> None:
    state = call_greet(server, 32)[1]["result"]["requestState"]
    answer = {"elicitation": {"action": "accept", "content": {"name": "Ada"}}}
    status, reply = call_greet(server, 33, inputResponses=answer, requestState=state)
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "Hello, Ada!"}]
    assert result["isError"] is False


def test_a_tampered_request_state_is_invalid_params(server: RunningServer) -> None:
    state = call_greet(server, 34)[1]["result"]["requestState"]
    answer = {"elicitation": {"action": "accept", "content": {"name": "Ada"}}}
    for forged in (state + "-TAMPERED", state[:-2], "not-a-state"):
        status, reply = call_greet(server, "forged", inputResponses=answer, requestState=forged)
        assert_error(status, reply, 400, -32602, "forged")


def test_a_state_issued_for_one_tool_is_refused_by_another(server: RunningServer) -> None:
    state = call_greet(server, 37)[1]["result"]["requestState"]
    params = {"name": "survey", "inputResponses": {}, "requestState": state}
    message = modern_message("tools/call", params, "other-tool", capabilities=ASKS_BOTH)
    status, reply = exchange(server, message)
    assert_error(status, reply, 400, -32602, "other-tool")


def test_an_elicitation_answer_without_the_request_state_never_becomes_arguments(
    server: RunningServer,
) -> None:
    # Only a round the server asked for may be answered: without its sealed state,
    # an answer under "elicitation" is not merged, and the tool asks again.
    answer = {"elicitation": {"action": "accept", "content": {"name": "Bo"}}}
    status, reply = call_greet(server, 38, inputResponses=answer)
    assert status == 200, reply
    assert reply["result"]["resultType"] == "input_required", reply
    declined = {"elicitation": {"action": "decline"}}
    status, reply = call_greet(server, 40, inputResponses=declined)
    assert reply["result"]["resultType"] == "input_required", reply


def test_input_responses_that_are_not_an_object_are_invalid_params(
    server: RunningServer,
) -> None:
    status, reply = call_greet(server, 39, inputResponses=12345)
    assert_error(status, reply, 400, -32602, 39)


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_declined_elicitation_ends_the_call_as_a_tool_error(
    server: RunningServer, action: str
) -> None:
    state = call_greet(server, 35)[1]["result"]["requestState"]
    status, reply = call_greet(
        server, 36, inputResponses={"elicitation": {"action": action}}, requestState=state
    )
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "complete"
    assert result["isError"] is True
    assert result["content"][0]["type"] == "text"


def test_input_required_carries_the_tools_requests_and_gives_back_its_state(
    server: RunningServer, gates: Gates
) -> None:
    first = modern(server, "tools/call", {"name": "survey"}, 41, capabilities=ASKS_BOTH)
    assert first["resultType"] == "input_required"
    assert set(first["inputRequests"]) == {"color", "size"}
    assert first["inputRequests"]["size"] == {"method": "roots/list", "params": {}}
    state = first["requestState"]
    assert isinstance(state, str) and state
    assert "round-1" not in state  # the tool's state is sealed, not shown

    answers = {
        "color": {"action": "accept", "content": {"color": "teal"}},
        "size": {"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}]},
    }
    params = {"name": "survey", "inputResponses": answers, "requestState": state}
    second = modern(server, "tools/call", params, 42, capabilities=ASKS_BOTH)
    assert second["resultType"] == "complete"
    assert second["content"] == [{"type": "text", "text": "teal with 2 roots after round-1"}]
    assert gates.seen == ["round-1"]


def test_an_input_request_the_client_cannot_answer_is_a_missing_capability(
    server: RunningServer,
) -> None:
    message = modern_message("tools/call", {"name": "survey"}, 43, capabilities={"elicitation": {}})
    status, reply = exchange(server, message)
    error = assert_error(status, reply, 400, -32021, 43)
    assert error["data"]["requiredCapabilities"] == {"roots": {}}


# --- 2025-11-25: asking the client on the call's stream ---------------------------------


def legacy_call(name: str, request_id: Any, arguments: dict[str, Any] | None = None) -> Any:
    params = {"name": name, "arguments": arguments or {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


LEGACY_HEADERS = {"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": LEGACY}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(
            {"result": {"action": "accept", "content": {"name": "Ada"}}},
            {"isError": False, "text": "Hello, Ada!"},
            id="accept",
        ),
        pytest.param({"result": {"action": "decline"}}, {"isError": True}, id="decline"),
        pytest.param(
            {"error": {"code": -32603, "message": "no user here"}}, {"isError": True}, id="error"
        ),
    ],
)
def test_a_2025_call_asks_the_client_on_its_stream_and_goes_on_with_the_answer(
    server: RunningServer, answer: dict[str, Any], expected: dict[str, Any]
) -> None:
    sock, reader, head = open_sse(server, legacy_call("greet", 51), LEGACY_HEADERS)
    with sock:
        assert head.status == 200
        assert (head.header("content-type") or "").startswith("text/event-stream")
        events = reader.events(head)
        asked = assert_one_compact_line(next(events))
        assert asked["method"] == "elicitation/create"
        assert isinstance(asked["id"], str) and asked["id"]
        assert asked["params"]["message"] == "What is your name?"
        assert asked["params"]["requestedSchema"]["required"] == ["name"]

        # The answer comes back as a POST of its own: accepted, no body.
        status, _, body = post(
            server, {"jsonrpc": "2.0", "id": asked["id"], **answer}, LEGACY_HEADERS
        )
        assert (status, body) == (202, b"")

        rest = [assert_one_compact_line(event) for event in events]
    assert len(rest) == 1, rest
    response = rest[0]
    assert response["id"] == 51
    assert response["result"]["isError"] is expected["isError"]
    if "text" in expected:
        assert response["result"]["content"] == [{"type": "text", "text": expected["text"]}]


def test_an_answer_to_a_request_nobody_asked_is_accepted_and_dropped(
    server: RunningServer,
) -> None:
    stray = {"jsonrpc": "2.0", "id": "mcplite-not-asked", "result": {"action": "accept"}}
    status, _, body = post(server, stray, LEGACY_HEADERS)
    assert (status, body) == (202, b"")
    assert legacy_result(server, "tools/call", {"name": "echo", "arguments": {"text": "ok"}})


def test_a_2025_client_that_takes_only_json_is_told_what_the_tool_needs(
    server: RunningServer,
) -> None:
    headers = {**LEGACY_HEADERS, "Accept": "application/json"}
    status, response_headers, body = post(server, legacy_call("greet", 52), headers)
    assert status == 200
    assert response_headers["content-type"].startswith("application/json")
    result = json.loads(body)["result"]
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": "What is your name?"}]
    assert result["structuredContent"]["elicitation"]["requestedSchema"]["required"] == ["name"]


# --- the core's context: copied for a shared one, filled in for a fresh one -----


async def test_handle_leaves_a_shared_context_alone_and_fills_in_a_fresh_one() -> None:
    # stdio answers every message with one shared context; HTTP makes one per request.
    from mcplite.core.context import RequestContext
    from mcplite.core.dispatch import Dispatcher
    from mcplite.protocols.mcp.server import McpServer

    mcp = McpServer(Dispatcher(make_tools(Gates()), make_config()))
    message = modern_message(
        "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, progressToken=7
    )
    headers = {name.lower(): value for name, value in modern_headers(message).items()}
    shared = RequestContext("stdio")
    for fresh in (False, True):
        context = shared if not fresh else RequestContext("mcp")
        reply = await mcp.handle(message, context, headers, fresh=fresh)
        assert reply.status == 200 and reply.body is not None, reply
        assert reply.body["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert shared.progress_token is None and shared.client_capabilities is None
    assert context.progress_token == 7 and context.client_capabilities == {}


# --- call_tool: handle's answer, or None for what may be a stream ---------------


async def test_call_tool_answers_as_handle_does_and_leaves_only_what_may_be_a_stream() -> None:
    # The HTTP binding asks McpServer.call_tool first when the client takes JSON:
    # it answers through the one path (handle's), and leaves (None, nothing run)
    # only what may say something before its result.
    from mcplite.core.context import RequestContext
    from mcplite.core.dispatch import Dispatcher
    from mcplite.protocols.mcp.server import McpServer

    mcp = McpServer(Dispatcher(make_tools(Gates()), make_config()))

    def call(name: str, arguments: Any = None, **meta: Any) -> dict[str, Any]:
        params = {"name": name} if arguments is None else {"name": name, "arguments": arguments}
        return modern_message("tools/call", params, **meta)

    def headers_of(message: Any, **changes: str | None) -> dict[str, str]:
        headers = {name.lower(): value for name, value in modern_headers(message).items()}
        for name, value in changes.items():
            if value is None:
                headers.pop(name.replace("_", "-"), None)
            else:
                headers[name.replace("_", "-")] = value
        return headers

    echo = call("echo", {"text": "hi"})
    answered_here: list[tuple[Any, dict[str, str]]] = [
        (message, headers_of(message))
        for message in [
            echo,
            call(
                "echo",
                {"text": "hi"},
                progressToken="p-1",
                **{"io.modelcontextprotocol/logLevel": "debug"},
            ),
            {**echo, "id": "req-7"},
            call("echo", {"text": 5}),  # invalid arguments: -32602
            call("echo", ["hi"]),  # arguments not an object: -32602
            call("needs_sampling"),  # a capability the client lacks
            call("refuse"),  # a promise waited for (no tasks extension), then a failure
            {**echo, "params": {**echo["params"], "inputResponses": {}}},
            call("nope"),  # unknown tool
        ]
    ]
    answered_here += [
        (echo, headers_of(echo, mcp_name="other")),
        (echo, headers_of(echo, mcp_name="=?base64?ZWNobw==?=")),  # base64 form of "echo"
        (echo, headers_of(echo, mcp_method=None)),
        (call("echo", {"text": "hi"}, version="2025-06-18"), headers_of(echo)),
        ({**echo, "id": True}, headers_of(echo)),
        ({**echo, "id": None}, headers_of(echo)),
        ({**echo, "id": 1.5}, headers_of(echo)),
        ({**echo, "jsonrpc": "1.0"}, headers_of(echo)),
        ({**echo, "params": {"name": "echo", "arguments": {"text": "hi"}}}, headers_of(echo)),
        ({**echo, "method": "tools/list"}, headers_of(echo)),
        ([echo], headers_of(echo)),
    ]
    for message, headers in answered_here:
        fast_context, general_context = RequestContext("mcp"), RequestContext("mcp")
        fast = await mcp.call_tool(message, fast_context, headers)
        general = await mcp.handle(message, general_context, headers, fresh=True)
        assert fast is not None, message
        assert fast == general, message
        for field_name in ("progress_token", "log_level", "client_capabilities"):
            assert getattr(fast_context, field_name) == getattr(general_context, field_name)

    listen = modern_message("subscriptions/listen", {"notifications": {}})
    may_be_a_stream: list[tuple[Any, dict[str, str]]] = [
        (call("count", {"steps": 1}), headers_of(call("count"))),  # takes a Context
        (echo, headers_of(echo, mcp_protocol_version="2025-06-18")),  # 2025 may ask the client
        (listen, headers_of(listen)),
    ]
    for message, headers in may_be_a_stream:
        assert await mcp.call_tool(message, RequestContext("mcp"), headers) is None, message
    # The base64 Mcp-Name is heard right.
    headers = headers_of(echo, mcp_name="=?base64?ZWNobw==?=")
    reply = await mcp.call_tool(echo, RequestContext("mcp"), headers)
    assert reply is not None and reply.body is not None
    assert reply.body["result"]["content"][0]["text"] == "hi"
    await mcp.dispatcher.close()
