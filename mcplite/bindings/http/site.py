"""The HTTP endpoints of one dispatcher, assembled once for whatever serves them.

:class:`HttpSite` holds what a request meets, knowing no socket: the route
table (:mod:`mcplite.bindings.http.routes`), the head checks
(:mod:`mcplite.bindings.http.admission`: allowed hosts, CORS, authentication),
the MCP endpoint, and where each request is counted and logged.  Our own
server (:class:`~mcplite.bindings.http.server.HttpServer`) is one; the ASGI
application (:mod:`mcplite.bindings.asgi`) drives another with the same
answers.
"""

from __future__ import annotations

import time
from typing import TypedDict, Unpack

from ...core.config import LOOPBACK_NAMES, Config, is_loopback
from ...core.dispatch import Dispatcher
from ...core.observe import Access
from ...core.prompts import Prompts
from ...core.resources import Resources
from ...protocols.jsonrpc import JsonRpc
from ...protocols.mcp.server import McpServer
from ...protocols.methods import mcplite_methods
from .admission import Admission
from .cors import CorsPolicy
from .endpoints import JsonRpcCalls, PromptsList, ResourceMetadata, ToolsList
from .hosts import AllowedHosts
from .mcp_endpoint import McpEndpoint
from .messages import Request, Response
from .playground import PAGE_PATH, STATE_PATH, Playground
from .protected import ProtectedResource
from .routes import Route, Routes

__all__ = ["HttpSite"]

_POST = (b"POST",)
_GET = (b"GET", b"HEAD")
#: What a CORS preflight to the MCP path is told: its GET and DELETE are answered
#: 405, which a browser shows the page only if the preflight let it ask.
_MCP_PREFLIGHT = (b"GET", b"POST", b"DELETE")


class Served(TypedDict, total=False):
    """What an HTTP server serves beside the tools."""

    prompts: Prompts | None
    resources: Resources | None


class HttpSite:
    """The endpoints of ``dispatcher`` over HTTP: MCP-lite under
    ``config.base_path``, MCP at ``config.mcp_path``, the OAuth metadata with
    auth on; ``prompts`` and ``resources`` are served too."""

    def __init__(
        self, dispatcher: Dispatcher, config: Config | None = None, **served: Unpack[Served]
    ) -> None:
        prompts, resources = served.get("prompts"), served.get("resources")
        self.dispatcher = dispatcher
        self.config = config = config or dispatcher.config
        self.rpc = JsonRpc(
            dispatcher, mcplite_methods(dispatcher, prompts=prompts, resources=resources)
        )
        self.prompts = prompts
        self.auth = auth = dispatcher.auth
        self.metrics = dispatcher.metrics
        self.access_log = dispatcher.access_log
        #: What 401s point to, and the OAuth metadata (auth on only).
        self.protected = ProtectedResource(auth, config, dispatcher) if auth is not None else None
        #: CORS for browsers on other origins (None: off); see mcplite.bindings.http.cors.
        self.cors = CorsPolicy(config.cors_allow_origins) if config.cors_allow_origins else None
        #: Host names the MCP endpoint accepts (None: any); see Config.mcp_allowed_hosts.
        self.hosts = AllowedHosts(
            frozenset(h.lower() for h in config.mcp_allowed_hosts)
            if config.mcp_allowed_hosts is not None
            else None,
            self.cors,
        )
        self.admission = Admission(self.hosts, cors=self.cors, auth=auth, protected=self.protected)
        mcp = McpServer(dispatcher, prompts=prompts, resources=resources)
        self._mcp = McpEndpoint(dispatcher, config, mcp, protected=self.protected)
        #: The playground page (None: off); ``mcplite dev`` reports reloads to it.
        self.playground = Playground(config) if config.playground else None
        self.routes = Routes(self._route_table(prompts))

    def _route_table(self, prompts: Prompts | None) -> list[Route]:
        config = self.config
        base = config.base_path.encode()
        tools = ToolsList(self.dispatcher).answer
        calls = JsonRpcCalls(self.dispatcher, config, self.rpc, protected=self.protected).handle
        table = [
            Route(base + b"/listtools", _POST, answer=tools),
            Route(base + b"/tools", _POST, answer=tools),
            Route(base + b"/calltools", _POST, handle=calls),
            Route(base + b"/rpc", _POST, handle=calls),
        ]
        if prompts is not None:
            table.append(Route(base + b"/prompts", _POST, answer=PromptsList(prompts).answer))
        if config.mcp_path is not None:
            table.append(
                Route(
                    config.mcp_path.encode(),
                    _POST,
                    handle=self._mcp.handle,
                    binding="mcp",
                    check_host=True,
                    preflight_methods=_MCP_PREFLIGHT,
                )
            )
        if self.protected is not None:
            metadata = ResourceMetadata(self.protected).answer
            for path in self.protected.metadata_paths():
                table.append(
                    Route(
                        path.encode(),
                        (b"GET", b"HEAD"),
                        answer=metadata,
                        public=True,
                        json_body=False,
                    )
                )
        if self.playground is not None:
            table += self._playground_routes(self.playground)
        return table

    def _playground_routes(self, playground: Playground) -> list[Route]:
        auth = self.auth is not None

        def state(request: Request) -> Response:
            return playground.answer_state(request, auth)

        return [
            Route(path, _GET, answer=answer, public=True, json_body=False, check_host=True)
            for path, answer in ((PAGE_PATH, playground.answer_page), (STATE_PATH, state))
        ]

    @property
    def mcp(self) -> McpServer:
        """The MCP methods ``/mcp`` answers with (replaceable)."""
        return self._mcp.mcp

    @mcp.setter
    def mcp(self, mcp: McpServer) -> None:
        self._mcp.mcp = mcp

    def listening(self, host: str, scheme: str, default_host: str) -> None:
        """Served from ``host`` over ``scheme`` (``http``, ``https``): on loopback,
        with no allowed hosts configured, the MCP endpoint takes loopback names
        only; ``default_host`` is the origin OAuth metadata names for a request
        that sends no Host."""
        unset = self.hosts.allowed is None and self.config.mcp_allowed_hosts is None
        if unset and is_loopback(host):
            self.hosts.allowed = LOOPBACK_NAMES
        if self.protected is not None:
            self.protected.scheme = scheme
            self.protected.default_host = default_host

    def record(
        self,
        request: Request,
        route: Route | None,
        status: int,
        t0: float,
        outcome: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Count ``request`` (answered ``status``; ``reason`` names a refusal) and
        write its access line; ``t0`` is when its head arrived (``perf_counter``),
        ``outcome`` how one cut off ended (``client-gone``, ``cancelled``)."""
        binding = route.binding if route is not None else "http"
        metrics = self.metrics
        if metrics.on:
            metrics.request(binding, status, reason)
        if self.config.access_log:
            entry = Access(
                binding,
                request.method.decode("latin-1"),
                request.path_text(),
                request.tool,
                status,
                (time.perf_counter() - t0) * 1000,
                request.peer,
                outcome,
            )
            self.access_log.write(entry)
