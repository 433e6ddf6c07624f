"""JSON-RPC 2.0 framing over bytes, shared by every JSON-RPC binding.

What each method does is in the method table (:mod:`mcplite.protocols.methods`); this
module only parses, checks, frames and encodes.
A request without ``id`` is a notification: it is processed, and gets no reply.
A batch (a JSON array) gets an array of the replies to its non-notifications.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import json
import json.scanner
import logging
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

from ..core.context import IN_PROCESS, RequestContext
from ..core.dispatch import Dispatcher, ToolStream
from ..core.errors import InvalidRequest, MCPLiteError, MethodNotFound, ParseError
from .methods import Method, mcplite_methods

__all__ = ["NO_ID", "JsonRpc", "Reply", "StreamReply", "check_request", "decode", "encode"]

log = logging.getLogger("mcplite")

#: ``check_request``'s id of a notification (a request without ``id``).
NO_ID: Any = object()
_MISSING = NO_ID


def _default(value: Any) -> Any:
    # What a tool may put in a result beyond plain JSON, and how it is written.
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        raise TypeError("bytes are not JSON: encode them (base64) in the tool")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_encoder = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default
)
# JSONEncoder.encode builds its C encoder again on every call (a third of the
# cost of encoding a small reply); it is built once here.  No circular-reference
# markers: a cycle ends in RecursionError, which encode() reports as ValueError.
_make_encoder: Any = json.encoder.c_make_encoder  # type: ignore[attr-defined]
_c_encode: Any = (
    None
    if _make_encoder is None  # no C accelerator (never on CPython)
    else _make_encoder(
        None, _default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def _encode_c(obj: Any) -> str:
    return "".join(_c_encode(obj, 0))


_encode: Callable[[Any], str] = _encoder.encode if _c_encode is None else _encode_c


_ascii_encode = json.JSONEncoder(
    ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=_default
).encode


def encode(obj: Any) -> bytes:
    """Compact UTF-8 JSON; raises ``ValueError``/``TypeError`` for what JSON cannot hold.

    A lone surrogate (possible in a Python str, never in UTF-8) is written as a
    ``\\udXXX`` escape rather than failing the whole reply.
    """
    try:
        return _encode(obj).encode()
    except UnicodeEncodeError:
        return _ascii_encode(obj).encode()
    except RecursionError:
        raise ValueError("nested too deeply, or circular") from None


class _NotJson(ValueError):
    pass


def _not_json(literal: str) -> Any:
    raise _NotJson(f"{literal} is not JSON (RFC 8259 has no NaN or Infinity)")


_decoder = json.JSONDecoder(parse_constant=_not_json)
_decode = _decoder.decode
#: The decoder's C scanner, called directly for a document that starts with a
#: value and ends with it (JSONDecoder.decode matches whitespace around it first).
_scan = json.scanner.make_scanner(cast(Any, _decoder))


def decode(body: bytes) -> Any:
    """Parse a UTF-8 JSON body; anything unparsable raises :class:`ParseError`.

    That includes invalid UTF-8, NaN and Infinity, nesting deep enough to exhaust
    the parser's recursion, and integers beyond Python's digit limit (4300 digits).
    """
    try:
        text = body.decode("utf-8")
        try:
            value, end = _scan(text, 0)
        except (StopIteration, json.JSONDecodeError):
            pass  # _decode says what is wrong, and where
        else:
            if end == len(text):
                return value
        return _decode(text)  # whitespace around the value, or an error
    except UnicodeDecodeError:
        raise ParseError("Parse error: the body is not valid UTF-8") from None
    except RecursionError:
        raise ParseError("Parse error: JSON nested too deeply") from None
    except (json.JSONDecodeError, _NotJson) as exc:
        raise ParseError(f"Parse error: {exc}") from None
    except ValueError:
        # The only other one: int() refusing more digits than the interpreter's
        # limit.  Its own message tells the *server* to call
        # sys.set_int_max_str_digits(), which is no advice for a client.
        limit = sys.get_int_max_str_digits()
        raise ParseError(f"Parse error: integer too large (over {limit} digits)") from None


class Reply(NamedTuple):
    """What to send back: ``body`` (None: nothing, e.g. notifications); ``error``
    when the whole reply is that one error (a binding maps its class to a status);
    ``tool``, what was called (for logs)."""

    body: bytes | None
    error: MCPLiteError | None = None
    tool: str | None = None


class StreamReply(NamedTuple):
    """A request that is answered as a stream: its id, the tool, the running stream."""

    request_id: Any
    tool: str
    stream: ToolStream


def _check_id(message: dict[str, Any]) -> Any:
    request_id = message.get("id", _MISSING)
    if type(request_id) is int or type(request_id) is str:  # the usual ids, checked first
        return request_id
    if request_id is _MISSING or request_id is None:
        return request_id
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | float):
        raise InvalidRequest("Invalid request: id must be a string, a number or null")
    if isinstance(request_id, float) and not math.isfinite(request_id):
        raise InvalidRequest("Invalid request: id is a number too large for JSON")
    return request_id


def check_request(message: Any) -> tuple[Any, str, Any]:
    """``(id, method, params)`` of one request; raises :class:`InvalidRequest`.

    ``id`` is ``_MISSING`` for a notification.
    """
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
    return _check_id(message), method, params


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


class JsonRpc:
    """Turns request bytes into reply bytes through a method table.

    The table defaults to MCP-lite's (:func:`mcplite.protocols.methods.mcplite_methods`).
    Every request, whichever way it is to be answered, passes the same checks
    (:func:`check_request`) here and nowhere else.
    """

    def __init__(self, dispatcher: Dispatcher, methods: Mapping[str, Method] | None = None) -> None:
        self.dispatcher = dispatcher
        self.methods = methods if methods is not None else mcplite_methods(dispatcher)
        self.auth = dispatcher.auth

    async def handle(self, body: bytes, context: RequestContext = IN_PROCESS) -> Reply:
        """The reply to a request body (one request or a batch)."""
        try:
            message = decode(body)
        except ParseError as exc:
            return self.unparsable(exc)
        if type(message) is dict:
            # The hot path: one request with a plain id and object params goes
            # straight to its handler; anything less ordinary takes the general
            # path (answer), which gives the same answers.
            request_id = message.get("id")
            params = message.get("params")
            method = message.get("method")
            if (
                type(method) is str
                and (found := self.methods.get(method)) is not None
                and message.get("jsonrpc") == "2.0"
                and (type(request_id) is str or type(request_id) is int)
                and type(params) is dict
            ):
                tool = _tool_name(message)
                try:
                    if self.auth is not None:
                        self.auth.admit(context, method)
                    result = await found.handler(params, context)
                except MCPLiteError as exc:
                    return self.error_reply(request_id, exc, tool)
                answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
                return Reply(self._encode_reply(answer), None, tool)
        return await self.answer(message, context)

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
                request_id, method, params = check_request(message)
            except InvalidRequest:
                return await self.answer(message, context)
            found = self.methods.get(method)
            if (
                found is not None
                and found.stream is not None
                and request_id is not _MISSING
                and not (json_too and not (found.streams is not None and found.streams(params)))
            ):
                tool = _tool_name(message)
                try:
                    if self.auth is not None:
                        self.auth.admit(context, method)
                    stream = found.stream(params, context)
                except MCPLiteError as exc:
                    return self.error_reply(request_id, exc, tool)
                return StreamReply(request_id, stream.tool.name, stream)
        return await self.answer(message, context)

    async def answer(self, message: Any, context: RequestContext = IN_PROCESS) -> Reply:
        """The reply to a decoded body: what :meth:`handle` answers after parsing."""
        if isinstance(message, list):
            return await self._batch(message, context)
        tool = _tool_name(message)
        reply, error = await self._one(message, context)
        if reply is None:
            return Reply(None, None, tool)
        return Reply(self._encode_reply(reply), error, tool)

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
        if not messages:
            error = InvalidRequest("Invalid request: empty batch")
            return Reply(self.error_bytes(None, error), error)
        replies = await asyncio.gather(*(self._one(m, context) for m in messages))
        out = [r for r, _ in replies if r is not None]
        tool = f"batch({len(messages)})"
        if not out:
            return Reply(None, None, tool)
        return Reply(self._encode_reply(out), None, tool)

    async def handle_message(
        self, message: Any, context: RequestContext = IN_PROCESS
    ) -> dict[str, Any] | None:
        """One request object -> one reply object (None for a notification)."""
        return (await self._one(message, context))[0]

    async def _one(
        self, message: Any, context: RequestContext
    ) -> tuple[dict[str, Any] | None, MCPLiteError | None]:
        """One request object -> its reply object (None for a notification), and
        the error when the reply is one."""
        try:
            request_id, method, params = check_request(message)
        except InvalidRequest as exc:
            # Answer even without an id: an invalid request is no notification.
            return self._error_obj(_known_id(message), exc), exc
        try:
            found = self.methods.get(method)
            if found is None:
                raise MethodNotFound(f"Method not found: {method}", {"method": method})
            if self.auth is not None:
                self.auth.admit(context, method)
            result = await found.handler(params, context)
        except MCPLiteError as exc:
            if request_id is _MISSING:
                return None, None
            return self._error_obj(request_id, exc), exc
        if request_id is _MISSING:
            return None, None
        return {"jsonrpc": "2.0", "id": request_id, "result": result}, None

    def _encode_reply(self, reply: Any) -> bytes:
        try:
            return encode(reply)
        except (TypeError, ValueError) as exc:
            if isinstance(reply, list):
                # Only the members JSON cannot hold become errors; the rest of
                # the batch keeps its results.
                return b"[" + b",".join(map(self._encode_reply, reply)) + b"]"
            # A tool returned something JSON cannot hold (NaN, bytes, an object).
            error = self.dispatcher.not_json("(result encoding)", exc)
            return self.error_bytes(reply.get("id"), error)

    @staticmethod
    def _error_obj(request_id: Any, error: MCPLiteError) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()}

    @classmethod
    def error_bytes(cls, request_id: Any, error: MCPLiteError) -> bytes:
        return encode(cls._error_obj(request_id, error))
