"""A module's tools, prompts and resources served as ``mcplite serve`` serves them:
MCP-lite and MCP (``/mcp``) on one HTTP port, gRPC (tools and prompts) on
another, all on 127.0.0.1 ephemeral ports, for peers we did not write: the
official ``mcp`` client, ``http.client`` and grpcio.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from conftest import BASE, WAIT, RunningServer, make_config, start_server
from grpc_support import Protos, protos
from test_mcp_http import modern_headers, modern_message, post_to

from mcplite import Config, Prompts, Resources, Tools
from mcplite.bindings.grpc.service import GrpcServer
from mcplite.bindings.http.server import HttpServer


@dataclass
class Served:
    running: RunningServer  # its own HTTP port serves the tools alone: unused here
    http: HttpServer
    grpc: GrpcServer

    @property
    def port(self) -> int:
        """The HTTP port: MCP-lite under /mcp-lite/v1, MCP at /mcp."""
        return self.http.port

    def lite(self, path: str, payload: Any) -> tuple[int, Any]:
        """POST JSON to an MCP-lite route with ``http.client``: status and decoded body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            headers = {"Content-Type": "application/json"}
            conn.request("POST", BASE + path, body=json.dumps(payload).encode(), headers=headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def modern(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        capabilities: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        **meta: Any,
    ) -> tuple[int, dict[str, Any]]:
        """A 2026-07-28 request to /mcp answered as JSON: status and reply."""
        message = modern_message(method, params, 7, capabilities=capabilities, **meta)
        all_headers = {**modern_headers(message), **(headers or {})}
        status, response_headers, body = post_to(self.port, message, all_headers)
        assert response_headers["content-type"].startswith("application/json"), body
        reply: dict[str, Any] = json.loads(body)
        return status, reply

    def legacy(self, method: str, params: dict[str, Any] | None = None) -> tuple[int, Any]:
        """A 2025-11-25 request to /mcp (no session is needed): status and reply."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": 8, "method": method}
        if params is not None:
            message["params"] = params
        headers = {"MCP-Protocol-Version": "2025-11-25", "Accept": "application/json"}
        status, _, body = post_to(self.port, message, headers)
        return status, json.loads(body)

    def unary(self, method: str, request: Any, response: str, proto: str = "ours") -> Any:
        """One gRPC call of ``/mcplite.MCPLite/METHOD`` with grpcio built from ``proto``."""
        classes: Protos = protos()[proto]
        options = [("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc.port}", options=options) as channel:
            call = channel.unary_unary(
                f"/mcplite.MCPLite/{method}",
                request_serializer=type(request).SerializeToString,
                response_deserializer=classes.cls(response).FromString,
            )
            return call(request, timeout=WAIT)


@contextmanager
def serving(
    tools: Tools,
    prompts: Prompts | None = None,
    resources: Resources | None = None,
    config: Config | None = None,
) -> Iterator[Served]:
    config = config or make_config()
    running = start_server(tools, config)

    async def boot() -> tuple[HttpServer, GrpcServer]:
        http_server = HttpServer(running.dispatcher, config, prompts=prompts, resources=resources)
        await http_server.start("127.0.0.1", 0)
        grpc_server = GrpcServer(running.dispatcher, config, prompts=prompts)
        await grpc_server.start("127.0.0.1", 0)
        return http_server, grpc_server

    http_server, grpc_server = running.run(boot())
    try:
        yield Served(running, http_server, grpc_server)
    finally:
        running.run(grpc_server.shutdown(0.0))
        running.run(http_server.shutdown(0.0))
        running.stop()
