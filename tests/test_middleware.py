"""Middleware around every call: one chain, the same on every binding.

A server started as ``mcplite serve`` starts it gets a chain that refuses one
tool, caches another and records the order it runs in; then the same calls go
over MCP-lite HTTP (``http.client``), MCP (``http.client`` speaking 2026-07-28),
a streamed call (SSE), and gRPC (grpcio built from our .proto), and in process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from conftest import BASE, WAIT, RunningServer, call_message, start_server
from grpc_support import protos, to_python
from http_support import JSON_HEADERS, SSE_HEADERS, mcp_tools_call
from sse_client import parse_events

from mcplite import Answer, CallNext, Dispatcher, Forbidden, Result, ToolCall, Tools, content
from mcplite.core.config import Config


@dataclass
class Seen:
    """What the tools and the middleware saw."""

    runs: dict[str, int] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)


def make_tools(seen: Seen) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str, times: int = 1) -> str:
        seen.runs["echo"] = seen.runs.get("echo", 0) + 1
        return text * times

    @tools.tool
    async def secret() -> str:
        seen.runs["secret"] = seen.runs.get("secret", 0) + 1
        return "the secret"

    @tools.tool
    async def spell(word: str) -> AsyncIterator[str]:
        for letter in word:
            yield letter

    return tools


class Refuse:
    """Refuses the tools it names, to everyone."""

    def __init__(self, *names: str) -> None:
        self.names = names

    async def __call__(self, call: ToolCall, call_next: CallNext) -> Result:
        if call.tool.name in self.names:
            raise Forbidden(f"{call.tool.name} is not for you")
        return await call_next(call)


class Cache:
    """Keeps the result of each (tool, arguments) it is given; a per-tool cache."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.kept: dict[str, Result] = {}

    async def __call__(self, call: ToolCall, call_next: CallNext) -> Result:
        if call.tool.name not in self.names:
            return await call_next(call)
        key = json.dumps([call.tool.name, call.arguments], sort_keys=True)
        if key not in self.kept:
            self.kept[key] = await call_next(call)
        return self.kept[key]


def recorder(seen: Seen, label: str) -> Any:
    async def record(call: ToolCall, call_next: CallNext) -> Result:
        seen.order.append(f"{label}>")
        seen.calls.append((call.tool.name, dict(call.arguments), call.context.binding))
        try:
            return await call_next(call)
        finally:
            seen.order.append(f"<{label}")

    return record


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def server(seen: Seen) -> Iterator[RunningServer]:
    running = start_server(make_tools(seen), Config(secret=b"m" * 32), grpc=True)
    try:
        chain = [recorder(seen, "outer"), Refuse("secret"), Cache("echo"), recorder(seen, "inner")]
        for middleware in chain:
            running.call_soon(functools.partial(running.dispatcher.use, middleware))
        yield running
    finally:
        running.stop()


def mcp_call(
    server: RunningServer, name: str, arguments: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """tools/call over MCP 2026-07-28 with ``http.client``: the status and JSON-RPC reply."""
    return mcp_tools_call(server, name, arguments)


def grpc_call(server: RunningServer, name: str, arguments: dict[str, Any]) -> Any:
    spec = protos()["ours"]
    target = f"127.0.0.1:{server.grpc_port}"
    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        return spec.stub(channel).CallTool(spec.request(name, arguments), timeout=WAIT)


def test_a_middleware_refuses_a_tool_on_every_binding(server: RunningServer, seen: Seen) -> None:
    status, _, body = server.post("/rpc", call_message("secret"))
    assert status == 403
    reply = json.loads(body)
    assert reply["error"]["code"] == Forbidden.jsonrpc_code
    assert reply["error"]["message"] == "secret is not for you"

    status, mcp = mcp_call(server, "secret", {})
    assert (status, mcp["error"]["code"]) == (403, Forbidden.jsonrpc_code)
    assert mcp["error"]["message"] == "secret is not for you"

    with pytest.raises(grpc.RpcError) as refused:
        grpc_call(server, "secret", {})
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.details() == "secret is not for you"

    assert "secret" not in seen.runs  # the tool never ran
    assert [binding for name, _, binding in seen.calls if name == "secret"] == [
        "http",
        "mcp",
        "grpc",
    ]


def test_a_cache_answers_repeated_calls_without_running_the_tool(
    server: RunningServer, seen: Seen
) -> None:
    first = server.call("echo", {"text": "ab", "times": 2})
    assert first["result"]["content"] == [{"type": "text", "text": "abab"}]
    # The same arguments after the schema's defaults: {"text": "ab"} is {"text": "ab", "times": 1}.
    server.call("echo", {"text": "ab"})
    status, again = mcp_call(server, "echo", {"text": "ab"})
    assert status == 200
    assert again["result"]["content"] == [{"type": "text", "text": "ab"}]
    response = grpc_call(server, "echo", {"text": "ab", "times": 2})
    assert to_python(response.result)["content"] == [{"type": "text", "text": "abab"}]
    assert seen.runs["echo"] == 2  # once for each distinct set of arguments


def test_the_chain_runs_in_the_order_given_with_the_validated_arguments(
    server: RunningServer, seen: Seen
) -> None:
    server.call("echo", {"text": "x"})
    assert seen.order == ["outer>", "inner>", "<inner", "<outer"]
    assert seen.calls == [("echo", {"text": "x", "times": 1}, "http")] * 2

    seen.order.clear()
    server.post("/rpc", call_message("secret"))  # refused between the two recorders
    assert seen.order == ["outer>", "<outer"]


def test_a_streamed_call_goes_through_the_chain(server: RunningServer, seen: Seen) -> None:
    conn = server.connection()
    try:
        body = json.dumps(call_message("spell", {"word": "abc"}, 3)).encode()
        conn.request(
            "POST", BASE + "/calltools", body=body, headers={**JSON_HEADERS, **SSE_HEADERS}
        )
        response = conn.getresponse()
        assert response.status == 200
        events = parse_events(response.read())
    finally:
        conn.close()
    assert [e.json()["partial"] for e in events[:-1]] == ["a", "b", "c"]
    assert events[-1].event == "done"
    assert seen.order == ["outer>", "inner>", "<inner", "<outer"]
    assert seen.calls[0] == ("spell", {"word": "abc"}, "http")


async def test_a_refused_stream_ends_with_the_error_and_runs_nothing(seen: Seen) -> None:
    dispatcher = Dispatcher(make_tools(seen), middleware=[Refuse("spell")])
    try:
        stream = dispatcher.stream("spell", {"word": "abc"})
        with pytest.raises(Forbidden, match="spell is not for you"):
            async for _ in stream:
                pass
        assert dispatcher.active == 0
    finally:
        await dispatcher.close()


async def test_a_middleware_may_replace_the_outcome_in_process(seen: Seen) -> None:
    async def shout(call: ToolCall, call_next: CallNext) -> Result:
        result = await call_next(call)
        assert isinstance(result.outcome, Answer)
        shouted = content.text(result.outcome.content[0]["text"].upper())
        return Result(Answer([shouted]), result.timestamp, result.processing_time_ms)

    dispatcher = Dispatcher(make_tools(seen), middleware=[shout])
    try:
        result = await dispatcher.call("echo", {"text": "hi"})
        assert result.to_json()["content"] == [{"type": "text", "text": "HI"}]
    finally:
        await dispatcher.close()
