"""The method table: JSON-RPC method name -> handler(params, context).

Every JSON-RPC binding (the MCP-lite HTTP endpoint today; stdio and full MCP
next) frames bytes with :mod:`mcplite.protocols.jsonrpc` and looks methods up here.  A
:class:`Method` answers with a JSON result, and may also be able to answer as a
stream (``tools/call`` of any tool, over SSE).

With a :class:`~mcplite.core.prompts.Prompts` registry the table also has
``prompts/list`` and ``prompts/get``, and with a
:class:`~mcplite.core.resources.Resources` registry ``resources/list``,
``resources/templates/list`` and ``resources/read``: MCP's methods, with MCP's
params, results and errors (without MCP's cache hints and ``input_required``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.context import RequestContext
from ..core.dispatch import Dispatcher, ToolStream
from ..core.errors import InternalError, InvalidParams, ToolNotFound
from ..core.outcomes import InputRequired
from ..core.prompts import Prompts
from ..core.resources import Resources
from ..core.tools import Kind

__all__ = [
    "Handler",
    "Method",
    "Streamer",
    "mcplite_methods",
    "prompt_methods",
    "resource_methods",
    "tool_call_params",
]

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


def mcplite_methods(
    dispatcher: Dispatcher,
    *,
    prompts: Prompts | None = None,
    resources: Resources | None = None,
) -> Mapping[str, Method]:
    """The methods of the MCP-lite JSON-RPC endpoint: ``tools/call``, ``tools/list``,
    ``ping``, and those of the prompts and resources given (see the module doc)."""

    async def call_tool(params: Any, context: RequestContext) -> Any:
        if type(params) is dict and type(name := params.get("name")) is str:
            arguments = params.get("arguments")  # the common case, checked inline
        else:
            name, arguments = tool_call_params(params)
        return (await dispatcher.call(name, arguments, context)).to_json()

    def stream_tool(params: Any, context: RequestContext) -> ToolStream:
        name, arguments = tool_call_params(params)
        return dispatcher.stream(name, arguments, context, progress=True)

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

    table = {
        "tools/call": Method(call_tool, stream_tool, name_param="name", streams=streams),
        "tools/list": Method(list_tools),
        "ping": Method(ping),
    }
    if prompts is not None:
        table.update(prompt_methods(prompts))
    if resources is not None:
        table.update(resource_methods(resources))
    return table


def _object(params: Any) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidParams("Invalid params: params must be an object")
    return params


def prompt_methods(prompts: Prompts) -> dict[str, Method]:
    """``prompts/list`` and ``prompts/get`` (MCP's shapes and errors) for a JSON-RPC table."""

    async def list_prompts(params: Any, context: RequestContext) -> Any:
        return {"prompts": prompts.definitions()}

    async def get_prompt(params: Any, context: RequestContext) -> Any:
        params = _object(params)
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("Invalid params: params.name must be a string")
        prompt = prompts.get(name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {name}", {"name": name})
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParams("Invalid params: params.arguments must be an object")
        rendered = await prompt.render(arguments, context)
        if isinstance(rendered, InputRequired):  # MCP-lite has no way to ask the client
            raise InternalError(f"prompt {name!r} needs input the client could not be asked for")
        return rendered

    return {
        "prompts/list": Method(list_prompts),
        "prompts/get": Method(get_prompt, name_param="name"),
    }


def resource_methods(resources: Resources) -> dict[str, Method]:
    """``resources/list``, ``resources/templates/list`` and ``resources/read`` (MCP's
    shapes and errors: an unknown URI is -32602 with ``data.uri``) for a JSON-RPC table."""

    async def list_resources(params: Any, context: RequestContext) -> Any:
        return {"resources": resources.definitions()}

    async def list_templates(params: Any, context: RequestContext) -> Any:
        return {"resourceTemplates": resources.template_definitions()}

    async def read_resource(params: Any, context: RequestContext) -> Any:
        uri = _object(params).get("uri")
        if not isinstance(uri, str):
            raise InvalidParams("Invalid params: params.uri must be a string")
        return {"contents": await resources.read(uri, context)}

    return {
        "resources/list": Method(list_resources),
        "resources/templates/list": Method(list_templates),
        "resources/read": Method(read_resource, name_param="uri"),
    }
