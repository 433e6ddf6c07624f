"""Wire constants that the server and the client both need, written once.

Nothing here imports anything of mcplite: the client takes its numbers from this
module without pulling in a single server module.
"""

from __future__ import annotations

import time
from typing import Any, Final

__all__ = [
    "DEADLINE_ERROR",
    "DEFAULT_BASE_PATH",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ERROR_DATA_KEY",
    "FORBIDDEN_ERROR",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "RESPONSE_TYPE_CODES",
    "RESPONSE_TYPE_NAMES",
    "SERVER_ERROR",
    "STORE_UNAVAILABLE",
    "UNAUTHENTICATED_ERROR",
    "iso_timestamp",
    "set_present",
]

#: Where the MCP-lite HTTP endpoints live unless configured otherwise.
DEFAULT_BASE_PATH: Final = "/mcp-lite/v1"

#: Largest gRPC message accepted, in bytes (grpcio's default receive limit).
DEFAULT_MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024

#: gRPC trailing metadata key that carries an error's JSON ``data``.
ERROR_DATA_KEY: Final = "mcplite-error-data"

# JSON-RPC 2.0 error codes (spec section 6, and JSON-RPC's reserved range).
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601  # also an unknown tool (spec A.5)
INVALID_PARAMS: Final = -32602  # also a bad or expired promise token
INTERNAL_ERROR: Final = -32603
SERVER_ERROR: Final = -32000  # overloaded, or shutting down: retryable
DEADLINE_ERROR: Final = -32001
#: The ``reason`` in a -32000 error's data when the promise store is down for a
#: moment (gRPC: UNAVAILABLE with that data): retry after its ``retry_after``.
STORE_UNAVAILABLE: Final = "store_unavailable"
# Authentication (HTTP answers these with 401 and 403 too; -320xx echoes the status).
UNAUTHENTICATED_ERROR: Final = -32041
FORBIDDEN_ERROR: Final = -32043

#: ``_meta.response_type`` names and their ``ResponseType`` enum numbers in the proto.
RESPONSE_TYPE_CODES: Final[dict[str, int]] = {
    "answer": 0,
    "promise": 1,
    "elicitation": 2,
    "failure": 3,
    "request-for-more-resource": 4,
}
RESPONSE_TYPE_NAMES: Final[dict[int, str]] = {v: k for k, v in RESPONSE_TYPE_CODES.items()}


_second_cache: tuple[int, str] = (-1, "")


def iso_timestamp(epoch: float) -> str:
    """ISO 8601 UTC with milliseconds, e.g. ``2024-01-01T12:00:00.123Z``.

    The date part is formatted once per second: this runs on every call.
    """
    global _second_cache
    # Round to the microsecond first, as datetime does: 0.123 is 0.12299999...
    second, micros = divmod(round(epoch * 1_000_000), 1_000_000)
    cached_second, prefix = _second_cache
    if second != cached_second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_cache = (second, prefix)
    return f"{prefix}.{micros // 1000:03d}Z"


def set_present(out: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``out`` with each of ``fields`` that is not None set: an optional field the
    wire leaves out rather than sending as null."""
    for key, value in fields.items():
        if value is not None:
            out[key] = value
    return out
