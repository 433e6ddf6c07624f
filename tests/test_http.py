"""The HTTP binding over real sockets: Appendix A, JSON-RPC 2.0 framing, the five
response types, promises, keep-alive and pipelining, and malformed input.

Peers we did not write: the stdlib ``http.client`` and raw sockets (read with the
byte-level reader in ``sse_client.py``).  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import re
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pytest
from conftest import (
    BASE,
    WAIT,
    DelegatingStore,
    RunningServer,
    call_message,
    make_config,
    rpc_message,
    run_in_thread,
    server_factory,
)
from http_support import JSON_HEADERS, RECV, assert_still_serving, call_held, echo_on
from sse_client import RawHttp, connect, read_all, request_bytes

from mcplite import (
    ALWAYS,
    Dispatcher,
    Elicitation,
    Failure,
    Field,
    MemoryStore,
    MoreResources,
    Tools,
    __version__,
)
from mcplite.bindings.http import HttpServer

ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


# --- a registry of test tools --------------------------------------------------


class Filters(TypedDict):
    tags: list[str]
    author: NotRequired[str]


@dataclass
class Probe:
    """What the test tools report to the test, and the gates the test opens."""

    notified: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # set on the server loop
    never: asyncio.Event = field(default_factory=asyncio.Event)  # never set
    calls: list[str] = field(default_factory=list)


SHAPES: dict[str, Any] = {
    "str": "hello",
    "dict": {"k": 1, "nested": {"a": [1, 2]}},
    "list": ["a", {"b": 2}, 3],
    "none": None,
    "int": 42,
}


def make_tools(probe: Probe) -> Tools:
    tools = Tools()

    @tools.tool(promise_after=math.inf)
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @tools.tool(promise_after=math.inf)
    async def shape(kind: Literal["str", "dict", "list", "none", "int"]) -> Any:
        """Return a value of the given shape."""
        return SHAPES[kind]

    @tools.tool(promise_after=math.inf)
    async def refuse() -> Failure:
        """A business failure."""
        return Failure("the item is out of stock", reason="out_of_stock", retryable=True)

    @tools.tool(promise_after=math.inf)
    async def ask() -> Elicitation:
        """Needs more information."""
        return Elicitation(
            "Which warehouse?",
            {"type": "object", "properties": {"warehouse": {"type": "string"}}},
        )

    @tools.tool(promise_after=math.inf)
    async def need_more() -> MoreResources:
        """Needs more resources."""
        return MoreResources("allow more time", time_seconds=120, quota=5, budget=2.5)

    @tools.tool(promise_after=math.inf)
    async def note(text: str) -> str:
        """Record a call (for notifications)."""
        probe.calls.append(text)
        probe.notified.set()
        return text

    @tools.tool(promise_after=math.inf)
    async def crash() -> str:
        """Raise an unexpected exception."""
        raise RuntimeError("the database password is hunter2")

    @tools.tool(promise_after=math.inf)
    async def not_json() -> dict[str, Any]:
        """Return something JSON cannot hold."""
        return {"ratio": math.nan}

    @tools.tool(promise_after=math.inf)
    def blocking() -> str:
        """A sync tool that blocks its thread until the test releases it."""
        probe.entered.set()
        probe.release.wait(WAIT)
        return "released"

    @tools.tool(promise_after=0)
    async def later() -> str:
        """Always a promise; finishes when the test opens the gate."""
        await probe.gate.wait()
        return "finished later"

    @tools.tool(promise_after=0)
    async def forever() -> str:
        """Always a promise; never finishes by itself."""
        await probe.never.wait()
        return "unreachable"

    @tools.tool(promise_after=math.inf)
    async def nested(
        filters: Filters, limit: Annotated[int, Field(ge=1, le=100)] = 10
    ) -> dict[str, Any]:
        """Nested arguments, for error paths."""
        return {"tags": filters["tags"], "limit": limit}

    @tools.tool(promise_after=math.inf)
    async def parts() -> AsyncIterator[str]:
        """A stream, called without SSE."""
        for word in ("alpha ", "beta ", "gamma"):
            yield word

    return tools


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def server(probe: Probe) -> Iterator[RunningServer]:
    with server_factory(lambda: make_tools(probe), lambda _: probe.release.set()) as start:
        yield start()


def rpc_raw(server: RunningServer, payload: Any) -> tuple[int, dict[str, str], Any]:
    """POST to /rpc and decode the JSON reply (status, headers, reply)."""
    status, headers, body = server.post("/rpc", payload)
    return status, headers, json.loads(body) if body else None


def error_of(reply: dict[str, Any]) -> dict[str, Any]:
    assert "result" not in reply, reply
    error: dict[str, Any] = reply["error"]
    return error


def result_of(reply: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


# --- A.1: discovery -----------------------------------------------------------


@pytest.mark.parametrize("path", ["/tools", "/listtools"])
def test_both_discovery_endpoints_answer_an_empty_object_with_the_tool_list(
    demo_server: RunningServer, path: str
) -> None:
    status, headers, body = demo_server.post(path, {})
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    listing = json.loads(body)
    assert list(listing) == ["tools"]
    names = [tool["name"] for tool in listing["tools"]]
    assert {"redeem", "search_documents", "analyze_dataset", "generate_report"} <= set(names)
    for tool in listing["tools"]:
        assert isinstance(tool["name"], str)
        assert isinstance(tool["description"], str)
        assert tool["inputSchema"]["type"] == "object"


def test_redeem_is_listed_first_as_a_system_tool_with_a_required_promise(
    demo_server: RunningServer,
) -> None:
    _, _, body = demo_server.post("/tools", {})
    redeem = json.loads(body)["tools"][0]
    assert redeem["name"] == "redeem"
    assert redeem["@type"] == "system"
    assert redeem["description"] == (
        "Redeem a promise token to get the result of a long-running operation"
    )
    assert redeem["inputSchema"]["required"] == ["promise"]
    assert redeem["inputSchema"]["properties"]["promise"] == {
        "type": "string",
        "description": "The promise token received from a previous operation",
    }


def test_search_documents_is_described_as_in_appendix_a1(demo_server: RunningServer) -> None:
    _, _, body = demo_server.post("/listtools", {})
    tool = next(t for t in json.loads(body)["tools"] if t["name"] == "search_documents")
    assert tool["@type"] == "query"
    assert tool["description"].startswith("Search through available documents")
    schema = tool["inputSchema"]
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"] == {"type": "string", "description": "Search query"}
    limit = schema["properties"]["limit"]
    assert limit["type"] == "integer"
    assert (limit["default"], limit["minimum"], limit["maximum"]) == (10, 1, 100)


@pytest.mark.parametrize("body", [b"", b"{}", b"  {}  "], ids=repr)
def test_discovery_accepts_an_empty_object_or_no_body(
    demo_server: RunningServer, body: bytes
) -> None:
    status, _, raw = demo_server.post("/listtools", body)
    assert status == 200
    assert json.loads(raw)["tools"][0]["name"] == "redeem"


def test_discovery_with_a_body_that_is_not_json_gets_32700(demo_server: RunningServer) -> None:
    status, _, raw = demo_server.post("/tools", b"{not json")
    assert status == 400
    assert error_of(json.loads(raw))["code"] == -32700


def test_the_tool_list_over_json_rpc_equals_the_discovery_endpoint(
    demo_server: RunningServer,
) -> None:
    _, _, body = demo_server.post("/listtools", {})
    reply = demo_server.rpc("tools/list", request_id="list-1")
    assert reply["id"] == "list-1"
    assert result_of(reply) == json.loads(body)


def test_ping_answers_an_empty_result(demo_server: RunningServer) -> None:
    assert demo_server.rpc("ping", request_id=9) == {"jsonrpc": "2.0", "id": 9, "result": {}}


# --- A.2: a simple call, on both endpoint names -------------------------------


@pytest.mark.parametrize("path", ["/calltools", "/rpc"])
def test_a_search_documents_call_answers_hits_with_meta_and_echoes_the_id(
    demo_server: RunningServer, path: str
) -> None:
    request = call_message("search_documents", {"query": "MCP specification", "limit": 5})
    request["id"] = "call-001"
    status, headers, body = demo_server.post(path, request)
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    reply = json.loads(body)
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == "call-001"
    result = result_of(reply)
    hits = result["content"]
    assert 1 <= len(hits) <= 5
    for hit in hits:
        assert isinstance(hit["document_id"], str) and hit["document_id"]
        assert isinstance(hit["title"], str) and hit["title"]
        assert isinstance(hit["excerpt"], str) and hit["excerpt"]
    meta = result["_meta"]
    assert meta["response_type"] == "answer"
    assert ISO_UTC.match(meta["timestamp"]), meta["timestamp"]
    assert isinstance(meta["processing_time_ms"], int | float)
    assert not isinstance(meta["processing_time_ms"], bool)
    assert meta["processing_time_ms"] >= 0
    assert meta["server_version"] == __version__


# --- A.5: unknown tools -------------------------------------------------------


def test_an_unknown_tool_gets_32601_with_the_available_tools_and_a_suggestion(
    demo_server: RunningServer,
) -> None:
    reply = demo_server.rpc(
        "tools/call", {"name": "nonexistent_tool", "arguments": {}}, "error-example"
    )
    assert reply["id"] == "error-example"
    error = error_of(reply)
    assert error["code"] == -32601
    assert error["message"] == "Tool not found"
    data = error["data"]
    assert data["requested_tool"] == "nonexistent_tool"
    assert {"redeem", "search_documents", "analyze_dataset"} <= set(data["available_tools"])
    suggested = re.fullmatch(r"Did you mean '(.+)'\?", data["suggestion"])
    assert suggested is not None
    assert suggested.group(1) in data["available_tools"]


def test_a_misspelt_tool_name_is_answered_with_the_closest_name(
    demo_server: RunningServer,
) -> None:
    reply = demo_server.call("search_document", {"query": "x"})
    assert error_of(reply)["data"]["suggestion"] == "Did you mean 'search_documents'?"


# --- JSON-RPC framing ---------------------------------------------------------


@pytest.mark.parametrize(
    "request_id",
    ["call-001", "", "ünïcode ✓", 0, 7, -3, 1.5, -2.25, 2**70, -(2**64), None],
    ids=repr,
)
def test_every_allowed_id_type_is_echoed_exactly(server: RunningServer, request_id: Any) -> None:
    status, _, body = server.post("/rpc", call_message("echo", {"text": "x"}, request_id))
    assert status == 200
    reply = json.loads(body)
    assert reply["id"] == request_id
    assert type(reply["id"]) is type(request_id)
    assert result_of(reply)["content"] == [{"type": "text", "text": "x"}]


@pytest.mark.parametrize("request_id", [True, False, {"a": 1}, [1]], ids=repr)
def test_an_id_that_is_a_bool_an_object_or_an_array_gets_32600(
    server: RunningServer, request_id: Any
) -> None:
    status, _, reply = rpc_raw(server, call_message("echo", {"text": "x"}, request_id))
    assert status == 200
    assert reply["id"] is None
    assert error_of(reply)["code"] == -32600


def test_a_notification_runs_the_tool_and_gets_202_with_no_body(
    server: RunningServer, probe: Probe
) -> None:
    notification = call_message("note", {"text": "fire and forget"})
    del notification["id"]
    status, headers, body = server.post("/rpc", notification)
    assert status == 202
    assert body == b""
    assert probe.notified.wait(WAIT)
    assert probe.calls == ["fire and forget"]
    assert "application/json" not in headers.get("content-type", "")


def test_a_batch_is_answered_in_order_without_its_notifications(
    server: RunningServer, probe: Probe
) -> None:
    notification = call_message("note", {"text": "in a batch"})
    del notification["id"]
    batch = [
        call_message("echo", {"text": "first"}, "a"),
        notification,
        rpc_message("ping", request_id=2),
        call_message("nope", {}, 3),
        call_message("echo", {"text": "last"}, "z"),
    ]
    status, _, replies = rpc_raw(server, batch)
    assert status == 200
    assert isinstance(replies, list)
    assert [r["id"] for r in replies] == ["a", 2, 3, "z"]
    assert result_of(replies[0])["content"][0]["text"] == "first"
    assert result_of(replies[1]) == {}
    assert error_of(replies[2])["code"] == -32601
    assert result_of(replies[3])["content"][0]["text"] == "last"
    assert probe.calls == ["in a batch"]


def test_a_batch_with_invalid_members_answers_each_in_its_place(server: RunningServer) -> None:
    batch = [1, rpc_message("ping", request_id="ok"), {"jsonrpc": "1.0", "id": 5, "method": "ping"}]
    _, _, replies = rpc_raw(server, batch)
    assert [(r["id"], r.get("error", {}).get("code")) for r in replies] == [
        (None, -32600),
        ("ok", None),
        (5, -32600),
    ]


def test_an_empty_batch_gets_32600(server: RunningServer) -> None:
    status, _, reply = rpc_raw(server, [])
    assert status == 200
    assert isinstance(reply, dict)
    assert reply["id"] is None
    assert error_of(reply)["code"] == -32600


def test_a_batch_of_notifications_only_gets_202_with_no_body(server: RunningServer) -> None:
    batch = [{"jsonrpc": "2.0", "method": "ping"}, {"jsonrpc": "2.0", "method": "ping"}]
    status, _, body = server.post("/rpc", batch)
    assert (status, body) == (202, b"")


PARSE_ERRORS = {
    "malformed": b'{"jsonrpc": "2.0", "id": 1, "method": ',
    "trailing garbage": b'{"jsonrpc": "2.0", "id": 1, "method": "ping"} xyz',
    "invalid utf-8": b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xff\xfe"}}',
    "nested 100000 deep": b"[" * 100_000 + b"]" * 100_000,
    "an integer of a million digits": (
        b'{"jsonrpc":"2.0","id":' + b"9" * 10**6 + b',"method":"ping"}'
    ),
    "empty body": b"",
}


@pytest.mark.parametrize("body", PARSE_ERRORS.values(), ids=PARSE_ERRORS.keys())
def test_a_body_that_is_not_json_gets_32700(server: RunningServer, body: bytes) -> None:
    status, _, raw = server.post("/rpc", body)
    assert status in (200, 400)
    reply = json.loads(raw)
    assert reply["id"] is None
    assert error_of(reply)["code"] == -32700
    assert_still_serving(server)


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json_and_get_32700(server: RunningServer, literal: bytes) -> None:
    # RFC 8259 has no NaN or Infinity; Python's json module accepts them by default.
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",'
    body += b'"arguments":{"text":' + literal + b"}}}"
    status, _, raw = server.post("/rpc", body)
    assert status in (200, 400), raw
    assert error_of(json.loads(raw))["code"] == -32700


def test_an_id_too_large_for_a_double_gets_a_json_rpc_error_not_a_500(
    server: RunningServer,
) -> None:
    body = b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}'
    status, _, raw = server.post("/rpc", body)
    assert status in (200, 400), raw
    reply = json.loads(raw)
    assert error_of(reply)["code"] in (-32700, -32600)
    assert_still_serving(server)


def test_a_lone_surrogate_escape_in_the_id_gets_a_reply_not_a_500(server: RunningServer) -> None:
    # "\ud800" is valid JSON syntax but no Unicode character: echo it escaped, or
    # refuse it; either way the body must be valid UTF-8 JSON.
    body = b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}'
    status, _, raw = server.post("/rpc", body)
    assert status in (200, 400), raw
    reply = json.loads(raw.decode("utf-8"))
    if "error" in reply:
        assert reply["error"]["code"] in (-32700, -32600)
    else:
        assert reply == {"jsonrpc": "2.0", "id": "\ud800", "result": {}}
    assert_still_serving(server)


INVALID_REQUESTS: dict[str, Any] = {
    "missing jsonrpc": {"id": 1, "method": "ping"},
    "wrong version": {"jsonrpc": "1.0", "id": 1, "method": "ping"},
    "version as a number": {"jsonrpc": 2.0, "id": 1, "method": "ping"},
    "missing method": {"jsonrpc": "2.0", "id": 1},
    "method not a string": {"jsonrpc": "2.0", "id": 1, "method": 5},
    "params a string": {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "echo"},
    "params a number": {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": 5},
    "not an object": "tools/call",
    "a number": 42,
}


@pytest.mark.parametrize("payload", INVALID_REQUESTS.values(), ids=INVALID_REQUESTS.keys())
def test_a_request_that_is_not_json_rpc_2_gets_32600(server: RunningServer, payload: Any) -> None:
    status, _, reply = rpc_raw(server, payload)
    assert status == 200
    assert error_of(reply)["code"] == -32600
    expected_id = payload.get("id") if isinstance(payload, dict) else None
    assert reply["id"] == expected_id


def test_an_unknown_method_gets_32601_naming_it(server: RunningServer) -> None:
    reply = server.rpc("tools/destroy", {}, "m-1")
    assert reply["id"] == "m-1"
    error = error_of(reply)
    assert error["code"] == -32601
    assert "tools/destroy" in error["message"]


@pytest.mark.parametrize("params", [[], ["echo", {}], {"arguments": {}}, {"name": 5}], ids=repr)
def test_tools_call_without_a_tool_name_gets_32602(server: RunningServer, params: Any) -> None:
    status, _, reply = rpc_raw(server, rpc_message("tools/call", params))
    assert status == 200
    assert error_of(reply)["code"] == -32602


INVALID_ARGUMENTS: list[tuple[dict[str, Any], list[tuple[str, str]]]] = [
    ({"query": "x", "limit": 500}, [("limit", "500 is greater than the maximum of 100")]),
    ({"query": "x", "limit": 0}, [("limit", "0 is less than the minimum of 1")]),
    ({"limit": 5}, [("query", "required")]),
    ({"query": "x", "colour": "red"}, [("colour", "not allowed")]),
    ({"query": "x", "limit": "10"}, [("limit", '"10"')]),
    (
        {"limit": "10", "colour": "red"},
        [("query", "required"), ("limit", '"10"'), ("colour", "not allowed")],
    ),
]


@pytest.mark.parametrize(("arguments", "expected"), INVALID_ARGUMENTS, ids=repr)
def test_invalid_arguments_get_32602_naming_every_field(
    demo_server: RunningServer, arguments: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    reply = demo_server.call("search_documents", arguments)
    error = error_of(reply)
    assert error["code"] == -32602
    errors = error["data"]["errors"]
    assert [e["field"] for e in errors] == [field for field, _ in expected]
    for (field_name, fragment), got in zip(expected, errors, strict=True):
        assert fragment in got["message"], got
        assert f"{field_name}: {got['message']}" in error["message"]


def test_a_limit_of_500_is_refused_with_the_maximum_in_the_message(
    demo_server: RunningServer,
) -> None:
    reply = demo_server.call("search_documents", {"query": "x", "limit": 500})
    assert error_of(reply)["data"]["errors"] == [
        {"field": "limit", "message": "500 is greater than the maximum of 100"}
    ]


def test_invalid_nested_arguments_are_named_by_their_path(server: RunningServer) -> None:
    reply = server.call("nested", {"filters": {"tags": ["ok", 3], "author": 5}, "limit": 101})
    error = error_of(reply)
    assert error["code"] == -32602
    fields = {e["field"] for e in error["data"]["errors"]}
    assert fields == {"filters.tags[1]", "filters.author", "limit"}


@pytest.mark.parametrize("arguments", [[1, 2], "text", 5], ids=repr)
def test_arguments_that_are_not_an_object_get_32602(server: RunningServer, arguments: Any) -> None:
    reply = server.rpc("tools/call", {"name": "echo", "arguments": arguments})
    assert error_of(reply)["code"] == -32602


def test_a_tool_that_raises_gets_32603_with_an_error_id_found_in_the_log(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="mcplite")
    status, _, body = server.post("/rpc", call_message("crash", request_id="c-1"))
    assert status == 200
    reply = json.loads(body)
    assert reply["id"] == "c-1"
    error = error_of(reply)
    assert error["code"] == -32603
    error_id = error["data"]["error_id"]
    assert isinstance(error_id, str) and error_id
    for leak in (b"Traceback", b"RuntimeError", b"hunter2", b'File "'):
        assert leak not in body
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged, caplog.text
    assert logged[0].exc_info is not None  # the traceback is in the log, not on the wire
    assert_still_serving(server)


def test_a_result_that_json_cannot_hold_gets_32603(server: RunningServer) -> None:
    status, _, body = server.post("/rpc", call_message("not_json"))
    assert status == 200
    assert error_of(json.loads(body))["code"] == -32603


# --- the five response types over the wire ------------------------------------


@pytest.mark.parametrize(
    ("kind", "content"),
    [
        ("str", [{"type": "text", "text": "hello"}]),
        ("dict", [{"k": 1, "nested": {"a": [1, 2]}}]),
        ("list", [{"type": "text", "text": "a"}, {"b": 2}, 3]),
        ("none", []),
        ("int", [{"type": "text", "text": "42"}]),
    ],
)
def test_a_plain_return_value_is_an_answer_with_content_items(
    server: RunningServer, kind: str, content: list[Any]
) -> None:
    result = result_of(server.call("shape", {"kind": kind}))
    assert result["content"] == content
    assert result["_meta"]["response_type"] == "answer"
    assert "isError" not in result


def test_a_failure_is_a_result_with_is_error_and_a_reason(server: RunningServer) -> None:
    result = result_of(server.call("refuse"))
    assert result["_meta"]["response_type"] == "failure"
    assert result["isError"] is True
    assert result["failure"]["message"] == "the item is out of stock"
    assert result["failure"]["reason"] == "out_of_stock"
    assert result["failure"]["retryable"] is True
    assert result["content"] == [{"type": "text", "text": "the item is out of stock"}]


def test_an_elicitation_carries_its_message_and_requested_schema(server: RunningServer) -> None:
    result = result_of(server.call("ask"))
    assert result["_meta"]["response_type"] == "elicitation"
    assert result["elicitation"] == {
        "message": "Which warehouse?",
        "requestedSchema": {"type": "object", "properties": {"warehouse": {"type": "string"}}},
    }


def test_a_request_for_more_resources_says_what_is_needed(server: RunningServer) -> None:
    result = result_of(server.call("need_more"))
    assert result["_meta"]["response_type"] == "request-for-more-resource"
    assert result["resources"] == {
        "message": "allow more time",
        "time_seconds": 120,
        "quota": 5,
        "budget": 2.5,
    }
    assert "isError" not in result


def test_a_streaming_tool_called_without_sse_answers_its_parts_joined(
    server: RunningServer,
) -> None:
    result = result_of(server.call("parts"))
    assert result["content"] == [{"type": "text", "text": "alpha beta gamma"}]


def promise_of(result: dict[str, Any]) -> str:
    meta = result["_meta"]
    assert meta["response_type"] == "promise", result
    token = meta["promise_token"]
    assert isinstance(token, str) and token.startswith("prom_")
    assert ISO_UTC.match(meta["expires_at"]), meta
    return token


def test_a_promise_is_redeemed_for_its_answer_and_again_for_the_same_answer(
    server: RunningServer, probe: Probe
) -> None:
    token = promise_of(result_of(server.call("later")))
    pending = result_of(server.call("redeem", {"promise": token}))
    assert promise_of(pending) == token
    server.call_soon(probe.gate.set)
    first = result_of(server.call("redeem", {"promise": token, "wait": WAIT}))
    assert first["_meta"]["response_type"] == "answer"
    assert first["content"] == [{"type": "text", "text": "finished later"}]
    again = result_of(server.call("redeem", {"promise": token}))
    assert again["content"] == first["content"]
    assert again["_meta"]["response_type"] == "answer"


def test_a_cancelled_promise_redeems_as_a_failure_with_reason_cancelled(
    server: RunningServer,
) -> None:
    token = promise_of(result_of(server.call("forever")))
    cancelled = result_of(server.call("cancel", {"promise": token}))
    assert cancelled["_meta"]["response_type"] == "answer"
    result = result_of(server.call("redeem", {"promise": token, "wait": WAIT}))
    assert result["_meta"]["response_type"] == "failure"
    assert result["isError"] is True
    assert result["failure"]["reason"] == "cancelled"


@pytest.mark.parametrize("forge", ["prom_a7b9c2d4e6f8", "tamper", "not a token", ""])
def test_a_forged_promise_token_gets_32602_invalid_promise_token(
    server: RunningServer, forge: str
) -> None:
    token = forge
    if forge == "tamper":
        genuine = promise_of(result_of(server.call("forever")))
        last = genuine[-2]
        token = genuine[:-2] + ("A" if last != "A" else "B") + genuine[-1]
    reply = server.call("redeem", {"promise": token})
    error = error_of(reply)
    assert error["code"] == -32602
    assert error["message"] == "invalid promise token"


def test_a_blocking_sync_tool_does_not_stall_other_requests(
    server: RunningServer, probe: Probe
) -> None:
    with call_held(server, "blocking", probe.entered, probe.release) as blocked:
        assert_still_serving(server)
        assert not blocked.done()
    reply = blocked.result(WAIT)
    assert result_of(reply)["content"] == [{"type": "text", "text": "released"}]


# --- connections: keep-alive, HTTP/1.0, pipelining, partial writes -------------


def echo_request(text: str, request_id: Any = 1, **kwargs: Any) -> bytes:
    return request_bytes(BASE + "/rpc", call_message("echo", {"text": text}, request_id), **kwargs)


def echoed(response_body: bytes) -> str:
    text: str = result_of(json.loads(response_body))["content"][0]["text"]
    return text


def test_several_requests_share_one_keep_alive_connection(server: RunningServer) -> None:
    conn = server.connection()
    try:
        local_addresses = set()
        for i in range(5):
            body = json.dumps(call_message("echo", {"text": f"n{i}"}, i)).encode()
            conn.request("POST", BASE + "/rpc", body=body, headers=JSON_HEADERS)
            response = conn.getresponse()
            assert response.status == 200
            assert echoed(response.read()) == f"n{i}"
            assert conn.sock is not None, "the server closed a keep-alive connection"
            local_addresses.add(conn.sock.getsockname())
        assert len(local_addresses) == 1
    finally:
        conn.close()


def test_an_http_1_0_request_is_answered_and_the_connection_closes(
    server: RunningServer,
) -> None:
    with connect(server.port, RECV) as sock:
        sock.sendall(echo_request("old client", version="HTTP/1.0"))
        reader = RawHttp(sock)
        response = reader.read_response()
        assert response.status == 200
        assert echoed(response.body) == "old client"
        assert reader.at_eof()


def test_a_request_asking_for_connection_close_is_answered_then_closed(
    server: RunningServer,
) -> None:
    with connect(server.port, RECV) as sock:
        sock.sendall(echo_request("bye", headers={"Connection": "close"}))
        reader = RawHttp(sock)
        response = reader.read_response()
        assert response.status == 200
        assert echoed(response.body) == "bye"
        assert reader.at_eof()


def test_two_pipelined_requests_are_answered_in_order(server: RunningServer) -> None:
    with connect(server.port, RECV) as sock:
        sock.sendall(echo_request("one", 1) + echo_request("two", 2))
        reader = RawHttp(sock)
        first, second = reader.read_response(), reader.read_response()
    assert (first.status, second.status) == (200, 200)
    assert (first.json()["id"], echoed(first.body)) == (1, "one")
    assert (second.json()["id"], echoed(second.body)) == (2, "two")


def test_a_request_sent_one_byte_at_a_time_is_answered(server: RunningServer) -> None:
    data = echo_request("trickle")
    with connect(server.port, RECV) as sock:
        for i in range(len(data)):
            sock.sendall(data[i : i + 1])
        response = RawHttp(sock).read_response()
    assert response.status == 200
    assert echoed(response.body) == "trickle"


def test_expect_100_continue_gets_100_before_the_body_is_sent(server: RunningServer) -> None:
    body = json.dumps(call_message("echo", {"text": "after 100"})).encode()
    head = request_bytes(
        BASE + "/rpc",
        headers={"Expect": "100-continue", "Content-Length": str(len(body))},
        content_length=False,
    )
    with connect(server.port, RECV) as sock:
        sock.sendall(head)
        reader = RawHttp(sock)
        interim = reader.read_head()
        assert interim.status == 100
        assert interim.version == b"HTTP/1.1"
        sock.sendall(body)
        response = reader.read_response()
    assert response.status == 200
    assert echoed(response.body) == "after 100"


def test_a_chunked_request_body_is_read(server: RunningServer) -> None:
    body = json.dumps(call_message("echo", {"text": "in chunks"})).encode()
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    data = request_bytes(
        BASE + "/rpc", headers={"Transfer-Encoding": "chunked"}, content_length=False
    )
    with connect(server.port, RECV) as sock:
        sock.sendall(data + chunked + b"0\r\n\r\n")
        response = RawHttp(sock).read_response()
    assert response.status == 200
    assert echoed(response.body) == "in chunks"


def test_a_query_string_does_not_change_the_route(server: RunningServer) -> None:
    status, _, body = server.post("/rpc?trace=1", call_message("echo", {"text": "q"}))
    assert status == 200
    assert echoed(body) == "q"


# --- HTTP-level errors --------------------------------------------------------


def test_a_get_gets_405_with_allow_post_and_the_connection_stays_usable(
    server: RunningServer,
) -> None:
    conn = server.connection()
    try:
        conn.request("GET", BASE + "/rpc")
        response = conn.getresponse()
        assert response.status == 405
        assert response.getheader("allow") == "POST"
        error = json.loads(response.read())["error"]
        assert error["data"]["http_status"] == 405
        assert echo_on(conn, "after 405") == "after 405"
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/mcp-lite/v1/nope", "/", "/mcp-lite/v2/rpc", "/mcp-lite/v1"])
def test_an_unknown_path_gets_404_and_the_connection_stays_usable(
    server: RunningServer, path: str
) -> None:
    conn = server.connection()
    try:
        conn.request("POST", path, body=b"{}", headers=JSON_HEADERS)
        response = conn.getresponse()
        assert response.status == 404
        assert json.loads(response.read())["error"]["data"]["http_status"] == 404
        assert echo_on(conn, "after 404") == "after 404"
    finally:
        conn.close()


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/json; charset=latin-1", "application/x-www-form-urlencoded"],
)
def test_a_body_that_is_not_utf_8_json_gets_415(server: RunningServer, content_type: str) -> None:
    status, headers, body = server.post(
        "/rpc", call_message("echo", {"text": "x"}), {"Content-Type": content_type}
    )
    assert status == 415
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"]["data"]["http_status"] == 415
    assert_still_serving(server)


def test_a_chunked_body_that_is_not_json_gets_415(server: RunningServer) -> None:
    body = json.dumps(call_message("echo", {"text": "x"})).encode()
    data = request_bytes(
        BASE + "/rpc",
        headers={"Transfer-Encoding": "chunked", "Content-Type": "text/plain"},
        content_length=False,
    )
    with connect(server.port, RECV) as sock:
        sock.sendall(data + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        response = RawHttp(sock).read_response()
    assert response.status == 415
    assert_still_serving(server)


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON"])
def test_json_with_a_utf_8_charset_or_any_case_is_accepted(
    server: RunningServer, content_type: str
) -> None:
    status, _, body = server.post(
        "/rpc", call_message("echo", {"text": "ok"}), {"Content-Type": content_type}
    )
    assert status == 200
    assert echoed(body) == "ok"


def _barrage() -> list[tuple[str, bytes]]:
    rng = random.Random(20240101)
    cases = [(f"random {i}", rng.randbytes(rng.randint(1, 3000))) for i in range(12)]
    whole = echo_request("whole")
    cases += [(f"truncated at {n}", whole[:n]) for n in (1, 5, 20, 40, len(whole) - 1)]
    cases += [
        ("no colon", b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nHost: x\r\nnot a header\r\n\r\n"),
        ("empty name", b"POST /mcp-lite/v1/rpc HTTP/1.1\r\n: value\r\n\r\n"),
        ("space before colon", b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nHost : x\r\n\r\n"),
        ("bad length", b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nContent-Length: abc\r\n\r\n"),
        (
            "two lengths",
            b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        ),
        (
            "length and chunked",
            b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nContent-Length: 2\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        ),
        (
            "bad chunk size",
            b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ),
        ("unknown coding", b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
        ("no version", b"POST /mcp-lite/v1/rpc\r\n\r\n"),
        ("http 9", b"POST /mcp-lite/v1/rpc HTTP/9.9\r\n\r\n"),
        ("nul in header", b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nX-A: a\x00b\r\n\r\n"),
        ("bare lf", b"POST /mcp-lite/v1/rpc HTTP/1.1\nHost: x\n\n"),
        ("only crlfs", b"\r\n" * 50),
        (
            "huge header",
            b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
        ),
        ("huge incomplete header", b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nX-Big: " + b"a" * 40_000),
        ("huge request line", b"POST /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n"),
        ("many headers", b"POST /mcp-lite/v1/rpc HTTP/1.1\r\n" + b"X-A: b\r\n" * 5000 + b"\r\n"),
    ]
    return cases


def test_a_barrage_of_malformed_input_leaves_the_server_serving(server: RunningServer) -> None:
    for name, data in _barrage():
        with connect(server.port, RECV) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server gave up on us early: fine
            answer = read_all(sock)
        if answer:
            status_line = answer.split(b"\r\n", 1)[0]
            # An answer (a bare-LF request may even be valid), a 4xx, or 501 for an
            # unknown transfer coding (RFC 9112 6.1); never a 500.
            assert re.fullmatch(rb"HTTP/1\.1 ([24]\d\d|501) [\w -]+", status_line), (
                name,
                status_line,
            )
    assert_still_serving(server)
    assert server.dispatcher.active == 0


def test_a_batch_member_that_hits_a_server_bug_is_a_500_after_every_member_ended() -> None:
    """A member failing with something no error code covers (here a promise store
    that raises a plain RuntimeError) is the 500 a single request gets; the batch's
    other members have ended by then instead of running on, unanswered."""

    class Broken(DelegatingStore):
        async def create(self, tool: str, owner: str) -> Any:
            raise RuntimeError("a bug in the store")

    tools = Tools()

    @tools.tool(promise_after=ALWAYS)
    async def job() -> str:
        return "never"

    @tools.tool
    async def work() -> str:
        await asyncio.sleep(0.2)  # the tool's own work, outlasting the broken member
        return "worked"

    async def boot() -> tuple[Dispatcher, HttpServer, None]:
        config = make_config()
        store = Broken(MemoryStore(ttl=60, max_entries=10))
        dispatcher = Dispatcher(tools, config, promises=store)
        http = HttpServer(dispatcher, config)
        await http.start("127.0.0.1", 0)
        return dispatcher, http, None

    served = run_in_thread(boot)
    try:
        batch = [call_message("work", {}, 1), call_message("job", {}, 2)]
        status, _, body = served.post("/rpc", batch)
        assert status == 500, body
        assert json.loads(body)["error"]["code"] == -32603
        assert served.dispatcher.active == 0
    finally:
        served.stop()
