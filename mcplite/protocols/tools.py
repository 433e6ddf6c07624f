"""``tools/list`` and ``tools/call``: one handler each, for every profile.

**MCP-lite** lists every tool as its discovery entry (``redeem`` and ``cancel``
included) and answers a call with the MCP-lite envelope; a tool's protocol
errors (unknown tool, invalid arguments, a crash) are JSON-RPC errors, and a
call can also be answered as a stream (SSE).

**MCP** lists the tools as MCP's ``Tool`` (no system tools: MCP has tasks) and
answers a call with a ``CallToolResult`` (:mod:`.mcp.render`):

- an answer, failure or request for more resources: ``resultType: complete``;
- invalid arguments and an exception in the tool: ``isError: true`` results the
  model reads, as MCP wants since 2025-11-25; an unknown tool is -32602;
- an elicitation or :class:`~mcplite.core.outcomes.InputRequired`: 2026
  answers ``input_required`` (:mod:`.mcp.rounds`), 2025 asks the client on the
  call's stream and runs the tool again with the answers;
- a promise: a task (``resultType: task``) when a 2026 request declared the
  ``io.modelcontextprotocol/tasks`` extension and the tool does not forbid it
  (:mod:`.mcp.tasks`); otherwise the call waits for its outcome (a tool that
  requires tasks is -32021 without the extension).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Mapping
from typing import Any, cast

from ..core.authorize import AllowAll
from ..core.content import text as text_block
from ..core.context import RequestContext
from ..core.dispatch import Dispatcher, ToolStream
from ..core.envelope import Result
from ..core.errors import (
    ExpiredToken,
    InternalError,
    InvalidArguments,
    InvalidParams,
    MCPLiteError,
    ToolNotFound,
    UnknownPromise,
)
from ..core.outcomes import Elicitation, Failure, InputRequired, Promised
from ..core.tools import Kind, Tool
from .mcp.pagination import listed
from .mcp.protocol import (
    TASKS_EXTENSION,
    TASKS_REQUIRED,
    check_param_headers,
    extensions_of,
    header_params,
    require,
)
from .mcp.render import call_result
from .mcp.rounds import MAX_ROUNDS, InputRounds
from .mcp.tasks import TaskStatus, TaskTable, input_requests, task_result, with_elicited
from .requests import LITE, MCP_2026, Request, Sender
from .shapes import CallToolResult, ToolDefinition

__all__ = ["ToolMethods", "mcp_tool", "tool_call_params"]

_STREAM = Kind.STREAM


def tool_call_params(params: Any) -> tuple[str, Any]:
    """``(name, arguments)`` of MCP-lite ``tools/call`` params; raises :class:`InvalidParams`."""
    if not isinstance(params, dict):
        raise InvalidParams.from_fields([("params", "expected an object")])
    name = params.get("name")
    if not isinstance(name, str):
        raise InvalidParams.from_fields([("params.name", "is required and must be a string")])
    return name, params.get("arguments")


def mcp_tool(definition: Mapping[str, Any], tool: Tool, modern: bool) -> ToolDefinition:
    """An MCP ``Tool``: the MCP-lite entry (title, annotations and icons included)
    without ``@type``, with ``outputSchema`` when the tool's answers carry
    ``structuredContent`` of a known shape, and ``execution.taskSupport`` when
    the tool declares it."""
    entry = cast(ToolDefinition, {k: v for k, v in definition.items() if k != "@type"})
    output_schema = tool.output_schema_for(modern)
    if output_schema is not None:
        entry["outputSchema"] = output_schema
    if tool.task_support is not None:
        entry["execution"] = {"taskSupport": tool.task_support}
    return entry


class ToolMethods:
    """The tools methods of a dispatcher's tools.  ``rounds`` and ``tasks``: the
    MCP server's (a table for MCP-lite alone has no tasks)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        rounds: InputRounds | None = None,
        tasks: TaskTable | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.rounds = rounds if rounds is not None else InputRounds(dispatcher)
        self.tasks = tasks
        # The (argument, header) pairs of each tool's Mcp-Param-* headers, worked
        # out once per tool (by name, for the tool it was worked out for).
        self._header_params: dict[str, tuple[Tool, tuple[tuple[str, str], ...]]] = {}
        # MCP's tool entries everyone sees, per revision (2026: True), for the
        # version of the dispatcher's list they were made from.
        self._mcp_tools: dict[bool, tuple[int, list[ToolDefinition]]] = {}

    # -- tools/list ------------------------------------------------------------

    async def list(self, request: Request) -> Any:
        """``tools/list``: MCP-lite's discovery entries, or MCP's tools (paged)."""
        dispatcher = self.dispatcher
        definitions = dispatcher.tool_definitions(request.context)
        if request.profile is LITE:
            return {"tools": definitions}
        modern = request.profile is MCP_2026
        # With auth on (or a policy of its own), each caller sees the tools it may
        # call: made for each request, never shared.
        shared = dispatcher.auth is None and type(dispatcher.policy) is AllowAll
        cached = self._mcp_tools.get(modern) if shared else None
        if cached is not None and cached[0] == dispatcher.version:
            tools = cached[1]
        else:
            tools = [
                mcp_tool(definition, dispatcher.tool(definition["name"]), modern)
                for definition in definitions
                if definition.get("@type") != "system"  # redeem and cancel: MCP has tasks
            ]
            if shared:
                self._mcp_tools[modern] = (dispatcher.version, tools)
        scope = "public" if dispatcher.auth is None else "private"
        return listed(request, "tools", tools, "name", dispatcher.config.page_size, scope)

    # -- tools/call ------------------------------------------------------------

    async def call(self, request: Request) -> Any:
        """``tools/call`` (see the module doc).  Raises the protocol errors: for
        MCP-lite every one the dispatcher raises; for MCP -32602 for bad params or
        an unknown tool, -32021 for a capability the client lacks, -32020 for a
        ``Mcp-Param-*`` header that disagrees."""
        params = request.params
        if request.profile is LITE:
            if type(params) is dict and type(name := params.get("name")) is str:
                arguments = params.get("arguments")  # the common case, checked inline
            else:
                name, arguments = tool_call_params(params)
            return (await self.dispatcher.call(name, arguments, request.context)).to_json()
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("Invalid params: params.name must be a string")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParams("Invalid params: params.arguments must be an object")
        tool = self.dispatcher.served.get(name)
        if tool is None:
            try:
                # redeem and cancel are MCP-lite's: MCP has tasks, never lists them,
                # and so never suggests them.
                tool = self.dispatcher.tool(name, request.context, system=False)
            except ToolNotFound as exc:
                # On MCP an unknown tool is invalid params (-32602), as the official
                # server says.
                raise InvalidParams(f"Unknown tool: {name}", exc.data) from None
        modern = request.profile is MCP_2026
        if modern:
            if tool.requires:
                require(request.capabilities, tool.requires)
            if tool.task_support == "required":
                require(request.capabilities, TASKS_REQUIRED)
            if request.headers is not None:
                cached = self._header_params.get(name)
                with_headers = cached[1] if cached is not None and cached[0] is tool else None
                if with_headers is None:
                    with_headers = self._header_params_of(tool)
                if with_headers:
                    check_param_headers(request.headers, with_headers, arguments or {})
        context = request.context
        merge = False
        if "requestState" in params or context.input_responses is not None:  # a round answered
            answered = self.rounds.answered(name, params, context)
            if answered is not None:
                context, merge = answered
        try:
            if not merge:  # the common call: nothing elicited to apply
                result = await self.dispatcher.call(name, arguments, context)
            else:
                result = await self._run(name, arguments, context, merge)
            if isinstance(result.outcome, Promised):
                if (
                    modern
                    and self.tasks is not None
                    and tool.task_support != "forbidden"
                    and TASKS_EXTENSION in extensions_of(request.capabilities)
                ):
                    task = self.tasks.add(result.outcome, name, arguments, context)
                    ttl = self.dispatcher.config.promise_ttl
                    return task_result(task, TaskStatus.WORKING, "task", ttl)
                result = await self._wait(result.outcome.token, context)
            if not modern and request.send is not None:
                result = await self._ask_client(name, arguments, context, result, request.send)
            outcome = result.outcome
            if modern and isinstance(outcome, (Elicitation, InputRequired)):
                return self.rounds.input_required(name, outcome, request.capabilities, context)
            try:
                return call_result(result, modern)
            except (TypeError, ValueError) as exc:  # plain data JSON cannot hold: NaN, a cycle
                raise self.dispatcher.not_json(name, exc) from None
        except (InvalidArguments, InternalError) as exc:
            return self._tool_error(name, exc)

    def stream(self, request: Request) -> ToolStream:
        """MCP-lite ``tools/call`` answered as a stream (SSE)."""
        name, arguments = tool_call_params(request.params)
        return self.dispatcher.stream(name, arguments, request.context, progress=True)

    def streams(self, params: Any) -> bool:
        """Whether MCP-lite ``tools/call`` params name a tool that streams by nature."""
        name = params.get("name") if isinstance(params, dict) else None
        tool = self.dispatcher.served.get(name) if isinstance(name, str) else None
        return tool is not None and tool.kind is _STREAM

    def _header_params_of(self, tool: Tool) -> tuple[tuple[str, str], ...]:
        found = header_params(tool.input_schema)
        self._header_params[tool.name] = (tool, found)
        return found

    def _tool_error(self, name: str, error: InvalidArguments | InternalError) -> CallToolResult:
        """A call that failed in the tool's own terms (arguments its schema refuses,
        an exception in the tool) as MCP wants it since 2025-11-25: a result with
        ``isError: true`` that the model reads, not a protocol error it never
        sees.  A raising tool's text gives only the error id, unless the server
        is told to show its exception (``show_tool_errors``)."""
        text = error.message
        if (
            isinstance(error, InternalError)
            and error.detail is not None
            and self.dispatcher.config.show_tool_errors
        ):
            text = f"{text}: {error.detail}"
        return {
            "content": [text_block(f"Error executing tool {name}: {text}")],
            "isError": True,
            "_meta": {"mcplite/response_type": "failure", "mcplite/error": error.to_jsonrpc()},
        }

    async def _run(self, name: str, arguments: Any, context: RequestContext, merge: bool) -> Result:
        """One run of a tool.  ``merge``: the round answered was an MCP-lite
        elicitation, whose accepted content becomes arguments and whose decline
        ends the call without running."""
        if merge:
            arguments = with_elicited(arguments, context.input_responses)
            if isinstance(arguments, Result):
                return arguments
        return await self.dispatcher.call(name, arguments, context)

    async def _wait(self, token: str, context: RequestContext) -> Result:
        """The outcome of a promise, for a client that cannot take a task.  That
        client never saw the token: when it leaves, the call is cancelled; when
        the promise expires first (the store then stops the call), the call
        fails, as its own outcome, not as an error about a token the client
        never sent."""
        started, t0 = time.time(), time.perf_counter()
        wait = self.dispatcher.config.max_redeem_wait
        try:
            while True:
                result = await self.dispatcher.redeem(token, wait, context)
                if not isinstance(result.outcome, Promised):
                    return result
        except (ExpiredToken, UnknownPromise):
            failure = Failure(
                "the call did not finish within the promise TTL and was stopped",
                reason="expired",
            )
            return Result(failure, started, (time.perf_counter() - t0) * 1000)
        except asyncio.CancelledError:
            with contextlib.suppress(MCPLiteError):
                await self.dispatcher.cancel(token, context)
            raise

    async def _ask_client(
        self, name: str, arguments: Any, context: RequestContext, result: Result, send: Sender
    ) -> Result:
        """Where 2026 answers ``input_required``, a 2025 client is asked itself: each
        input request goes out on the call's stream, the client POSTs its answer
        back, and the tool runs again with the answers, round after round."""
        rounds = self.rounds
        for _ in range(MAX_ROUNDS):
            outcome = result.outcome
            if not isinstance(outcome, Elicitation | InputRequired):
                return result
            answers = await rounds.ask(input_requests(outcome), send, context)
            if isinstance(answers, Result):
                return answers
            state = outcome.state if isinstance(outcome, InputRequired) else None
            context = dataclasses.replace(context, input_responses=answers, request_state=state)
            result = await self._run(name, arguments, context, isinstance(outcome, Elicitation))
            if isinstance(result.outcome, Promised):
                result = await self._wait(result.outcome.token, context)
        return result
