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
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from . import (
    AuthenticationError,
    Client,
    ClientError,
    InvalidArgumentsError,
    Partial,
    PermissionDeniedError,
    PromiseTimeout,
    RequestTimeout,
    Response,
    RPCError,
    ToolInfo,
    ToolNotFoundError,
    TransportError,
)
from .progress import ProgressLine

__all__ = ["COMMANDS", "main", "redeem_command", "register", "run"]

#: The subcommands :func:`register` adds.
COMMANDS = ("tools", "call", "prompts", "prompt", "resources", "read")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_TRANSPORT = 3
EXIT_UNKNOWN_TOOL = 4
EXIT_INVALID_ARGUMENTS = 5
EXIT_PROTOCOL = 6
EXIT_TIMEOUT = 7
EXIT_UNAUTHENTICATED = 8
EXIT_FORBIDDEN = 9
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

#: Seconds each long poll of a promise lasts while a progress line is shown: the
#: line hears of the tool's progress about this often (one redeem per interval).
PROGRESS_POLL_WAIT = 1.0

#: The environment variable ``--token`` defaults to.
TOKEN_ENV = "MCPLITE_TOKEN"


class UsageError(Exception):
    """A mistake on the command line (exit 2)."""


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


def _token(args: argparse.Namespace) -> str | None:
    token: str | None = getattr(args, "token", None)
    return token if token is not None else os.environ.get(TOKEN_ENV) or None


def _client(args: argparse.Namespace) -> Client:
    """The client a command's options ask for.  Raises ValueError (exit 2)."""
    return Client(
        args.url,
        timeout=args.timeout,
        token=_token(args),
        cafile=args.cafile,
        certfile=args.certfile,
        keyfile=args.keyfile,
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

    prompts = subparsers.add_parser(
        "prompts",
        help="list the prompts of a server",
        description="List the prompts of a server: name, description and arguments "
        "(* marks the required ones).",
    )
    prompts.add_argument("url", metavar="URL", help=url_help)
    prompts.add_argument("--json", action="store_true", help="print the prompts as JSON")
    timeout_option(prompts)
    prompts.set_defaults(client_command="prompts", log_level="warning")

    prompt = subparsers.add_parser(
        "prompt",
        help="get a prompt, filled in",
        description="Get a prompt of a server with its arguments (key=value, taken as "
        "strings) and print its messages. Exit status: 0 the messages, 2 usage, "
        "3 connection, 5 unknown prompt or invalid arguments, 6 other protocol error, "
        "7 timeout.",
    )
    prompt.__class__ = _IntermixedParser
    prompt.add_argument("url", metavar="URL", help=url_help)
    prompt.add_argument("name", metavar="NAME", help="the prompt")
    prompt.add_argument("pairs", metavar="KEY=VALUE", nargs="*", help="an argument")
    prompt.add_argument("--json", action="store_true", help="print the whole result as JSON")
    timeout_option(prompt)
    prompt.set_defaults(client_command="prompt", log_level="warning")

    resources = subparsers.add_parser(
        "resources",
        help="list the resources of a server",
        description="List the resources and resource templates of a server (HTTP).",
    )
    resources.add_argument("url", metavar="URL", help=url_help)
    resources.add_argument("--json", action="store_true", help="print them as JSON")
    timeout_option(resources)
    resources.set_defaults(client_command="resources", log_level="warning")

    read = subparsers.add_parser(
        "read",
        help="read a resource",
        description="Read a resource of a server (HTTP) and print its contents: text as "
        "it is, binary contents as bytes. Exit status: 5 unknown resource.",
    )
    read.add_argument("url", metavar="URL", help=url_help)
    read.add_argument("uri", metavar="URI", help="the resource's URI")
    read.add_argument("--json", action="store_true", help="print the contents as JSON")
    timeout_option(read)
    read.set_defaults(client_command="read", log_level="warning")


def run(args: argparse.Namespace) -> int:
    """Run a ``tools`` or ``call`` command parsed by :func:`register`'s parsers;
    return the exit status (see the module doc)."""
    try:
        if args.client_command == "tools":
            return asyncio.run(_tools(args))
        if args.client_command in _PROMPT_AND_RESOURCE_COMMANDS:
            return asyncio.run(_PROMPT_AND_RESOURCE_COMMANDS[args.client_command](args))
        arguments = parse_arguments(args.pairs, args.json_arguments)
        waiting = _Waiting()
        try:
            return asyncio.run(_call(args, arguments, waiting))
        except KeyboardInterrupt:
            return _interrupted(args, waiting)
    except UsageError as exc:
        return _error(str(exc), EXIT_USAGE)
    except ValueError as exc:  # a bad URL
        return _error(str(exc), EXIT_USAGE)
    except (PromiseTimeout, RequestTimeout) as exc:
        return _error(str(exc), EXIT_TIMEOUT)
    except TransportError as exc:
        return _error(str(exc), EXIT_TRANSPORT)
    except AuthenticationError as exc:
        hint = "" if _token(args) else f" (give --token or set ${TOKEN_ENV})"
        return _error(f"not authenticated: {exc.message}{hint}", EXIT_UNAUTHENTICATED)
    except PermissionDeniedError as exc:
        needed = f" (needs scope: {' '.join(exc.scopes)})" if exc.scopes else ""
        return _error(f"permission denied: {exc.message}{needed}", EXIT_FORBIDDEN)
    except ToolNotFoundError as exc:
        return _error(_unknown_tool(exc), EXIT_UNKNOWN_TOOL)
    except InvalidArgumentsError as exc:
        fields = exc.errors
        if not fields:
            return _error(exc.message, EXIT_INVALID_ARGUMENTS)
        lines = "".join(f"\n  {e['field']}: {e['message']}" for e in fields)
        what = getattr(args, "name", None) or getattr(args, "uri", "?")
        return _error(f"invalid arguments for '{what}':{lines}", EXIT_INVALID_ARGUMENTS)
    except RPCError as exc:
        return _error(f"{exc.message} (code {exc.code})", EXIT_PROTOCOL)
    except ClientError as exc:  # e.g. resources asked of a gRPC server
        return _error(str(exc), EXIT_PROTOCOL)
    except KeyboardInterrupt:  # also a second Ctrl-C while the first is handled
        if _terminal(sys.stderr):
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


# --- tools --------------------------------------------------------------------------


async def _tools(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        tools = await client.list_tools()
    if args.json:
        definitions = [
            {
                "name": t.name,
                **({"@type": t.type} if t.type else {}),
                "description": t.description,
                "inputSchema": t.input_schema,
            }
            for t in tools
        ]
        _print_json(definitions)
    else:
        sys.stdout.write(tools_table(tools))
    return EXIT_OK


def tools_table(tools: Sequence[ToolInfo]) -> str:
    """A plain-text table: name, type, description's first line, arguments."""
    rows = [("NAME", "TYPE", "DESCRIPTION", "ARGUMENTS")]
    for tool in tools:
        summary = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
        rows.append((tool.name, tool.type or "-", summary, describe_arguments(tool.input_schema)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        + "  "
        + row[3]
        for row in rows
    ]
    lines.append("(* required)")
    return "".join(line.rstrip() + "\n" for line in lines)


def describe_arguments(schema: dict[str, Any]) -> str:
    """``name*: type, name: type = default`` for each property (``*``: required)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "-"
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    out = []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        text = f"{name}{'*' if name in required else ''}: {schema_type(prop)}"
        if "default" in prop:
            text += f" = {json.dumps(prop['default'], ensure_ascii=False)}"
        out.append(text)
    return ", ".join(out)


def schema_type(schema: dict[str, Any]) -> str:
    """A short type for a JSON Schema: ``string``, ``array[integer]``, ``"a"|"b"``."""
    if "enum" in schema and isinstance(schema["enum"], list):
        return "|".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array[{schema_type(schema['items'])}]"
    if isinstance(kind, str):
        return kind
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return "|".join(schema_type(o) if isinstance(o, dict) else "any" for o in options)
    return "any"


# --- prompts and resources ----------------------------------------------------------


def _no_grpc(args: argparse.Namespace) -> None:
    if args.url.lower().startswith("grpc:"):
        raise UsageError(f"'{args.client_command}' needs an http:// URL: gRPC has no resources")


async def _prompts(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        prompts = await client.list_prompts()
    if args.json:
        _print_json(prompts)
    else:
        sys.stdout.write(prompts_table(prompts))
    return EXIT_OK


def prompts_table(prompts: Sequence[dict[str, Any]]) -> str:
    """A plain-text table: name, description's first line, arguments (``*``: required)."""
    rows = [("NAME", "DESCRIPTION", "ARGUMENTS")]
    for prompt in prompts:
        description = str(prompt.get("description") or "").strip()
        summary = description.splitlines()[0] if description else ""
        arguments = prompt.get("arguments")
        names = [
            f"{a.get('name')}{'*' if a.get('required') else ''}"
            for a in (arguments if isinstance(arguments, list) else [])
            if isinstance(a, dict)
        ]
        rows.append((str(prompt.get("name")), summary, ", ".join(names) or "-"))
    return _table(rows, "(* required)")


def _table(rows: Sequence[tuple[str, ...]], footer: str | None = None) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True))
        + "  "
        + row[-1]
        for row in rows
    ]
    if footer is not None:
        lines.append(footer)
    return "".join(line.rstrip() + "\n" for line in lines)


async def _prompt(args: argparse.Namespace) -> int:
    arguments = {}
    for pair in args.pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"expected KEY=VALUE, got {pair!r}")
        arguments[key] = value
    async with _client(args) as client:
        result = await client.get_prompt(args.name, arguments)
    if args.json:
        _print_json(result)
        return EXIT_OK
    messages = result.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        sys.stdout.write(f"[{message.get('role')}]\n")
        _print_content([message.get("content")], sys.stdout)
    return EXIT_OK


async def _resources(args: argparse.Namespace) -> int:
    _no_grpc(args)
    async with _client(args) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
    if args.json:
        _print_json({"resources": resources, "resourceTemplates": templates})
        return EXIT_OK
    rows = [("URI", "MIME TYPE", "NAME")]
    for entry in resources:
        rows.append((str(entry.get("uri")), str(entry.get("mimeType") or "-"), _named(entry)))
    for entry in templates:
        rows.append(
            (str(entry.get("uriTemplate")), str(entry.get("mimeType") or "-"), _named(entry))
        )
    sys.stdout.write(_table(rows))
    return EXIT_OK


def _named(entry: dict[str, Any]) -> str:
    name = str(entry.get("title") or entry.get("name") or "")
    description = str(entry.get("description") or "").strip()
    summary = description.splitlines()[0] if description else ""
    return f"{name}: {summary}" if summary else name


async def _read(args: argparse.Namespace) -> int:
    _no_grpc(args)
    async with _client(args) as client:
        contents = await client.read_resource(args.uri)
    if args.json:
        _print_json(contents)
        return EXIT_OK
    for item in contents:
        if isinstance(item.get("text"), str):
            text = item["text"]
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        elif isinstance(item.get("blob"), str):
            sys.stdout.flush()
            sys.stdout.buffer.write(base64.b64decode(item["blob"]))
            sys.stdout.buffer.flush()
    return EXIT_OK


_PROMPT_AND_RESOURCE_COMMANDS = {
    "prompts": _prompts,
    "prompt": _prompt,
    "resources": _resources,
    "read": _read,
}


# --- call ---------------------------------------------------------------------------


@dataclass
class _Waiting:
    """What a Ctrl-C needs to know of the call: the promise it waits on (if any)
    and the progress line to erase."""

    token: str | None = None
    line: ProgressLine | None = field(default=None, repr=False)

    def promised(self, response: Response) -> None:
        self.token = response.promise_token
        if self.line is not None:
            self.line.update(response.meta)


def _progress_line(args: argparse.Namespace) -> ProgressLine | None:
    """The progress line of a waiting call: only on a terminal, and not ``--quiet``."""
    if args.quiet or args.no_wait or args.stream:
        return None
    return ProgressLine(sys.stderr, args.name) if _terminal(sys.stderr) else None


def _terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced, or closed
        return False


async def _call(args: argparse.Namespace, arguments: dict[str, Any], waiting: _Waiting) -> int:
    async with _client(args) as client:
        if args.stream:
            return await _stream(client, args, arguments)
        if args.no_wait:
            response = await client.call(args.name, arguments, wait=False, timeout=args.timeout)
        else:
            line = waiting.line = _progress_line(args)
            shown = line.shown() if line is not None else contextlib.nullcontext()
            async with shown:
                response = await client.call(
                    args.name,
                    arguments,
                    timeout=args.timeout,
                    on_progress=waiting.promised,
                    poll_wait=PROGRESS_POLL_WAIT if line is not None else None,
                )
    if args.no_wait and response.promise_token is not None and not args.raw:
        print(response.promise_token)
        return EXIT_OK
    return _print_response(response, args.raw)


async def _stream(client: Client, args: argparse.Namespace, arguments: dict[str, Any]) -> int:
    out = sys.stdout
    printed = False
    ends_with_newline = True
    async for item in client.stream(args.name, arguments):
        if isinstance(item, Partial):
            printed = True
            if args.raw:
                out.write(json.dumps({"partial": item.value}, ensure_ascii=False) + "\n")
            elif isinstance(item.value, str):
                out.write(item.value)
                ends_with_newline = item.value.endswith("\n")
            else:
                if not ends_with_newline:
                    out.write("\n")
                out.write(json.dumps(item.value, ensure_ascii=False) + "\n")
                ends_with_newline = True
            out.flush()
            continue
        if printed and not ends_with_newline:
            out.write("\n")
        if args.raw:
            return _print_response(item, raw=True)
        if printed and item.response_type == "answer":
            return EXIT_OK  # the final answer is the parts, already printed
        return _print_response(item, raw=False)
    raise TransportError("the stream ended without its final result")


# --- Ctrl-C while waiting -----------------------------------------------------------


def _interrupted(args: argparse.Namespace, waiting: _Waiting) -> int:
    """Ctrl-C during a call: cancel its promise, or say how to redeem it (exit 130).

    Runs after the event loop has ended; a second Ctrl-C (KeyboardInterrupt) from
    here exits at once, through :func:`run`.
    """
    if waiting.line is not None:
        waiting.line.erase()
    token = waiting.token
    if token is None:  # interrupted before the server answered: nothing to redeem
        print("mcplite: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        cancel = args.cancel_on_interrupt or _ask("Cancel the call on the server? [y/N] ")
    except KeyboardInterrupt:  # a second Ctrl-C: no cancel, exit at once
        sys.stderr.write("\n")
        cancel = False
    if cancel:
        return _cancel(args, token)
    print(
        "mcplite: interrupted; the call goes on on the server. Redeem it later with:\n"
        f"  {redeem_command(args, token)}",
        file=sys.stderr,
    )
    return EXIT_INTERRUPTED


def _ask(question: str) -> bool:
    """Ask on the terminal (stderr, stdin); False when either is not a terminal."""
    if not (_terminal(sys.stdin) and _terminal(sys.stderr)):
        return False
    # At the start of the line, over the terminal's "^C" (the progress line is erased).
    sys.stderr.write(f"\r\x1b[Kmcplite: {question}")
    sys.stderr.flush()
    answer = sys.stdin.readline()  # "": end of input, a no
    return answer.strip().lower() in ("y", "yes")


def _cancel(args: argparse.Namespace, token: str) -> int:
    async def cancel() -> Response:
        async with _client(args) as client:
            return await client.cancel(token)

    try:
        response = asyncio.run(cancel())
    except ClientError as exc:
        print(
            f"mcplite: error: could not cancel the call: {exc}\n"
            f"  redeem it with: {redeem_command(args, token)}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    structured = response.raw.get("structuredContent")
    cancelled = isinstance(structured, dict) and structured.get("cancelled") is True
    if cancelled or response.text == "cancelled":
        print(f"mcplite: interrupted; cancelled the call on the server ({token})", file=sys.stderr)
    else:
        print(
            "mcplite: interrupted; the call had already finished on the server. Its outcome:\n"
            f"  {redeem_command(args, token)}",
            file=sys.stderr,
        )
    return EXIT_INTERRUPTED


def redeem_command(args: argparse.Namespace, token: str) -> str:
    """The shell command that redeems ``token`` with the same server and TLS options
    (never the bearer token: it comes from ``$MCPLITE_TOKEN`` or is given again)."""
    words = ["mcplite", "call", args.url, "redeem", f"promise={token}"]
    for option in ("cafile", "certfile", "keyfile"):
        value = getattr(args, option, None)
        if value is not None:
            words += [f"--{option}", value]
    command = shlex.join(words)
    if getattr(args, "token", None) is not None:
        command += "  # and --token as before"
    return command


def _print_response(response: Response, raw: bool) -> int:
    status = EXIT_FAILURE if response.is_error else EXIT_OK
    if raw:
        _print_json(response.raw)
        return status
    if response.is_error:
        failure = response.raw.get("failure")
        message = failure.get("message") if isinstance(failure, dict) else None
        message = message or response.text or "the tool failed"
        reason = failure.get("reason") if isinstance(failure, dict) else None
        suffix = f" (reason: {reason})" if reason else ""
        print(f"mcplite: failure: {message}{suffix}", file=sys.stderr)
        return status
    _print_content(response.content, sys.stdout)
    if response.response_type == "elicitation":
        elicitation = response.raw.get("elicitation")
        schema = elicitation.get("requestedSchema") if isinstance(elicitation, dict) else None
        print(
            "mcplite: the tool asks for more information; call again with arguments for: "
            + json.dumps(schema, ensure_ascii=False),
            file=sys.stderr,
        )
    elif response.response_type == "request-for-more-resource":
        wanted = response.raw.get("resources")
        print(
            "mcplite: the tool asks for more resources: " + json.dumps(wanted, ensure_ascii=False),
            file=sys.stderr,
        )
    elif response.response_type == "promise":
        print(f"mcplite: promise {response.promise_token}", file=sys.stderr)
    return status


def _print_content(content: list[Any], out: TextIO) -> None:
    for item in content:
        if (
            isinstance(item, dict)
            and item.get("type") == "text"
            and isinstance(item.get("text"), str)
        ):
            text = item["text"]
            out.write(text if text.endswith("\n") else text + "\n")
        else:
            out.write(json.dumps(item, indent=2, ensure_ascii=False) + "\n")


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _unknown_tool(exc: ToolNotFoundError) -> str:
    name = exc.requested_tool or "?"
    if exc.suggestion:
        return f"unknown tool '{name}'. {exc.suggestion}"
    available = ", ".join(exc.available_tools)
    return f"unknown tool '{name}'" + (f" (available: {available})" if available else "")


def _error(message: str, status: int) -> int:
    print(f"mcplite: error: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
