"""The method table: every JSON-RPC method mcplite answers, each with its one handler.

MCP-lite's JSON-RPC endpoint (:class:`~mcplite.protocols.jsonrpc.JsonRpc`) and MCP
2026-07-28 and 2025-11-25, over HTTP and stdio
(:class:`~mcplite.protocols.mcp.server.McpServer`), look their methods up in a
table :func:`method_table` builds, each through its profile's view
(:meth:`MethodTable.view`).  A :class:`Method` is one handler, taking a
:class:`~mcplite.protocols.requests.Request` whose ``profile`` says who asks,
and what the framing needs to know of it: the profiles that offer it, the param
naming its target (which 2026's ``Mcp-Name`` header repeats), whether it is
discovery (open to anonymous callers under ``open_discovery``), and for
MCP-lite whether it can answer as a stream.

The handlers, by concept: :mod:`.tools`, :mod:`.prompts`, :mod:`.resources`,
:mod:`.completion`; MCP's own (its lifecycle, tasks, subscriptions) come from
the MCP server (:class:`McpMethods`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.context import RequestContext
from ..core.dispatch import Dispatcher, ToolStream
from ..core.errors import MethodNotFound
from ..core.prompts import Prompts
from ..core.resources import Resources
from .completion import CompletionMethod
from .mcp.protocol import NAME_PARAMS
from .mcp.tasks import TaskMethods
from .prompts import PromptMethods
from .requests import EVERY, MCP, NO_ID, Profile, Request
from .resources import ResourceMethods
from .tools import ToolMethods, tool_call_params

__all__ = [
    "Handler",
    "LiteMethod",
    "McpMethods",
    "Method",
    "MethodTable",
    "Streamer",
    "call_method",
    "mcplite_methods",
    "method_table",
    "prompt_methods",
    "resource_methods",
    "tool_call_params",
]

Handler = Callable[[Request], Awaitable[Any]]
"""A checked request -> the method's result (a JSON value); raises a protocol error."""
Streamer = Callable[[Request], ToolStream]
"""Starts a streamed answer; raises a protocol error before anything runs."""


@dataclass(frozen=True, slots=True)
class Method:
    """One method: its handler and what the framing needs to know of it."""

    handler: Handler
    #: Who may call it: MCP-lite, MCP 2026, MCP 2025 (a :class:`Profile` flag).
    profiles: Profile = EVERY
    #: The param naming the method's target (the tool, prompt, URI or task): what
    #: 2026's ``Mcp-Name`` header repeats (:data:`~.mcp.protocol.NAME_PARAMS`).
    name_param: str | None = None
    #: Discovery: an anonymous caller may use it when ``open_discovery`` is on.
    discovery: bool = False
    #: MCP-lite: starts the answer as a stream (``tools/call`` over SSE).
    stream: Streamer | None = None
    #: MCP-lite: whether these params name something that streams by nature (a
    #: streaming tool), answered as a stream even to a client that takes JSON too.
    streams: Callable[[Any], bool] | None = None


class MethodTable:
    """Method name -> :class:`Method`, and each profile's view of it."""

    def __init__(self, methods: Mapping[str, Method]) -> None:
        self.methods: Mapping[str, Method] = dict(methods)
        self._views = {
            profile: {name: m for name, m in methods.items() if profile in m.profiles}
            for profile in (Profile.LITE, Profile.MCP_2026, Profile.MCP_2025)
        }

    def view(self, profile: Profile) -> Mapping[str, Method]:
        """The methods ``profile`` may call (one profile, not a combination)."""
        return self._views[profile]


@dataclass(frozen=True, slots=True)
class McpMethods:
    """The handlers of the methods only MCP has: its lifecycle, tasks, subscriptions."""

    initialize: Handler
    discover: Handler
    tasks: TaskMethods
    listen: Handler


async def _empty(request: Request) -> Any:
    return {}


def method_table(
    tools: ToolMethods | None,
    prompts: PromptMethods | None = None,
    resources: ResourceMethods | None = None,
    mcp: McpMethods | None = None,
) -> MethodTable:
    """The table of a server's methods: the tools methods, those of the prompts and
    resources it serves, and with ``mcp`` MCP's own (see the module doc).
    ``tools`` None: no tools methods (the table of a binding that serves its
    tools without JSON-RPC: gRPC's prompts)."""
    table: dict[str, Method] = {}

    def add(
        name: str,
        handler: Handler,
        profiles: Profile = EVERY,
        *,
        discovery: bool = False,
        stream: Streamer | None = None,
        streams: Callable[[Any], bool] | None = None,
    ) -> None:
        name_param = NAME_PARAMS.get(name)
        table[name] = Method(handler, profiles, name_param, discovery, stream, streams)

    if tools is not None:
        add("tools/call", tools.call, stream=tools.stream, streams=tools.streams)
        add("tools/list", tools.list, discovery=True)
        add("ping", _empty, Profile.LITE | Profile.MCP_2025, discovery=True)
    if prompts is not None:
        add("prompts/list", prompts.list, discovery=True)
        add("prompts/get", prompts.get)
    if resources is not None:
        add("resources/list", resources.list, discovery=True)
        add("resources/templates/list", resources.templates, discovery=True)
        add("resources/read", resources.read)
        # 2025 only: updates need a session to be sent on (ResourceMethods.subscribe).
        add("resources/subscribe", resources.subscribe, Profile.MCP_2025)
        add("resources/unsubscribe", resources.subscribe, Profile.MCP_2025)
    if prompts is not None or resources is not None:
        completion = CompletionMethod(
            prompts.prompts if prompts is not None else None,
            resources.resources if resources is not None else None,
        )
        add("completion/complete", completion.complete, MCP)
    if mcp is not None:
        add("initialize", mcp.initialize, Profile.MCP_2025, discovery=True)
        add("logging/setLevel", _empty, Profile.MCP_2025)  # stateless: nothing to remember
        add("server/discover", mcp.discover, Profile.MCP_2026, discovery=True)
        add("tasks/get", mcp.tasks.get, Profile.MCP_2026)
        add("tasks/update", mcp.tasks.update, Profile.MCP_2026)
        add("tasks/cancel", mcp.tasks.cancel, Profile.MCP_2026)
        add("subscriptions/listen", mcp.listen, Profile.MCP_2026)
    return MethodTable(table)


def mcplite_methods(
    dispatcher: Dispatcher,
    *,
    prompts: Prompts | None = None,
    resources: Resources | None = None,
) -> Mapping[str, Method]:
    """The methods of the MCP-lite JSON-RPC endpoint: ``tools/call``, ``tools/list``,
    ``ping``, and those of the prompts and resources given (MCP's methods, with
    MCP's params, results and errors, without MCP's pages, caching hints and
    ``input_required``)."""
    size = dispatcher.config.page_size
    table = method_table(
        ToolMethods(dispatcher),
        PromptMethods(prompts, size) if prompts is not None else None,
        ResourceMethods(resources, size) if resources is not None else None,
    )
    return table.view(Profile.LITE)


async def call_method(
    methods: Mapping[str, Method], name: str, params: Any, context: RequestContext
) -> Any:
    """Answer method ``name`` of an MCP-lite table (:func:`mcplite_methods`) with
    ``params``, as the JSON-RPC endpoint would: for a binding that is not
    JSON-RPC (gRPC's ``GetPrompt``).  Raises :class:`MethodNotFound` and the
    method's protocol errors."""
    found = methods.get(name)
    if found is None:
        raise MethodNotFound(f"Method not found: {name}", {"method": name})
    return await found.handler(Request(NO_ID, name, params, Profile.LITE, context))


@dataclass(frozen=True, slots=True)
class LiteMethod:
    """A method of the MCP-lite table called with ``(params, context)``."""

    name: str
    methods: Mapping[str, Method]

    async def handler(self, params: Any, context: RequestContext) -> Any:
        return await call_method(self.methods, self.name, params, context)


def prompt_methods(prompts: Prompts) -> dict[str, LiteMethod]:
    """``prompts/list`` and ``prompts/get`` as MCP-lite answers them, each called
    as ``.handler(params, context)`` (what the gRPC binding holds; new code:
    :func:`call_method` over :func:`mcplite_methods`)."""
    table = method_table(None, PromptMethods(prompts, None))
    view = table.view(Profile.LITE)
    return {name: LiteMethod(name, view) for name in ("prompts/list", "prompts/get")}


def resource_methods(resources: Resources) -> dict[str, LiteMethod]:
    """``resources/list``, ``resources/templates/list`` and ``resources/read`` as
    MCP-lite answers them (see :func:`prompt_methods`)."""
    table = method_table(None, resources=ResourceMethods(resources, None))
    view = table.view(Profile.LITE)
    names = ("resources/list", "resources/templates/list", "resources/read")
    return {name: LiteMethod(name, view) for name in names}
