"""Error -> HTTP status: the one table every HTTP endpoint answers with.

The core's errors carry their JSON-RPC code and gRPC status, never an HTTP
status; which status an error goes out with depends on the protocol (and MCP's
revision) of the request it answers, and is decided here:

- MCP-lite's JSON-RPC endpoint answers 200 with the JSON-RPC error, except an
  overload (503, with ``Retry-After``) and auth's refusals (401, 403);
- MCP 2026-07-28 follows the official server's table (400 for what the request
  got wrong, 404 for an unknown method);
- MCP 2025 keeps 400 for bodies the transport cannot take and 401/403 for auth.

:func:`refusal_status` is the status of a request auth refuses before any
method runs, and :func:`error_code` the JSON-RPC code of an error the HTTP
layer answers itself (a 413, a 431...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..core import wire
from ..core.errors import Forbidden, MCPLiteError, Overloaded, RateLimited, Unauthenticated
from .mcp.protocol import HeaderMismatch, MissingCapability, UnsupportedVersion
from .requests import MCP_2025, MCP_2026, Profile

__all__ = [
    "LITE_STATUS",
    "MCP_2025_STATUS",
    "MCP_2026_STATUS",
    "error_code",
    "http_status",
    "refusal_status",
]

#: MCP-lite: the error classes answered with a status other than 200 (the first
#: that matches wins; a subclass counts: RateLimited is an overload).
LITE_STATUS: Final[tuple[tuple[type[MCPLiteError], int], ...]] = (
    (Overloaded, 503),
    (Unauthenticated, 401),
    (Forbidden, 403),
)

#: MCP 2026-07-28, by JSON-RPC code (the official server's table); any other
#: code is answered 200.
MCP_2026_STATUS: Final[Mapping[int, int]] = {
    wire.PARSE_ERROR: 400,
    wire.INVALID_REQUEST: 400,
    wire.INVALID_PARAMS: 400,
    HeaderMismatch.jsonrpc_code: 400,
    MissingCapability.jsonrpc_code: 400,
    UnsupportedVersion.jsonrpc_code: 400,
    wire.METHOD_NOT_FOUND: 404,
    wire.UNAUTHENTICATED_ERROR: 401,  # auth on
    wire.FORBIDDEN_ERROR: 403,  # insufficient scope
}

#: The same for a 2025 request.  That revision's status table is only for bodies
#: the transport cannot take (not JSON, not a JSON-RPC message) and for auth:
#: every error a method answers goes out with 200, as the official server sends
#: it.  A 404 there means "your session is gone", and a 400 makes clients (mcp
#: 1.x, langchain-mcp-adapters, the TypeScript SDK) drop the session or lose the
#: JSON-RPC error behind an HTTP one.
MCP_2025_STATUS: Final[Mapping[int, int]] = {
    wire.PARSE_ERROR: 400,
    wire.INVALID_REQUEST: 400,
    wire.UNAUTHENTICATED_ERROR: 401,
    wire.FORBIDDEN_ERROR: 403,
}


def http_status(error: MCPLiteError, profile: Profile) -> int:
    """The HTTP status of a reply that is ``error``, answering a request of ``profile``."""
    if profile is MCP_2026:
        return MCP_2026_STATUS.get(error.jsonrpc_code, 200)
    if profile is MCP_2025:
        return MCP_2025_STATUS.get(error.jsonrpc_code, 200)
    for kind, status in LITE_STATUS:
        if isinstance(error, kind):
            return status
    return 200


def refusal_status(error: MCPLiteError) -> int:
    """The status of a request auth refuses before reading it: 429 over its
    rate, 403 without the scope it needs, 401 otherwise."""
    if isinstance(error, RateLimited):
        return 429
    if isinstance(error, Forbidden):
        return 403
    return 401


def error_code(status: int) -> int:
    """The JSON-RPC code of an error the HTTP layer answers itself with ``status``."""
    if status == 503 or status == 429:
        return Overloaded.jsonrpc_code
    if status == 401:
        return Unauthenticated.jsonrpc_code
    if status >= 500:
        return wire.INTERNAL_ERROR
    return wire.INVALID_REQUEST
