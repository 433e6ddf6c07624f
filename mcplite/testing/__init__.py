"""Test helpers for users of mcplite: the real server, reached in memory.

:func:`connect` serves a tools registry (or a :class:`~mcplite.Dispatcher`) with
the same HTTP and gRPC bindings ``mcplite serve`` runs, and connects a client to
them through in-memory transports instead of sockets: every request goes through
the binding's framing (h11 for HTTP/1.1 and SSE, h2 frames and grpclib for gRPC),
routing, limits and error mapping, as it would over TCP, but with no port, no
thread and no network, so tests are fast and deterministic::

    import pytest
    from mcplite.testing import connect
    from mytools import tools

    async def test_search_finds_the_spec() -> None:
        async with connect(tools) as client:
            response = await client.call("search", {"query": "MCP"})
            assert response.response_type == "answer"
            async for item in client.stream("report", {"topic": "Q3"}):
                ...  # Partial parts, then the final Response
            assert "search" in [tool.name for tool in await client.list_tools()]

            # MCP at /mcp, either revision
            called = {"name": "search", "arguments": {"query": "MCP"}}
            result = await client.mcp("tools/call", called)
            assert result["isError"] is False
            await client.mcp("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "t", "version": "1"}},
                             version="2025-11-25")

            # any HTTP request, answered whole: status, headers, body
            response = await client.post("/mcp-lite/v1/rpc", {"jsonrpc": "2.0", "id": 1,
                                                              "method": "tools/list"})
            assert response.status == 200 and response.json()["result"]["tools"]

    async def test_the_same_call_over_grpc() -> None:
        async with connect(tools, binding="grpc") as client:
            response = await client.call("search", {"query": "MCP"})

The client (:class:`InMemoryClient`) has the interface of
:class:`mcplite.client.Client`, over the binding named by ``binding``: the same
:class:`~mcplite.client.Response` objects, the same exceptions
(:class:`~mcplite.client.InvalidArgumentsError`, ...), promises redeemed the
same way.  :meth:`InMemoryClient.grpc_channel` gives a grpclib channel for any
gRPC stub.  Lower down, :func:`~mcplite.testing.transports.transport_pair`
joins any client protocol to any server protocol, with flow control, half-close
and resets as a socket transport has them.

What differs from a socket: the server is reached from no address, so
``mcplite serve``'s limit of ``/mcp`` to loopback ``Host`` names (a loopback-bound
server's default) applies only when ``Config.mcp_allowed_hosts`` is set; the peer
address tools see is ``127.0.0.1``; there is no TLS.
"""

from __future__ import annotations

from .client import InMemoryClient, connect
from .grpc import GrpcLiteTransport, MemoryChannel
from .http import HttpResponse, HttpSession, LiteTransport, StreamingResponse
from .transports import MemoryTransport, transport_pair

__all__ = [
    "GrpcLiteTransport",
    "HttpResponse",
    "HttpSession",
    "InMemoryClient",
    "LiteTransport",
    "MemoryChannel",
    "MemoryTransport",
    "StreamingResponse",
    "connect",
    "transport_pair",
]
