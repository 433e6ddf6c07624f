"""``mcplite tools URL`` and ``mcplite call URL NAME [key=value ...]``: a client on
the command line; also ``mcplite prompts URL``, ``mcplite prompt URL NAME
[key=value ...]``, ``mcplite resources URL`` and ``mcplite read URL URI``.

URL is ``http://HOST:PORT/BASE`` (``http://127.0.0.1:8080/mcp-lite/v1``) or
``grpc://HOST:PORT``; ``https://`` and ``grpcs://`` use TLS.

Security options (every command): ``--token TOKEN`` is the bearer token sent with
each request (default: ``$MCPLITE_TOKEN``, which keeps it out of the process
list; it is never printed, not even in an error); ``--cafile PEM`` trusts that CA
(only) for the server's certificate; ``--certfile PEM`` and ``--keyfile PEM`` are a
client certificate for mutual TLS.

``call`` takes arguments as ``key=value`` (the value is parsed as JSON where it
parses, else taken as a string: ``limit=5`` is a number, ``query=MCP`` a string,
``'query="5"'`` the string 5) and/or ``--json '{...}'`` (``key=value`` win).
Promises are redeemed until the outcome (``--no-wait`` prints the token instead).
Output: text items as they are, structured items as indented JSON (``--raw``:
the whole result as JSON; ``--stream``: each part as it arrives, text as it is,
others as one JSON line each).  A failure's message goes to stderr.

While ``call`` waits (for the answer, then on a promise), a progress line is
drawn on stderr when stderr is a terminal, never on stdout (see
:mod:`mcplite.client.progress`): a bar with the percentage when the tool reports
a total, else a spinner, with the tool's message, an ETA when the server gives
one, and the time elapsed.  It is erased when the call ends.  ``--quiet`` turns
it off; it is never drawn when stderr is not a terminal.

Ctrl-C while waiting on a promise: with ``--cancel-on-interrupt`` the promise is
cancelled on the server (the ``cancel`` tool).  Without it, when stdin and stderr
are terminals, ``Cancel the call on the server? [y/N]`` is asked (a second Ctrl-C
exits at once); otherwise, or on no, the call goes on on the server and its
token is printed with the command that redeems it later
(``mcplite call URL redeem promise=TOKEN``).  Either way the exit status is 130.

Exit status:

==  ==========================================================================
0   an answer (also an elicitation or a request for more resources, explained
    on stderr; and the token printed by ``--no-wait``)
1   a failure result (``response_type: failure``)
2   usage: bad options, a ``key=value`` without ``=``, ``--json`` not an object,
    a bad URL
3   the server cannot be reached or talked to (connection refused or broken, an
    HTTP error without a JSON-RPC body)
4   unknown tool (the server's suggestion is printed)
5   invalid arguments (each offending field is printed)
6   any other protocol error (internal error, overloaded, bad promise token, ...)
7   timed out: a request, or a promise without an outcome in ``--timeout`` (its
    token is printed, to redeem later)
8   not authenticated: no token, or the server refused it (HTTP 401, gRPC
    UNAUTHENTICATED)
9   permission denied: the token lacks a scope the tool needs (HTTP 403, gRPC
    PERMISSION_DENIED; the scopes are printed)
130 interrupted (Ctrl-C, SIGINT): a promise waited on was cancelled on the
    server, or its token was printed with the command to redeem it
==  ==========================================================================

Prompts and resources: ``prompts`` lists the prompts (``*`` marks a required
argument), ``prompt`` prints the filled-in prompt's messages (each after a
``[role]`` line; text as it is, other content as JSON), with arguments as
``key=value`` taken as strings (prompt arguments are strings).  ``resources`` lists
the resources and templates, ``read`` prints a resource's text (binary contents
go to stdout as bytes).  ``--json`` prints the MCP JSON instead.  They work over
HTTP; ``prompts`` and ``prompt`` over gRPC too (resources there: exit 2).  An
unknown prompt or resource, or a missing argument, exits 5; a server without
prompts or resources exits 6.

Errors are printed as ``mcplite: error: ...`` on stderr.

The lead's ``mcplite/ops/cli.py`` wires these in with :func:`register` and :func:`run`;
``python -m mcplite.client.cli tools URL`` works on its own too.

This module parses the command line and maps errors to exit statuses; the
commands are in :mod:`mcplite.client.clicommands`, what they print in
:mod:`mcplite.client.clioutput`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from .clicommands import (
    PROMPT_AND_RESOURCE_COMMANDS,
    TOKEN_ENV,
    UsageError,
    Waiting,
    call_command,
    interrupted,
    redeem_command,
    token_of,
    tools_command,
)
from .clioutput import (
    EXIT_FORBIDDEN,
    EXIT_INTERRUPTED,
    EXIT_INVALID_ARGUMENTS,
    EXIT_PROTOCOL,
    EXIT_TIMEOUT,
    EXIT_TRANSPORT,
    EXIT_UNAUTHENTICATED,
    EXIT_UNKNOWN_TOOL,
    EXIT_USAGE,
    print_error,
    terminal,
    unknown_tool,
)
from .errors import (
    AuthenticationError,
    ClientError,
    InvalidArgumentsError,
    PermissionDeniedError,
    PromiseTimeout,
    RequestTimeout,
    RPCError,
    ToolNotFoundError,
    TransportError,
)

__all__ = ["COMMANDS", "main", "redeem_command", "register", "run"]

#: The subcommands :func:`register` adds.
COMMANDS = ("tools", "call", "prompts", "prompt", "resources", "read")


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


class _IntermixedParser(argparse.ArgumentParser):
    """Lets options come between KEY=VALUE pairs (``call URL NAME --raw a=1 b=2``).

    Plain argparse gives a ``nargs="*"`` positional only the words before the
    first option; ``parse_known_intermixed_args`` takes them all.  It calls
    ``parse_known_args`` itself, hence the flag.
    """

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def _security_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security")
    group.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"bearer token sent with every request (default: ${TOKEN_ENV})",
    )
    group.add_argument(
        "--cafile", metavar="PEM", help="trust this CA (only) for the server's certificate"
    )
    group.add_argument(
        "--certfile", metavar="PEM", help="client certificate for mutual TLS (with its chain)"
    )
    group.add_argument(
        "--keyfile", metavar="PEM", help="the client certificate's key (if not in --certfile)"
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``tools`` and ``call`` subcommands to ``mcplite``'s subparsers."""
    url_help = (
        "http(s)://HOST:PORT/BASE (e.g. http://127.0.0.1:8080/mcp-lite/v1) or grpc(s)://HOST:PORT"
    )
    tools = subparsers.add_parser(
        "tools",
        help="list the tools of a server",
        description="List the tools of an MCP-lite server: name, type, description and "
        "arguments (* marks the required ones).",
    )
    tools.add_argument("url", metavar="URL", help=url_help)
    tools.add_argument("--json", action="store_true", help="print the tool definitions as JSON")
    tools.add_argument(
        "--timeout", type=_timeout, default=30.0, metavar="S", help="seconds to wait (default 30)"
    )
    _security_options(tools)
    tools.set_defaults(client_command="tools", log_level="warning")

    call = subparsers.add_parser(
        "call",
        help="call a tool",
        description="Call a tool of an MCP-lite server. Arguments are key=value (the value "
        "is JSON where it parses, else a string) and/or --json '{...}'. Exit status: 0 "
        "answer, 1 failure, 2 usage, 3 connection, 4 unknown tool, 5 invalid arguments, "
        "6 other protocol error, 7 timeout, 8 not authenticated, 9 permission denied, "
        "130 interrupted.",
    )
    call.__class__ = _IntermixedParser  # made by the caller's parser class
    call.add_argument("url", metavar="URL", help=url_help)
    call.add_argument("name", metavar="NAME", help="the tool")
    call.add_argument("pairs", metavar="KEY=VALUE", nargs="*", help="an argument")
    call.add_argument(
        "--json", dest="json_arguments", metavar="OBJECT", help="the arguments as a JSON object"
    )
    mode = call.add_mutually_exclusive_group()
    mode.add_argument("--stream", action="store_true", help="print the parts as they arrive")
    mode.add_argument(
        "--no-wait", action="store_true", help="print a promise's token instead of waiting"
    )
    call.add_argument("--raw", action="store_true", help="print the whole result as JSON")
    call.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="draw no progress line on stderr (drawn only when stderr is a terminal)",
    )
    call.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="on Ctrl-C, cancel the promise on the server (default: ask on a terminal, "
        "else print its token)",
    )
    call.add_argument(
        "--timeout",
        type=_timeout,
        default=30.0,
        metavar="S",
        help="seconds for each request and for a promise's outcome (default 30)",
    )
    _security_options(call)
    call.set_defaults(client_command="call", log_level="warning")
    _register_prompts_and_resources(subparsers, url_help)


def _register_prompts_and_resources(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], url_help: str
) -> None:
    def timeout_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--timeout",
            type=_timeout,
            default=30.0,
            metavar="S",
            help="seconds to wait (default 30)",
        )
        _security_options(parser)

    def command(
        name: str,
        summary: str,
        description: str,
        json_help: str,
        *positionals: tuple[str, str, str, str | None],
    ) -> argparse.ArgumentParser:
        # URL, then ``positionals`` (dest, metavar, help, nargs), --json, --timeout
        # and the security options: the order their help lists them in.
        parser = subparsers.add_parser(name, help=summary, description=description)
        parser.add_argument("url", metavar="URL", help=url_help)
        for dest, metavar, what, nargs in positionals:
            parser.add_argument(dest, metavar=metavar, help=what, nargs=nargs)
        parser.add_argument("--json", action="store_true", help=json_help)
        timeout_option(parser)
        parser.set_defaults(client_command=name, log_level="warning")
        return parser

    command(
        "prompts",
        "list the prompts of a server",
        "List the prompts of a server: name, description and arguments "
        "(* marks the required ones).",
        "print the prompts as JSON",
    )
    prompt = command(
        "prompt",
        "get a prompt, filled in",
        "Get a prompt of a server with its arguments (key=value, taken as "
        "strings) and print its messages. Exit status: 0 the messages, 2 usage, "
        "3 connection, 5 unknown prompt or invalid arguments, 6 other protocol error, "
        "7 timeout.",
        "print the whole result as JSON",
        ("name", "NAME", "the prompt", None),
        ("pairs", "KEY=VALUE", "an argument", "*"),
    )
    prompt.__class__ = _IntermixedParser  # made by the caller's parser class
    command(
        "resources",
        "list the resources of a server",
        "List the resources and resource templates of a server (HTTP).",
        "print them as JSON",
    )
    command(
        "read",
        "read a resource",
        "Read a resource of a server (HTTP) and print its contents: text as "
        "it is, binary contents as bytes. Exit status: 5 unknown resource.",
        "print the contents as JSON",
        ("uri", "URI", "the resource's URI", None),
    )


def run(args: argparse.Namespace) -> int:
    """Run a ``tools`` or ``call`` command parsed by :func:`register`'s parsers;
    return the exit status (see the module doc)."""
    try:
        if args.client_command == "tools":
            return asyncio.run(tools_command(args))
        if args.client_command in PROMPT_AND_RESOURCE_COMMANDS:
            return asyncio.run(PROMPT_AND_RESOURCE_COMMANDS[args.client_command](args))
        arguments = parse_arguments(args.pairs, args.json_arguments)
        waiting = Waiting()
        try:
            return asyncio.run(call_command(args, arguments, waiting))
        except KeyboardInterrupt:
            return interrupted(args, waiting)
    except UsageError as exc:
        return print_error(str(exc), EXIT_USAGE)
    except ValueError as exc:  # a bad URL
        return print_error(str(exc), EXIT_USAGE)
    except (PromiseTimeout, RequestTimeout) as exc:
        return print_error(str(exc), EXIT_TIMEOUT)
    except TransportError as exc:
        return print_error(str(exc), EXIT_TRANSPORT)
    except AuthenticationError as exc:
        hint = "" if token_of(args) else f" (give --token or set ${TOKEN_ENV})"
        return print_error(f"not authenticated: {exc.message}{hint}", EXIT_UNAUTHENTICATED)
    except PermissionDeniedError as exc:
        needed = f" (needs scope: {' '.join(exc.scopes)})" if exc.scopes else ""
        return print_error(f"permission denied: {exc.message}{needed}", EXIT_FORBIDDEN)
    except ToolNotFoundError as exc:
        return print_error(unknown_tool(exc), EXIT_UNKNOWN_TOOL)
    except InvalidArgumentsError as exc:
        fields = exc.errors
        if not fields:
            return print_error(exc.message, EXIT_INVALID_ARGUMENTS)
        lines = "".join(f"\n  {e['field']}: {e['message']}" for e in fields)
        what = getattr(args, "name", None) or getattr(args, "uri", "?")
        return print_error(f"invalid arguments for '{what}':{lines}", EXIT_INVALID_ARGUMENTS)
    except RPCError as exc:
        return print_error(f"{exc.message} (code {exc.code})", EXIT_PROTOCOL)
    except ClientError as exc:  # e.g. resources asked of a gRPC server
        return print_error(str(exc), EXIT_PROTOCOL)
    except KeyboardInterrupt:  # also a second Ctrl-C while the first is handled
        if terminal(sys.stderr):
            sys.stderr.write("\n")  # the shell's prompt on a line of its own
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mcplite.client.cli {tools,call} ...`` (until ``mcplite`` has them)."""
    parser = argparse.ArgumentParser(prog="mcplite", description="An MCP-lite client.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(subparsers)
    return run(parser.parse_args(argv))


# --- arguments ----------------------------------------------------------------------


def parse_arguments(pairs: Sequence[str], json_text: str | None) -> dict[str, Any]:
    """``--json`` then ``key=value`` pairs, into one arguments object.  Raises UsageError."""
    arguments: dict[str, Any] = {}
    if json_text is not None:
        try:
            loaded = json.loads(json_text)
        except ValueError as exc:
            raise UsageError(f"--json is not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise UsageError("--json must be a JSON object, e.g. '{\"limit\": 5}'")
        arguments.update(loaded)
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"expected KEY=VALUE, got {pair!r}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        arguments[key] = value
    return arguments


if __name__ == "__main__":
    sys.exit(main())
