"""An ASGI 3 application serving a dispatcher's HTTP endpoints.

:class:`AsgiApplication` answers what our own HTTP server answers (the same
:class:`~mcplite.bindings.http.site.HttpSite`), to any ASGI 3 server (uvicorn,
hypercorn) or mounted in an ASGI framework (Starlette's ``Mount``, FastAPI's
``app.mount``): ``http`` scopes go to an
:class:`~mcplite.bindings.asgi.exchange.HttpExchange` each; ``lifespan``
starts and closes it; ``websocket`` scopes are closed (no endpoint takes one).

Lifecycle: :meth:`~AsgiApplication.start` readies what needs the running loop
(:meth:`~AsgiApplication.startup`), :meth:`~AsgiApplication.close` ends the
streams that wait for news and releases it (:meth:`~AsgiApplication.shutdown`).
A server that sends ``lifespan`` events calls both; without them (an app
mounted in Starlette, whose lifespan does not reach its mounts) the first
request starts it, and closing is the host's to arrange: ``await app.close()``,
or ``app.lifespan`` as (or inside) the host's lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ..http.site import HttpSite
from ..http.statuses import retry_after
from .exchange import HttpExchange, request_of
from .types import Receive, Scope, Send

__all__ = ["AsgiApplication"]


class AsgiApplication:
    """``await app(scope, receive, send)``: ``dispatcher``'s endpoints over ASGI 3
    (MCP at ``config.mcp_path``, MCP-lite under ``config.base_path``), under the
    mount point the server names in ``root_path``."""

    def __init__(self, site: HttpSite) -> None:
        #: The endpoints, as our own server has them.
        self.site = site
        self.dispatcher = site.dispatcher
        self.config = site.config
        self._ready = False  # started, and told where it is served from: requests go straight in
        self._addressed = False
        self._started = False
        self._starting: asyncio.Task[None] | None = None
        self._closed = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            exchange = HttpExchange(self.site, request_of(scope), receive, send)
            if self._ready or await self._prepare(scope):
                await exchange.run()
            else:
                retry = (retry_after(self.config.retry_after),)
                await exchange.fail(503, "Server is shutting down", retry)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": 1000})  # before accept: a 403
        else:
            raise ValueError(f"unsupported ASGI scope type {kind!r}")

    async def _prepare(self, scope: Scope) -> bool:
        """Before the first request: learn where it is served from, start; False
        once closed."""
        if self._closed:
            return False
        if not self._addressed:
            self._addressed = True
            server = scope.get("server")
            host = str(server[0]) if server else ""
            port = server[1] if server and len(server) > 1 else None
            name = f"[{host}]" if ":" in host else host
            default_host = name if port is None else f"{name}:{port}"
            self.site.listening(host, scope.get("scheme", "http"), default_host)
        await self.start()
        self._ready = not self._closed
        return self._ready

    # -- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        """Ready what needs the running loop (:meth:`startup`), once: concurrent
        calls wait for the same start.  Raises what :meth:`startup` raises (the
        next call then tries again) and RuntimeError once closed."""
        if self._started:
            return
        if self._closed:
            raise RuntimeError("this ASGI app is closed")
        starting = self._starting
        if starting is None:
            starting = self._starting = asyncio.get_running_loop().create_task(self.startup())
        try:
            await asyncio.shield(starting)
        except BaseException:
            if starting.done():  # it failed (not only this wait): let the next call retry
                self._starting = None
            raise
        self._started = True

    async def close(self) -> None:
        """End the streams that wait for news (MCP subscriptions) and release what
        the app holds (:meth:`shutdown`), once; requests after it are answered
        ``503``.  Calls still running are the ASGI server's to finish or cancel."""
        if self._closed:
            return
        self._closed = True
        self._ready = False
        starting = self._starting
        if starting is not None and not starting.done():
            starting.cancel()
            await asyncio.wait([starting])
        self.site.mcp.end_subscriptions()
        await self.shutdown()

    async def startup(self) -> None:
        """What :meth:`start` readies (nothing here; a subclass may add to it)."""

    async def shutdown(self) -> None:
        """What :meth:`close` releases (nothing here: the dispatcher was given, and
        is its owner's to close; a subclass may add to it)."""

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """:meth:`start`, then :meth:`close` on the way out: a lifespan for the host
        framework (``FastAPI(lifespan=tools_app.lifespan)``), or to enter inside
        one of its own (``async with tools_app.lifespan(): yield``)."""
        await self.start()
        try:
            yield
        finally:
            await self.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """The ASGI lifespan protocol: start at ``startup``, close at ``shutdown``."""
        steps = {
            "lifespan.startup": ("startup", self.start),
            "lifespan.shutdown": ("shutdown", self.close),
        }
        while True:
            message = await receive()
            step = steps.get(message["type"])
            if step is None:
                continue
            name, run = step
            try:
                await run()
            except Exception as exc:
                failed = f"{type(exc).__name__}: {exc}"
                await send({"type": f"lifespan.{name}.failed", "message": failed})
                return
            await send({"type": f"lifespan.{name}.complete"})
            if name == "shutdown":
                return
