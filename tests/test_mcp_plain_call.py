"""The 2026 ``tools/call`` most clients send is checked in one pass over HTTP
(``McpServer.call_tool``); every other message takes the general path, check by
check (``McpServer.handle``).  For any message, both must answer the same: the
same status and bytes, the same context handed to the tool, the same calls made.

Messages are drawn around a valid call: each field the one-pass check reads
(id, ``jsonrpc``, params, ``_meta`` and its version, capabilities, progress
token and log level, the ``Mcp-Method`` and ``Mcp-Name`` headers, answered
input rounds) kept, changed or dropped, for tools that answer, fail, raise,
refuse their arguments, need a capability or take a Context.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcplite import Context, Failure, Tools
from mcplite.bindings.http.messages import HeaderView
from mcplite.core.context import RequestContext
from mcplite.core.dispatch import Dispatcher
from mcplite.protocols.mcp.protocol import (
    CAPABILITIES_KEY,
    LOG_LEVEL_KEY,
    MODERN_VERSION,
    VERSION_KEY,
)
from mcplite.protocols.mcp.server import McpServer

tools = Tools()
calls: list[tuple[str, Any]] = []


@tools.tool
def echo(text: str) -> str:
    calls.append(("echo", text))
    return text


@tools.tool
def refuse(text: str) -> str:
    calls.append(("refuse", text))
    raise Failure("no", reason="refused")


@tools.tool
def crash(text: str) -> str:
    calls.append(("crash", text))
    raise RuntimeError("boom")


@tools.tool
def numbers(n: int) -> dict[str, int]:
    calls.append(("numbers", n))
    return {"n": n, "twice": 2 * n}


@tools.tool(requires={"sampling": {}})
def sampled(text: str) -> str:
    calls.append(("sampled", text))
    return text


@tools.tool(name="=?base64?ZWNobw==?=")  # a name in the form of a base64 header value
def coded(text: str) -> str:
    calls.append(("coded", text))
    return text


@tools.tool
async def chatty(text: str, ctx: Context) -> str:
    calls.append(("chatty", text))
    return text


SERVER = McpServer(Dispatcher(tools), name="plain")

MISSING = object()  # a field left out


def mostly(draw: st.DrawFn, valid: Any, *others: Any) -> Any:
    """``valid`` six times in seven, else one of ``others``: most exchanges keep
    most fields, so that many take the one-pass check and the rest miss it by one
    or two fields."""
    return valid if draw(st.integers(0, 6)) else draw(st.sampled_from(others))


@st.composite
def exchanges(draw: st.DrawFn) -> tuple[Any, dict[bytes, bytes]]:
    """A message and its headers, each field the one-pass check reads varied."""
    name = draw(st.sampled_from(["echo", "refuse", "crash", "numbers", "sampled", "chatty"]))
    name = mostly(draw, name, "nope", "=?base64?ZWNobw==?=", "=?base64?ZWNobw==?=")
    meta: dict[str, Any] = {VERSION_KEY: mostly(draw, MODERN_VERSION, "2025-11-25", 7, MISSING)}
    meta[CAPABILITIES_KEY] = mostly(draw, {}, {"sampling": {}}, [], MISSING)
    meta["progressToken"] = draw(
        st.integers(-3, 3) | st.text(max_size=3) | st.booleans() | st.just(2.5) | st.just(MISSING)
    )
    meta[LOG_LEVEL_KEY] = draw(st.sampled_from(["info", "debug", "loud", 3, [], MISSING]))
    meta = {key: value for key, value in meta.items() if value is not MISSING}
    if draw(st.integers(0, 4)) == 0:
        arguments: Any = {"text": draw(st.text(max_size=4))}
    else:
        arguments = mostly(draw, {"n": draw(st.integers(-3, 3))}, {"n": "x"}, [], MISSING)
    params: dict[str, Any] = {
        "name": name,
        "arguments": arguments,
        "_meta": mostly(draw, meta, None, "meta", MISSING),
        "requestState": mostly(draw, MISSING, "x", None),
        "inputResponses": mostly(draw, MISSING, {}, None),
    }
    request_id = draw(st.integers(-5, 5) | st.text(max_size=3))
    message: dict[str, Any] = {
        "jsonrpc": mostly(draw, "2.0", "1.0", MISSING),
        "id": mostly(draw, request_id, True, 1.5, None, MISSING),
        "method": mostly(draw, "tools/call", "tools/list", 5, MISSING),
        "params": mostly(draw, params, [], None, MISSING),
    }
    if type(message["params"]) is dict:
        message["params"] = {k: v for k, v in params.items() if v is not MISSING}
    message = {key: value for key, value in message.items() if value is not MISSING}
    headers = {
        b"mcp-protocol-version": mostly(draw, MODERN_VERSION, "2025-11-25", MISSING),
        b"mcp-method": mostly(draw, "tools/call", "tools/list", MISSING),
        b"mcp-name": mostly(draw, name, " " + name, "echo", "=?base64?ZWNobw==?=", MISSING),
    }
    return message, {k: v.encode() for k, v in headers.items() if v is not MISSING}


async def answer(
    message: Any, raw: dict[bytes, bytes], one_pass: bool
) -> tuple[Any, RequestContext, list[tuple[str, Any]]]:
    calls.clear()
    headers = HeaderView(raw)
    context = RequestContext("mcp", ("127.0.0.1", 1), headers)
    if one_pass:
        reply = await SERVER.call_tool(message, context, headers)
        # None: worth a stream (the endpoint then answers through handle), exactly
        # when the general path says a call may say something before its result.
        modern = SERVER.is_modern(message, headers)
        assert (reply is None) == SERVER.may_notify(message, headers, modern)
        if reply is None:
            reply = await SERVER.handle(message, context, headers, fresh=True)
    else:
        reply = await SERVER.handle(message, context, headers, fresh=True)
    return (reply.status, reply.json() if reply.body is not None else None), context, list(calls)


def redacted(answered: tuple[Any, RequestContext, list[tuple[str, Any]]]) -> Any:
    """An answer without what differs by nature from one call to the next (the
    error id of a raising tool)."""
    (status, body), context, made = answered
    text = None if body is None else re.sub(r"\b[0-9a-f]{12}\b", "<id>", body.decode())
    return status, text, context, made


@settings(max_examples=500, deadline=None)
@given(exchanges())
def test_the_one_pass_call_and_the_general_path_answer_every_message_alike(
    exchange: tuple[Any, dict[bytes, bytes]],
) -> None:
    message, raw = exchange
    one_pass = asyncio.run(answer(message, raw, True))
    general = asyncio.run(answer(message, raw, False))
    assert redacted(one_pass) == redacted(general)


def test_the_common_call_takes_the_one_pass_check() -> None:
    """(So that the test above compares two paths, not one with itself.)"""
    meta = {VERSION_KEY: MODERN_VERSION, CAPABILITIES_KEY: {}, "progressToken": 7}
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta},
    }
    raw = {
        b"mcp-protocol-version": MODERN_VERSION.encode(),
        b"mcp-method": b"tools/call",
        b"mcp-name": b"echo",
    }
    headers = HeaderView(raw)
    context = RequestContext("mcp", None, headers)
    assert SERVER._plain_call(message, context, headers) is not None
    assert context.progress_token == 7 and context.meta is meta
    del raw[b"mcp-name"]
    assert SERVER._plain_call(message, RequestContext("mcp", None, headers), headers) is None
