"""One MCP message in, one reply out, for any transport (HTTP, stdio).

:class:`McpServer` speaks both revisions from the same core
(:class:`~mcplite.core.dispatch.Dispatcher`) and the same method table as
MCP-lite's JSON-RPC endpoint (:mod:`mcplite.protocols.methods`).  A transport
hands it a decoded message, the request's headers (None on stdio, which has
none), a ``notify`` callback for what a tool says before its result and a
``send`` callback for requests to the client (2025); it gets back an
:class:`McpReply`: the HTTP status the official server would use
(:mod:`mcplite.protocols.status`) and the JSON-RPC response (None: nothing to
send, e.g. for a notification).

Every message takes one path, :meth:`McpServer.handle`: the revision, the
JSON-RPC checks, then 2026's ``_meta`` and header checks in the order the
official suite requires (:mod:`.protocol`), the method's handler, the reply.
Over HTTP, the 2026 ``tools/call`` most clients send has those checks in one
pass first (:meth:`McpServer._plain_call`), to the same request and handler;
anything out of that shape takes the path above.
What each method does, and how outcomes map onto MCP, is with its handler:
tools (:mod:`mcplite.protocols.tools`), prompts, resources, completion, tasks
(:mod:`.tasks`), input rounds (:mod:`.rounds`), ``subscriptions/listen``
(:mod:`.subscriptions`); ``notifications/cancelled`` over HTTP stops the
request it names (:mod:`.inflight`).  Here: ``initialize`` (2025) and
``server/discover`` (2026).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from ..._version import __version__
from ...core.context import LOG_LEVELS, Notifier, RequestContext
from ...core.dispatch import Dispatcher
from ...core.errors import InvalidParams, InvalidRequest, MCPLiteError, MethodNotFound
from ...core.prompts import Prompts
from ...core.resources import Resources
from ...core.tools import Kind
from ..jsoncodec import encode
from ..jsonrpc import check_request
from ..methods import McpMethods, Method, method_table
from ..prompts import PromptMethods
from ..requests import MCP_2025, MCP_2026, NO_ID, Profile, Request, Sender
from ..resources import ResourceMethods
from ..status import http_status
from ..tools import ToolMethods
from .inflight import InFlight
from .protocol import (
    BASE64_OPEN,
    CAPABILITIES_KEY,
    LEGACY_VERSIONS,
    LOG_LEVEL_KEY,
    MODERN_VERSION,
    SERVER_INFO_KEY,
    TASKS_EXTENSION,
    VERSION_KEY,
    checked_meta,
)
from .rounds import InputRounds
from .subscriptions import Subscriptions
from .tasks import TaskMethods, TaskTable

__all__ = ["McpReply", "McpServer", "Sender"]

_STREAM = Kind.STREAM


@dataclass(slots=True)
class McpReply:
    """The HTTP status to answer with, and the JSON-RPC response (None: none)."""

    status: int
    body: dict[str, Any] | None
    #: ``body`` as JSON, when known already (see :meth:`json`): a reply's body
    #: is not changed once the reply is made.
    encoded: bytes | None = None

    def json(self) -> bytes:
        """``body`` as :func:`~mcplite.protocols.jsoncodec.encode` writes it,
        raising as it does."""
        if self.encoded is not None:
            return self.encoded
        return encode(self.body)


async def _no_reply() -> None:
    return None


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
        config = dispatcher.config
        #: Served beside the dispatcher's tools (None: the methods are not offered).
        self.prompts = prompts
        self.resources = resources
        self.server_info = {"name": name, "version": __version__}
        identity = encode({SERVER_INFO_KEY: self.server_info})[1:-1]
        #: What closes a 2026 result without ``_meta``, and one whose ``_meta``
        #: is its last field: how many bytes of its JSON to replace, and with what.
        self._tails = (
            (2, b',"_meta":{' + identity + b'},"resultType":"complete"}}'),
            (3, b"," + identity + b'},"resultType":"complete"}}'),
        )
        self.instructions = instructions
        #: Tasks of this process: what MCP needs beyond the promise (see .tasks).
        self.tasks = TaskTable(dispatcher, config.max_promises)
        self.rounds = InputRounds(dispatcher)
        self.inflight = InFlight()
        served = frozenset(
            kind
            for kind, registry in (("tools", True), ("prompts", prompts), ("resources", resources))
            if registry is not None
        )
        self.subscriptions = Subscriptions(served, config.max_connections, config.retry_after)
        self._listen_for_changes()
        size = config.page_size
        table = method_table(
            ToolMethods(dispatcher, self.rounds, self.tasks),
            PromptMethods(prompts, size, self.rounds) if prompts is not None else None,
            ResourceMethods(resources, size) if resources is not None else None,
            McpMethods(
                self._initialize,
                self._discover,
                TaskMethods(self.tasks),
                self.subscriptions.listen,
            ),
        )
        self.methods = table
        self._modern = table.view(MCP_2026)
        self._tools_call = self._modern["tools/call"].handler
        self._legacy = table.view(MCP_2025)

    # -- which revision, and whether the answer may be a stream ---------------

    def is_modern(self, message: Any, headers: Mapping[str, str] | None) -> bool:
        """Which revision a message speaks: the ``MCP-Protocol-Version`` header
        decides over HTTP (absent or a 2025 version: 2025); without it, a
        2026 ``_meta`` envelope in the body."""
        sent = None if headers is None else headers.get("mcp-protocol-version")
        return _is_modern(message, sent)

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
        tool = self.dispatcher.served.get(name) if isinstance(name, str) else None
        return tool is not None and (tool.context_param is not None or tool.kind is _STREAM)

    # -- the one path --------------------------------------------------------
    # handle and call_tool are plain functions returning the coroutine that
    # answers: one coroutine per request, not one awaiting another.

    def handle(
        self,
        message: Any,
        context: RequestContext,
        headers: Mapping[str, str] | None = None,
        notify: Notifier | None = None,
        *,
        send: Sender | None = None,
        fresh: bool = False,
        modern: bool | None = None,
    ) -> Coroutine[Any, Any, McpReply]:
        """Answer one decoded message; never raises a protocol error.

        ``notify`` takes what a tool says before its result (progress, log
        messages); ``send`` puts a whole message on the response's stream, which
        a 2025 call uses to ask the client for what a tool needs (sampling,
        elicitation, roots).  Without them, nothing is said and nothing asked.
        ``fresh``: ``context`` was made for this message alone, so the request's
        own fields (progress token, capabilities...) are set on it, not on a copy.
        ``modern``: :meth:`is_modern`'s answer, when the caller has it already.
        """
        sent = None if headers is None else headers.get("mcp-protocol-version")
        if modern is None:
            modern = _is_modern(message, sent)
        return self._answer(message, context, headers, notify, send, fresh, modern, sent, True)

    def call_tool(
        self, message: Any, context: RequestContext, headers: Mapping[str, str]
    ) -> Coroutine[Any, Any, McpReply | None]:
        """Over HTTP, to a client that takes JSON: the reply to ``message`` when
        nothing can be said before its result (see :meth:`may_notify`), as
        :meth:`handle` gives it (``context`` made for this message alone); None,
        with nothing done, for a message that may be worth a stream."""
        sent = headers.get("mcp-protocol-version")
        if sent == MODERN_VERSION:
            request = self._plain_call(message, context, headers)
            if request is not None:
                return self._call_plainly(request)
        modern = sent not in LEGACY_VERSIONS if sent is not None else _is_modern(message, None)
        if self.may_notify(message, headers, modern):
            return _no_reply()
        return self._answer(message, context, headers, None, None, True, modern, sent, not modern)

    def _plain_call(
        self, message: Any, context: RequestContext, headers: Mapping[str, str]
    ) -> Request | None:
        """The request of the 2026 ``tools/call`` most calls are, checked in one
        pass, ``context`` filled in as :meth:`_answer` fills it: a JSON-RPC
        request with the ``_meta``, version and headers 2026 asks for, naming a
        served tool that says nothing before its result, no ``inputResponses``,
        auth off.  None for anything else, which :meth:`_answer` then
        takes check by check (to the same answer, or the error that says why)."""
        if type(message) is not dict or message.get("method") != "tools/call":
            return None
        request_id = message.get("id")
        params = message.get("params")
        if (
            (type(request_id) is not int and type(request_id) is not str)
            or type(params) is not dict
            or message.get("jsonrpc") != "2.0"
        ):
            return None
        meta = params.get("_meta")
        name = params.get("name")
        if (
            type(meta) is not dict
            or type(name) is not str
            or meta.get(VERSION_KEY) != MODERN_VERSION
            or type(capabilities := meta.get(CAPABILITIES_KEY)) is not dict
            or "inputResponses" in params
            or headers.get("mcp-method") != "tools/call"
            or headers.get("mcp-name") != name
            or name.startswith(BASE64_OPEN)
        ):
            return None
        dispatcher = self.dispatcher
        tool = dispatcher.served.get(name)
        if (
            tool is None
            or tool.context_param is not None
            or tool.kind is _STREAM
            or dispatcher.auth is not None
        ):
            return None
        token = meta.get("progressToken")
        if token is not None and (isinstance(token, bool) or not isinstance(token, str | int)):
            token = None
        level = meta.get(LOG_LEVEL_KEY)
        context.notify = None
        context.progress_token = token
        context.log_level = None if level is None or level not in LOG_LEVELS else level
        context.input_responses = None
        context.client_capabilities = capabilities
        context.meta = meta
        request = Request(request_id, "tools/call", params, MCP_2026, context)
        request.headers = headers
        request.capabilities = capabilities
        return request

    async def _call_plainly(self, request: Request) -> McpReply:
        """Answer what :meth:`_plain_call` checked: its handler, then the reply."""
        try:
            result = await self._tools_call(request)
        except MCPLiteError as exc:
            return self._error(request.id, exc, MCP_2026)
        return self._modern_reply(request.id, result)

    async def _answer(
        self,
        message: Any,
        context: RequestContext,
        headers: Mapping[str, str] | None,
        notify: Notifier | None,
        send: Sender | None,
        fresh: bool,
        modern: bool,
        sent_version: str | None,
        cancellable: bool,
    ) -> McpReply:
        """The one path: the JSON-RPC checks, 2026's ``_meta`` and header checks,
        the context filled in, the method's handler, the reply (see :meth:`handle`).
        ``cancellable``: over HTTP, ``notifications/cancelled`` may stop it (all
        but 2026's plain JSON calls, whose clients close the connection instead)."""
        profile = MCP_2026 if modern else MCP_2025
        if isinstance(message, list):
            error = InvalidRequest("Invalid request: batches are not supported by MCP")
            return self._error(None, error, profile)
        if (
            isinstance(message, dict)
            and "method" not in message
            and ("result" in message or "error" in message)
        ):
            if modern:  # 2026 has no requests from the server: nothing to answer
                error = InvalidRequest("Invalid request: unexpected JSON-RPC response")
                return self._error(None, error, profile)
            self.rounds.answer(message, context)  # 2025: a client answers what a call asked
            return McpReply(202, None)
        try:
            request = check_request(message, profile, context)
        except InvalidRequest as exc:
            known = message.get("id") if isinstance(message, dict) else None
            if type(known) is not str and type(known) is not int:
                known = None  # no id to echo (true, 1.5, an object): null, as JSON-RPC says
            return self._error(known, exc, profile)
        request_id = request.id
        if request_id is None:
            return self._error(
                None, InvalidRequest("Invalid request: id must not be null"), profile
            )
        if request_id is NO_ID:
            if request.method == "notifications/cancelled" and headers is not None:
                self._cancel_request(request.params, context)
            return McpReply(202, None)  # a notification: nothing to answer
        params = request.params
        if params is None:
            request.params = params = {}
        elif type(params) is not dict:
            invalid = InvalidParams("Invalid params: expected an object")
            return self._error(request_id, invalid, profile)
        try:
            # What 2026 asks beyond JSON-RPC (_meta, headers, version), then what
            # the handler reads: the context filled in from _meta, the client's
            # capabilities, the headers, send.
            capabilities: Mapping[str, Any]
            if modern:
                meta: Any = checked_meta(params, request.method, headers, sent_version)
                capabilities = meta[CAPABILITIES_KEY]
                level = meta.get(LOG_LEVEL_KEY)
                log_level = None if level is None or level not in LOG_LEVELS else level
                responses = params.get("inputResponses")
                if (responses is not None or "inputResponses" in params) and not isinstance(
                    responses, dict
                ):
                    raise InvalidParams(
                        "Invalid params: inputResponses must be an object",
                        {"field": "inputResponses"},
                    )
            else:
                meta = params.get("_meta")
                capabilities = {}  # a dict, as a tool may return it
                log_level = "info"  # stateless: logging/setLevel cannot be remembered
                responses = None  # 2025 has none
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            if token is not None and (isinstance(token, bool) or not isinstance(token, str | int)):
                token = None
            sent_meta = meta if type(meta) is dict else None
            if fresh:
                context.notify = notify
                context.progress_token = token
                context.log_level = log_level
                context.input_responses = responses
                context.client_capabilities = capabilities
                context.meta = sent_meta
            else:  # built directly: dataclasses.replace costs more than the rest of the checks
                request.context = RequestContext(
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
                    sent_meta,
                )
            request.headers = headers
            request.capabilities = capabilities
            request.send = send
            found: Method | None = (self._modern if modern else self._legacy).get(request.method)
            if found is None:
                raise MethodNotFound(
                    f"Method not found: {request.method}", {"method": request.method}
                )
            if self.dispatcher.auth is not None:
                self.dispatcher.auth.admit(context, request.method)
            if headers is None or not cancellable:
                # stdio cancels its requests itself; a 2026 plain JSON call is
                # cancelled by closing its connection (the fast path stays lean).
                result = await found.handler(request)
            else:
                inflight = self.inflight
                task = asyncio.current_task()
                assert task is not None
                key = inflight.key(request.context.caller, request_id)
                inflight.add(key, task)
                try:
                    result = await found.handler(request)
                except asyncio.CancelledError:
                    if not inflight.stopped(task):
                        raise
                    return McpReply(202, None)  # cancelled by the client: MCP sends no answer
                finally:
                    inflight.discard(key, task)
        except MCPLiteError as exc:
            return self._error(request_id, exc, profile)
        if modern:
            return self._modern_reply(request_id, result)
        return McpReply(200, {"jsonrpc": "2.0", "id": request_id, "result": result})

    def _modern_reply(self, request_id: Any, result: dict[str, Any]) -> McpReply:
        """A 2026 result's reply: the server's identity added to its ``_meta``, and
        ``resultType`` (``complete`` unless the handler said otherwise).

        When those go at the result's end (no ``resultType`` yet; no ``_meta``,
        or ``_meta`` its last field), its JSON is made here: the result as the
        handler gave it, then, in place of its last closing braces, those fields
        as the server encoded them once.  The standard library's encoder spends
        a third of a small answer's time on them."""
        body = {"jsonrpc": "2.0", "id": request_id, "result": result}
        tail = None
        if "resultType" not in result and result:
            meta = result.get("_meta")
            if meta is None:
                tail = self._tails[0] if "_meta" not in result else None
            elif (
                type(meta) is dict
                and meta
                and SERVER_INFO_KEY not in meta
                and next(reversed(result)) == "_meta"
            ):
                tail = self._tails[1]
        encoded = None
        if tail is not None:
            # (try, not contextlib.suppress: its context manager costs more than the rest)
            try:
                encoded = encode(body)[: -tail[0]] + tail[1]
            except (TypeError, ValueError):
                encoded = None  # not JSON: json() says so
        meta = result.get("_meta")
        if type(meta) is not dict:
            result["_meta"] = meta = {}
        meta[SERVER_INFO_KEY] = self.server_info
        result.setdefault("resultType", "complete")
        return McpReply(200, body, encoded)

    def _error(self, request_id: Any, error: MCPLiteError, profile: Profile) -> McpReply:
        return McpReply(
            http_status(error, profile),
            {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()},
        )

    def _cancel_request(self, params: Any, context: RequestContext) -> None:
        """``notifications/cancelled`` over HTTP: stop the request it names when it
        runs in this process for the same caller (see :mod:`.inflight`)."""
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return
        self.inflight.cancel(self.inflight.key(context.caller, request_id))

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

    async def _discover(self, request: Request) -> dict[str, Any]:
        out: dict[str, Any] = {
            "supportedVersions": [MODERN_VERSION],
            "capabilities": self._capabilities(True),
            "ttlMs": 0,
            "cacheScope": "public",
        }
        if self.instructions:
            out["instructions"] = self.instructions
        return out

    async def _initialize(self, request: Request) -> dict[str, Any]:
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

    # -- subscriptions/listen (2026) -----------------------------------------

    @property
    def subscription_count(self) -> int:
        """How many ``subscriptions/listen`` streams are open."""
        return len(self.subscriptions)

    def end_subscriptions(self) -> None:
        """End every open ``subscriptions/listen`` (at shutdown): each answers its
        final ``resultType: complete`` result, which ends its stream; so does
        any listen that comes after."""
        self.subscriptions.end()

    def list_changed(self, kind: str) -> None:
        """Tell every subscription that asked for it that the list of ``kind``
        (``"tools"``, ``"prompts"``, ``"resources"``) changed; any thread may call it.
        The registries call it on every change."""
        self.subscriptions.changed(kind)

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


def _is_modern(message: Any, sent_version: str | None) -> bool:
    """2026 by the ``MCP-Protocol-Version`` header sent (a 2025 version: 2025);
    without one, by a 2026 ``_meta`` envelope in the body."""
    if sent_version is not None:
        return sent_version not in LEGACY_VERSIONS
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and VERSION_KEY in meta
