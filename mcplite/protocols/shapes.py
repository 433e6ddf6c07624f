"""The wire shapes that cross modules of :mod:`mcplite.protocols`, as TypedDicts.

A JSON-RPC 2.0 response (what a handler's result is framed in), MCP's ``Tool``
and ``CallToolResult``.  Only the fields mcplite reads or writes are named.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

__all__ = [
    "CallToolResult",
    "JsonRpcResponse",
    "ToolDefinition",
]


class JsonRpcResponse(TypedDict, total=False):
    """The answer to a request: ``result`` or ``error`` (``{code, message, data}``)."""

    jsonrpc: Required[str]
    id: Required[Any]
    result: Any
    error: dict[str, Any]


class ToolDefinition(TypedDict, total=False):
    """MCP's ``Tool``: MCP-lite's discovery entry without ``@type``, plus what MCP adds."""

    name: Required[str]
    title: str
    description: str
    inputSchema: Required[dict[str, Any]]
    outputSchema: dict[str, Any]
    annotations: dict[str, Any]
    icons: list[dict[str, Any]]
    execution: dict[str, Any]


class CallToolResult(TypedDict, total=False):
    """MCP's ``CallToolResult`` (``resultType`` is 2026-07-28's)."""

    content: Required[list[dict[str, Any]]]
    structuredContent: Any
    isError: bool
    resultType: str
    _meta: dict[str, Any]
