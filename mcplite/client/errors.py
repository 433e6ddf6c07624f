"""What the client raises: one ladder under :class:`ClientError`.

:class:`TransportError` (and :class:`RequestTimeout`) when the server could not be
reached or talked to; :class:`RPCError` and its subclasses for a protocol error
the server answered, keeping its JSON-RPC ``code``, ``message`` and ``data`` (a gRPC
status is mapped to the same classes and codes); :class:`PromiseTimeout` when a
promise has no outcome in time.  Both transports build them with
:func:`rpc_error` and :func:`error_from_object`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

from ..core import wire

__all__ = [
    "AuthenticationError",
    "ClientError",
    "Datum",
    "InternalServerError",
    "InvalidArgumentsError",
    "InvalidTokenError",
    "OverloadedError",
    "PermissionDeniedError",
    "PromiseTimeout",
    "RPCError",
    "RequestTimeout",
    "ToolNotFoundError",
    "TransportError",
    "error_from_object",
    "rpc_error",
]


T = TypeVar("T")


class ClientError(Exception):
    """Base of every error the client raises."""


class TransportError(ClientError):
    """The server could not be reached or talked to: connection refused or broken,
    an HTTP status without a JSON-RPC body, a malformed reply."""


class RequestTimeout(TransportError, TimeoutError):
    """One request got no (complete) answer within its timeout."""


class PromiseTimeout(ClientError, TimeoutError):
    """A promise did not reach its outcome within the call's ``timeout``.

    ``token`` redeems it later (until it expires).
    """

    def __init__(self, message: str, token: str) -> None:
        super().__init__(message)
        self.token = token


class RPCError(ClientError):
    """A protocol error answered by the server, with its JSON-RPC ``code``,
    ``message`` and ``data``.  Over gRPC, ``code`` is the equivalent JSON-RPC code
    and ``grpc_status`` the status number received."""

    def __init__(
        self, code: int, message: str, data: Any = None, *, grpc_status: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.grpc_status = grpc_status

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, {self.data!r})"


class Datum(Generic[T]):
    """A read-only attribute of an :class:`RPCError`: the item of its ``data`` (a
    JSON object) named as the attribute, as ``read`` makes it: ``read`` gets None
    when there is no such item (or ``data`` is no object) and must not raise."""

    def __init__(self, read: Callable[[Any], T], doc: str | None = None) -> None:
        self.read = read
        self.key = ""
        self.__doc__ = doc

    def __set_name__(self, owner: type[RPCError], name: str) -> None:
        self.key = name

    @overload
    def __get__(self, error: None, owner: type[RPCError]) -> Datum[T]: ...
    @overload
    def __get__(self, error: RPCError, owner: type[RPCError]) -> T: ...
    def __get__(self, error: RPCError | None, owner: type[RPCError]) -> Datum[T] | T:
        if error is None:
            return self
        data = error.data
        return self.read(data.get(self.key) if isinstance(data, Mapping) else None)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _texts(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _field_errors(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list):
        return []
    return [
        {"field": str(e.get("field", "")), "message": str(e.get("message", ""))}
        for e in value
        if isinstance(e, Mapping)
    ]


class ToolNotFoundError(RPCError):
    """No tool by that name (-32601, gRPC NOT_FOUND)."""

    requested_tool = Datum(_text, "The name the call asked for.")
    available_tools = Datum(_texts, "The names of the tools the server has.")
    suggestion = Datum(
        _text, "The server's hint, e.g. ``\"Did you mean 'echo'?\"``, when a name is close."
    )


class InvalidArgumentsError(RPCError):
    """The arguments do not match the tool's schema (-32602, gRPC INVALID_ARGUMENT)."""

    errors = Datum(_field_errors, 'Each offending field: ``{"field": "limit", "message": "..."}``.')


class InvalidTokenError(RPCError):
    """A promise token that is invalid, expired or unknown to the server."""

    reason = Datum(_text, '``"invalid"``, ``"expired"`` or ``"unknown"``.')


class OverloadedError(RPCError):
    """The server is at a limit (-32000, HTTP 503, gRPC RESOURCE_EXHAUSTED); retryable."""

    retry_after = Datum(_number, "Seconds to wait before trying again, when the server says.")


class AuthenticationError(RPCError):
    """The server refused the request's credentials, or wanted some: no token, an
    unknown, expired or malformed one (-32041, HTTP 401, gRPC UNAUTHENTICATED).

    ``www_authenticate`` is the HTTP challenge (``Bearer resource_metadata=...``
    names where an OAuth server says how to get a token); None over gRPC.
    """

    www_authenticate: str | None = None


class PermissionDeniedError(RPCError):
    """The token is good but lacks a scope the tool needs (-32043, HTTP 403
    ``insufficient_scope``, gRPC PERMISSION_DENIED)."""

    www_authenticate: str | None = None
    scopes = Datum(_texts, "The scopes the request needed (every one the tool names).")


class InternalServerError(RPCError):
    """The tool raised (-32603, gRPC INTERNAL); ``error_id`` finds it in the server log."""

    error_id = Datum(_text, "The id of the failure in the server's log.")


_TOKEN_REASONS = frozenset({"invalid", "expired", "unknown"})


def rpc_error(
    code: int, message: str, data: Any = None, *, grpc_status: int | None = None
) -> RPCError:
    """The :class:`RPCError` subclass for a JSON-RPC error."""
    cls: type[RPCError] = RPCError
    if code == wire.METHOD_NOT_FOUND and isinstance(data, Mapping) and "requested_tool" in data:
        cls = ToolNotFoundError
    elif code == wire.INVALID_PARAMS:
        token_error = isinstance(data, Mapping) and data.get("reason") in _TOKEN_REASONS
        cls = InvalidTokenError if token_error else InvalidArgumentsError
    elif code == wire.INTERNAL_ERROR:
        cls = InternalServerError
    elif code == wire.SERVER_ERROR:
        cls = OverloadedError
    elif code == wire.UNAUTHENTICATED_ERROR:
        cls = AuthenticationError
    elif code == wire.FORBIDDEN_ERROR:
        cls = PermissionDeniedError
    return cls(code, message, data, grpc_status=grpc_status)


def error_from_object(error: Any) -> RPCError:
    """The :class:`RPCError` for a JSON-RPC ``error`` object ``{code, message, data?}``."""
    if not isinstance(error, Mapping):
        return RPCError(wire.INTERNAL_ERROR, f"malformed error object: {error!r}")
    code = error.get("code")
    message = error.get("message")
    return rpc_error(
        code if isinstance(code, int) and not isinstance(code, bool) else wire.INTERNAL_ERROR,
        message if isinstance(message, str) else "error",
        error.get("data"),
    )
