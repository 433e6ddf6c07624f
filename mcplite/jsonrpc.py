"""JSON-RPC 2.0 framing over bytes, shared by the HTTP binding (and later stdio).

Methods: ``tools/call`` (the main one), ``tools/list`` (as in MCP) and ``ping``.
A request without ``id`` is a notification: it is processed, and gets no reply.
A batch (a JSON array) gets an array of the replies to its non-notifications.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import json
import logging
import math
from typing import Any, NamedTuple

from .dispatch import Dispatcher
from .errors import (
    InvalidParams,
    InvalidRequest,
    MCPLiteError,
    MethodNotFound,
    Overloaded,
    ParseError,
)

__all__ = ["JsonRpc", "Reply", "check_request", "decode", "encode", "tool_call_params"]

log = logging.getLogger("mcplite")

_MISSING: Any = object()


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
_encode = _encoder.encode


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


def _not_json(literal: str) -> Any:
    raise ValueError(f"{literal} is not JSON (RFC 8259 has no NaN or Infinity)")


_decode = json.JSONDecoder(parse_constant=_not_json).decode


def decode(body: bytes) -> Any:
    """Parse a UTF-8 JSON body; anything unparsable raises :class:`ParseError`.

    That includes invalid UTF-8, NaN and Infinity, nesting deep enough to exhaust
    the parser's recursion, and integers beyond Python's digit limit (4300 digits).
    """
    try:
        return _decode(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ParseError("Parse error: the body is not valid UTF-8") from None
    except RecursionError:
        raise ParseError("Parse error: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError and the int digit limit
        raise ParseError(f"Parse error: {exc}") from None


class Reply(NamedTuple):
    """What to send back: ``body`` (None: nothing, e.g. notifications) and, when
    the only reply is an overload error, the seconds for Retry-After."""

    body: bytes | None
    retry_after: float | None = None
    tool: str | None = None  # for the access log


def _check_id(message: dict[str, Any]) -> Any:
    request_id = message.get("id", _MISSING)
    if request_id is _MISSING or request_id is None:
        return request_id
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | float):
        raise InvalidRequest("Invalid request: id must be a string, a number or null")
    if isinstance(request_id, float) and not math.isfinite(request_id):
        raise InvalidRequest("Invalid request: id is a number too large for JSON")
    return request_id


def tool_call_params(params: Any) -> tuple[str, Any]:
    """``(name, arguments)`` of ``tools/call`` params; raises :class:`InvalidParams`."""
    if not isinstance(params, dict):
        raise InvalidParams.from_fields([("params", "expected an object")])
    name = params.get("name")
    if not isinstance(name, str):
        raise InvalidParams.from_fields([("params.name", "is required and must be a string")])
    return name, params.get("arguments")


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
    if params is not None and not isinstance(params, dict | list):
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
    """Turns request bytes into reply bytes through a :class:`Dispatcher`."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._tools_result = {"tools": dispatcher.tool_definitions()}

    async def handle(self, body: bytes) -> Reply:
        try:
            message = decode(body)
        except ParseError as exc:
            return Reply(self.error_bytes(None, exc))
        if type(message) is dict and message.get("method") == "tools/call":
            # The hot path: a single call with a plain id and object params is
            # answered here without the general path's extra await level.
            # Anything less ordinary goes the general way, with the same answers.
            request_id = message.get("id")
            params = message.get("params")
            if (
                message.get("jsonrpc") == "2.0"
                and (type(request_id) is str or type(request_id) is int)
                and type(params) is dict
                and type(name := params.get("name")) is str
            ):
                try:
                    result = await self.dispatcher.call(name, params.get("arguments"))
                except MCPLiteError as exc:
                    return self._error_reply(request_id, exc, name)
                answer: dict[str, Any] = {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": result.to_json(),
                }
                return Reply(self._encode_reply(answer), None, name)
        elif isinstance(message, list):
            return await self._batch(message)
        tool = _tool_name(message)
        reply = await self.handle_message(message)
        if reply is None:
            return Reply(None, None, tool)
        error = reply.get("error")
        retry_after = None
        if error is not None and error["code"] == Overloaded.jsonrpc_code:
            retry_after = error.get("data", {}).get("retry_after")
        return Reply(self._encode_reply(reply), retry_after, tool)

    def _error_reply(self, request_id: Any, error: MCPLiteError, tool: str | None) -> Reply:
        retry_after = error.retry_after if isinstance(error, Overloaded) else None
        return Reply(self.error_bytes(request_id, error), retry_after, tool)

    async def _batch(self, messages: list[Any]) -> Reply:
        if not messages:
            return Reply(self.error_bytes(None, InvalidRequest("Invalid request: empty batch")))
        replies = await asyncio.gather(*(self.handle_message(m) for m in messages))
        out = [r for r in replies if r is not None]
        tool = f"batch({len(messages)})"
        if not out:
            return Reply(None, None, tool)
        return Reply(self._encode_reply(out), None, tool)

    async def handle_message(self, message: Any) -> dict[str, Any] | None:
        """One request object -> one reply object (None for a notification)."""
        try:
            request_id, method, params = check_request(message)
        except InvalidRequest as exc:
            # Answer even without an id: an invalid request is no notification.
            return self._error_obj(_known_id(message), exc)
        try:
            if method == "tools/call":  # inline: the hot path saves an await level
                name, arguments = tool_call_params(params)
                result = (await self.dispatcher.call(name, arguments)).to_json()
            else:
                result = await self.call_method(method, params)
        except MCPLiteError as exc:
            if request_id is _MISSING:
                return None
            return self._error_obj(request_id, exc)
        if request_id is _MISSING:
            return None
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    async def call_method(self, method: str, params: Any) -> dict[str, Any]:
        if method == "tools/call":
            name, arguments = tool_call_params(params)
            result = await self.dispatcher.call(name, arguments)
            return result.to_json()
        if method == "tools/list":
            return self._tools_result
        if method == "ping":
            return {}
        raise MethodNotFound(f"Method not found: {method}", {"method": method})

    def _encode_reply(self, reply: Any) -> bytes:
        try:
            return encode(reply)
        except (TypeError, ValueError) as exc:
            # A tool returned something JSON cannot hold (NaN, bytes, an object).
            error = self.dispatcher.internal_error("(result encoding)", exc)
            error.message = f"The tool's result is not valid JSON: {exc}"
            if isinstance(reply, list):
                return encode([self._error_obj(r.get("id"), error) for r in reply])
            return self.error_bytes(reply.get("id"), error)

    @staticmethod
    def _error_obj(request_id: Any, error: MCPLiteError) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()}

    @classmethod
    def error_bytes(cls, request_id: Any, error: MCPLiteError) -> bytes:
        return encode(cls._error_obj(request_id, error))
