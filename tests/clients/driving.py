"""What every client driver shares: the plan it reads, the outcome lines it prints.

A driver is a small program that runs one MCP client library against one server.
It reads a plan (JSON, on stdin) naming the server (``http``: the ``/mcp`` URL, or
``stdio``: the command that serves stdio) and a list of steps, runs the steps in
order on one client session, and prints one JSON line per step:
``{"id": ..., "ok": {...}}`` or ``{"id": ..., "error": {"code", "message", "type", "data"}}``
(``code`` and ``data``: the JSON-RPC error's, when the client gives them).  A step that fails
does not end the run: the next step shows whether the session survived.

Steps (``op`` and its fields) and the ``ok`` shapes:

- ``list_tools``, ``list_prompts``: ``{"names": [...]}``
- ``call_tool`` (``name``, ``arguments``): ``{"is_error", "text", "structured"}``,
  ``text`` being the result's text blocks joined with newlines
- ``long_call`` (the same): that, and ``via``: ``"task"`` when the client polled a
  task, ``"request"`` when the call completed on its own request
- ``get_prompt`` (``name``, ``arguments``): ``{"messages": [{"role", "kind", "text"}]}``
- ``read_resource`` (``uri``): ``{"contents": [{"uri", "mime_type", "text"}]}``
- ``cancel_call`` (``name``, ``arguments``): the client cancels the call once the
  tool reports progress; ``{"cancelled": true}``

This module is the Python drivers' half (the TypeScript driver has its own); it
uses only the standard library, since drivers run in venvs without mcplite.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NotRequired, TypedDict


class Stdio(TypedDict):
    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str


class Plan(TypedDict):
    http: NotRequired[str]
    stdio: NotRequired[Stdio]
    options: NotRequired[dict[str, Any]]
    steps: list[dict[str, Any]]


class ErrorInfo(TypedDict):
    code: int | None
    message: str
    type: str
    data: Any


Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: How long one step may take, in seconds (the long call takes about 6).
STEP_WAIT = 30.0


def read_plan() -> Plan:
    plan: Plan = json.load(sys.stdin)
    return plan


def emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def leaf(error: BaseException) -> BaseException:
    """The first non-group exception inside ``error`` (anyio task groups wrap them)."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def rpc_error(error: BaseException) -> tuple[int, Any] | None:
    """The JSON-RPC error's ``(code, data)`` that ``error`` carries, looking through
    groups and causes: on the exception (mcp 2's ``MCPError``, pydantic-ai's) or on
    its ``.error`` (mcp 1's ``McpError``)."""
    seen: BaseException | None = error
    while seen is not None:
        seen = leaf(seen)
        for holder in (seen, getattr(seen, "error", None)):
            code = getattr(holder, "code", None)
            if isinstance(code, int) and not isinstance(code, bool):
                return code, getattr(holder, "data", None)
        seen = seen.__cause__
    return None


def code_of(error: BaseException) -> int | None:
    """The JSON-RPC error code ``error`` carries, if any."""
    found = rpc_error(error)
    return None if found is None else found[0]


def describe(error: BaseException) -> ErrorInfo:
    inner = leaf(error)
    code, data = rpc_error(error) or (None, None)
    return {
        "code": code,
        "message": str(inner),
        "type": type(inner).__name__,
        "data": data if isinstance(data, dict | list | str) else None,
    }


def joined(texts: list[str]) -> str:
    return "\n".join(texts)


async def run_steps(steps: list[dict[str, Any]], handlers: Mapping[str, Handler]) -> None:
    """Run each step with the handler of its ``op`` and print its outcome line."""
    for step in steps:
        handler = handlers.get(step["op"])
        if handler is None:
            unsupported = {"code": None, "message": step["op"], "type": "Unsupported", "data": None}
            emit({"id": step["id"], "error": unsupported})
            continue
        try:
            async with asyncio.timeout(STEP_WAIT):
                emit({"id": step["id"], "ok": await handler(step)})
        except Exception as error:  # the outcome of the step, reported; the run goes on
            emit({"id": step["id"], "error": describe(error)})
