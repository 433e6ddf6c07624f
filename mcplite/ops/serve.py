"""Running a server: resolve what the core must be given, start the bindings,
drain them on SIGINT/SIGTERM.  ``cli.py`` only parses arguments and calls this.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine, Iterable
from types import EllipsisType
from typing import Any

from .._version import __version__
from ..auth import Auth, StaticTokens, auth_from_config
from ..bindings.base import Binding, loop_name
from ..bindings.stdio import StdioPipes, run_stdio
from ..core.accel import enabled
from ..core.config import Config, is_loopback, resolve_secret
from ..core.dispatch import Dispatcher
from ..core.middleware import Middleware
from ..core.promises import PromiseStore, stop_tasks
from ..core.prompts import Prompts
from ..core.resources import Resources
from ..core.tools import Tools
from ..protocols.mcp.server import McpServer
from .logs import ACCESS
from .metrics import METRICS, Health, MetricsServer, watch_process

__all__ = [
    "ServeError",
    "Server",
    "build_dispatcher",
    "fit_connections_to_fd_limit",
    "promise_store",
    "raise_fd_limit",
    "resolve_secret",
    "serve",
    "serve_stdio",
]

log = logging.getLogger("mcplite")


class ServeError(Exception):
    """The server cannot start as configured; ``status`` is the exit status."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def promise_store(config: Config) -> PromiseStore | None:
    """The store ``config.promise_store`` names (None: the dispatcher's own memory
    store).  Raises :class:`ServeError` for a URL no store takes."""
    if config.promise_store in ("memory://", ""):
        return None
    from ..stores import open_store

    try:
        return open_store(
            config.promise_store,
            ttl=config.promise_ttl,
            max_entries=config.max_promises,
            retry_after=config.retry_after,
        )
    except (ValueError, ImportError) as exc:
        raise ServeError(f"--promise-store: {exc}") from None


class Server:
    """mcplite's bindings inside a running asyncio program::

        async with Server(tools, http=("127.0.0.1", 0), grpc=None) as server:
            print(server.urls)
            ...  # serve until the program says stop
            await server.drain(5.0)  # optional: let calls in flight finish

    ``http`` and ``grpc`` are the addresses to listen on (port 0: an ephemeral
    one, read back from :attr:`urls`, :attr:`http_port`, :attr:`grpc_port`); None
    turns that binding off; left out, ``config``'s (``Config().http`` and
    ``.grpc``).  ``prompts`` and ``resources`` are served on MCP; ``middleware``
    runs around every call (:mod:`mcplite.core.middleware`).  ``dispatcher``:
    serve that core instead of one made from ``tools`` (it is then not closed).

    It installs no signal handler, exception handler or gc setting: the program
    it runs in decides those (``mcplite serve`` adds them around a Server).
    Several servers may run in one loop, and one may be started again once closed.
    Authentication, TLS, the promise store and ``--metrics`` come from ``config``
    as they do for ``mcplite serve``.
    """

    def __init__(
        self,
        tools: Tools | None = None,
        *,
        http: tuple[str, int] | EllipsisType | None = ...,
        grpc: tuple[str, int] | EllipsisType | None = ...,
        config: Config | None = None,
        prompts: Prompts | None = None,
        resources: Resources | None = None,
        middleware: Iterable[Middleware] = (),
        dispatcher: Dispatcher | None = None,
        reuse_port: bool = False,
        sockets: dict[str, socket.socket] | None = None,
    ) -> None:
        if (tools is None) == (dispatcher is None):
            raise TypeError("Server() takes either tools or a dispatcher")
        config = config or Config()
        updates: dict[str, Any] = {}
        if http is not ...:
            updates["http"] = http
        if grpc is not ...:
            updates["grpc"] = grpc
        self.config = dataclasses.replace(config, **updates) if updates else config
        self.tools = tools
        self.prompts = prompts
        self.resources = resources
        self.middleware = tuple(middleware)
        self._given = dispatcher
        self._reuse_port = reuse_port
        self._sockets = sockets or {}
        #: The core serving now (None before :meth:`start` and after :meth:`close`).
        self.dispatcher: Dispatcher | None = None
        #: The bindings listening now, HTTP first.
        self.bindings: list[Binding] = []
        self.health = Health()
        self._metrics: MetricsServer | None = None

    async def __aenter__(self) -> Server:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> Server:
        """Listen on every address; returns the server.  Raises :class:`ServeError`
        (its message names the address, or the setting) when one cannot be served,
        having closed what had started; RuntimeError when it is running already."""
        if self.dispatcher is not None:
            raise RuntimeError("this Server is running already")
        config = self.config
        if config.http is None and config.grpc is None:
            raise ServeError("both bindings are off: nothing to serve")
        if self._given is not None:
            dispatcher = self._given
        else:
            assert self.tools is not None
            auth = await start_auth(config)
            dispatcher = build_dispatcher(self.tools, config, auth=auth)
        for middleware in self.middleware:
            dispatcher.use(middleware)
        self.dispatcher = dispatcher
        self.health = Health()
        try:
            if config.metrics is not None:
                self._metrics = await start_metrics(config.metrics, self.health)
                watch(dispatcher, self.bindings, self.health)
            made = _bindings(dispatcher, config, self.prompts, self.resources)
            for binding, (host, port) in made:
                sock = self._sockets.get(binding.name)
                guard_accept(await _listen(binding, host, port, self._reuse_port, sock))
                self.bindings.append(binding)
        except BaseException:
            await self.close()
            raise
        self.health.listening = True
        return self

    @property
    def urls(self) -> list[str]:
        """Where clients reach each binding (and ``/metrics``, when served)."""
        urls = [binding.url() for binding in self.bindings]
        if self._metrics is not None:
            urls.append(self._metrics.url())
        return urls

    @property
    def http_port(self) -> int | None:
        """The port HTTP listens on (None: not serving HTTP)."""
        return self._port("HTTP")

    @property
    def grpc_port(self) -> int | None:
        """The port gRPC listens on (None: not serving gRPC)."""
        return self._port("gRPC")

    def _port(self, name: str) -> int | None:
        return next((b.port for b in self.bindings if b.name == name), None)

    async def drain(self, grace: float) -> None:
        """Stop taking work: ``/readyz`` says so, listeners close, calls in flight
        get ``grace`` seconds, then a shutting-down error.  Returns within ``grace`` + 1 s."""
        self.health.draining = True
        await asyncio.gather(*(b.drain(grace) for b in self.bindings))

    async def close(self) -> None:
        """Close every connection and listener, then the core it made (a dispatcher
        given is left open).  Closing a closed server does nothing."""
        bindings, self.bindings = self.bindings, []
        await asyncio.gather(*(b.close() for b in bindings))
        if self._metrics is not None:
            await self._metrics.close()
            self._metrics = None
        dispatcher, self.dispatcher = self.dispatcher, None
        if dispatcher is not None and dispatcher is not self._given:
            await dispatcher.close()


async def serve(
    tools: Tools,
    config: Config,
    *,
    prompts: Prompts | None = None,
    resources: Resources | None = None,
    reuse_port: bool = False,
    sockets: dict[str, socket.socket] | None = None,
    announce: Callable[[int, list[str]], None] | None = None,
    beside: Callable[[Server, asyncio.Event], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Run a :class:`Server` as a process does: until SIGINT/SIGTERM, then shut down
    gracefully (drain every binding within ``config.grace``, close them, close the
    core).  Around it, what only a whole process should do: the open-file limit
    raised and the connection caps fitted to it, the loop's exception handler
    (accept errors said once a minute), the signal handlers, and ``gc.freeze()``
    once started.

    ``reuse_port`` binds with SO_REUSEPORT (the workers of :mod:`mcplite.ops.workers`
    share their ports so).  ``sockets`` maps a binding's name ("HTTP", "gRPC") to an
    already bound, listening socket it serves instead of binding its address (the
    workers' fallback where SO_REUSEPORT does not spread connections).  ``announce``,
    when given, is told the tool count and the URLs once every binding listens,
    instead of the "serving" log line.  ``beside(server, stop)``, when given, runs
    from then on until the stop (``mcplite dev`` watches files so)."""
    if config.http is None and config.grpc is None:
        raise ServeError("both bindings are off: nothing to serve")
    config = fit_connections_to_fd_limit(config, raise_fd_limit())
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_AcceptErrorsOnce())
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = Server(
        tools,
        config=config,
        prompts=prompts,
        resources=resources,
        reuse_port=reuse_port,
        sockets=sockets,
    )
    await server.start()
    # What start-up made lives as long as the process: out of the collector's way,
    # so that no full collection walks it in the middle of a request (p99).
    gc.collect()
    gc.freeze()
    assert server.dispatcher is not None
    count, urls = len(server.dispatcher.tool_definitions()), server.urls
    if announce is not None:
        announce(count, urls)
    else:
        log.info(
            "mcplite %s (%s) serving %d tools on %s",
            __version__,
            loop_name(loop),
            count,
            " and ".join(urls),
        )
    companion = asyncio.create_task(beside(server, stop)) if beside is not None else None
    await stop.wait()
    if companion is not None:
        await stop_tasks([companion])
    log.info("shutting down: finishing in-flight calls (grace %ss)", config.grace)
    await server.drain(config.grace)
    await server.close()
    log.info("stopped")
    ACCESS.flush()


def build_dispatcher(tools: Tools, config: Config, *, auth: Auth | None = None) -> Dispatcher:
    """The core as every way of serving assembles it: the promise secret resolved
    (``config.secret``, else ``$MCPLITE_SECRET``, else random, with a warning), the
    promise store ``config.promise_store`` names, and the metrics and access log
    attached."""
    config = resolve_secret(config)
    return Dispatcher(
        tools,
        config,
        promises=promise_store(config),
        auth=auth,
        metrics=METRICS,
        access_log=ACCESS,
    )


async def serve_stdio(
    tools: Tools,
    config: Config,
    pipes: StdioPipes | None = None,
    *,
    prompts: Prompts | None = None,
    resources: Resources | None = None,
) -> None:
    """Serve ``tools`` (and ``prompts`` and ``resources``) as MCP on ``pipes``
    (default: fds 0 and 1) until the input ends or SIGINT/SIGTERM arrives; then
    drain within ``config.grace`` and return.  The pipes are closed on return."""
    if pipes is None:
        pipes = StdioPipes(os.dup(0), os.dup(1))
    dispatcher = build_dispatcher(tools, config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            signals.append(sig)
        except (ValueError, NotImplementedError, RuntimeError):  # not the main thread; Windows
            pass
    try:
        await run_stdio(McpServer(dispatcher, prompts=prompts, resources=resources), pipes, stop)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await dispatcher.close()
    log.info("stopped")


async def start_metrics(address: tuple[str, int], health: Health) -> MetricsServer:
    """The ``--metrics`` listener, started (counting starts with it)."""
    server = MetricsServer(METRICS, health)
    try:
        await server.start(*address)
    except OSError as exc:
        raise ServeError(f"--metrics {address[0]}:{address[1]}: {exc.strerror or exc}") from None
    return server


def watch(dispatcher: Dispatcher, bindings: list[Binding], health: Health) -> None:
    """The gauges and the readiness check of a serving process."""

    def connections() -> list[tuple[dict[str, str], float]]:
        out = []
        for binding in bindings:
            count = getattr(binding, "connection_count", None)
            if count is not None:
                out.append(({"binding": binding.name.lower()}, float(count())))
        return out

    METRICS.gauge(
        "mcplite_calls_in_flight",
        "Calls and streams running now.",
        lambda: [({}, dispatcher.active)],
    )
    METRICS.gauge(
        "mcplite_streams_open", "Streamed calls open now.", lambda: [({}, dispatcher.streams)]
    )
    METRICS.gauge(
        "mcplite_promises_pending",
        "Promises this process is running.",
        lambda: [({}, dispatcher.pending_promises)],
    )
    METRICS.gauge("mcplite_connections_open", "Open connections, by binding.", connections)
    watch_process(METRICS)

    async def store() -> str | None:
        try:
            await dispatcher.promises.has_room()
        except Exception as exc:
            return f"promise store unreachable ({type(exc).__name__})"
        return None

    health.checks.append(store)


async def start_auth(config: Config) -> Auth | None:
    """The authentication ``config`` asks for, its verifiers started (an OAuth
    issuer's keys fetched), and the TLS files checked; raises ServeError."""
    try:
        config.server_ssl_context()
    except (OSError, ValueError) as exc:
        text = str(exc)
        text = "client-ca" + text[len("client_ca") :] if text.startswith("client_ca") else text
        raise ServeError(f"TLS: --{text}") from None
    try:
        auth = auth_from_config(config)
    except (ValueError, ImportError) as exc:
        raise ServeError(str(exc)) from None
    if auth is None:
        if config.http is not None and not is_loopback(config.http[0]):
            log.warning(
                "auth is off and HTTP listens beyond loopback: anyone who reaches "
                "the port can call every tool (see --auth-tokens, --oauth-issuer)"
            )
        return None
    for authenticator in auth.authenticators:
        start = getattr(authenticator, "start", None)
        if start is not None:
            await start()
    kinds = [
        f"{len(a)} static tokens" if isinstance(a, StaticTokens) else "OAuth access tokens"
        for a in auth.authenticators
    ]
    log.info(
        "auth on: %s; discovery %s%s",
        " and ".join(kinds),
        "open" if auth.open_discovery else "needs a token",
        f"; {auth.limiter.rate:g} requests/s per caller" if auth.limiter else "",
    )
    return auth


def _bindings(
    dispatcher: Dispatcher,
    config: Config,
    prompts: Prompts | None = None,
    resources: Resources | None = None,
) -> list[tuple[Binding, tuple[str, int]]]:
    """Each enabled binding with its address (gRPC is imported only when served)."""
    from ..bindings.http import HttpServer

    out: list[tuple[Binding, tuple[str, int]]] = []
    if config.http is not None:
        http = HttpServer(dispatcher, config, prompts=prompts, resources=resources)
        out.append((http, config.http))
    if config.grpc is not None:
        from ..bindings.grpc.service import GrpcServer

        out.append((GrpcServer(dispatcher, config, prompts=prompts), config.grpc))
    return out


async def _listen(
    binding: Binding,
    host: str,
    port: int,
    reuse_port: bool = False,
    sock: socket.socket | None = None,
) -> Any:
    try:
        if sock is not None:
            return await binding.start(sock=sock)
        return await binding.start(host, port, reuse_port=reuse_port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ServeError(
            f"cannot listen for {binding.name} on {host}:{port}: {reason}", 1
        ) from None


# --- open files -------------------------------------------------------------------------
#
# Each connection holds a file descriptor.  Without care, a few hundred silent
# clients use up the soft RLIMIT_NOFILE (often 1024), accept() then fails with
# EMFILE on every listener, and asyncio logs that error in a storm.  So: raise the
# soft limit to the hard one, keep the connection caps within it, and when the
# limit is reached anyway (a tool holding files), pause accepting quietly.

#: File descriptors kept out of the connection caps: the listeners, the event loop,
#: logs, files that tools open, and connections accepted only to be refused.
FD_RESERVE = 32
#: Connections one listener accepts in one turn of the event loop.  asyncio's accept
#: loop would take up to ``backlog`` (1,024 for both bindings) in one turn, each
#: an open file descriptor before any cap can refuse it, and a refused one is closed
#: only a few turns later: a burst of connections beyond the caps would then run
#: past FD_RESERVE into EMFILE.  The rest wait in the kernel's queue for the next turn.
ACCEPTS_PER_TURN = 16
#: accept() errors meaning "out of file descriptors or memory", after which asyncio
#: stops accepting on that listener for a second.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def raise_fd_limit() -> int | None:
    """Raise the soft open-file limit to the hard one; return the soft limit (None:
    unlimited, or no ``resource`` module on this platform)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # e.g. macOS refuses an unlimited soft limit
            log.debug("could not raise the open-file limit from %s to %s", soft, hard)
    return None if soft == resource.RLIM_INFINITY else soft


def _open_fds() -> int:
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(directory))
        except OSError:
            continue
    return 16


def fit_connections_to_fd_limit(config: Config, fd_limit: int | None) -> Config:
    """``config`` with the connection caps of the bindings it serves lowered, in
    proportion, so that together they fit in ``fd_limit`` with a reserve; says so once."""
    http_cap = config.max_connections if config.http is not None else 0
    grpc_cap = config.grpc_max_connections if config.grpc is not None else 0
    total = http_cap + grpc_cap
    if fd_limit is None or not total:
        return config
    # Reserved too: what the listeners may have accepted beyond the caps in the
    # turns before a refused connection's descriptor is closed (about four).
    reserve = max(FD_RESERVE, fd_limit // 8) + 4 * ACCEPTS_PER_TURN
    budget = fd_limit - _open_fds() - reserve
    if total <= budget:
        return config
    if budget < (http_cap > 0) + (grpc_cap > 0):
        raise ServeError(
            f"the open-file limit ({fd_limit}) leaves no room for connections; "
            "raise it (ulimit -n)",
            1,
        )
    http_fit = max(1, http_cap * budget // total) if http_cap else config.max_connections
    grpc_fit = max(1, grpc_cap * budget // total) if grpc_cap else config.grpc_max_connections
    served = [
        f"{n} {kind}"
        for n, kind, on in ((http_fit, "HTTP", http_cap), (grpc_fit, "gRPC", grpc_cap))
        if on
    ]
    log.warning(
        "the open-file limit (%d) cannot hold %d connections: serving at most %s "
        "(raise it with ulimit -n to serve more)",
        fd_limit,
        total,
        " and ".join(served),
    )
    return dataclasses.replace(config, max_connections=http_fit, grpc_max_connections=grpc_fit)


def guard_accept(server: asyncio.AbstractServer) -> None:
    """Bound each turn's accepts of ``server`` to :data:`ACCEPTS_PER_TURN` and end
    asyncio's accept loop at the first EMFILE, where the speed paths are on
    (:mod:`mcplite.ops.accel`: it changes asyncio's listening sockets).  Off
    (``MCPLITE_ACCEL=0``), asyncio accepts as it does by itself; so does another
    loop's server (uvloop's accepts in libuv, which keeps a spare file descriptor
    to shed connections with when out of them)."""
    if isinstance(server, asyncio.Server) and enabled("serve", {}):
        from .accel import guard_listeners

        guard_listeners(server, ACCEPTS_PER_TURN, OUT_OF_RESOURCES)


class _AcceptErrorsOnce:
    """The loop's exception handler: an accept() that failed for lack of file
    descriptors is one warning a minute, not a traceback each time; the rest goes
    to asyncio's default handler."""

    every = 60.0

    def __init__(self) -> None:
        self._said_at: float | None = None

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not (isinstance(exc, OSError) and exc.errno in OUT_OF_RESOURCES and "socket" in context):
            loop.default_exception_handler(context)
            return
        now = loop.time()
        if self._said_at is None or now - self._said_at >= self.every:
            self._said_at = now
            log.warning(
                "out of file descriptors (%s): not accepting new connections until some "
                "close; raise the open-file limit (ulimit -n) or lower the connection caps",
                exc.strerror or exc,
            )
