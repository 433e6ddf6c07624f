"""HTTP statuses as this binding answers them: reason phrases, the JSON-RPC
error body of an HTTP-level error, and ``Retry-After``."""

from __future__ import annotations

from http import HTTPStatus

from ...core.errors import InternalError, InvalidRequest, Overloaded, Unauthenticated
from ...protocols.jsonrpc import encode

__all__ = ["JSON", "REASONS", "error_body", "retry_after"]

#: The reason phrase of each status (RFC 9110's, as the stdlib spells them).
REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
#: The headers of a JSON answer (more are added after it, never in place).
JSON = [(b"content-type", b"application/json")]


def error_body(status: int, message: str) -> bytes:
    """The JSON-RPC error (``id: null``) an HTTP-level error carries, so that a
    JSON-RPC client reads every answer the same way; its code follows the status."""
    if status == 503 or status == 429:
        code = Overloaded.jsonrpc_code
    elif status == 401:
        code = Unauthenticated.jsonrpc_code
    elif status >= 500:
        code = InternalError.jsonrpc_code
    else:
        code = InvalidRequest.jsonrpc_code
    error = {"code": code, "message": message, "data": {"http_status": status}}
    return encode({"jsonrpc": "2.0", "id": None, "error": error})


def retry_after(seconds: float) -> tuple[bytes, bytes]:
    """``Retry-After`` in whole seconds, at least 1."""
    return (b"retry-after", b"%d" % max(1, round(seconds)))
