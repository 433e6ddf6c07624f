"""The ``mcplite`` client commands, run on parsed arguments: ``tools``, ``call``
(with its progress line and Ctrl-C handling), ``prompts``, ``prompt``,
``resources`` and ``read``.  Each returns its exit status; errors propagate to
:func:`mcplite.client.cli.run`, which maps them to theirs.
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
from dataclasses import dataclass, field
from typing import Any

from ..core.outcomes import Partial
from . import Client
from .clioutput import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    named,
    print_content,
    print_json,
    print_response,
    prompts_table,
    table,
    terminal,
    tools_table,
)
from .errors import ClientError, TransportError
from .progress import ProgressLine
from .results import Response

__all__ = [
    "PROGRESS_POLL_WAIT",
    "PROMPT_AND_RESOURCE_COMMANDS",
    "TOKEN_ENV",
    "UsageError",
    "Waiting",
    "call_command",
    "client_for",
    "interrupted",
    "redeem_command",
    "token_of",
    "tools_command",
]

#: Seconds each long poll of a promise lasts while a progress line is shown: the
#: line hears of the tool's progress about this often (one redeem per interval).
PROGRESS_POLL_WAIT = 1.0

#: The environment variable ``--token`` defaults to.
TOKEN_ENV = "MCPLITE_TOKEN"


class UsageError(Exception):
    """A mistake on the command line (exit 2)."""


def token_of(args: argparse.Namespace) -> str | None:
    """The bearer token: ``--token``, else ``$MCPLITE_TOKEN``; None without either."""
    token: str | None = getattr(args, "token", None)
    return token if token is not None else os.environ.get(TOKEN_ENV) or None


def client_for(args: argparse.Namespace) -> Client:
    """The client a command's options ask for.  Raises ValueError (exit 2)."""
    return Client(
        args.url,
        timeout=args.timeout,
        token=token_of(args),
        cafile=args.cafile,
        certfile=args.certfile,
        keyfile=args.keyfile,
    )


# --- tools --------------------------------------------------------------------------


async def tools_command(args: argparse.Namespace) -> int:
    """``mcplite tools URL``: the tools as a table, or their definitions as JSON."""
    async with client_for(args) as client:
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
        print_json(definitions)
    else:
        sys.stdout.write(tools_table(tools))
    return EXIT_OK


# --- prompts and resources ----------------------------------------------------------


def _no_grpc(args: argparse.Namespace) -> None:
    if args.url.lower().startswith("grpc:"):
        raise UsageError(f"'{args.client_command}' needs an http:// URL: gRPC has no resources")


async def _prompts(args: argparse.Namespace) -> int:
    async with client_for(args) as client:
        prompts = await client.list_prompts()
    if args.json:
        print_json(prompts)
    else:
        sys.stdout.write(prompts_table(prompts))
    return EXIT_OK


async def _prompt(args: argparse.Namespace) -> int:
    arguments = {}
    for pair in args.pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"expected KEY=VALUE, got {pair!r}")
        arguments[key] = value
    async with client_for(args) as client:
        result = await client.get_prompt(args.name, arguments)
    if args.json:
        print_json(result)
        return EXIT_OK
    messages = result.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        sys.stdout.write(f"[{message.get('role')}]\n")
        print_content([message.get("content")], sys.stdout)
    return EXIT_OK


async def _resources(args: argparse.Namespace) -> int:
    _no_grpc(args)
    async with client_for(args) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
    if args.json:
        print_json({"resources": resources, "resourceTemplates": templates})
        return EXIT_OK
    rows = [("URI", "MIME TYPE", "NAME")]
    for entry in resources:
        rows.append((str(entry.get("uri")), str(entry.get("mimeType") or "-"), named(entry)))
    for entry in templates:
        rows.append(
            (str(entry.get("uriTemplate")), str(entry.get("mimeType") or "-"), named(entry))
        )
    sys.stdout.write(table(rows))
    return EXIT_OK


async def _read(args: argparse.Namespace) -> int:
    _no_grpc(args)
    async with client_for(args) as client:
        contents = await client.read_resource(args.uri)
    if args.json:
        print_json(contents)
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


PROMPT_AND_RESOURCE_COMMANDS = {
    "prompts": _prompts,
    "prompt": _prompt,
    "resources": _resources,
    "read": _read,
}


# --- call ---------------------------------------------------------------------------


@dataclass
class Waiting:
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
    return ProgressLine(sys.stderr, args.name) if terminal(sys.stderr) else None


async def call_command(
    args: argparse.Namespace, arguments: dict[str, Any], waiting: Waiting
) -> int:
    """``mcplite call URL NAME``: call, stream or hand back the promise, and print
    the outcome.  ``waiting`` keeps what a Ctrl-C needs (see :func:`interrupted`)."""
    async with client_for(args) as client:
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
    return print_response(response, args.raw)


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
            return print_response(item, raw=True)
        if printed and item.response_type == "answer":
            return EXIT_OK  # the final answer is the parts, already printed
        return print_response(item, raw=False)
    raise TransportError("the stream ended without its final result")


# --- Ctrl-C while waiting -----------------------------------------------------------


def interrupted(args: argparse.Namespace, waiting: Waiting) -> int:
    """Ctrl-C during a call: cancel its promise, or say how to redeem it (exit 130).

    Runs after the event loop has ended; a second Ctrl-C (KeyboardInterrupt) from
    here exits at once, through :func:`mcplite.client.cli.run`.
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
    if not (terminal(sys.stdin) and terminal(sys.stderr)):
        return False
    # At the start of the line, over the terminal's "^C" (the progress line is erased).
    sys.stderr.write(f"\r\x1b[Kmcplite: {question}")
    sys.stderr.flush()
    answer = sys.stdin.readline()  # "": end of input, a no
    return answer.strip().lower() in ("y", "yes")


def _cancel(args: argparse.Namespace, token: str) -> int:
    async def cancel() -> Response:
        async with client_for(args) as client:
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
