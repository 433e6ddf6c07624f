"""One MCP message in, one reply out, for any transport (HTTP, stdio).

:class:`McpServer` speaks both revisions from the same core
(:class:`~mcplite.core.dispatch.Dispatcher`).  A transport hands it a decoded
message, the request's headers (None on stdio, which has none), a ``notify``
callback for what a tool says before its result and a ``send`` callback for
requests to the client (2025); it gets back an :class:`McpReply`: the HTTP
status the official server would use and the JSON-RPC response (None: nothing
to send, e.g. for a notification).  Over HTTP the common request, a 2026
``tools/call`` answered as JSON, first goes to :meth:`McpServer.call_tool`,
which makes the same checks in one pass and leaves anything else to
:meth:`McpServer.handle`.

How core outcomes map onto MCP (2026-07-28):

- an answer, failure or request for more resources: ``resultType: complete``,
  content blocks (:mod:`.render`);
- an elicitation or :class:`~mcplite.core.outcomes.InputRequired`:
  ``resultType: input_required`` with ``inputRequests`` and a sealed
  ``requestState`` (sealed with the tool's name); the repeated call's accepted
  elicitation content is merged into the arguments (MCP-lite's "call again
  with the extra arguments"), and every answer is in ``ctx.input_responses``;
  a request the client did not declare the capability for is -32021;
- a promise: a task (``resultType: task``, ``taskId`` = the sealed promise
  token) when the request declared the ``io.modelcontextprotocol/tasks``
  extension, with ``tasks/update`` answering its input rounds (:mod:`.tasks`);
  otherwise, or when the tool says ``task_support="forbidden"``, the call
  simply waits for its outcome (``"required"``: a call without the extension
  is -32021).

On 2025-11-25 there is no ``input_required``: the server asks the client
itself, sending each input request as a JSON-RPC request on the call's SSE
stream; the client POSTs its answer to the endpoint (202), and the tool runs
again with the answers, as a 2026 client's repeated call would bring them.  The
requests waiting for answers live in this process (no session is needed, but a
client's answer must reach the process that asked).

2026 ``subscriptions/listen`` answers with a stream that stays open: its
acknowledgement (the filter honoured: tools, prompts, resources list changes),
then ``notifications/{tools,prompts,resources}/list_changed`` as the registries
change (``Tools.add``/``remove``, :meth:`~mcplite.core.dispatch.Dispatcher.add_tool`,
``Prompts.add``/``remove``, ``Resources.add``/``remove``), each tagged with the subscription id (the
request's id).  The transport ends it by cancelling the call (the client left,
or cancelled it on stdio); :meth:`McpServer.end_subscriptions` ends every one
with its final result at shutdown.  Delivery is to the streams open in this
process: it does not cross processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import hmac
import json
import logging
import math
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from ..._version import __version__
from ...core.completion import Completer, complete, completion_result
from ...core.content import text as text_block
from ...core.context import LOG_LEVELS, Notifier, RequestContext, binding_of
from ...core.dispatch import Dispatcher
from ...core.envelope import Result
from ...core.errors import (
    ExpiredToken,
    InternalError,
    InvalidArguments,
    InvalidParams,
    InvalidRequest,
    InvalidToken,
    MCPLiteError,
    MethodNotFound,
    Overloaded,
    ToolNotFound,
    UnknownPromise,
)
from ...core.outcomes import Elicitation, Failure, InputRequired, Promised
from ...core.prompts import Prompts
from ...core.resources import Resources
from ...core.tools import Kind, Tool
from ..jsonrpc import NO_ID, check_request
from . import protocol
from .pagination import page
from .protocol import (
    LEGACY_VERSIONS,
    MODERN_VERSION,
    SERVER_INFO_KEY,
    SUBSCRIPTION_ID_KEY,
    TASKS_EXTENSION,
    MissingCapability,
    http_status,
)
from .render import call_result
from .tasks import Task, TaskStatus, TaskTable, check_answers, input_requests

__all__ = ["McpReply", "McpServer", "Sender"]

log = logging.getLogger("mcplite")

Sender = Callable[[dict[str, Any]], None]
"""``send(message)``: put a whole JSON-RPC message on the response's stream."""

#: Seconds a repeated call may take to come back with its answers.
_STATE_TTL = 3600.0
_TOKEN_ERRORS = (InvalidToken, ExpiredToken, UnknownPromise)
_POLL_INTERVAL_MS = 500
#: 2025: seconds a client gets to answer a request sent on a call's stream
#: (a person may be answering an elicitation), rounds of requests per call,
#: and requests pending at once over all calls.
_ASK_TIMEOUT = 300.0
_MAX_ROUNDS = 16
_MAX_PENDING = 1024
#: The client capability each input request needs.
_REQUEST_CAPABILITY = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


#: subscriptions/listen: the filter fields this server honours, by the kind of list.
_LIST_CHANGED = {
    "tools": "toolsListChanged",
    "prompts": "promptsListChanged",
    "resources": "resourcesListChanged",
}


@dataclass(eq=False, slots=True)
class _Subscription:
    """One open ``subscriptions/listen``: the lists it wants to hear about, and how
    to put a message on its stream (from any thread)."""

    kinds: frozenset[str]
    deliver: Callable[[dict[str, Any]], None]
    ended: asyncio.Future[None]


@dataclass(slots=True)
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
    send: Sender | None


class McpServer:
    """The MCP methods of both revisions over a dispatcher."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        name: str = "mcplite",
        instructions: str | None = None,
        prompts: Prompts | None = None,
        resources: Resources | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        #: Served beside the dispatcher's tools (None: the methods are not offered).
        self.prompts = prompts
        self.resources = resources
        self._header_params: dict[str, tuple[tuple[str, str], ...]] = {}
        self.server_info = {"name": name, "version": __version__}
        self.instructions = instructions
        #: Tasks of this process: what MCP needs beyond the promise (see .tasks).
        self.tasks = TaskTable(dispatcher, dispatcher.config.max_promises)
        #: 2025: requests sent to clients on a call's stream, by id, awaiting answers.
        # Requests sent to 2025 clients, by id: the answer's future and who may answer.
        self._pending: dict[str, tuple[asyncio.Future[Any], bytes]] = {}
        #: 2026: the open subscriptions/listen streams, and how many may be open at once.
        self._subscriptions: set[_Subscription] = set()
        self._subscriptions_ended = False  # shutting down: a new listen ends at once
        #: HTTP requests in flight by (caller, id), for notifications/cancelled, and
        #: the tasks it has cancelled.
        self._running: dict[tuple[bytes, str | int], list[asyncio.Task[Any]]] = {}
        self._cancelled: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self.max_subscriptions = dispatcher.config.max_connections
        self._listen_for_changes()
        self._modern = {
            "server/discover": self._discover,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "tasks/get": self._task_get,
            "tasks/update": self._task_update,
            "tasks/cancel": self._task_cancel,
            "subscriptions/listen": self._listen,
        }
        self._legacy = {
            "initialize": self._initialize,
            "ping": self._empty,
            "logging/setLevel": self._empty,
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
        }
        both: dict[str, Callable[[_Request], Coroutine[Any, Any, dict[str, Any]]]] = {}
        if prompts is not None:
            both["prompts/list"] = self._list_prompts
            both["prompts/get"] = self._get_prompt
        if resources is not None:
            both["resources/list"] = self._list_resources
            both["resources/templates/list"] = self._list_templates
            both["resources/read"] = self._read_resource
            # 2025 only: updates need a session to be sent on; see _subscribe.
            self._legacy["resources/subscribe"] = self._subscribe
            self._legacy["resources/unsubscribe"] = self._subscribe
        if prompts is not None or resources is not None:
            both["completion/complete"] = self._complete
        self._modern.update(both)
        self._legacy.update(both)

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

    def may_notify(
        self, message: Any, headers: Mapping[str, str] | None = None, modern: bool | None = None
    ) -> bool:
        """Whether answering ``message`` may send something before the result, so
        that it is worth an SSE answer: a 2026 call of a tool that takes a Context
        or streams; any 2025 call (its tool may need to ask the client), a
        2025 ``prompts/get`` (its prompt may too), and ``subscriptions/listen``.
        ``modern``: :meth:`is_modern`'s answer, when the caller has it already."""
        if not isinstance(message, dict):
            return False
        method = message.get("method")
        if method != "tools/call":
            if method == "subscriptions/listen":
                return True
            if method == "prompts/get":  # 2025: a prompt may ask the client
                return self.prompts is not None and not self.is_modern(message, headers)
            return False
        if not (self.is_modern(message, headers) if modern is None else modern):
            return True
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
        *,
        send: Sender | None = None,
        fresh: bool = False,
        modern: bool | None = None,
    ) -> McpReply:
        """Answer one decoded message; never raises a protocol error.

        ``notify`` takes what a tool says before its result (progress, log
        messages); ``send`` puts a whole message on the response's stream, which
        a 2025 call uses to ask the client for what a tool needs (sampling,
        elicitation, roots).  Without them, nothing is said and nothing asked.
        ``fresh``: ``context`` was made for this message alone, so the request's
        own fields (progress token, capabilities...) are set on it, not on a copy.
        ``modern``: :meth:`is_modern`'s answer, when the caller has it already.
        """
        if modern is None:
            modern = self.is_modern(message, headers)
        if isinstance(message, list):
            error = InvalidRequest("Invalid request: batches are not supported by MCP")
            return self._error(None, error, modern)
        if (
            isinstance(message, dict)
            and "method" not in message
            and ("result" in message or "error" in message)
        ):
            if modern:  # 2026 has no requests from the server: nothing to answer
                error = InvalidRequest("Invalid request: unexpected JSON-RPC response")
                return self._error(None, error, modern)
            self._answered(message, context)  # 2025: a client answers what a call asked it
            return McpReply(202, None)
        try:
            request_id, method, params = check_request(message)
        except InvalidRequest as exc:
            known = message.get("id") if isinstance(message, dict) else None
            return self._error(known if isinstance(known, str | int) else None, exc, modern)
        if request_id is None:
            error = InvalidRequest("Invalid request: id must not be null")
            return self._error(None, error, modern)
        if request_id is NO_ID:
            if method == "notifications/cancelled" and headers is not None:
                self._cancel_request(params, context)
            return McpReply(202, None)  # a notification: nothing to answer
        if params is None:
            params = {}
        if not isinstance(params, dict):
            invalid = InvalidParams("Invalid params: expected an object")
            return self._error(request_id, invalid, modern)
        try:
            request = self._check(
                request_id, method, params, modern, context, headers, notify, send, fresh
            )
            table = self._modern if modern else self._legacy
            handler = table.get(method)
            if handler is None:
                raise MethodNotFound(f"Method not found: {method}", {"method": method})
            if self.dispatcher.auth is not None:
                self.dispatcher.auth.admit(context, method)
            if headers is None:  # stdio cancels its requests itself
                result = await handler(request)
            else:
                answered = await self._cancellable(handler, request)
                if answered is None:  # cancelled by the client: MCP sends no answer
                    return McpReply(202, None)
                result = answered
        except MCPLiteError as exc:
            return self._error(request_id, exc, modern)
        return self._result_reply(request_id, result, modern)

    async def call_tool(
        self, message: Any, context: RequestContext, headers: Mapping[str, str]
    ) -> McpReply | None:
        """The common request over HTTP answered with its checks in one pass: a
        2026 ``tools/call`` with a plain id, ``_meta`` giving this revision and
        capabilities, ``MCP-Protocol-Version``, ``Mcp-Method`` and a literal
        ``Mcp-Name`` that match the body, of a tool that neither streams nor
        takes a Context (nothing to say before its result), with auth off.  It
        is answered as :meth:`handle` answers it (``context`` made for it alone,
        as ``fresh``).  Any other message: None, with nothing done, for
        :meth:`handle`.  (The general path's checks, function by function, cost
        about a tenth of such a call at 50 connections: docs/benchmarks.md.)"""
        if (
            type(message) is not dict
            or message.get("method") != "tools/call"
            or message.get("jsonrpc") != "2.0"
            or self.dispatcher.auth is not None
        ):
            return None
        request_id = message.get("id")
        params = message.get("params")
        if not (type(request_id) is int or type(request_id) is str) or type(params) is not dict:
            return None
        meta = params.get("_meta")
        name = params.get("name")
        if type(meta) is not dict or type(name) is not str:
            return None
        capabilities = meta.get(protocol.CAPABILITIES_KEY)
        if (
            meta.get(protocol.VERSION_KEY) != MODERN_VERSION
            or type(capabilities) is not dict
            or headers.get("mcp-protocol-version") != MODERN_VERSION
            or headers.get("mcp-method") != "tools/call"
            or headers.get("mcp-name") != name
            or name.startswith(protocol.BASE64_OPEN)
        ):
            return None
        try:
            tool = self.dispatcher.tool(name)
        except ToolNotFound:
            return None
        if tool.context_param is not None or tool.kind is Kind.STREAM:
            return None
        try:
            request = self._check(
                request_id,
                "tools/call",
                params,
                True,
                context,
                headers,
                None,
                None,
                True,
                (meta, capabilities),
            )
            result = await self._call_tool(request)
        except MCPLiteError as exc:
            return self._error(request_id, exc, True)
        return self._result_reply(request_id, result, True)

    def _result_reply(self, request_id: Any, result: dict[str, Any], modern: bool) -> McpReply:
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
        send: Sender | None,
        fresh: bool = False,
        checked: tuple[dict[str, Any], Mapping[str, Any]] | None = None,
    ) -> _Request:
        """A checked request, and its context filled in from ``_meta``.
        ``checked``: ``(_meta, capabilities)`` of a 2026 request whose ``_meta``
        and headers the caller has checked already (:meth:`call_tool`)."""
        capabilities: Mapping[str, Any] = {}
        meta: Any
        if checked is not None:
            meta, capabilities = checked
        elif modern:
            verdict = protocol.invalid_meta(params)
            if isinstance(verdict, MCPLiteError):
                raise verdict
            version, capabilities, meta = verdict
            if headers is not None:
                protocol.check_headers(headers, version, method, params)
            if version != MODERN_VERSION:
                raise protocol.UnsupportedVersion(version)
        else:
            meta = params.get("_meta")
        if modern:
            level = meta.get(protocol.LOG_LEVEL_KEY)
            log_level = None if level is None or level not in LOG_LEVELS else level
        else:
            log_level = "info"  # stateless: logging/setLevel cannot be remembered
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if token is not None and (isinstance(token, bool) or not isinstance(token, str | int)):
            token = None
        responses = params.get("inputResponses") if modern else None  # 2025 has none
        if (responses is not None or (modern and "inputResponses" in params)) and not isinstance(
            responses, dict
        ):
            raise InvalidParams(
                "Invalid params: inputResponses must be an object", {"field": "inputResponses"}
            )
        if fresh:
            request_context = context
            context.notify = notify
            context.progress_token = token
            context.log_level = log_level
            context.input_responses = responses
            context.client_capabilities = capabilities
        else:  # built directly: dataclasses.replace costs more than the rest of the checks
            request_context = RequestContext(
                context.binding,
                context.peer,
                context.headers,
                context.caller,
                notify,
                token,
                log_level,
                responses,
                context.request_state,
                capabilities,
            )
        return _Request(
            request_id, method, params, modern, request_context, headers, capabilities, send
        )

    def _error(self, request_id: Any, error: MCPLiteError, modern: bool) -> McpReply:
        return McpReply(
            http_status(error, modern),
            {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()},
        )

    # -- notifications/cancelled over HTTP -------------------------------------

    async def _cancellable(
        self, handler: Callable[[_Request], Coroutine[Any, Any, dict[str, Any]]], request: _Request
    ) -> dict[str, Any] | None:
        """Run ``handler`` where a ``notifications/cancelled`` naming this request
        can stop it (None: it did).  Over HTTP the notification comes on a POST of
        its own; there is no session, so a request is named by its id and its
        caller (the auth subject, with auth on)."""
        task = asyncio.current_task()
        assert task is not None
        key = (binding_of(request.context.caller), request.id)
        running = self._running.setdefault(key, [])
        running.append(task)
        try:
            return await handler(request)
        except asyncio.CancelledError:
            if task not in self._cancelled:
                raise
            self._cancelled.discard(task)
            task.uncancel()
            return None
        finally:
            running.remove(task)
            if not running and self._running.get(key) is running:
                del self._running[key]

    def _cancel_request(self, params: Any, context: RequestContext) -> None:
        """``notifications/cancelled``: stop the request it names when it runs in
        this process for the same caller.  Two requests of that caller with that
        id in flight at once (two anonymous clients, each counting from 0):
        neither is stopped, since MCP lets a cancellation go unheeded."""
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return
        running = self._running.get((binding_of(context.caller), request_id))
        if running is None or len(running) != 1:
            return
        task = running[0]
        if task not in self._cancelled:
            log.debug("request %r cancelled by the client", request_id)
            self._cancelled.add(task)
            task.cancel()

    # -- lifecycle and discovery --------------------------------------------

    def _capabilities(self, modern: bool) -> dict[str, Any]:
        # 2026: list changes reach the streams of subscriptions/listen.  (2025 has
        # them only on a session's stream, and mcplite is stateless: not there.)
        lists: dict[str, Any] = {"listChanged": True} if modern else {}
        out: dict[str, Any] = {"tools": dict(lists)}
        if self.prompts is not None:
            out["prompts"] = dict(lists)
        if self.resources is not None:
            out["resources"] = dict(lists)
        if self.prompts is not None or self.resources is not None:
            out["completions"] = {}
        if modern:
            out["extensions"] = {TASKS_EXTENSION: {}}
        else:
            out["logging"] = {}
        return out

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
            _tool_definition(definition, self.dispatcher.tool(definition["name"]), request.modern)
            for definition in self.dispatcher.tool_definitions(request.context)
            if definition.get("@type") != "system"  # redeem and cancel: MCP has tasks
        ]
        out = self._page(request, "tools", tools, "name")
        if request.modern:
            out["ttlMs"] = 0
            # With auth on, each caller sees the tools its scopes allow: never shared.
            out["cacheScope"] = "public" if self.dispatcher.auth is None else "private"
        return out

    # -- prompts, resources, completion -------------------------------------

    def _page(
        self, request: _Request, field: str, entries: list[dict[str, Any]], key: str
    ) -> dict[str, Any]:
        """``{field: the page asked for}``, and ``nextCursor`` while more remain
        (:mod:`.pagination`; ``key`` names an entry)."""
        size = self.dispatcher.config.page_size
        shown, next_cursor = page(entries, request.params.get("cursor"), request.method, key, size)
        out: dict[str, Any] = {field: shown}
        if next_cursor is not None:
            out["nextCursor"] = next_cursor
        return out

    async def _list_prompts(self, request: _Request) -> dict[str, Any]:
        assert self.prompts is not None
        listed = self._page(request, "prompts", self.prompts.definitions(), "name")
        return _cacheable(listed, request, "public")

    async def _get_prompt(self, request: _Request) -> dict[str, Any]:
        assert self.prompts is not None
        params = request.params
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("Invalid params: params.name must be a string")
        prompt = self.prompts.get(name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {name}", {"name": name})
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParams("Invalid params: params.arguments must be an object")
        owner = f"prompt:{name}"  # a tool's requestState never reaches a prompt
        context, _ = self._answered_round(owner, params, request.context)
        rendered = await prompt.render(arguments, context)
        if request.modern:
            if isinstance(rendered, InputRequired):
                return self._input_required(owner, rendered, request.capabilities, context)
            return rendered
        # 2025: ask the client on the response's stream, as for a tool (_ask_client).
        for _ in range(_MAX_ROUNDS):
            if not isinstance(rendered, InputRequired):
                return rendered
            if request.send is None:  # answered as plain JSON: no stream to ask on
                break
            answers = await self._asked(input_requests(rendered), request.send, context)
            if isinstance(answers, Result):
                assert isinstance(answers.outcome, Failure)
                raise InternalError(f"prompt {name!r}: {answers.outcome.message}")
            context = dataclasses.replace(
                context, input_responses=answers, request_state=rendered.state
            )
            rendered = await prompt.render(arguments, context)
        raise InternalError(f"prompt {name!r} needs input the client could not be asked for")

    async def _list_resources(self, request: _Request) -> dict[str, Any]:
        assert self.resources is not None
        listed = self._page(request, "resources", self.resources.definitions(), "uri")
        return _cacheable(listed, request, "public")

    async def _list_templates(self, request: _Request) -> dict[str, Any]:
        assert self.resources is not None
        templates = self.resources.template_definitions()
        listed = self._page(request, "resourceTemplates", templates, "uriTemplate")
        return _cacheable(listed, request, "public")

    async def _read_resource(self, request: _Request) -> dict[str, Any]:
        assert self.resources is not None
        uri = request.params.get("uri")
        if not isinstance(uri, str):
            raise InvalidParams("Invalid params: params.uri must be a string")
        contents = await self.resources.read(uri, request.context)
        # Private: a resource function may answer each caller differently.
        return _cacheable({"contents": contents}, request, "private")

    async def _subscribe(self, request: _Request) -> dict[str, Any]:
        """2025 ``resources/subscribe`` and ``unsubscribe``: acknowledged, but no
        ``notifications/resources/updated`` is ever sent: a stateless server has
        no session to send them on."""
        assert self.resources is not None
        uri = request.params.get("uri")
        if not isinstance(uri, str):
            raise InvalidParams("Invalid params: params.uri must be a string")
        return {}

    async def _complete(self, request: _Request) -> dict[str, Any]:
        params = request.params
        ref = params.get("ref")
        argument = params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise InvalidParams("Invalid params: params.ref and params.argument must be objects")
        name, value = argument.get("name"), argument.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidParams("Invalid params: argument.name and argument.value must be strings")
        context = params.get("context")
        given = context.get("arguments") if isinstance(context, dict) else None
        given = (
            {k: v for k, v in given.items() if isinstance(v, str)}
            if isinstance(given, dict)
            else {}
        )
        kind = ref.get("type")
        completer: Completer | None
        choices: tuple[str, ...] | None
        if kind == "ref/prompt" and self.prompts is not None:
            prompt_name = ref.get("name")
            prompt = self.prompts.get(prompt_name) if isinstance(prompt_name, str) else None
            if prompt is None:
                raise InvalidParams(f"Unknown prompt: {prompt_name}", {"name": prompt_name})
            completer, choices = prompt.completers.get(name), prompt.choices.get(name)
        elif kind == "ref/resource" and self.resources is not None:
            uri = ref.get("uri")
            template = self.resources.template(uri) if isinstance(uri, str) else None
            if template is None:  # a fixed resource has nothing to complete
                return completion_result([])
            completer, choices = template.completers.get(name), template.choices.get(name)
        else:
            raise InvalidParams(f"Invalid params: cannot complete a reference of type {kind!r}")
        try:
            values = await complete(completer, choices, value, given)
        except Exception:
            log.exception("completing %r failed", name)
            raise InternalError(f"completing {name!r} failed") from None
        return completion_result(values)

    # -- subscriptions/listen (2026) -----------------------------------------

    @property
    def subscription_count(self) -> int:
        """How many ``subscriptions/listen`` streams are open."""
        return len(self._subscriptions)

    def end_subscriptions(self) -> None:
        """End every open ``subscriptions/listen`` (at shutdown): each answers its
        final ``resultType: complete`` result, which ends its stream; so does
        any listen that comes after."""
        self._subscriptions_ended = True
        for subscription in list(self._subscriptions):
            ended = subscription.ended
            if not ended.done():
                with contextlib.suppress(RuntimeError):  # its loop is gone
                    ended.get_loop().call_soon_threadsafe(_set_done, ended)

    def _listen_for_changes(self) -> None:
        # Weakly: a registry served by many servers (tests, workers) keeps none alive.
        ref = weakref.ref(self)

        def listener(kind: str) -> Callable[[], None]:
            def changed() -> None:
                server = ref()
                if server is not None:
                    server.list_changed(kind)

            return changed

        self.dispatcher.on_change(listener("tools"))
        if self.prompts is not None:
            self.prompts.on_change(listener("prompts"))
        if self.resources is not None:
            self.resources.on_change(listener("resources"))

    def list_changed(self, kind: str) -> None:
        """Tell every subscription that asked for it that the list of ``kind``
        (``"tools"``, ``"prompts"``, ``"resources"``) changed; any thread may call it.
        The registries call it on every change."""
        if kind == "tools":
            self._header_params.clear()  # a name may now be another tool
        for subscription in list(self._subscriptions):
            if kind in subscription.kinds:
                subscription.deliver(
                    {"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed"}
                )

    async def _listen(self, request: _Request) -> dict[str, Any]:
        """A stream of list changes: first the acknowledgement naming the filter
        honoured, then ``notifications/*/list_changed`` of the kinds asked for,
        each tagged with the subscription id (the request's id); it ends when the
        client goes (the transport cancels this), or with a final result at
        shutdown (:meth:`end_subscriptions`)."""
        send = request.send
        if send is None:
            raise InvalidRequest("Invalid request: subscriptions/listen needs a stream (SSE)")
        wanted = request.params.get("notifications", {})
        if not isinstance(wanted, dict):
            raise InvalidParams("Invalid params: notifications must be an object")
        if len(self._subscriptions) >= self.max_subscriptions:
            raise Overloaded(
                f"Too many open subscriptions (max {self.max_subscriptions})",
                retry_after=self.dispatcher.config.retry_after,
            )
        served = {"tools": True, "prompts": self.prompts is not None}
        served["resources"] = self.resources is not None
        kinds = frozenset(
            kind for kind, key in _LIST_CHANGED.items() if served[kind] and wanted.get(key) is True
        )
        honoured = {_LIST_CHANGED[kind]: True for kind in sorted(kinds)}
        meta = {SUBSCRIPTION_ID_KEY: request.id}
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def deliver(message: dict[str, Any]) -> None:
            message = {**message, "params": {"_meta": dict(meta)}}
            if threading.get_ident() == loop_thread:
                send(message)
            else:  # a change made from a worker thread (a sync tool)
                with contextlib.suppress(RuntimeError):  # the loop is gone
                    loop.call_soon_threadsafe(send, message)

        subscription = _Subscription(kinds, deliver, loop.create_future())
        if self._subscriptions_ended:
            subscription.ended.set_result(None)
        self._subscriptions.add(subscription)
        try:
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": dict(meta), "notifications": honoured},
                }
            )
            await subscription.ended
        finally:
            self._subscriptions.discard(subscription)
        return {"resultType": "complete", "_meta": dict(meta)}

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
            # redeem and cancel are MCP-lite's: MCP has tasks, never lists them, and
            # so never suggests them.
            tool = self.dispatcher.tool(name, request.context, system=False)
        except ToolNotFound as exc:
            # On MCP an unknown tool is invalid params (-32602), as the official server says.
            raise InvalidParams(f"Unknown tool: {name}", exc.data) from None
        if request.modern:
            if tool.requires:
                _require(request.capabilities, tool.requires)
            if tool.task_support == "required":
                _require(request.capabilities, _TASKS_REQUIRED)
            if request.headers is not None:
                params_with_headers = self._header_params.get(name)
                if params_with_headers is None:  # worked out once per tool
                    params_with_headers = protocol.header_params(tool.input_schema)
                    self._header_params[name] = params_with_headers
                if params_with_headers:
                    protocol.check_param_headers(
                        request.headers, params_with_headers, arguments or {}
                    )
        context, merge = self._answered_round(name, params, request.context)
        try:
            if not merge:  # the common call: nothing elicited to apply
                result = await self.dispatcher.call(name, arguments, context)
            else:
                result = await self._run(name, arguments, context, merge)
            if isinstance(result.outcome, Promised):
                if (
                    request.modern
                    and tool.task_support != "forbidden"
                    and TASKS_EXTENSION in _extensions(request.capabilities)
                ):
                    task = self.tasks.add(result.outcome, name, arguments, context)
                    return self._task_fields(task, TaskStatus.WORKING, "task")
                result = await self._wait(result.outcome.token, context)
            if not request.modern and request.send is not None:
                result = await self._ask_client(name, arguments, context, result, request.send)
            outcome = result.outcome
            if request.modern and isinstance(outcome, (Elicitation, InputRequired)):
                return self._input_required(name, outcome, request.capabilities, context)
            try:
                return call_result(result, request.modern)
            except (TypeError, ValueError) as exc:  # plain data JSON cannot hold: NaN, a cycle
                raise self.dispatcher.not_json(name, exc) from None
        except (InvalidArguments, InternalError) as exc:
            return self._tool_error(name, exc)

    def _tool_error(self, name: str, error: InvalidArguments | InternalError) -> dict[str, Any]:
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
            arguments = _with_elicited(arguments, context.input_responses)
            if isinstance(arguments, Result):
                return arguments
        return await self.dispatcher.call(name, arguments, context)

    def _answered_round(
        self, owner: str, params: Mapping[str, Any], context: RequestContext
    ) -> tuple[RequestContext, bool]:
        """The context of a call that may answer a round of input requests, and
        whether that round was an elicitation to merge into the arguments.  With a
        ``requestState``: only the answers that round asked for, checked.  Without
        one, no round was asked for: the answers reach the tool as they are (it
        may read them itself), checked for shape, but never become arguments."""
        if "requestState" not in params:
            if context.input_responses is not None:
                check_answers(context.input_responses, None)
            return context, False
        state, asked, merge = self._open_state(owner, params["requestState"], context)
        responses = check_answers(context.input_responses, asked)
        return (
            dataclasses.replace(context, request_state=state, input_responses=responses),
            merge,
        )

    def _open_state(
        self, owner: str, sealed: Any, context: RequestContext
    ) -> tuple[str | None, dict[str, str], bool]:
        """The ``requestState`` a call was given, verified (sealed by this server,
        for this tool or prompt and this caller): the tool's own state, what the
        round asked for (method by key), and whether it was an elicitation."""
        try:
            opened = self.dispatcher.sealer.open_state(sealed, binding_of(context.caller))
        except (InvalidToken, ExpiredToken) as exc:
            raise InvalidParams(f"Invalid params: requestState: {exc.message}") from None
        try:
            issued_to, state, asked, merge = json.loads(opened)
        except (ValueError, TypeError):  # sealed by this secret, but not by this code
            raise InvalidParams("Invalid params: requestState is not one of ours") from None
        if issued_to != owner:
            raise InvalidParams(f"Invalid params: requestState was not issued for {owner}")
        return state, asked, merge

    def _input_required(
        self,
        tool: str,
        outcome: Elicitation | InputRequired,
        capabilities: Mapping[str, Any],
        context: RequestContext,
    ) -> dict[str, Any]:
        """An ``input_required`` result; -32021 when it asks for something the client
        did not declare it can do (MCP: never send such a request)."""
        requests = input_requests(outcome)
        for asked in requests.values():
            needed = _REQUEST_CAPABILITY.get(asked.get("method", ""))
            if needed is not None and needed not in capabilities:
                raise MissingCapability(needed, {needed: {}})
        state = outcome.state if isinstance(outcome, InputRequired) else None
        asked = {key: str(request.get("method")) for key, request in requests.items()}
        merge = isinstance(outcome, Elicitation)
        # Sealed with the tool's name: a state given by one tool never reaches
        # another; and with the round, so that only what was asked is answered.
        sealed = self.dispatcher.sealer.seal_state(
            json.dumps([tool, state, asked, merge]), _STATE_TTL, binding_of(context.caller)
        )
        return {"resultType": "input_required", "inputRequests": requests, "requestState": sealed}

    async def _wait(self, token: str, context: RequestContext) -> Result:
        """The outcome of a promise, for a client that cannot take a task.  That
        client never saw the token: when it leaves, the call is cancelled."""
        wait = self.dispatcher.config.max_redeem_wait
        try:
            while True:
                result = await self.dispatcher.redeem(token, wait, context)
                if not isinstance(result.outcome, Promised):
                    return result
        except asyncio.CancelledError:
            with contextlib.suppress(MCPLiteError):
                await self.dispatcher.cancel(token, context)
            raise

    # -- 2025: asking the client on the call's stream -------------------------

    async def _ask_client(
        self,
        name: str,
        arguments: Any,
        context: RequestContext,
        result: Result,
        send: Sender,
    ) -> Result:
        """Where the 2026 revision answers ``input_required``, a 2025 client is asked
        itself: each input request goes out as a JSON-RPC request on the call's
        stream, the client POSTs its answer back, and the tool runs again with the
        answers, round after round.  The pending requests live in this process."""
        for _ in range(_MAX_ROUNDS):
            outcome = result.outcome
            if not isinstance(outcome, Elicitation | InputRequired):
                return result
            answers = await self._asked(input_requests(outcome), send, context)
            if isinstance(answers, Result):
                return answers
            state = outcome.state if isinstance(outcome, InputRequired) else None
            context = dataclasses.replace(context, input_responses=answers, request_state=state)
            result = await self._run(name, arguments, context, isinstance(outcome, Elicitation))
            if isinstance(result.outcome, Promised):
                result = await self._wait(result.outcome.token, context)
        return result

    async def _asked(
        self, requests: Mapping[str, Mapping[str, Any]], send: Sender, context: RequestContext
    ) -> dict[str, Any] | Result:
        """Send ``requests`` to the client; its answers by key, or the failure that
        ends the call (an error answer, no answer in time, too many pending).  Only
        the caller that was asked can answer (with auth on: the same subject)."""
        started = time.time()
        if len(self._pending) + len(requests) > _MAX_PENDING:
            return _failed(started, "too many requests to clients are pending; try again")
        loop = asyncio.get_running_loop()
        waiting: dict[str, tuple[str, asyncio.Future[Any]]] = {}
        try:
            for key, asked in requests.items():
                request_id = f"mcplite-{uuid.uuid4()}"
                future: asyncio.Future[Any] = loop.create_future()
                self._pending[request_id] = (future, binding_of(context.caller))
                waiting[key] = (request_id, future)
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": asked.get("method"),
                        "params": asked.get("params", {}),
                    }
                )
            futures = [future for _, future in waiting.values()]
            done, _ = await asyncio.wait(futures, timeout=_ASK_TIMEOUT)
            answers: dict[str, Any] = {}
            for key, (_, future) in waiting.items():
                method = requests[key].get("method")
                if future not in done:
                    return _failed(started, f"the client did not answer {method} in time")
                answer = future.result()
                if "error" in answer:
                    error = answer["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    return _failed(started, f"the client could not answer {method}: {message}")
                answers[key] = answer.get("result")
            try:
                asked = {key: str(request.get("method")) for key, request in requests.items()}
                return check_answers(answers, asked) or {}
            except InvalidParams as exc:
                return _failed(started, f"the client's answer is not usable: {exc.message}")
        finally:
            for request_id, _ in waiting.values():
                self._pending.pop(request_id, None)

    def _answered(self, message: dict[str, Any], context: RequestContext) -> None:
        """A client's answer to a request of :meth:`_asked` (others are dropped)."""
        request_id = message.get("id")
        pending = self._pending.get(request_id) if isinstance(request_id, str) else None
        if pending is None:
            return
        future, asked = pending
        if not future.done() and hmac.compare_digest(asked, binding_of(context.caller)):
            future.set_result(message)

    # -- tasks (extension io.modelcontextprotocol/tasks) -----------------------

    def _task_fields(self, task: Task, status: TaskStatus, result_type: str) -> dict[str, Any]:
        ttl = self.dispatcher.config.promise_ttl
        out: dict[str, Any] = {
            "resultType": result_type,
            "taskId": task.task_id,
            "status": str(status),
            "createdAt": _iso(task.created_at),
            "lastUpdatedAt": _iso(task.updated_at),
            "ttlMs": int(ttl * 1000) if math.isfinite(ttl) else None,
            "pollIntervalMs": _POLL_INTERVAL_MS,
        }
        progress = task.progress or {}
        if status is TaskStatus.WORKING and isinstance(progress.get("message"), str):
            out["statusMessage"] = progress["message"]
        return out

    async def _find_task(self, request: _Request) -> Task:
        if TASKS_EXTENSION not in _extensions(request.capabilities):
            raise MissingCapability(
                f"extensions.{TASKS_EXTENSION}", {"extensions": {TASKS_EXTENSION: {}}}
            )
        task_id = request.params.get("taskId")
        if not isinstance(task_id, str):
            raise InvalidParams("Invalid params: taskId must be a string")
        try:
            task = await self.tasks.find(task_id, request.context)
            await self.tasks.settle(task)
        except _TOKEN_ERRORS as exc:
            raise InvalidParams(f"Unknown task: {exc.message}", {"taskId": task_id}) from None
        return task

    async def _task_get(self, request: _Request) -> dict[str, Any]:
        task = await self._find_task(request)
        status = task.status
        out = self._task_fields(task, status, "complete")
        if status is TaskStatus.INPUT_REQUIRED:
            out["inputRequests"] = task.open_requests()
        elif status is TaskStatus.FAILED:
            assert isinstance(task.outcome, MCPLiteError)
            out["error"] = {"code": task.outcome.jsonrpc_code, "message": task.outcome.message}
        elif status is TaskStatus.COMPLETED:
            assert isinstance(task.outcome, Result)
            out["result"] = {"resultType": "complete", **call_result(task.outcome, True)}
        return out

    async def _task_update(self, request: _Request) -> dict[str, Any]:
        task = await self._find_task(request)
        responses = request.params.get("inputResponses")
        if not isinstance(responses, dict):
            raise InvalidParams("Invalid params: inputResponses must be an object")
        await self.tasks.update(task, responses)
        return {}

    async def _task_cancel(self, request: _Request) -> dict[str, Any]:
        task = await self._find_task(request)
        await self.tasks.cancel(task)
        return {}


def _cacheable(result: dict[str, Any], request: _Request, scope: str) -> dict[str, Any]:
    """``result`` with the 2026 caching hints (none before): not to be reused
    without asking again (``ttlMs: 0``), by everyone or this caller only."""
    if request.modern:
        result["ttlMs"] = 0
        result["cacheScope"] = scope
    return result


#: What a tool declared ``task_support="required"`` needs of a 2026 client.
_TASKS_REQUIRED: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}


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


def _tool_definition(definition: Mapping[str, Any], tool: Tool, modern: bool) -> dict[str, Any]:
    """An MCP ``Tool``: the MCP-lite entry (title, annotations and icons included)
    without ``@type``, with ``outputSchema`` when the tool's answers carry
    ``structuredContent`` of a known shape, and ``execution.taskSupport`` when
    the tool declares it."""
    out = {k: v for k, v in definition.items() if k != "@type"}
    output_schema = tool.output_schema_for(modern)
    if output_schema is not None:
        out["outputSchema"] = output_schema
    if tool.task_support is not None:
        out["execution"] = {"taskSupport": tool.task_support}
    return out


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _iso(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _failed(started: float, message: str) -> Result:
    """A call that ends as a failure without running (again)."""
    return Result(Failure(message), started, (time.time() - started) * 1000)
