"""The method table: JSON-RPC method name -> handler(params, context).

Every JSON-RPC binding (the MCP-lite HTTP endpoint today; stdio and full MCP
next) frames bytes with :mod:`mcplite.jsonrpc` and looks methods up here.  A
:class:`Method` answers with a JSON result, and may also be able to answer as a
stream (``tools/call`` of any tool, over SSE).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .context import RequestContext
from .dispatch import Dispatcher, ToolStream
from .errors import InvalidParams, ToolNotFound
from .tools import Kind

__all__ = ["Handler", "Method", "Streamer", "mcplite_methods", "tool_call_params"]

Handler = Callable[[Any, RequestContext], Awaitable[Any]]
"""``params`` (checked to be an object, an array or None) and the context -> the result."""
Streamer = Callable[[Any, RequestContext], ToolStream]
"""Starts a streamed answer; raises a protocol error before anything runs."""


@dataclass(frozen=True, slots=True)
class Method:
    handler: Handler
    stream: Streamer | None = None
    name_param: str | None = None  # the param that names the target (logs): "name"
    #: Whether these params name something that streams by nature (a streaming
    #: tool): answered as a stream even to a client that also takes JSON.
    streams: Callable[[Any], bool] | None = None


def tool_call_params(params: Any) -> tuple[str, Any]:
    """``(name, arguments)`` of ``tools/call`` params; raises :class:`InvalidParams`."""
    if not isinstance(params, dict):
        raise InvalidParams.from_fields([("params", "expected an object")])
    name = params.get("name")
    if not isinstance(name, str):
        raise InvalidParams.from_fields([("params.name", "is required and must be a string")])
    return name, params.get("arguments")


def mcplite_methods(dispatcher: Dispatcher) -> Mapping[str, Method]:
    """The methods of the MCP-lite JSON-RPC endpoint: ``tools/call``, ``tools/list``, ``ping``."""

    async def call_tool(params: Any, context: RequestContext) -> Any:
        if type(params) is dict and type(name := params.get("name")) is str:
            arguments = params.get("arguments")  # the common case, checked inline
        else:
            name, arguments = tool_call_params(params)
        return (await dispatcher.call(name, arguments, context)).to_json()

    def stream_tool(params: Any, context: RequestContext) -> ToolStream:
        name, arguments = tool_call_params(params)
        return dispatcher.stream(name, arguments, context)

    def streams(params: Any) -> bool:
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str):
            return False
        try:
            return dispatcher.tool(name).kind is Kind.STREAM
        except ToolNotFound:
            return False

    async def list_tools(params: Any, context: RequestContext) -> Any:
        return {"tools": dispatcher.tool_definitions(context)}

    async def ping(params: Any, context: RequestContext) -> Any:
        return {}

    return {
        "tools/call": Method(call_tool, stream_tool, name_param="name", streams=streams),
        "tools/list": Method(list_tools),
        "ping": Method(ping),
    }
