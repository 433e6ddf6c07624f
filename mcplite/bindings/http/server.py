"""The HTTP/1.1 binding: our own asyncio server around h11.

Endpoints under the base path (default ``/mcp-lite/v1``), POST only
(:mod:`mcplite.bindings.http.endpoints`):

- ``/listtools`` and its alias ``/tools``: ``{"tools": [...]}`` (spec 4.2.1, A.1);
- ``/calltools`` and its alias ``/rpc``: JSON-RPC 2.0 (spec 4.2.2, A.2), or an
  SSE stream when the request says ``Accept: text/event-stream`` (spec 4.3, A.4);
- ``/prompts``, when the server has prompts: ``{"prompts": [...]}`` (spec 8.1);

and MCP at ``/mcp`` (:mod:`mcplite.bindings.http.mcp_endpoint`).  The routes are
a table (:mod:`mcplite.bindings.http.routes`): 404, 405 and ``Allow`` follow from it.

With ``cors_allow_origins``, pages of those origins may call every endpoint from
a browser: preflights are answered and answers carry the CORS headers
(:mod:`mcplite.bindings.http.cors`).

With OAuth on, ``GET /.well-known/oauth-protected-resource`` (and the same
followed by the MCP path or the base path, RFC 9728 section 3.1) serves the
Protected Resource Metadata that 401 answers point to
(:mod:`mcplite.bindings.http.protected`).

HTTP-level errors (400, 404, 405, 408, 413, 415, 431, 501, 503) carry a JSON-RPC
error object with ``id: null`` so that a JSON-RPC client can read every answer
the same way (a HEAD request gets the same headers and no body).  An error
answered before the request was read to its end closes the connection, but
*lingering* (see :mod:`mcplite.bindings.http.connection`).

:class:`HttpServer` is the listener and its lifecycle (start, drain, close) and
the one deadline ticker; each connection is an
:class:`~mcplite.bindings.http.connection.HttpConnection`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from typing import Unpack

from ...core.config import Config
from ...core.dispatch import Dispatcher
from ..base import Binding
from .connection import HttpConnection
from .site import HttpSite, Served

__all__ = ["HttpServer"]

# After the grace period, how long calls told to stop get before the rest is cancelled.
_LAST_WORD = 0.5


class HttpServer(HttpSite, Binding):
    """Serves a :class:`Dispatcher` over HTTP/1.1; start with :meth:`start`.  The
    endpoints are its :class:`~mcplite.bindings.http.site.HttpSite`."""

    def __init__(
        self, dispatcher: Dispatcher, config: Config | None = None, **served: Unpack[Served]
    ) -> None:
        super().__init__(dispatcher, config, **served)
        config = self.config
        self.ssl: ssl.SSLContext | None = None
        self.connections: set[HttpConnection] = set()
        # Connections refused with 503 (too many), lingering until their client
        # has read it (see _LINGERING_REFUSALS).
        self.rejected: set[HttpConnection] = set()
        self.draining = False
        #: Whether a request handler started in this loop turn (see HttpConnection).
        self.started_this_turn = False
        self.streams_closing = asyncio.Event()
        self.all_closed = asyncio.Event()  # set while draining, once no connection is left
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.TimerHandle | None = None
        # One server-wide timer checks every connection's deadline, instead of a
        # timer set and cancelled per request: a deadline is then a float store.
        self._tick_every = min(
            1.0, max(0.02, min(config.request_timeout, config.keepalive_timeout) / 4)
        )

    def watch(self) -> None:
        """Make sure the deadline ticker runs while there are connections."""
        if self._ticker is None:
            loop = asyncio.get_running_loop()
            self._ticker = loop.call_later(self._tick_every, self._tick)

    def _tick(self) -> None:
        self._ticker = None
        if not self.connections:
            return
        now = asyncio.get_running_loop().time()
        for conn in list(self.connections):
            conn.check_deadline(now)
        self.watch()

    name = "HTTP"

    async def listen(self, sock: socket.socket, host: str) -> asyncio.Server:
        """Serve on ``sock`` (see :meth:`Binding.start`)."""
        loop = asyncio.get_running_loop()
        self.ssl = tls = self.config.server_ssl_context()
        self._server = await loop.create_server(
            lambda: HttpConnection(self), sock=sock, backlog=1024, ssl=tls
        )
        bound = self._server.sockets[0].getsockname()[0]
        scheme = "https" if tls is not None else "http"
        self.listening(bound, scheme, f"127.0.0.1:{self.port}")
        return self._server

    def connection(self) -> asyncio.Protocol:
        """The server side of one new connection, as :meth:`start` makes one for each
        socket it accepts: for a transport made elsewhere, such as the in-memory pairs
        of :mod:`mcplite.testing`.  Call it in the running event loop."""
        return HttpConnection(self)

    def connection_count(self) -> int:
        return len(self.connections)

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def url(self) -> str:
        assert self._server is not None
        host = self._server.sockets[0].getsockname()[0]
        scheme = "https" if self.ssl is not None else "http"
        return f"{scheme}://{host}:{self.port}{self.config.base_path}"

    async def shutdown(self, grace: float | None = None) -> None:
        """:meth:`drain` within ``grace`` seconds (default ``config.grace``), then :meth:`close`."""
        await self.drain(self.config.grace if grace is None else grace)
        await self.close()

    async def close(self) -> None:
        """Close every connection and the listener (after :meth:`drain`, nothing is left)."""
        if self._server is not None:
            self._server.close()
        for conn in [*self.connections, *self.rejected]:
            conn.abort(hard=True)
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None

    async def drain(self, grace: float) -> None:
        """Stop accepting; let in-flight requests finish within ``grace`` seconds.

        Idle keep-alive connections close at once.  When the grace period ends,
        a call still running is answered ``503`` with a JSON-RPC error saying
        the server is shutting down (``-32000``, ``Connection: close``), and a
        stream still open gets a final ``event: error`` saying the same; what
        is left half a second later is cancelled.  Returns within ``grace`` + 1 s.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + grace + 1.0
        self.draining = True
        self.mcp.end_subscriptions()  # subscriptions/listen streams end now, not at the grace
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close_if_idle()
        busy = [c.task for c in self.connections if c.task is not None and not c.task.done()]
        if busy:
            _, pending = await asyncio.wait(busy, timeout=grace)
            if pending:
                self.streams_closing.set()
                for conn in list(self.connections):
                    conn.cut_short()
                _, pending = await asyncio.wait(pending, timeout=_LAST_WORD)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=max(0.0, end - loop.time() - 0.1))
        for conn in [*self.connections, *self.rejected]:
            conn.abort()
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self.connections or self.rejected:
            # A close waits until the unsent output is sent; a client that reads
            # nothing must not hold the shutdown up (nor keep its socket after
            # it): past the budget, drop what is unsent.
            try:
                await asyncio.wait_for(self.all_closed.wait(), max(0.0, end - loop.time() - 0.1))
            except TimeoutError:
                for conn in [*self.connections, *self.rejected]:
                    conn.abort(hard=True)
        if self._server is not None:
            # From Python 3.12 on this also waits for every connection to be gone.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), max(0.05, end - loop.time()))
