"""The MCP-lite endpoints: each takes a :class:`~.messages.Request` and gives a
response, knowing no socket.

- :class:`ToolsList`: ``POST {base}/listtools`` and its alias ``/tools``:
  ``{"tools": [...]}`` (spec 4.2.1, A.1);
- :class:`PromptsList`: ``POST {base}/prompts``: ``{"prompts": [...]}`` (spec 8.1);
- :class:`JsonRpcCalls`: ``POST {base}/calltools`` and its alias ``/rpc``:
  JSON-RPC 2.0 (spec 4.2.2, A.2), or an SSE stream (spec 4.3, A.4);
- :class:`ResourceMetadata`: ``GET`` of the OAuth metadata (RFC 9728).

A JSON-RPC reply becomes a status here, in one place: none (a notification)
``202``, an overload ``503`` with ``Retry-After``, a refused caller ``401`` or
``403`` with its challenge, anything else ``200``.
"""

from __future__ import annotations

import dataclasses

from ...core.config import Config
from ...core.dispatch import Dispatcher, ToolStream
from ...core.errors import Forbidden, MCPLiteError, Overloaded, ParseError
from ...core.outcomes import Partial, ProgressUpdate
from ...core.prompts import Prompts
from ...protocols.jsonrpc import JsonRpc, Reply, decode, encode
from ...protocols.requests import LITE
from ...protocols.status import http_status
from . import sse
from .messages import EventStream, Request, Response, StreamingResponse
from .protected import ProtectedResource
from .statuses import JSON, retry_after

__all__ = [
    "HEARTBEAT",
    "JsonRpcCalls",
    "PromptsList",
    "ResourceMetadata",
    "ToolEvents",
    "ToolsList",
    "unparsable",
]

#: The event a stream sends while its tool is silent.
HEARTBEAT = sse.frame("heartbeat", "{}")


def unparsable(body: bytes) -> Response | None:
    """``400`` with a JSON-RPC parse error for a body that is not blank and not
    JSON (a list endpoint reads nothing of its body, but refuses a broken one)."""
    if body.strip():
        try:
            decode(body)
        except ParseError as exc:
            return Response(400, JSON, JsonRpc.error_bytes(None, exc))
    return None


class ToolsList:
    """``{"tools": [...]}``: each caller sees the tools it may call (with auth
    off, the same list for everyone, encoded once per version of the list)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._body = encode({"tools": dispatcher.tool_definitions()})
        self._version = dispatcher.version

    @property
    def body(self) -> bytes:
        """The list everyone sees, encoded once per version of the dispatcher's list."""
        dispatcher = self.dispatcher
        version = dispatcher.version
        if self._version != version:
            self._body = encode({"tools": dispatcher.tool_definitions()})
            self._version = version
        return self._body

    def answer(self, request: Request) -> Response:
        refused = unparsable(request.body)
        if refused is not None:
            return refused
        dispatcher = self.dispatcher
        if dispatcher.auth is None:
            return Response(200, JSON, self.body)
        tools = dispatcher.tool_definitions(request.context())
        return Response(200, JSON, encode({"tools": tools}))


class PromptsList:
    """``{"prompts": [...]}`` (spec 8.1: name, description, arguments; MCP's
    ``Prompt`` objects)."""

    def __init__(self, prompts: Prompts) -> None:
        self.prompts = prompts

    def answer(self, request: Request) -> Response:
        refused = unparsable(request.body)
        if refused is not None:
            return refused
        return Response(200, JSON, encode({"prompts": self.prompts.definitions()}))


class ResourceMetadata:
    """The Protected Resource Metadata (RFC 9728) of the resource a well-known
    path names."""

    def __init__(self, protected: ProtectedResource) -> None:
        self.protected = protected

    def answer(self, request: Request) -> Response:
        return Response(200, JSON, self.protected.metadata(request.path_text(), request.headers))


@dataclasses.dataclass(slots=True)
class Endpoint:
    """What an endpoint that calls tools holds, and how it refuses."""

    dispatcher: Dispatcher
    config: Config
    #: Where 401 and 403 answers point (None: authentication is off).
    protected: ProtectedResource | None = dataclasses.field(default=None, kw_only=True)

    def refusal(
        self, request: Request, status: int, scopes: tuple[str, ...], body: bytes
    ) -> Response:
        """A 401 or 403 with its ``WWW-Authenticate`` challenge (none with
        authentication off: a middleware's refusal)."""
        if self.protected is None:
            return Response(status, JSON, body)
        challenge = self.protected.challenge(request, status, scopes)
        return Response(status, [*JSON, challenge], body)


@dataclasses.dataclass(slots=True)
class JsonRpcCalls(Endpoint):
    """JSON-RPC 2.0 over ``rpc``; with ``Accept: text/event-stream``, a
    ``tools/call`` answered as SSE (a client that takes JSON too, as every MCP
    client does, gets JSON unless the tool streams by nature)."""

    rpc: JsonRpc

    async def handle(self, request: Request) -> Response | StreamingResponse:
        accept = request.headers.get(b"accept", b"")
        # bytes.find, not "in": on bytes, "in" first tries its operand as an int
        # and builds (then drops) a TypeError, nearly twice the cost.
        if accept.find(b"text/event-stream") >= 0:
            return await self._stream(request, json_too=accept.find(b"application/json") >= 0)
        return self.reply(await self.rpc.handle(request.body, request.context()), request)

    def reply(self, reply: Reply, request: Request) -> Response:
        """A JSON-RPC reply as an HTTP response (the one place an error class
        becomes a status)."""
        request.tool = reply.tool
        error = reply.error
        if reply.body is None:
            return Response(202, [], b"")
        status = 200 if error is None else http_status(error, LITE)
        if status == 200:
            return Response(200, JSON, reply.body)
        if isinstance(error, Overloaded):
            return Response(status, [*JSON, retry_after(error.retry_after)], reply.body)
        scopes = error.scopes if isinstance(error, Forbidden) else ()
        return self.refusal(request, status, scopes, reply.body)

    async def _stream(self, request: Request, *, json_too: bool) -> Response | StreamingResponse:
        """A ``tools/call`` answered as SSE.  Anything that is not a single valid
        call with an id, and every error before the tool starts, is answered as
        plain JSON-RPC, by the same checks and with the same errors."""
        reply = await self.rpc.handle_stream(request.body, request.context(), json_too=json_too)
        if isinstance(reply, Reply):
            return self.reply(reply, request)
        request.tool = reply.tool
        events = ToolEvents(reply.stream, self.dispatcher, self.config.heartbeat)
        return StreamingResponse(events)


class ToolEvents:
    """A streamed call's items as SSE frames: ``message`` (a part), ``progress``,
    ``heartbeat`` while the tool is silent for ``heartbeat`` seconds, then
    ``done`` or ``error``.  Each item is taken only when the last frame was
    (the stream's one-slot backpressure)."""

    def __init__(self, stream: ToolStream, dispatcher: Dispatcher, heartbeat: float) -> None:
        self.stream = stream
        self.dispatcher = dispatcher
        self.heartbeat = heartbeat
        self._ended = False

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> bytes:
        if self._ended:
            raise StopAsyncIteration
        try:
            item = await self.stream.next(self.heartbeat)
        except StopAsyncIteration:
            self._ended = True
            raise
        except MCPLiteError as exc:
            self._ended = True
            return sse.frame_json("error", exc.to_jsonrpc())
        if item is None:
            return HEARTBEAT
        if isinstance(item, ProgressUpdate):
            return sse.frame_json("progress", item.to_json())
        is_part = isinstance(item, Partial)
        try:
            if isinstance(item, Partial):
                frame = sse.frame_json("message", {"partial": item.value})
            else:
                frame = sse.frame_json("done", item.to_json())
        except (TypeError, ValueError) as exc:
            what = "part" if is_part else "result"
            error = self.dispatcher.not_json(self.stream.tool.name, exc, what)
            frame = sse.frame_json("error", error.to_jsonrpc())
            is_part = False
        if not is_part:
            self._ended = True
        return frame

    def interrupt(self, error: MCPLiteError) -> None:
        self.stream.interrupt(error)

    async def aclose(self, *, disconnected: bool) -> None:
        self._ended = True
        await self.stream.aclose(disconnected=disconnected)
