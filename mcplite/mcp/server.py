"""One MCP message in, one reply out, for any transport (HTTP, stdio).

:class:`McpServer` speaks both revisions from the same core
(:class:`~mcplite.dispatch.Dispatcher`).  A transport hands it a decoded
message, the request's headers (None on stdio, which has none) and a
``notify`` callback for what a tool says before its result; it gets back an
:class:`McpReply`: the HTTP status the official server would use and the
JSON-RPC response (None: nothing to send, e.g. for a notification).

How core outcomes map onto MCP (2026-07-28):

- an answer, failure or request for more resources: ``resultType: complete``,
  content blocks (:mod:`.render`);
- an elicitation or :class:`~mcplite.outcomes.InputRequired`:
  ``resultType: input_required`` with ``inputRequests`` and a sealed
  ``requestState``; the repeated call's accepted elicitation content is merged
  into the arguments (MCP-lite's "call again with the extra arguments"), and
  every answer is in ``ctx.input_responses``;
- a promise: a task (``resultType: task``, ``taskId`` = the sealed promise
  token) when the request declared the ``io.modelcontextprotocol/tasks``
  extension; otherwise the call simply waits for its outcome.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..context import LOG_LEVELS, Notifier, RequestContext
from ..dispatch import Dispatcher
from ..envelope import Result
from ..errors import (
    ExpiredToken,
    InvalidParams,
    InvalidRequest,
    InvalidToken,
    MCPLiteError,
    MethodNotFound,
    ToolNotFound,
    UnknownPromise,
)
from ..jsonrpc import NO_ID, check_request
from ..outcomes import Elicitation, Failure, InputRequired, Promised
from ..tools import Kind
from . import protocol
from .protocol import (
    LEGACY_VERSIONS,
    MODERN_VERSION,
    SERVER_INFO_KEY,
    TASKS_EXTENSION,
    MissingCapability,
    http_status,
)
from .render import call_result

__all__ = ["McpReply", "McpServer"]

_MISSING: Any = object()
#: Seconds a repeated call may take to come back with its answers.
_STATE_TTL = 3600.0
_TOKEN_ERRORS = (InvalidToken, ExpiredToken, UnknownPromise)


@dataclass(frozen=True, slots=True)
class McpReply:
    status: int
    body: dict[str, Any] | None


@dataclass(slots=True)
class _Request:
    """One checked request: what a handler needs."""

    id: Any
    method: str
    params: dict[str, Any]
    modern: bool
    context: RequestContext
    headers: Mapping[str, str] | None
    capabilities: Mapping[str, Any]


class McpServer:
    """The MCP methods of both revisions over a dispatcher."""

    def __init__(
        self, dispatcher: Dispatcher, *, name: str = "mcplite", instructions: str | None = None
    ) -> None:
        self.dispatcher = dispatcher
        self.server_info = {"name": name, "version": __version__}
        self.instructions = instructions
        self._modern = {
            "server/discover": self._discover,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "tasks/get": self._task_get,
            "tasks/update": self._task_update,
            "tasks/cancel": self._task_cancel,
        }
        self._legacy = {
            "initialize": self._initialize,
            "ping": self._empty,
            "logging/setLevel": self._empty,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
        }

    # -- the ladder ---------------------------------------------------------

    def is_modern(self, message: Any, headers: Mapping[str, str] | None) -> bool:
        """Which revision a message speaks: the ``MCP-Protocol-Version`` header
        decides over HTTP (absent or a 2025 version: 2025); without it, a
        2026 ``_meta`` envelope in the body."""
        version = None if headers is None else headers.get("mcp-protocol-version")
        if version is not None:
            return version not in LEGACY_VERSIONS
        params = message.get("params") if isinstance(message, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        return isinstance(meta, dict) and protocol.VERSION_KEY in meta

    def may_notify(self, message: Any) -> bool:
        """Whether answering ``message`` may send notifications before the result
        (a tool that takes a Context or streams): worth an SSE answer."""
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return False
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str):
            return False
        try:
            tool = self.dispatcher.tool(name)
        except ToolNotFound:
            return False
        return tool.context_param is not None or tool.kind is Kind.STREAM

    async def handle(
        self,
        message: Any,
        context: RequestContext,
        headers: Mapping[str, str] | None = None,
        notify: Notifier | None = None,
    ) -> McpReply:
        """Answer one decoded message; never raises a protocol error."""
        modern = self.is_modern(message, headers)
        if isinstance(message, list):
            error = InvalidRequest("Invalid request: batches are not supported by MCP")
            return self._error(None, error)
        if (
            isinstance(message, dict)
            and "method" not in message
            and ("result" in message or "error" in message)
        ):
            # A response to a server request: this server sends none (stateless).
            return (
                McpReply(202, None)
                if not modern
                else self._error(
                    None, InvalidRequest("Invalid request: unexpected JSON-RPC response")
                )
            )
        try:
            request_id, method, params = check_request(message)
        except InvalidRequest as exc:
            known = message.get("id") if isinstance(message, dict) else None
            return self._error(known if isinstance(known, str | int) else None, exc)
        if request_id is None:
            return self._error(None, InvalidRequest("Invalid request: id must not be null"))
        if request_id is NO_ID:
            return McpReply(202, None)  # a notification: nothing to answer
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return self._error(request_id, InvalidParams("Invalid params: expected an object"))
        try:
            request = self._check(request_id, method, params, modern, context, headers, notify)
            table = self._modern if modern else self._legacy
            handler = table.get(method)
            if handler is None:
                raise MethodNotFound(f"Method not found: {method}", {"method": method})
            result = await handler(request)
        except MCPLiteError as exc:
            return self._error(request_id, exc)
        if modern:
            result.setdefault("resultType", "complete")
            result.setdefault("_meta", {})[SERVER_INFO_KEY] = self.server_info
        return McpReply(200, {"jsonrpc": "2.0", "id": request_id, "result": result})

    def _check(
        self,
        request_id: Any,
        method: str,
        params: dict[str, Any],
        modern: bool,
        context: RequestContext,
        headers: Mapping[str, str] | None,
        notify: Notifier | None,
    ) -> _Request:
        meta = params.get("_meta")
        capabilities: Mapping[str, Any] = {}
        log_level: str | None = None
        if modern:
            checked = protocol.invalid_meta(params)
            if isinstance(checked, MCPLiteError):
                raise checked
            version, capabilities, meta = checked
            if headers is not None:
                protocol.check_headers(headers, version, method, params)
            if version != MODERN_VERSION:
                raise protocol.UnsupportedVersion(version)
            level = meta.get(protocol.LOG_LEVEL_KEY)
            log_level = level if level in LOG_LEVELS else None
        else:
            log_level = "info"  # stateless: logging/setLevel cannot be remembered
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if isinstance(token, bool) or not isinstance(token, str | int):
            token = None
        responses = params.get("inputResponses")
        request_context = dataclasses.replace(
            context,
            notify=notify,
            progress_token=token,
            log_level=log_level,
            input_responses=responses if isinstance(responses, dict) else None,
            client_capabilities=capabilities,
        )
        return _Request(request_id, method, params, modern, request_context, headers, capabilities)

    def _error(self, request_id: Any, error: MCPLiteError) -> McpReply:
        return McpReply(
            http_status(error),
            {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()},
        )

    # -- lifecycle and discovery --------------------------------------------

    def _capabilities(self, modern: bool) -> dict[str, Any]:
        if modern:
            return {"tools": {}, "extensions": {TASKS_EXTENSION: {}}}
        return {"tools": {}, "logging": {}}

    async def _discover(self, request: _Request) -> dict[str, Any]:
        out: dict[str, Any] = {
            "supportedVersions": [MODERN_VERSION],
            "capabilities": self._capabilities(True),
            "ttlMs": 0,
            "cacheScope": "public",
        }
        if self.instructions:
            out["instructions"] = self.instructions
        return out

    async def _initialize(self, request: _Request) -> dict[str, Any]:
        asked = request.params.get("protocolVersion")
        version = asked if asked in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
        out: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self._capabilities(False),
            "serverInfo": self.server_info,
        }
        if self.instructions:
            out["instructions"] = self.instructions
        return out

    async def _empty(self, request: _Request) -> dict[str, Any]:
        return {}

    async def _list_tools(self, request: _Request) -> dict[str, Any]:
        tools = [
            _tool_definition(definition)
            for definition in self.dispatcher.tool_definitions(request.context)
            if definition.get("@type") != "system"  # redeem and cancel: MCP has tasks
        ]
        out: dict[str, Any] = {"tools": tools}
        if request.modern:
            out["ttlMs"] = 0
            out["cacheScope"] = "public"
        return out

    # -- tools/call ---------------------------------------------------------

    async def _call_tool(self, request: _Request) -> dict[str, Any]:
        params = request.params
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("Invalid params: params.name must be a string")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParams("Invalid params: params.arguments must be an object")
        try:
            tool = self.dispatcher.tool(name)
        except ToolNotFound as exc:
            # On MCP an unknown tool is invalid params (-32602), as the official server says.
            raise InvalidParams(f"Unknown tool: {name}", exc.data) from None
        if request.modern:
            if tool.requires:
                _require(request.capabilities, tool.requires)
            if request.headers is not None:
                protocol.check_param_headers(request.headers, tool.input_schema, arguments or {})
        context = request.context
        state = params.get("requestState")
        if state is not None:
            try:
                context = dataclasses.replace(
                    context, request_state=self.dispatcher.sealer.open_state(state)
                )
            except (InvalidToken, ExpiredToken) as exc:
                raise InvalidParams(f"Invalid params: requestState: {exc.message}") from None
        arguments = _with_elicited(arguments, context.input_responses)
        if isinstance(arguments, Result):
            return self._complete(arguments, request)
        result = await self.dispatcher.call(name, arguments, context)
        if isinstance(result.outcome, Promised):
            if request.modern and TASKS_EXTENSION in _extensions(request.capabilities):
                return self._task(result.outcome, "working")
            result = await self._wait(result.outcome.token)
        return self._complete(result, request)

    def _complete(self, result: Result, request: _Request) -> dict[str, Any]:
        outcome = result.outcome
        if request.modern and isinstance(outcome, Elicitation | InputRequired):
            return self._input_required(outcome)
        return call_result(result)

    def _input_required(self, outcome: Elicitation | InputRequired) -> dict[str, Any]:
        if isinstance(outcome, Elicitation):
            requests = {
                "elicitation": {
                    "method": "elicitation/create",
                    "params": {
                        "message": outcome.message,
                        "requestedSchema": outcome.requested_schema,
                    },
                }
            }
            state = ""
        else:
            requests, state = outcome.requests, outcome.state or ""
        return {
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": self.dispatcher.sealer.seal_state(state, _STATE_TTL),
        }

    async def _wait(self, token: str) -> Result:
        """The outcome of a promise, for a client that cannot take a task."""
        wait = self.dispatcher.config.max_redeem_wait
        while True:
            result = await self.dispatcher.redeem(token, wait)
            if not isinstance(result.outcome, Promised):
                return result

    # -- tasks (extension io.modelcontextprotocol/tasks) -----------------------

    def _task(self, promised: Promised, status: str, **extra: Any) -> dict[str, Any]:
        ttl = self.dispatcher.config.promise_ttl
        created = promised.expires_at - ttl
        out: dict[str, Any] = {
            "resultType": "task",
            "taskId": promised.token,
            "status": status,
            "createdAt": _iso(created),
            "lastUpdatedAt": _iso(time.time()),
            "ttlMs": int(ttl * 1000) if math.isfinite(ttl) else None,
            "pollIntervalMs": 500,
        }
        progress = promised.progress or {}
        if isinstance(progress.get("message"), str):
            out["statusMessage"] = progress["message"]
        out.update(extra)
        return out

    def _task_id(self, request: _Request) -> str:
        if TASKS_EXTENSION not in _extensions(request.capabilities):
            raise MissingCapability(
                f"extensions.{TASKS_EXTENSION}", {"extensions": {TASKS_EXTENSION: {}}}
            )
        task_id = request.params.get("taskId")
        if not isinstance(task_id, str):
            raise InvalidParams("Invalid params: taskId must be a string")
        return task_id

    async def _task_get(self, request: _Request) -> dict[str, Any]:
        token = self._task_id(request)
        try:
            result = await self.dispatcher.redeem(token, 0)
        except _TOKEN_ERRORS as exc:
            raise InvalidParams(f"Unknown task: {exc.message}", {"taskId": token}) from None
        except MCPLiteError as exc:  # the call itself ended in a protocol error
            detail = {"code": exc.jsonrpc_code, "message": exc.message}
            return self._detailed(token, "failed", error=detail)
        outcome = result.outcome
        if isinstance(outcome, Promised):
            task = self._task(outcome, "working")
            task["resultType"] = "complete"
            return task
        if isinstance(outcome, Elicitation | InputRequired):
            asked = self._input_required(outcome)
            return self._detailed(token, "input_required", inputRequests=asked["inputRequests"])
        done = call_result(result)
        done["resultType"] = "complete"
        return self._detailed(token, "completed", result=done)

    def _detailed(self, token: str, status: str, **extra: Any) -> dict[str, Any]:
        _, expires_at = self.dispatcher.sealer.open(token)
        task = self._task(Promised(token, expires_at), status, **extra)
        task["resultType"] = "complete"
        return task

    async def _task_update(self, request: _Request) -> dict[str, Any]:
        token = self._task_id(request)
        try:
            await self.dispatcher.redeem(token, 0)
        except _TOKEN_ERRORS as exc:
            raise InvalidParams(f"Unknown task: {exc.message}", {"taskId": token}) from None
        except MCPLiteError:
            pass  # a failed task: an update changes nothing, and is acknowledged
        return {}

    async def _task_cancel(self, request: _Request) -> dict[str, Any]:
        token = self._task_id(request)
        try:
            await self.dispatcher.cancel(token)
        except _TOKEN_ERRORS as exc:
            raise InvalidParams(f"Unknown task: {exc.message}", {"taskId": token}) from None
        return {}


def _extensions(capabilities: Mapping[str, Any]) -> Mapping[str, Any]:
    extensions = capabilities.get("extensions")
    return extensions if isinstance(extensions, dict) else {}


def _require(capabilities: Mapping[str, Any], required: Mapping[str, Any]) -> None:
    """Raise :class:`MissingCapability` unless ``capabilities`` declares every key
    of ``required`` (one level into ``extensions``)."""
    for key, value in required.items():
        have = capabilities.get(key)
        if have is None:
            raise MissingCapability(key, {key: value})
        if key == "extensions" and isinstance(value, dict):
            for name in value:
                if name not in _extensions(capabilities):
                    raise MissingCapability(f"extensions.{name}", {key: {name: value[name]}})


def _with_elicited(arguments: Any, responses: Mapping[str, Any] | None) -> Any:
    """The arguments of a call answering an elicitation: the accepted content
    merged in; a declined or cancelled elicitation ends the call as a failure."""
    answer = responses.get("elicitation") if responses else None
    if not isinstance(answer, dict):
        return arguments
    action = answer.get("action")
    if action == "accept" and isinstance(answer.get("content"), dict):
        return {**(arguments or {}), **answer["content"]}
    if action in ("decline", "cancel"):
        return Result(Failure(f"the user chose to {action}", reason=action), time.time(), 0.0)
    return arguments


def _tool_definition(definition: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in definition.items() if k != "@type"}
    return out


def _iso(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
