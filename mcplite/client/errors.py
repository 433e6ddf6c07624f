"""What the client raises: one ladder under :class:`ClientError`.

:class:`TransportError` (and :class:`RequestTimeout`) when the server could not be
reached or talked to; :class:`RPCError` and its subclasses for a protocol error
the server answered, keeping its JSON-RPC ``code``, ``message`` and ``data`` (a gRPC
status is mapped to the same classes and codes); :class:`PromiseTimeout` when a
promise has no outcome in time.  Both transports build them with
:func:`rpc_error` and :func:`error_from_object`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core import wire

__all__ = [
    "AuthenticationError",
    "ClientError",
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

    def _data(self, key: str) -> Any:
        return self.data.get(key) if isinstance(self.data, Mapping) else None


class ToolNotFoundError(RPCError):
    """No tool by that name (-32601, gRPC NOT_FOUND)."""

    @property
    def requested_tool(self) -> str | None:
        value = self._data("requested_tool")
        return value if isinstance(value, str) else None

    @property
    def available_tools(self) -> list[str]:
        value = self._data("available_tools")
        return [str(v) for v in value] if isinstance(value, list) else []

    @property
    def suggestion(self) -> str | None:
        """The server's hint, e.g. ``"Did you mean 'echo'?"``, when a name is close."""
        value = self._data("suggestion")
        return value if isinstance(value, str) else None


class InvalidArgumentsError(RPCError):
    """The arguments do not match the tool's schema (-32602, gRPC INVALID_ARGUMENT)."""

    @property
    def errors(self) -> list[dict[str, str]]:
        """Each offending field: ``{"field": "limit", "message": "..."}``."""
        value = self._data("errors")
        if not isinstance(value, list):
            return []
        return [
            {"field": str(e.get("field", "")), "message": str(e.get("message", ""))}
            for e in value
            if isinstance(e, Mapping)
        ]


class InvalidTokenError(RPCError):
    """A promise token that is invalid, expired or unknown to the server."""

    @property
    def reason(self) -> str | None:
        """``"invalid"``, ``"expired"`` or ``"unknown"``."""
        value = self._data("reason")
        return value if isinstance(value, str) else None


class OverloadedError(RPCError):
    """The server is at a limit (-32000, HTTP 503, gRPC RESOURCE_EXHAUSTED); retryable."""

    @property
    def retry_after(self) -> float | None:
        value = self._data("retry_after")
        return float(value) if isinstance(value, int | float) else None


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

    @property
    def scopes(self) -> list[str]:
        """The scopes the request needed (every one the tool names)."""
        value = self._data("scopes")
        return [str(s) for s in value] if isinstance(value, list) else []


class InternalServerError(RPCError):
    """The tool raised (-32603, gRPC INTERNAL); ``error_id`` finds it in the server log."""

    @property
    def error_id(self) -> str | None:
        value = self._data("error_id")
        return value if isinstance(value, str) else None


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
