"""HTTP statuses as this binding answers them: reason phrases, the JSON-RPC
error body of an HTTP-level error, and ``Retry-After``."""

from __future__ import annotations

from http import HTTPStatus

from ...protocols.jsonrpc import encode
from ...protocols.status import error_code

__all__ = ["JSON", "REASONS", "error_body", "retry_after"]

#: The reason phrase of each status (RFC 9110's, as the stdlib spells them).
REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
#: The headers of a JSON answer (more are added after it, never in place).
JSON = [(b"content-type", b"application/json")]


def error_body(status: int, message: str) -> bytes:
    """The JSON-RPC error (``id: null``) an HTTP-level error carries, so that a
    JSON-RPC client reads every answer the same way; its code follows the status."""
    error = {"code": error_code(status), "message": message, "data": {"http_status": status}}
    return encode({"jsonrpc": "2.0", "id": None, "error": error})


def retry_after(seconds: float) -> tuple[bytes, bytes]:
    """``Retry-After`` in whole seconds, at least 1."""
    return (b"retry-after", b"%d" % max(1, round(seconds)))
