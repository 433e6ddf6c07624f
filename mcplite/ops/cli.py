"""``python -m mcplite serve MODULE[:ATTR]``: every binding on ONE asyncio loop.

``python -m mcplite stdio MODULE[:ATTR]``: the same tools as MCP on stdin/stdout
(:mod:`mcplite.bindings.stdio`), for an MCP host that starts its servers.

Also ``python -m mcplite tools URL``, ``call URL NAME k=v``, ``prompts URL``,
``prompt URL NAME k=v``, ``resources URL`` and ``read URL URI``, the client
commands of :mod:`mcplite.client.cli`.

``MODULE:ATTR`` names a :class:`~mcplite.Tools` registry; ``MODULE`` alone looks
for the attribute ``tools``.  The module's ``prompts`` (a :class:`~mcplite.Prompts`)
and ``resources`` (a :class:`~mcplite.Resources`) attributes, when it has them,
are served on the MCP endpoint and on stdio too.  SIGINT/SIGTERM stop accepting, give in-flight
calls ``--grace`` seconds, then cancel what is left, and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from collections.abc import Sequence
from typing import Any

from .._version import __version__
from ..core.config import Config
from .loading import DEFAULT_ATTR, load_served
from .logs import setup_logging
from .serve import ServeError, serve

__all__ = ["main"]

log = logging.getLogger("mcplite")


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
    bind.add_argument(
        "--mcp-path",
        default=d.mcp_path,
        help="path of the full MCP endpoint on the HTTP port (default: %(default)s)",
    )
    bind.add_argument("--no-mcp", action="store_true", help="do not serve the MCP endpoint")
    bind.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST[:PORT]",
        help="a Host/Origin the MCP endpoint accepts (repeatable; default: localhost, "
        "127.0.0.1 and [::1] when bound to loopback, any otherwise)",
    )
    bind.add_argument(
        "--cors-allow-origin",
        action="append",
        metavar="ORIGIN",
        help="let web pages of ORIGIN (http[s]://host[:port]) call the HTTP endpoints from a "
        "browser (CORS; repeatable; '*': any origin; off by default; see docs/security.md)",
    )
    _add_page_size(bind)
    limits = serve.add_argument_group("limits")
    _add_max_body_size(limits, d, "larger request bodies get 413")
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
    _add_max_concurrent_calls(limits, d, "more calls get 503 + Retry-After / RESOURCE_EXHAUSTED")
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
    _add_security_options(
        serve.add_argument_group("security (HTTP and gRPC; see docs/security.md)")
    )
    promises = serve.add_argument_group("promises and streams")
    _add_promise_options(promises, d)
    promises.add_argument(
        "--heartbeat",
        type=_positive(float),
        default=d.heartbeat,
        metavar="S",
        help="seconds of tool silence before an SSE heartbeat",
    )
    process = serve.add_argument_group("process")
    _add_process_options(
        process,
        d,
        grace_help="seconds in-flight calls get after SIGINT/SIGTERM",
        access_log_help="no access line per HTTP request or gRPC call",
    )
    process.add_argument(
        "--metrics",
        type=_address,
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus), /healthz and /readyz on this address "
        "(its own listener; off by default)",
    )
    process.add_argument(
        "--workers",
        type=_positive(int),
        default=1,
        metavar="N",
        help="worker processes serving the same ports (SO_REUSEPORT), supervised and "
        "restarted by this one; more than 1 needs a shared promise store",
    )
    _add_stdio_command(commands, d)
    from ..client import cli as client_cli

    client_cli.register(commands)
    return parser


def _add_security_options(group: Any) -> None:
    group.add_argument(
        "--auth-tokens",
        metavar="PATH",
        help="bearer tokens, one per line followed by the scopes it grants "
        "(default: the file $MCPLITE_AUTH_TOKENS names)",
    )
    group.add_argument(
        "--oauth-issuer", metavar="URL", help="accept JWT access tokens from this issuer"
    )
    group.add_argument(
        "--oauth-audience", metavar="AUD", help="the audience those tokens must name"
    )
    group.add_argument(
        "--public-url",
        metavar="URL",
        help="the origin clients reach this server at (for the OAuth resource metadata)",
    )
    group.add_argument(
        "--open-discovery",
        action="store_true",
        help="let clients without a token list tools, prompts and resources",
    )
    group.add_argument(
        "--rate-limit",
        type=_positive(float),
        metavar="N",
        help="requests per second per caller (429 / RESOURCE_EXHAUSTED beyond)",
    )
    group.add_argument(
        "--rate-burst", type=_positive(float), metavar="N", help="burst size (default: N)"
    )
    group.add_argument("--certfile", metavar="PEM", help="serve TLS with this certificate chain")
    group.add_argument("--keyfile", metavar="PEM", help="the certificate's private key")
    group.add_argument(
        "--client-ca", metavar="PEM", help="require client certificates signed by this CA"
    )


def _add_stdio_command(commands: Any, d: Config) -> None:
    stdio = commands.add_parser(
        "stdio",
        help="serve the tools of a module as MCP on stdin/stdout",
        description="Serve the tools of MODULE[:ATTR] as MCP (2026-07-28 and 2025) over stdio: "
        "one JSON-RPC message per line on stdin and stdout, logs on stderr; exits when stdin "
        f"closes. ATTR defaults to '{DEFAULT_ATTR}'. Example: mcplite stdio mcplite.demo",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    stdio.add_argument("target", metavar="MODULE[:ATTR]", help="where the Tools registry lives")
    limits = stdio.add_argument_group("limits")
    _add_max_body_size(limits, d, "longer lines get a -32600 error and are skipped")
    _add_max_concurrent_calls(limits, d, "more requests in flight get a -32000 error")
    _add_page_size(limits)
    _add_promise_options(stdio.add_argument_group("promises"), d)
    _add_process_options(
        stdio.add_argument_group("process"),
        d,
        grace_help="seconds in-flight calls get after stdin closes or SIGINT/SIGTERM",
        access_log_help="no log line per request",
    )


def _add_page_size(group: Any) -> None:
    group.add_argument(
        "--page-size",
        type=_positive(int),
        metavar="N",
        help="answer MCP's lists (tools, prompts, resources, templates) in pages of N "
        "entries, each with a nextCursor to the next (off by default)",
    )


def _add_max_body_size(group: Any, d: Config, help: str) -> None:
    group.add_argument(
        "--max-body-size", type=_positive(int), default=d.max_body_size, metavar="BYTES", help=help
    )


def _add_max_concurrent_calls(group: Any, d: Config, help: str) -> None:
    group.add_argument(
        "--max-concurrent-calls",
        type=_positive(int),
        default=d.max_concurrent_calls,
        metavar="N",
        help=help,
    )


def _add_promise_options(group: Any, d: Config) -> None:
    group.add_argument(
        "--promise-after",
        type=_non_negative,
        default=d.promise_after,
        metavar="S",
        help="seconds before a running call becomes a promise",
    )
    group.add_argument(
        "--promise-ttl",
        type=_positive(float),
        default=d.promise_ttl,
        metavar="S",
        help="seconds a promise token and its result live",
    )
    group.add_argument(
        "--max-promises",
        type=_positive(int),
        default=d.max_promises,
        metavar="N",
        help="pending promises before new long calls are refused",
    )
    group.add_argument(
        "--secret",
        default=None,
        help="promise sealing secret (default: $MCPLITE_SECRET, else random)",
    )
    group.add_argument(
        "--promise-store",
        default=None,
        metavar="URL",
        help="where promises live: memory:// (default; with --workers > 1 a SQLite file "
        "in a private temporary directory), sqlite:///PATH (processes of one host), "
        "redis://HOST:PORT/DB or rediss:// (many hosts; mcplite[redis])",
    )


def _add_process_options(group: Any, d: Config, *, grace_help: str, access_log_help: str) -> None:
    group.add_argument("--grace", type=_non_negative, default=d.grace, metavar="S", help=grace_help)
    group.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level",
    )
    group.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="log lines as text, or as one JSON object each (see docs/operations.md)",
    )
    group.add_argument("--no-access-log", action="store_true", help=access_log_help)
    group.add_argument(
        "--show-tool-errors",
        action="store_true",
        help="MCP: put a raising tool's exception (type and text) in its isError result, "
        "not only its error id (for development: it may reveal internals)",
    )


def _shared_config(args: argparse.Namespace) -> dict[str, Any]:
    """The Config fields ``serve`` and ``stdio`` both take."""
    return {
        "max_body_size": args.max_body_size,
        "max_concurrent_calls": args.max_concurrent_calls,
        "page_size": args.page_size,
        "promise_after": args.promise_after,
        "promise_ttl": args.promise_ttl,
        "max_promises": args.max_promises,
        "promise_store": args.promise_store or Config().promise_store,
        "secret": args.secret.encode() if args.secret else None,
        "grace": args.grace,
        "access_log": not args.no_access_log,
        "show_tool_errors": args.show_tool_errors,
        "log_format": args.log_format,
    }


def _config(args: argparse.Namespace) -> Config:
    return Config(
        http=None if args.no_http else args.http,
        grpc=None if args.no_grpc else args.grpc,
        base_path=args.base_path,
        mcp_path=None if args.no_mcp else args.mcp_path,
        mcp_allowed_hosts=tuple(args.allowed_host) if args.allowed_host else None,
        cors_allow_origins=tuple(args.cors_allow_origin or ()),
        max_header_size=args.max_header_size,
        request_timeout=args.request_timeout,
        keepalive_timeout=args.keepalive_timeout,
        max_connections=args.max_connections,
        grpc_max_message_size=args.grpc_max_message_size,
        grpc_idle_timeout=args.grpc_idle_timeout,
        grpc_max_connections=args.grpc_max_connections,
        heartbeat=args.heartbeat,
        metrics=args.metrics,
        auth_tokens=args.auth_tokens,
        oauth_issuer=args.oauth_issuer,
        oauth_audience=args.oauth_audience,
        public_url=args.public_url,
        open_discovery=args.open_discovery,
        rate_limit=args.rate_limit,
        rate_burst=args.rate_burst,
        certfile=args.certfile,
        keyfile=args.keyfile,
        client_ca=args.client_ca,
        **_shared_config(args),
    )


def _stdio_config(args: argparse.Namespace) -> Config:
    return Config(http=None, grpc=None, mcp_path=None, **_shared_config(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("tools", "call", "prompts", "prompt", "resources", "read"):
        from ..client import cli as client_cli

        return client_cli.run(args)
    setup_logging(args.log_level, args.log_format)
    try:
        if args.command == "serve" and args.workers > 1:
            from .workers import check_store, run_workers

            check_store(args.promise_store, args.workers)
            load_served(args.target)  # a module that does not load: one error, no workers
            config = dataclasses.replace(_config(args), promise_store=args.promise_store or "")
            return run_workers(args.target, config, args.workers, log_level=args.log_level)
        if args.command == "serve":
            served = load_served(args.target)
            asyncio.run(
                serve(
                    served.tools,
                    _config(args),
                    prompts=served.prompts,
                    resources=served.resources,
                )
            )
        elif args.command == "stdio":
            from ..bindings.stdio import take_stdio
            from .serve import serve_stdio

            # Before the import: a print() at import time must not reach the protocol.
            pipes = take_stdio()
            served = load_served(args.target)
            config = _stdio_config(args)
            asyncio.run(
                serve_stdio(
                    served.tools,
                    config,
                    pipes,
                    prompts=served.prompts,
                    resources=served.resources,
                )
            )
    except (CliError, ServeError) as exc:
        print(f"mcplite: error: {exc}", file=sys.stderr)
        return exc.status
    except ValueError as exc:  # a Config or registry refusal
        print(f"mcplite: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
