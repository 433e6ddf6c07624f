"""The MCP endpoint (``POST /mcp``, stateless streamable HTTP): a
:class:`~.messages.Request` in, JSON or an SSE stream out, knowing no socket.

The answer is JSON, or an SSE stream once the call says something before its
result (progress, log messages) and the client takes ``text/event-stream``;
see :mod:`mcplite.protocols.mcp.server` for the methods.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ...core.context import RequestContext
from ...core.errors import MCPLiteError, ParseError, Unauthenticated
from ...core.runner import abandon, start_task, wake
from ...protocols.jsonrpc import JsonRpc, decode, encode
from ...protocols.mcp.server import McpReply, McpServer
from . import sse
from .endpoints import Endpoint
from .messages import EventStream, HeaderView, Request, Response, StreamingResponse
from .statuses import JSON, error_body

__all__ = ["McpEndpoint", "McpEvents"]

#: What keeps a silent stream alive (an SSE comment: clients ignore it).
PING = b": ping\n\n"


@dataclasses.dataclass(slots=True)
class McpEndpoint(Endpoint):
    """``POST /mcp`` over ``mcp`` (which a server may replace: read at each call)."""

    mcp: McpServer

    async def handle(self, request: Request) -> Response | StreamingResponse:
        accept = request.headers.get(b"accept", b"*/*")
        takes = _TAKES.get(accept)
        sse_ok, json_ok = takes if takes is not None else _takes(accept)
        if not (json_ok or sse_ok):
            return Response(406, JSON, error_body(406, "Not acceptable: accept application/json"))
        try:
            message = decode(request.body)
        except ParseError as exc:
            return Response(400, JSON, JsonRpc.error_bytes(None, exc))
        mcp = self.mcp
        # The MCP checks read a few headers by name: decoded when read.
        headers = HeaderView(request.headers)
        context = RequestContext("mcp", request.peer, headers, request.caller)
        request.tool = _target(message)
        if json_ok:  # the common call, answered as JSON, its checks in one pass
            reply = await mcp.call_tool(message, context, headers)
            if reply is not None:
                return self.reply(reply, request)
        modern = mcp.is_modern(message, headers)
        if not sse_ok and _method(message) == "subscriptions/listen":  # always a stream
            refusal = "Not acceptable: subscriptions/listen answers text/event-stream"
            return Response(406, JSON, error_body(406, refusal))
        if not (sse_ok and (mcp.may_notify(message, headers, modern) or not json_ok)) or (
            request.caller is None
            and self.dispatcher.auth is not None
            and not self._admitted(context, message)
        ):
            # (An anonymous request that will be refused gets its 401 as JSON, not
            # as an event on a 200 stream: the status and challenge must show.)
            reply = await mcp.handle(message, context, headers, fresh=True, modern=modern)
            return self.reply(reply, request)
        return await self._stream(request, message, context, headers, json_ok, modern)

    def reply(self, reply: McpReply, request: Request) -> Response:
        """An MCP reply as an HTTP response: its status, the challenge of a 401 or
        403, and a result JSON cannot hold (NaN, bytes) turned into an internal error."""
        if reply.body is None:
            return Response(202, [], b"")
        if reply.status == 401 or reply.status == 403:
            data = reply.body.get("error", {}).get("data") or {}
            scopes = tuple(data.get("scopes", ()))
            return self.refusal(request, reply.status, scopes, encode(reply.body))
        try:
            body = reply.json()
        except (TypeError, ValueError) as exc:
            error = self.dispatcher.not_json("(result encoding)", exc)
            body = JsonRpc.error_bytes(reply.body.get("id"), error)
        return Response(reply.status, JSON, body)

    def _admitted(self, context: RequestContext, message: Any) -> bool:
        """Whether auth lets this anonymous request through."""
        auth = self.dispatcher.auth
        assert auth is not None
        try:
            auth.admit(context, str(_method(message)))
        except Unauthenticated:
            return False
        return True

    async def _stream(
        self,
        request: Request,
        message: Any,
        context: RequestContext,
        headers: HeaderView,
        json_ok: bool,
        modern: bool,
    ) -> Response | StreamingResponse:
        """A request that may say something before its result: JSON when it says
        nothing first (and the client takes JSON), else an SSE stream."""
        events = McpEvents(self.config.heartbeat)
        # (Eager from Python 3.12 on: a call that answers without waiting is done here.)
        events.call = call = start_task(
            self.mcp.handle(
                message,
                context,
                headers,
                events.notify,
                send=events.send,
                fresh=True,
                modern=modern,
            )
        )
        streaming = False
        try:
            await events.news()
            if call.done() and not events.pending and json_ok:
                return self.reply(call.result(), request)  # it said nothing first: plain JSON
            streaming = True
            return StreamingResponse(events)
        finally:
            if not streaming:
                events.close()


class McpEvents:
    """The SSE frames of an MCP request answered as a stream: each message the
    call sends (notifications, requests to the client) as it comes, ``: ping``
    while it is silent for ``heartbeat`` seconds, then its reply."""

    def __init__(self, heartbeat: float) -> None:
        self.heartbeat = heartbeat
        self.pending: list[dict[str, Any]] = []
        self.call: asyncio.Task[McpReply] | None = None
        self._waiter: asyncio.Future[None] | None = None  # what news() awaits
        self._open = True  # False once the response is over: a task's later news goes nowhere
        self._ended = False
        self._loop = asyncio.get_running_loop()

    def send(self, message: dict[str, Any]) -> None:
        """Queue a message for the stream (from the loop)."""
        if self._open:
            self.pending.append(message)
            self._woken()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Queue a notification, from the loop or from a sync tool's worker thread."""
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a sync tool, from its worker thread
            self._loop.call_soon_threadsafe(self.send, message)
        else:
            self.send(message)

    async def news(self, timeout: float | None = None) -> bool:
        """Wait until the call ends or has sent something (True), or for
        ``timeout`` seconds of silence (False): one future, woken by the call's
        end or by :meth:`send`, rather than a task and ``asyncio.wait`` per wait."""
        call = self.call
        assert call is not None
        if not (call.done() or self.pending or not self._open):
            self._waiter = waiter = self._loop.create_future()
            call.add_done_callback(self._woken)
            timer = None if timeout is None else self._loop.call_later(timeout, wake, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                call.remove_done_callback(self._woken)
                if timer is not None:
                    timer.cancel()
        return call.done() or bool(self.pending) or not self._open

    def _woken(self, _call: object = None) -> None:
        wake(self._waiter)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> bytes:
        call = self.call
        assert call is not None
        while not self._ended:
            if self.pending:
                return sse.frame_json("message", self.pending.pop(0))
            if call.done():
                self._ended = True
                reply = call.result()
                if reply.body is not None:
                    return sse.frame("message", reply.json().decode())
                break
            if not await self.news(self.heartbeat):
                return PING  # a silent tool, or a client still answering: keep the stream alive
        raise StopAsyncIteration

    def interrupt(self, error: MCPLiteError) -> None:
        """Nothing: at the end of the grace period the call is cancelled instead."""

    def close(self) -> None:
        """Stop: later messages go nowhere, the call is stopped (and how it ends read)."""
        self._open = False
        self._ended = True
        self.pending.clear()
        self._woken()
        if self.call is not None:
            abandon(self.call)  # the client left: stop the tool (and read how it ends)

    async def aclose(self, *, disconnected: bool) -> None:
        self.close()


#: What each Accept header seen takes (SSE, JSON): clients repeat theirs.
_TAKES: dict[bytes, tuple[bool, bool]] = {}
#: How many Accept headers :data:`_TAKES` keeps.
_TAKES_KEPT = 64


def _takes(accept: bytes) -> tuple[bool, bool]:
    """Whether an ``Accept`` header takes an SSE stream, and JSON."""
    # bytes.find, not "in": on bytes, "in" first tries its operand as an int
    # and builds (then drops) a TypeError, nearly twice the cost.
    takes = (
        accept.find(b"text/event-stream") >= 0,
        accept.find(b"application/json") >= 0
        or accept.find(b"*/*") >= 0
        or accept.find(b"application/*") >= 0,
    )
    if len(_TAKES) < _TAKES_KEPT and len(accept) <= 256:
        _TAKES[accept] = takes
    return takes


def _target(message: Any) -> str | None:
    """What an MCP request names, for the access log: the tool, or the method."""
    if not isinstance(message, dict):
        return None
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    if isinstance(name, str):
        return name
    method = message.get("method")
    return method if isinstance(method, str) else None


def _method(message: Any) -> Any:
    return message.get("method") if isinstance(message, dict) else None
