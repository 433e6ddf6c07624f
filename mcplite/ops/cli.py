"""``python -m mcplite serve MODULE[:ATTR]``: every binding on ONE event loop.

``python -m mcplite stdio MODULE[:ATTR]``: the same tools as MCP on stdin/stdout
(:mod:`mcplite.bindings.stdio`), for an MCP host that starts its servers.

Also ``python -m mcplite tools URL``, ``call URL NAME k=v``, ``prompts URL``,
``prompt URL NAME k=v``, ``resources URL`` and ``read URL URI``, the client
commands of :mod:`mcplite.client.cli`.

``MODULE:ATTR`` names a :class:`~mcplite.Tools` registry; ``MODULE`` alone looks
for the attribute ``tools``.  The module's ``prompts`` (a :class:`~mcplite.Prompts`)
and ``resources`` (a :class:`~mcplite.Resources`) attributes, when it has them,
are served on the MCP endpoint and on stdio too.  SIGINT/SIGTERM stop accepting, give in-flight
calls ``--grace`` seconds, then cancel what is left, and exit 0.  ``--loop`` picks the
event loop (:mod:`mcplite.ops.loops`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._version import __version__
from ..core.config import GROUPS, PROCESS, STDIN_EOF_GRACE, Config, flags, positive_int
from .exits import leave_stuck_threads
from .loading import DEFAULT_ATTR, load_served
from .logs import setup_logging
from .loops import ENVIRONMENT_VARIABLE as LOOP_VARIABLE
from .loops import LOOPS, choose_loop, run_on
from .serve import ServeError, serve

__all__ = ["build_parser", "config_from_args", "main"]

log = logging.getLogger("mcplite")


class CliError(Exception):
    """One line for the user, and an exit status."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


#: The commands that serve, and what ``--help`` says of them.
SERVER_COMMANDS = {
    "serve": (
        "serve the tools of a module",
        "Serve the tools of MODULE[:ATTR] over HTTP/1.1 and gRPC on one event loop. "
        f"ATTR defaults to '{DEFAULT_ATTR}'. Example: mcplite serve mcplite.demo",
    ),
    "stdio": (
        "serve the tools of a module as MCP on stdin/stdout",
        "Serve the tools of MODULE[:ATTR] as MCP (2026-07-28 and 2025) over stdio: one "
        "JSON-RPC message per line on stdin and stdout, logs on stderr; exits when stdin "
        f"closes. ATTR defaults to '{DEFAULT_ATTR}'. Example: mcplite stdio mcplite.demo",
    ),
    "dev": (
        "serve a module while you write it: reload on change, playground on",
        "Serve MODULE[:ATTR] as 'serve' does, on loopback, with debug logs, tool errors "
        "shown to callers and the playground page at http://HOST:PORT/; import it again "
        "whenever its files (or a --watch path) change, keeping the process and its ports. "
        "Example: mcplite dev mcplite.demo",
    ),
}
#: The command whose options each server command takes.
OPTIONS_OF = {"serve": "serve", "stdio": "stdio", "dev": "serve"}
#: What ``stdio`` serves on: no network at all.
STDIO_OFF = {"http": None, "grpc": None, "mcp_path": None}


def _argument_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` for argparse: its ValueError becomes a usage error with its message."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _with_default(help: str, default: Any) -> str:
    if default is not None and default != ():
        if isinstance(default, tuple):  # an address
            default = f"{default[0]}:{default[1]}"
        help = f"{help} (default: {default})"
    return help.replace("%", "%%")


def _dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def _add_config_options(
    parser: argparse.ArgumentParser, command: str
) -> dict[str, argparse._ArgumentGroup]:
    """Add the options of every :class:`Config` field ``command`` takes, in their
    groups; the groups by title.  Not given, an option is None (Config's default)."""
    taken = [(f, flag) for f, flag in flags() if command in flag.commands]
    titles = {flag.group for _, flag in taken} | {PROCESS}
    groups = {title: parser.add_argument_group(title) for title in GROUPS if title in titles}
    for f, flag in taken:
        group = groups[flag.group]
        option = flag.flag(f.name)
        if isinstance(f.default, bool):
            action = "store_false" if f.default else "store_true"
            group.add_argument(option, dest=f.name, action=action, help=flag.help)
            continue
        how: dict[str, Any] = {"metavar": flag.metavar, "choices": flag.choices}
        if flag.parse is not None:
            how["type"] = _argument_type(flag.parse)
        if flag.repeat:
            how["action"] = "append"
        help = _with_default(flag.help, f.default)
        group.add_argument(option, dest=f.name, default=None, help=help, **how)
        if flag.off is not None:
            off, off_help = flag.off
            group.add_argument(off, action="store_true", help=off_help)
    return groups


def config_from_args(args: argparse.Namespace) -> Config:
    """The :class:`Config` of a ``serve`` or ``stdio`` command line: the options
    given, and Config's defaults for the rest.  Raises ValueError from Config."""
    given: dict[str, Any] = {}
    command = OPTIONS_OF.get(args.command, args.command)
    for f, flag in flags():
        if command not in flag.commands:
            continue
        value = getattr(args, f.name)
        if flag.off is not None and getattr(args, _dest(flag.off[0])):
            given[f.name] = None
        elif value is not None:
            given[f.name] = tuple(value) if flag.repeat else value
    if args.command == "stdio":
        given.update(STDIO_OFF)
    return Config(**given)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``mcplite`` command line; with ``only`` (one of :data:`SERVER_COMMANDS`),
    that command alone, without the modules of the client's and install's commands."""
    parser = argparse.ArgumentParser(
        prog="mcplite", description="Serve MCP-lite tools over HTTP/1.1 and gRPC, and call them."
    )
    parser.add_argument("--version", action="version", version=f"mcplite {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command, (summary, description) in SERVER_COMMANDS.items():
        if only is not None and command != only:
            continue
        sub = commands.add_parser(command, help=summary, description=description)
        sub.add_argument("target", metavar="MODULE[:ATTR]", help="where the Tools registry lives")
        process = _add_config_options(sub, OPTIONS_OF[command])[PROCESS]
        level = "debug" if command == "dev" else "info"
        process.add_argument(
            "--log-level",
            default=level,
            choices=["debug", "info", "warning", "error"],
            help=f"log level (default: {level})",
        )
        process.add_argument(
            "--loop",
            choices=LOOPS,
            default=None,
            help="the event loop: uvloop's (the uvloop extra), asyncio's, or auto: uvloop "
            f"when it can be imported (default: ${LOOP_VARIABLE}, else auto)",
        )
        if command == "dev":
            process.add_argument(
                "--watch",
                action="append",
                default=[],
                metavar="PATH",
                help="also reload when a file under PATH changes (repeatable; the module's "
                "own files are always watched)",
            )
        if command == "serve":
            process.add_argument(
                "--workers",
                type=_argument_type(positive_int),
                default=1,
                metavar="N",
                help="worker processes serving the same ports (SO_REUSEPORT), supervised and "
                "restarted by this one; more than 1 needs a shared promise store (default: 1)",
            )
    if only is None:
        from ..client import cli as client_cli
        from . import install

        client_cli.register(commands)
        install.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # A server command is parsed by a parser of its own: an MCP host starting
    # `mcplite stdio` does not wait for the client's modules to load.
    first = argv[0] if argv else None
    args = build_parser(first if first in SERVER_COMMANDS else None).parse_args(argv)
    if args.command in ("tools", "call", "prompts", "prompt", "resources", "read"):
        from ..client import cli as client_cli

        return client_cli.run(args)
    if args.command == "install":
        from . import install

        return install.run(args)
    try:
        config = config_from_args(args)
        loop = choose_loop(args.loop)
        setup_logging(args.log_level, config.log_format)
        if args.command == "serve" and args.workers > 1:
            from .workers import check_store, run_workers

            check_store(args.promise_store, args.workers)
            load_served(args.target)  # a module that does not load: one error, no workers
            # No --promise-store: the workers share a private SQLite file.
            config = dataclasses.replace(config, promise_store=args.promise_store or "")
            return run_workers(
                args.target, config, args.workers, log_level=args.log_level, loop=loop
            )
        if args.command == "serve":
            served = load_served(args.target)
            run_on(
                loop,
                serve(served.tools, config, prompts=served.prompts, resources=served.resources),
            )
            leave_stuck_threads(0)
        elif args.command == "dev":
            from .dev import Reloader, dev_config, run_dev

            reloader = Reloader.create(args.target, args.watch)
            run_on(loop, run_dev(reloader, dev_config(config, args.playground)))
            leave_stuck_threads(0)
        elif args.command == "stdio":
            from ..bindings.stdio import take_stdio
            from .serve import serve_stdio

            # Before the import: a print() at import time must not reach the protocol.
            pipes = take_stdio()
            served = load_served(args.target)
            run_on(
                loop,
                serve_stdio(
                    served.tools,
                    config,
                    pipes,
                    prompts=served.prompts,
                    resources=served.resources,
                ),
            )
            # Not 1 s: a host that closed stdin sends SIGTERM 2 s later.
            leave_stuck_threads(0, STDIN_EOF_GRACE)
    except (CliError, ServeError) as exc:
        print(f"mcplite: error: {exc}", file=sys.stderr)
        return exc.status
    except ValueError as exc:  # a Config or registry refusal
        print(f"mcplite: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
