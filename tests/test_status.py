"""Error -> HTTP status (mcplite.protocols.status): one table per protocol, the
statuses of auth's refusals, and the JSON-RPC code of an HTTP-level error."""

from __future__ import annotations

import pytest

from mcplite.core.errors import (
    Forbidden,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MCPLiteError,
    MethodNotFound,
    Overloaded,
    ParseError,
    PromiseTableFull,
    RateLimited,
    ShuttingDown,
    ToolNotFound,
    Unauthenticated,
)
from mcplite.protocols.mcp.protocol import HeaderMismatch, MissingCapability, UnsupportedVersion
from mcplite.protocols.requests import Profile
from mcplite.protocols.status import error_code, http_status, refusal_status

CASES: list[tuple[MCPLiteError, int, int, int]] = [
    # error, MCP-lite, MCP 2026, MCP 2025
    (ParseError(), 200, 400, 400),
    (InvalidRequest(), 200, 400, 400),
    (InvalidParams(), 200, 400, 200),
    (HeaderMismatch(), 200, 400, 200),
    (MissingCapability("sampling", {"sampling": {}}), 200, 400, 200),
    (UnsupportedVersion("2024-01-01"), 200, 400, 200),
    (MethodNotFound(), 200, 404, 200),
    (ToolNotFound("nope", [], None), 200, 404, 200),
    (Unauthenticated(), 401, 401, 401),
    (Forbidden(), 403, 403, 403),
    (Overloaded(), 503, 200, 200),
    (PromiseTableFull(), 503, 200, 200),
    (ShuttingDown(), 200, 200, 200),
    (InternalError(), 200, 200, 200),
]


@pytest.mark.parametrize(("error", "lite", "modern", "legacy"), CASES)
def test_each_protocol_answers_an_error_with_the_status_of_its_own_table(
    error: MCPLiteError, lite: int, modern: int, legacy: int
) -> None:
    assert http_status(error, Profile.LITE) == lite
    assert http_status(error, Profile.MCP_2026) == modern
    assert http_status(error, Profile.MCP_2025) == legacy


def test_auth_refusals_are_429_over_the_rate_403_without_scope_else_401() -> None:
    assert refusal_status(RateLimited("slow down", retry_after=1)) == 429
    assert refusal_status(Forbidden()) == 403
    assert refusal_status(Unauthenticated()) == 401


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, -32000), (429, -32000), (401, -32041), (500, -32603), (413, -32600), (404, -32600)],
)
def test_an_http_level_error_carries_the_json_rpc_code_of_its_kind(status: int, code: int) -> None:
    assert error_code(status) == code
