"""What the ``mcplite`` client commands print, and the status they exit with.

Tables for people (tools, prompts, resources), results as text or JSON on
stdout, errors and failures as ``mcplite: ...`` lines on stderr.  The exit
statuses are listed in :mod:`mcplite.client.cli`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .errors import ToolNotFoundError
from .results import Response, ToolInfo

__all__ = [
    "EXIT_FAILURE",
    "EXIT_FORBIDDEN",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID_ARGUMENTS",
    "EXIT_OK",
    "EXIT_PROTOCOL",
    "EXIT_TIMEOUT",
    "EXIT_TRANSPORT",
    "EXIT_UNAUTHENTICATED",
    "EXIT_UNKNOWN_TOOL",
    "EXIT_USAGE",
    "describe_arguments",
    "named",
    "print_content",
    "print_error",
    "print_json",
    "print_response",
    "prompts_table",
    "schema_type",
    "table",
    "terminal",
    "tools_table",
    "unknown_tool",
]

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


def terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False once it is replaced or closed)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced, or closed
        return False


# --- tables ----------------------------------------------------------------------


def tools_table(tools: Sequence[ToolInfo]) -> str:
    """A plain-text table: name, type, description's first line, arguments."""
    rows = [("NAME", "TYPE", "DESCRIPTION", "ARGUMENTS")]
    for tool in tools:
        summary = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
        rows.append((tool.name, tool.type or "-", summary, describe_arguments(tool.input_schema)))
    return table(rows, "(* required)")


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
    return table(rows, "(* required)")


def table(rows: Sequence[tuple[str, ...]], footer: str | None = None) -> str:
    """Columns padded to their widest cell; the last one is not padded."""
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


def named(entry: dict[str, Any]) -> str:
    """A resource's ``title`` (or ``name``) and its description's first line."""
    name = str(entry.get("title") or entry.get("name") or "")
    description = str(entry.get("description") or "").strip()
    summary = description.splitlines()[0] if description else ""
    return f"{name}: {summary}" if summary else name


# --- results and errors ---------------------------------------------------------


def print_response(response: Response, raw: bool) -> int:
    """Print a call's outcome (``raw``: the whole result as JSON); return the exit
    status, EXIT_FAILURE for a failure (its message on stderr), else EXIT_OK."""
    status = EXIT_FAILURE if response.is_error else EXIT_OK
    if raw:
        print_json(response.raw)
        return status
    if response.is_error:
        failure = response.raw.get("failure")
        message = failure.get("message") if isinstance(failure, dict) else None
        message = message or response.text or "the tool failed"
        reason = failure.get("reason") if isinstance(failure, dict) else None
        suffix = f" (reason: {reason})" if reason else ""
        print(f"mcplite: failure: {message}{suffix}", file=sys.stderr)
        return status
    print_content(response.content, sys.stdout)
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


def print_content(content: list[Any], out: TextIO) -> None:
    """Text items as they are, any other item as indented JSON."""
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


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def unknown_tool(exc: ToolNotFoundError) -> str:
    """The message for an unknown tool: the server's suggestion, or the tools it has."""
    name = exc.requested_tool or "?"
    if exc.suggestion:
        return f"unknown tool '{name}'. {exc.suggestion}"
    available = ", ".join(exc.available_tools)
    return f"unknown tool '{name}'" + (f" (available: {available})" if available else "")


def print_error(message: str, status: int) -> int:
    """``mcplite: error: message`` on stderr; returns ``status``."""
    print(f"mcplite: error: {message}", file=sys.stderr)
    return status
