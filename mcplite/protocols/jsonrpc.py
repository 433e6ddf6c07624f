"""JSON-RPC 2.0 framing over bytes, shared by every JSON-RPC binding.

What each method does is in the method table (:mod:`mcplite.protocols.methods`); this
module only parses, checks, frames and encodes (JSON itself: :mod:`.jsoncodec`).
A request without ``id`` is a notification: it is processed, and gets no reply.
A batch (a JSON array) gets an array of the replies to its non-notifications.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine, Mapping
from typing import Any, NamedTuple

from ..core.context import IN_PROCESS, RequestContext
from ..core.dispatch import Dispatcher, ToolStream
from ..core.errors import InvalidRequest, MCPLiteError, MethodNotFound, ParseError
from .jsoncodec import decode, encode
from .methods import Method, mcplite_methods
from .requests import LITE, NO_ID, Profile, Request
from .shapes import JsonRpcResponse

__all__ = ["NO_ID", "JsonRpc", "Reply", "StreamReply", "check_request", "decode", "encode"]


class Reply(NamedTuple):
    """What to send back: ``body`` (None: nothing, e.g. notifications); ``error``
    when the whole reply is that one error (a binding maps its class to a status);
    ``tool``, what was called (for logs)."""

    body: bytes | None
    error: MCPLiteError | None = None
    tool: str | None = None


_new_reply = tuple.__new__


class StreamReply(NamedTuple):
    """A request that is answered as a stream: its id, the tool, the running stream."""

    request_id: Any
    tool: str
    stream: ToolStream


def _check_id(message: dict[str, Any], profile: Profile) -> Any:
    request_id = message.get("id", NO_ID)
    if type(request_id) is int or type(request_id) is str:  # the usual ids, checked first
        return request_id
    if request_id is NO_ID or request_id is None:
        return request_id
    if profile is not LITE and isinstance(request_id, float):
        # MCP's RequestId is a string or an integer (the official SDKs refuse 1.5).
        raise InvalidRequest("Invalid request: id must be a string or an integer")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | float):
        raise InvalidRequest("Invalid request: id must be a string, a number or null")
    if isinstance(request_id, float) and not math.isfinite(request_id):
        raise InvalidRequest("Invalid request: id is a number too large for JSON")
    return request_id


def check_request(
    message: Any, profile: Profile = LITE, context: RequestContext = IN_PROCESS
) -> Request:
    """The :class:`Request` one JSON-RPC message makes, for ``profile`` and
    ``context``; raises :class:`InvalidRequest`.  Its ``id`` is :data:`NO_ID`
    for a notification; its ``params`` are an object, an array or None."""
    if type(message) is dict:
        # The usual request, accepted at a glance; anything else is checked rule
        # by rule below (which accepts it too), for the error that says why not.
        method = message.get("method")
        params = message.get("params")
        request_id = message.get("id", NO_ID)
        if (
            type(method) is str
            and (type(request_id) is int or type(request_id) is str or request_id is NO_ID)
            and (type(params) is dict or params is None)
            and message.get("jsonrpc") == "2.0"
        ):
            return Request(request_id, method, params, profile, context)
    if not isinstance(message, dict):
        raise InvalidRequest("Invalid request: expected a JSON object")
    if message.get("jsonrpc") != "2.0":
        raise InvalidRequest('Invalid request: "jsonrpc" must be "2.0"')
    method = message.get("method")
    if not isinstance(method, str):
        raise InvalidRequest('Invalid request: "method" must be a string')
    params = message.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        raise InvalidRequest('Invalid request: "params" must be an object or an array')
    return Request(_check_id(message, profile), method, params, profile, context)


def _tool_name(message: Any) -> str | None:
    if isinstance(message, dict):
        params = message.get("params")
        if isinstance(params, dict):
            name = params.get("name")
            if isinstance(name, str):
                return name
    return None


def _known_id(message: Any) -> Any:
    """The id of an invalid request, when it can be told; else null."""
    if isinstance(message, dict):
        request_id = message.get("id")
        if isinstance(request_id, bool) or (
            isinstance(request_id, float) and not math.isfinite(request_id)
        ):
            return None
        if isinstance(request_id, str | int | float):
            return request_id
    return None


async def _ready(reply: Reply) -> Reply:
    return reply


class JsonRpc:
    """Turns request bytes into reply bytes through a method table.

    The table defaults to MCP-lite's (:func:`mcplite.protocols.methods.mcplite_methods`).
    Every request, whichever way it is to be answered, passes the same checks
    (:func:`check_request`) and takes the same path to its method's handler,
    alone or as a member of a batch.
    """

    def __init__(self, dispatcher: Dispatcher, methods: Mapping[str, Method] | None = None) -> None:
        self.dispatcher = dispatcher
        self.methods = methods if methods is not None else mcplite_methods(dispatcher)
        self.auth = dispatcher.auth

    # handle and answer are plain functions returning the coroutine that answers:
    # one coroutine per request, not one awaiting another.

    def handle(
        self, body: bytes, context: RequestContext = IN_PROCESS
    ) -> Coroutine[Any, Any, Reply]:
        """The reply to a request body (one request or a batch)."""
        try:
            message = decode(body)
        except ParseError as exc:
            return _ready(self.unparsable(exc))
        if type(message) is list:
            return self._batch(message, context)
        return self._one(message, context)

    def answer(
        self, message: Any, context: RequestContext = IN_PROCESS
    ) -> Coroutine[Any, Any, Reply]:
        """The reply to a decoded body: what :meth:`handle` answers after parsing."""
        if type(message) is list:
            return self._batch(message, context)
        return self._one(message, context)

    async def handle_stream(
        self, body: bytes, context: RequestContext = IN_PROCESS, *, json_too: bool = False
    ) -> Reply | StreamReply:
        """Like :meth:`handle`, for a client that takes a stream: a single valid
        request with an id to a method that can stream is started as one; every
        other body, and every error before the stream starts, is a plain reply.
        ``json_too``: the client takes JSON as well, so only a request whose
        target streams by nature (a streaming tool) is answered as a stream."""
        try:
            message = decode(body)
        except ParseError as exc:
            return self.unparsable(exc)
        if type(message) is dict:
            try:
                request = check_request(message, LITE, context)
            except InvalidRequest:
                return await self._one(message, context)
            found = self.methods.get(request.method)
            if (
                found is not None
                and found.stream is not None
                and request.id is not NO_ID
                and not (
                    json_too and not (found.streams is not None and found.streams(request.params))
                )
            ):
                tool = _tool_name(message)
                try:
                    if self.auth is not None:
                        self.auth.admit(context, request.method)
                    stream = found.stream(request)
                except MCPLiteError as exc:
                    return self.error_reply(request.id, exc, tool)
                return StreamReply(request.id, stream.tool.name, stream)
        return await self.answer(message, context)

    @classmethod
    def unparsable(cls, error: ParseError) -> Reply:
        """The reply to a body that is not JSON (the id cannot be told: null)."""
        return Reply(cls.error_bytes(None, error), error)

    def error_reply(self, request_id: Any, error: MCPLiteError, tool: str | None) -> Reply:
        """``error`` as the reply to the request ``request_id`` (already checked)."""
        return Reply(self.error_bytes(request_id, error), error, tool)

    def refusal(self, body: bytes, error: MCPLiteError) -> bytes:
        """``error`` as the answer to every request in ``body``, each under its own
        id (null when it cannot be told): for calls the server cuts short."""
        try:
            message = decode(body)
        except ParseError:
            message = None
        if isinstance(message, list):
            ids = [_known_id(m) for m in message if isinstance(m, dict) and "id" in m]
            if ids:
                return encode([self._error_obj(request_id, error) for request_id in ids])
            message = None
        return self.error_bytes(_known_id(message), error)

    async def _batch(self, messages: list[Any], context: RequestContext) -> Reply:
        tool = f"batch({len(messages)})"
        if not messages:
            error = InvalidRequest("Invalid request: empty batch")
            return Reply(self.error_bytes(None, error), error)
        # Every member ends before the batch does, even when one raised (a server
        # bug: re-raised below, a 500), so none is left running unanswered.
        outcomes = await asyncio.gather(
            *(self._one(m, context) for m in messages), return_exceptions=True
        )
        replies: list[Reply] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            replies.append(outcome)
        # Each member encoded alone: one whose result JSON cannot hold becomes
        # an error, and the rest keep their results.
        bodies = [reply.body for reply in replies if reply.body is not None]
        if not bodies:
            return Reply(None, None, tool)
        return Reply(b"[" + b",".join(bodies) + b"]", None, tool)

    async def _one(self, message: Any, context: RequestContext) -> Reply:
        """The reply to one request object (no body for a notification)."""
        try:
            request = check_request(message, LITE, context)
        except InvalidRequest as exc:
            # Answer even without an id: an invalid request is no notification.
            return Reply(self.error_bytes(_known_id(message), exc), exc, _tool_name(message))
        request_id = request.id
        params = request.params
        tool = params.get("name") if isinstance(params, dict) else None  # for the logs
        if not isinstance(tool, str):
            tool = None
        try:
            found = self.methods.get(request.method)
            if found is None:
                raise MethodNotFound(
                    f"Method not found: {request.method}", {"method": request.method}
                )
            if self.auth is not None:
                self.auth.admit(context, request.method)
            result = await found.handler(request)
        except MCPLiteError as exc:
            if request_id is NO_ID:
                return Reply(None, None, tool)
            return Reply(self.error_bytes(request_id, exc), exc, tool)
        if request_id is NO_ID:
            return Reply(None, None, tool)
        answer: JsonRpcResponse = {"jsonrpc": "2.0", "id": request_id, "result": result}
        # The Reply built as the tuple it is: its own __new__ is a Python function.
        return _new_reply(Reply, (self._encode_reply(answer), None, tool))

    def _encode_reply(self, reply: JsonRpcResponse) -> bytes:
        try:
            return encode(reply)
        except (TypeError, ValueError) as exc:
            # A tool returned something JSON cannot hold (NaN, bytes, an object).
            error = self.dispatcher.not_json("(result encoding)", exc)
            return self.error_bytes(reply.get("id"), error)

    @staticmethod
    def _error_obj(request_id: Any, error: MCPLiteError) -> JsonRpcResponse:
        return {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()}

    @classmethod
    def error_bytes(cls, request_id: Any, error: MCPLiteError) -> bytes:
        """The bytes of ``error`` answering the request ``request_id`` (None: null)."""
        return encode(cls._error_obj(request_id, error))
