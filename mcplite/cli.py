"""``python -m mcplite serve MODULE[:ATTR]``: every binding on ONE asyncio loop.

Also ``python -m mcplite tools URL`` and ``python -m mcplite call URL NAME k=v``,
the client commands of :mod:`mcplite.client.cli`.

``MODULE:ATTR`` names a :class:`~mcplite.Tools` registry; ``MODULE`` alone looks
for the attribute ``tools``.  SIGINT/SIGTERM stop accepting, give in-flight
calls ``--grace`` seconds, then cancel what is left, and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import importlib
import logging
import os
import signal
import socket
import sys
import weakref
from collections.abc import Sequence
from typing import Any

from ._version import __version__
from .config import Config
from .dispatch import Dispatcher
from .serve import resolve_secret
from .tools import Tools

__all__ = ["main"]

log = logging.getLogger("mcplite")

DEFAULT_ATTR = "tools"


class CliError(Exception):
    """One line for the user, and an exit status."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return (host.strip("[]") or "127.0.0.1", int(port))


def _text_address(address: tuple[str, int] | None) -> str | None:
    # A string default is parsed by `type` like a given value, and reads well in --help.
    return None if address is None else f"{address[0]}:{address[1]}"


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcplite", description="Serve MCP-lite tools over HTTP/1.1 and gRPC, and call them."
    )
    parser.add_argument("--version", action="version", version=f"mcplite {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    d = Config()
    serve = commands.add_parser(
        "serve",
        help="serve the tools of a module",
        description="Serve the tools of MODULE[:ATTR] over HTTP/1.1 and gRPC on one asyncio loop. "
        f"ATTR defaults to '{DEFAULT_ATTR}'. Example: mcplite serve mcplite.demo",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    serve.add_argument("target", metavar="MODULE[:ATTR]", help="where the Tools registry lives")
    bind = serve.add_argument_group("bindings")
    bind.add_argument(
        "--http",
        type=_address,
        default=_text_address(d.http),
        metavar="HOST:PORT",
        help="HTTP/1.1 address (port 0: any free port)",
    )
    bind.add_argument("--no-http", action="store_true", help="do not serve HTTP")
    bind.add_argument(
        "--grpc",
        type=_address,
        default=_text_address(d.grpc),
        metavar="HOST:PORT",
        help="gRPC address (port 0: any free port)",
    )
    bind.add_argument("--no-grpc", action="store_true", help="do not serve gRPC")
    bind.add_argument("--base-path", default=d.base_path, help="HTTP path prefix")
    limits = serve.add_argument_group("limits")
    limits.add_argument(
        "--max-body-size",
        type=_positive(int),
        default=d.max_body_size,
        metavar="BYTES",
        help="larger request bodies get 413",
    )
    limits.add_argument(
        "--max-header-size",
        type=_positive(int),
        default=d.max_header_size,
        metavar="BYTES",
        help="larger request heads get 431",
    )
    limits.add_argument(
        "--request-timeout",
        type=_positive(float),
        default=d.request_timeout,
        metavar="S",
        help="seconds to receive a whole request, else 408",
    )
    limits.add_argument(
        "--keepalive-timeout",
        type=_positive(float),
        default=d.keepalive_timeout,
        metavar="S",
        help="idle seconds before a keep-alive connection is closed",
    )
    limits.add_argument(
        "--max-connections",
        type=_positive(int),
        default=d.max_connections,
        metavar="N",
        help="more connections get 503",
    )
    limits.add_argument(
        "--max-concurrent-calls",
        type=_positive(int),
        default=d.max_concurrent_calls,
        metavar="N",
        help="more calls get 503 + Retry-After / RESOURCE_EXHAUSTED",
    )
    limits.add_argument(
        "--grpc-max-message-size",
        type=_positive(int),
        default=d.grpc_max_message_size,
        metavar="BYTES",
        help="larger gRPC messages get RESOURCE_EXHAUSTED",
    )
    limits.add_argument(
        "--grpc-idle-timeout",
        type=_positive(float),
        default=d.grpc_idle_timeout,
        metavar="S",
        help="seconds without an open stream before a gRPC connection is closed (GOAWAY)",
    )
    limits.add_argument(
        "--grpc-max-connections",
        type=_positive(int),
        default=d.grpc_max_connections,
        metavar="N",
        help="more gRPC connections are closed at once (UNAVAILABLE)",
    )
    promises = serve.add_argument_group("promises and streams")
    promises.add_argument(
        "--promise-after",
        type=_non_negative,
        default=d.promise_after,
        metavar="S",
        help="seconds before a running call becomes a promise",
    )
    promises.add_argument(
        "--promise-ttl",
        type=_positive(float),
        default=d.promise_ttl,
        metavar="S",
        help="seconds a promise token and its result live",
    )
    promises.add_argument(
        "--max-promises",
        type=_positive(int),
        default=d.max_promises,
        metavar="N",
        help="pending promises before new long calls are refused",
    )
    promises.add_argument(
        "--secret",
        default=None,
        help="promise sealing secret (default: $MCPLITE_SECRET, else random)",
    )
    promises.add_argument(
        "--heartbeat",
        type=_positive(float),
        default=d.heartbeat,
        metavar="S",
        help="seconds of tool silence before an SSE heartbeat",
    )
    proc = serve.add_argument_group("process")
    proc.add_argument(
        "--grace",
        type=_non_negative,
        default=d.grace,
        metavar="S",
        help="seconds in-flight calls get after SIGINT/SIGTERM",
    )
    proc.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level",
    )
    proc.add_argument("--no-access-log", action="store_true", help="no log line per HTTP request")
    from .client import cli as client_cli

    client_cli.register(commands)
    return parser


def load_tools(target: str) -> Tools:
    """Import ``MODULE[:ATTR]`` and return its registry; raises :class:`CliError`."""
    module_name, _, attr = target.partition(":")
    attr = attr or DEFAULT_ATTR
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the console script does not add it
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import module '{module_name}': {exc}") from None
    except Exception as exc:
        raise CliError(f"importing '{module_name}' failed: {type(exc).__name__}: {exc}") from None
    registry = getattr(module, attr, None)
    if registry is None:
        raise CliError(f"module '{module_name}' has no attribute '{attr}' (a mcplite.Tools)")
    if not isinstance(registry, Tools):
        raise CliError(
            f"'{module_name}:{attr}' is a {type(registry).__name__}, not a mcplite.Tools"
        )
    return registry


def _config(args: argparse.Namespace) -> Config:
    secret = args.secret.encode() if args.secret else None
    return Config(
        http=None if args.no_http else args.http,
        grpc=None if args.no_grpc else args.grpc,
        base_path=args.base_path,
        max_body_size=args.max_body_size,
        max_header_size=args.max_header_size,
        request_timeout=args.request_timeout,
        keepalive_timeout=args.keepalive_timeout,
        max_connections=args.max_connections,
        max_concurrent_calls=args.max_concurrent_calls,
        grpc_max_message_size=args.grpc_max_message_size,
        grpc_idle_timeout=args.grpc_idle_timeout,
        grpc_max_connections=args.grpc_max_connections,
        promise_after=args.promise_after,
        promise_ttl=args.promise_ttl,
        max_promises=args.max_promises,
        secret=secret,
        heartbeat=args.heartbeat,
        grace=args.grace,
        access_log=not args.no_access_log,
    )


async def serve(tools: Tools, config: Config) -> None:
    """Run every enabled binding until SIGINT/SIGTERM, then shut down gracefully."""
    from .http import HttpServer

    if config.http is None and config.grpc is None:
        raise CliError("both bindings are off: nothing to serve")
    config = resolve_secret(config)
    config = fit_connections_to_fd_limit(config, raise_fd_limit())
    dispatcher = Dispatcher(tools, config)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_AcceptErrorsOnce())
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    http: HttpServer | None = None
    grpc: Any = None
    where = []
    try:
        if config.http is not None:
            http = HttpServer(dispatcher, config)
            host, port = config.http
            _guard_accept(await _listen("HTTP", host, port, http.start(host, port)))
            where.append(f"http://{host}:{http.port}{config.base_path}")
        if config.grpc is not None:
            from .grpc.service import GrpcServer

            grpc = GrpcServer(dispatcher, config)
            host, port = config.grpc
            _guard_accept(await _listen("gRPC", host, port, grpc.start(host, port)))
            where.append(f"grpc://{host}:{grpc.port}")
    except BaseException:
        if http is not None:
            await http.shutdown(0)
        await dispatcher.close()
        raise
    log.info(
        "mcplite %s serving %d tools on %s",
        __version__,
        len(dispatcher.tool_definitions()),
        " and ".join(where),
    )
    await stop.wait()
    log.info("shutting down: finishing in-flight calls (grace %ss)", config.grace)
    waits = []
    if http is not None:
        waits.append(http.shutdown(config.grace))
    if grpc is not None:
        waits.append(grpc.shutdown(config.grace))
    await asyncio.gather(*waits)
    await dispatcher.close()
    log.info("stopped")


async def _listen(name: str, host: str, port: int, starting: Any) -> Any:
    try:
        return await starting
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CliError(f"cannot listen for {name} on {host}:{port}: {reason}", 1) from None


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
#: accept() errors meaning "out of file descriptors or memory", after which asyncio
#: stops accepting on that listener for a second.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


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
    budget = fd_limit - _open_fds() - max(FD_RESERVE, fd_limit // 8)
    if total <= budget:
        return config
    if budget < (http_cap > 0) + (grpc_cap > 0):
        raise CliError(
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


#: Listening sockets whose accept() just failed for lack of resources.
_failed_accepts: weakref.WeakSet[socket.socket] = weakref.WeakSet()


class _Listener(socket.socket):
    """A listening socket that ends asyncio's accept loop at the first EMFILE.

    On such an error asyncio (3.11-3.13) pauses the listener for a second but goes
    on calling accept() up to ``backlog`` times in the same turn, logging the error
    and scheduling one more resume each time; the resumes then multiply into a storm
    of log lines and wasted turns.  After one failure this raises BlockingIOError,
    which ends that loop.
    """

    __slots__ = ()

    def accept(self) -> tuple[socket.socket, Any]:
        if self in _failed_accepts:
            _failed_accepts.discard(self)
            raise BlockingIOError(errno.EAGAIN, "accepting paused")
        try:
            return super().accept()
        except OSError as exc:
            if exc.errno in _OUT_OF_RESOURCES:
                _failed_accepts.add(self)
            raise


def _guard_accept(server: asyncio.AbstractServer) -> None:
    """Make the listening sockets of ``server`` :class:`_Listener` ones."""
    for sock in getattr(server, "_sockets", None) or ():  # asyncio.Server's own sockets
        if type(sock) is socket.socket:
            sock.__class__ = _Listener


class _AcceptErrorsOnce:
    """The loop's exception handler: an accept() that failed for lack of file
    descriptors is one warning a minute, not a traceback each time; the rest goes
    to asyncio's default handler."""

    every = 60.0

    def __init__(self) -> None:
        self._said_at: float | None = None

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not (
            isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES and "socket" in context
        ):
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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("tools", "call"):
        from .client import cli as client_cli

        return client_cli.run(args)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        if args.command == "serve":
            tools = load_tools(args.target)
            asyncio.run(serve(tools, _config(args)))
    except CliError as exc:
        print(f"mcplite: error: {exc}", file=sys.stderr)
        return exc.status
    except ValueError as exc:  # a Config or registry refusal
        print(f"mcplite: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
