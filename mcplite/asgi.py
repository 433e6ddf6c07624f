"""mcplite as an ASGI 3 application: run it with any ASGI server, or mount it in
an ASGI framework next to routes of your own::

    from fastapi import FastAPI
    from mcplite.asgi import App

    tools_app = App(tools)                           # or App(mymodule)
    api = FastAPI(lifespan=tools_app.lifespan)       # closes it on shutdown
    api.mount("/tools", tools_app)                   # MCP at /tools/mcp

or alone: ``uvicorn mymodule:app`` with ``app = App(tools)``.  It answers what
``mcplite serve`` answers over HTTP, from the same endpoints
(:mod:`mcplite.bindings.asgi`); the socket, TLS, keep-alive and the access
log are the ASGI server's.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

from .auth import Auth, auth_from_config
from .bindings.asgi import AsgiApplication
from .bindings.http.site import HttpSite
from .core.config import Config, resolve_secret
from .core.dispatch import Dispatcher
from .core.prompts import Prompts
from .core.resources import Resources
from .core.tools import Tool, Tools

__all__ = ["App"]


class App(AsgiApplication):
    """``await app(scope, receive, send)``: ``tools`` served over HTTP (MCP at
    ``config.mcp_path``, MCP-lite under ``config.base_path``), with ``prompts``
    and ``resources`` on MCP.

    ``tools`` is a :class:`~mcplite.Tools` registry (or tools), or a module
    holding one named ``tools`` (its ``prompts`` and ``resources``, when it has
    them, are served too, as ``mcplite serve module`` serves them).  The app
    makes its dispatcher as ``mcplite serve`` does: the promise secret from
    ``config.secret``, else ``$MCPLITE_SECRET``, else a random one (with a
    warning); authentication as ``config`` asks for it.  Or give a
    ``dispatcher`` of your own instead of ``tools`` (with your middleware,
    metrics or access log); the app then leaves closing it to you.

    Lifecycle (see :class:`~mcplite.bindings.asgi.AsgiApplication`): ``lifespan``
    events, or the first request, start it (an OAuth issuer's keys are fetched);
    the lifespan's shutdown, :meth:`close` or leaving :meth:`lifespan` closes
    it: promised calls are cancelled and the promise store closed.

    Raises TypeError for neither or both of ``tools`` and ``dispatcher``, or a
    module without a ``tools`` registry; ValueError for a token file that cannot
    be used; ImportError for OAuth without PyJWT.
    """

    def __init__(
        self,
        tools: Tools | Iterable[Tool] | ModuleType | None = None,
        *,
        prompts: Prompts | None = None,
        resources: Resources | None = None,
        config: Config | None = None,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        if isinstance(tools, ModuleType):
            module = tools
            tools = getattr(module, "tools", None)
            if not isinstance(tools, Tools):
                raise TypeError(f"module {module.__name__!r} has no mcplite.Tools named 'tools'")
            found = getattr(module, "prompts", None)
            if prompts is None and isinstance(found, Prompts):
                prompts = found
            found = getattr(module, "resources", None)
            if resources is None and isinstance(found, Resources):
                resources = found
        self._auth: Auth | None = None
        self._owns_dispatcher = dispatcher is None
        if dispatcher is None:
            if tools is None:
                raise TypeError("App needs tools (or a dispatcher)")
            config = resolve_secret(config or Config())
            self._auth = auth_from_config(config)
            dispatcher = Dispatcher(tools, config, auth=self._auth)
        elif tools is not None:
            raise TypeError("give App tools or a dispatcher, not both")
        super().__init__(HttpSite(dispatcher, config, prompts=prompts, resources=resources))

    async def startup(self) -> None:
        """Start the verifiers that need the loop (an OAuth issuer's keys, as
        ``mcplite serve`` fetches them before it listens)."""
        if self._auth is not None:
            for authenticator in self._auth.authenticators:
                start = getattr(authenticator, "start", None)
                if start is not None:
                    await start()

    async def shutdown(self) -> None:
        """Close the dispatcher the app made (promised calls, promise store,
        thread pool)."""
        if self._owns_dispatcher:
            await self.dispatcher.close()
