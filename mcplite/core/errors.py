"""Protocol errors: each one knows its JSON-RPC code and its gRPC status.

Bindings never guess how to render an error: they read ``jsonrpc_code`` (HTTP,
stdio) or ``grpc_status`` (gRPC) from the exception.  Business outcomes such as a
tool's failure are *not* errors; they are results (see :mod:`mcplite.core.envelope`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import wire

__all__ = [
    "DeadlineExceeded",
    "ExpiredToken",
    "Forbidden",
    "InternalError",
    "InvalidArguments",
    "InvalidParams",
    "InvalidRequest",
    "InvalidToken",
    "MCPLiteError",
    "MethodNotFound",
    "Overloaded",
    "ParseError",
    "PromiseTableFull",
    "RateLimited",
    "ShuttingDown",
    "StoreUnavailable",
    "ToolNotFound",
    "Unauthenticated",
    "UnknownPromise",
]

# gRPC status codes (grpc/status.h); numbers so the core needs no gRPC import.
_INVALID_ARGUMENT = 3
_DEADLINE_EXCEEDED = 4
_NOT_FOUND = 5
_PERMISSION_DENIED = 7
_RESOURCE_EXHAUSTED = 8
_UNIMPLEMENTED = 12
_INTERNAL = 13
_UNAVAILABLE = 14
_UNAUTHENTICATED = 16


class MCPLiteError(Exception):
    """Base of every protocol error.

    ``message`` is the short text a person reads; ``data`` is the structured,
    machine-readable part (the JSON-RPC ``error.data``).
    """

    jsonrpc_code: ClassVar[int] = wire.INTERNAL_ERROR
    grpc_status: ClassVar[int] = _INTERNAL
    default_message: ClassVar[str] = "Internal error"
    reason: ClassVar[str | None] = None  # when set, the default data is {"reason": reason}

    def __init__(self, message: str | None = None, data: dict[str, Any] | None = None) -> None:
        self.message = message or self.default_message
        if data is None and self.reason is not None:
            data = {"reason": self.reason}
        self.data = data
        super().__init__(self.message)

    def to_jsonrpc(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.jsonrpc_code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(MCPLiteError):
    """The body is not valid UTF-8 JSON (or is nested or sized beyond reason)."""

    jsonrpc_code = wire.PARSE_ERROR
    grpc_status = _INVALID_ARGUMENT
    default_message = "Parse error"


class InvalidRequest(MCPLiteError):
    """Valid JSON, but not a valid JSON-RPC 2.0 request."""

    jsonrpc_code = wire.INVALID_REQUEST
    grpc_status = _INVALID_ARGUMENT
    default_message = "Invalid request"


class MethodNotFound(MCPLiteError):
    """A JSON-RPC method that this server does not have."""

    jsonrpc_code = wire.METHOD_NOT_FOUND
    grpc_status = _UNIMPLEMENTED
    default_message = "Method not found"


class ToolNotFound(MCPLiteError):
    """No tool by that name; ``data`` carries the names and a suggestion (spec A.5)."""

    jsonrpc_code = wire.METHOD_NOT_FOUND
    grpc_status = _NOT_FOUND
    default_message = "Tool not found"

    def __init__(self, name: str, available: list[str], suggestion: str | None) -> None:
        data: dict[str, Any] = {"requested_tool": name, "available_tools": available}
        if suggestion is not None:
            data["suggestion"] = f"Did you mean '{suggestion}'?"
        super().__init__("Tool not found", data)
        self.name = name


class InvalidParams(MCPLiteError):
    """The arguments do not match the tool's ``inputSchema``.

    ``data["errors"]`` lists every offending field as ``{"field", "message"}``.
    """

    jsonrpc_code = wire.INVALID_PARAMS
    grpc_status = _INVALID_ARGUMENT
    default_message = "Invalid params"

    @classmethod
    def from_fields(cls, errors: list[tuple[str, str]]) -> InvalidParams:
        text = "; ".join(f"{field}: {message}" for field, message in errors)
        return cls(
            f"Invalid arguments: {text}",
            {"errors": [{"field": field, "message": message} for field, message in errors]},
        )


class InvalidArguments(InvalidParams):
    """A tool's arguments do not match its ``inputSchema`` (raised before it runs).

    On the MCP-lite endpoints and gRPC this is the protocol error its parent is;
    on MCP (since 2025-11-25) the same failure is a tool result with
    ``isError: true`` whose text names each field, so that a model can read it
    and correct its call.
    """


class InvalidToken(MCPLiteError):
    """A promise token that is malformed, forged or tampered with."""

    jsonrpc_code = wire.INVALID_PARAMS
    grpc_status = _INVALID_ARGUMENT
    default_message = "invalid promise token"
    reason = "invalid"


class ExpiredToken(MCPLiteError):
    """A genuine promise token whose expiry has passed; its result is gone."""

    jsonrpc_code = wire.INVALID_PARAMS
    grpc_status = _INVALID_ARGUMENT
    default_message = "promise token expired"
    reason = "expired"


class UnknownPromise(MCPLiteError):
    """A genuine, unexpired token that this process has no entry for
    (for instance after a restart with the same secret)."""

    jsonrpc_code = wire.INVALID_PARAMS
    grpc_status = _NOT_FOUND
    default_message = "unknown promise"
    reason = "unknown"


class InternalError(MCPLiteError):
    """An unexpected exception in a tool; ``data["error_id"]`` finds it in the log.

    Raise it from a tool to end a call as a server fault on purpose.  ``detail``
    is what went wrong in words (for a tool's exception: its type and text); it
    never goes on the wire unless the server is told to show it
    (``Config.show_tool_errors``, ``--show-tool-errors``).
    """

    jsonrpc_code = wire.INTERNAL_ERROR
    grpc_status = _INTERNAL
    default_message = "Internal error"
    detail: str | None = None


class Overloaded(MCPLiteError):
    """A limit was hit (concurrent calls, promise table); retry after ``retry_after`` s."""

    jsonrpc_code = wire.SERVER_ERROR
    grpc_status = _RESOURCE_EXHAUSTED
    default_message = "Server overloaded"

    def __init__(self, message: str | None = None, retry_after: float = 1.0) -> None:
        super().__init__(message, {"retry_after": retry_after})
        self.retry_after = retry_after


class PromiseTableFull(Overloaded):
    """The promise table is at its bound; a new long call must wait."""

    default_message = "Too many pending promises"


class StoreUnavailable(Overloaded):
    """The promise store does not answer or cannot write (a Redis that is down, an
    SQLite file that is locked, read-only, full or gone); retry after ``retry_after`` s.

    -32000 with ``data`` ``{"retry_after": S, "reason": "store_unavailable"}``: HTTP
    ``503`` with ``Retry-After`` on the MCP-lite endpoints, gRPC ``UNAVAILABLE``.
    """

    grpc_status = _UNAVAILABLE
    default_message = "Promise store unavailable"
    reason = wire.STORE_UNAVAILABLE

    def __init__(self, message: str | None = None, retry_after: float = 1.0) -> None:
        super().__init__(message, retry_after)
        self.data = {"retry_after": retry_after, "reason": self.reason}


class DeadlineExceeded(MCPLiteError):
    """The caller's own deadline passed before a result or a promise could be given."""

    jsonrpc_code = wire.DEADLINE_ERROR
    grpc_status = _DEADLINE_EXCEEDED
    default_message = "Deadline exceeded"


class ShuttingDown(MCPLiteError):
    """The grace period after SIGTERM ended with this call or stream still open."""

    jsonrpc_code = wire.SERVER_ERROR
    grpc_status = _UNAVAILABLE
    default_message = "Server is shutting down"


class Unauthenticated(MCPLiteError):
    """Authentication is on and the request has no credentials, or bad ones.

    HTTP answers it with ``401`` and ``WWW-Authenticate: Bearer ...``; gRPC with
    ``UNAUTHENTICATED``.  ``message`` says what was wrong without repeating the
    credentials (a token is never echoed or logged).
    """

    jsonrpc_code = wire.UNAUTHENTICATED_ERROR
    grpc_status = _UNAUTHENTICATED
    default_message = "Unauthenticated: send Authorization: Bearer <token>"
    reason = "unauthenticated"


class Forbidden(MCPLiteError):
    """The caller is known but lacks a scope the tool needs (``insufficient_scope``).

    ``scopes`` are the scopes the request needed.  HTTP ``403`` with
    ``WWW-Authenticate: Bearer error="insufficient_scope", scope="..."``; gRPC
    ``PERMISSION_DENIED``.
    """

    jsonrpc_code = wire.FORBIDDEN_ERROR
    grpc_status = _PERMISSION_DENIED
    default_message = "Forbidden: insufficient scope"
    reason = "insufficient_scope"

    def __init__(self, message: str | None = None, scopes: tuple[str, ...] = ()) -> None:
        super().__init__(message, {"reason": "insufficient_scope", "scopes": list(scopes)})
        self.scopes = scopes


class RateLimited(Overloaded):
    """This caller sent more requests than its rate allows; retry after ``retry_after`` s.

    HTTP ``429`` with ``Retry-After``; gRPC ``RESOURCE_EXHAUSTED``.
    """

    default_message = "Too many requests"
