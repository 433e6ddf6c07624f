"""Pydantic AI's MCP toolset (``pydantic_ai.mcp.MCPToolset``) as a driver (plan and
outcomes: driving.py).

Run as ``python -m clients.drive_pydantic_ai`` from ``tests/``, by the Python of
the flavour under test: this venv's (``pydantic-ai-slim[mcp]``), or the tasks
venv's (``[mcp,mcp-tasks]``: with ``options.tasks`` a long call takes the
toolset's task path, ``use_task=True``).

Tools are called as an agent calls them (``direct_call_tool``, the default
``tool_error_behavior="retry"``): a tool error reaches the model as a
``ModelRetry`` with the error's text, reported here as a result with
``is_error``; a JSON-RPC error is also a ``ModelRetry``, caused by the SDK's
error, reported as an error with that cause's code.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.mcp import EmbeddedResource, MCPToolset, PromptMessage
from pydantic_ai.messages import TextContent

from .driving import STEP_WAIT, Handler, Plan, code_of, read_plan, run_steps


def value_outcome(value: Any, via: str | None = None) -> dict[str, Any]:
    """A tool's value as the toolset maps it: text, or structured content."""
    if isinstance(value, str):
        outcome: dict[str, Any] = {"is_error": False, "text": value, "structured": None}
    else:
        structured = value if isinstance(value, dict) else None
        outcome = {"is_error": False, "text": json.dumps(value), "structured": structured}
    return outcome if via is None else {**outcome, "via": via}


def message_outcome(message: PromptMessage) -> dict[str, Any]:
    content = message.content
    if isinstance(content, TextContent):
        return {"role": message.role, "kind": "text", "text": content.content}
    if isinstance(content, EmbeddedResource):
        text = content.content if isinstance(content.content, str) else None
        return {"role": message.role, "kind": "resource", "text": text}
    return {"role": message.role, "kind": type(content).__name__, "text": None}


def handlers(toolset: MCPToolset[Any], tasks: bool) -> dict[str, Handler]:
    async def outcome_of(step: dict[str, Any], via: str | None) -> dict[str, Any]:
        try:
            value = await toolset.direct_call_tool(
                step["name"], step["arguments"], use_task=via == "task"
            )
        except ModelRetry as retry:
            if code_of(retry) is not None:
                raise  # a JSON-RPC error: the outcome is the error, with the cause's code
            return {"is_error": True, "text": retry.message, "structured": None}
        return value_outcome(value, via)

    async def call_tool(step: dict[str, Any]) -> dict[str, Any]:
        return await outcome_of(step, via=None)

    async def long_call(step: dict[str, Any]) -> dict[str, Any]:
        return await outcome_of(step, via="task" if tasks else "request")

    async def list_tools(step: dict[str, Any]) -> dict[str, Any]:
        return {"names": [tool.name for tool in await toolset.list_tools()]}

    async def list_prompts(step: dict[str, Any]) -> dict[str, Any]:
        return {"names": [prompt.name for prompt in await toolset.list_prompts()]}

    async def get_prompt(step: dict[str, Any]) -> dict[str, Any]:
        result = await toolset.get_prompt(step["name"], step["arguments"])
        return {"messages": [message_outcome(message) for message in result.messages]}

    async def read_resource(step: dict[str, Any]) -> dict[str, Any]:
        value = await toolset.read_resource(step["uri"])
        values = value if isinstance(value, list) else [value]
        return {
            "contents": [
                {"uri": step["uri"], "mime_type": None, "text": v if isinstance(v, str) else None}
                for v in values
            ]
        }

    return {
        "list_tools": list_tools,
        "list_prompts": list_prompts,
        "call_tool": call_tool,
        "long_call": long_call,
        "get_prompt": get_prompt,
        "read_resource": read_resource,
    }


async def main(plan: Plan) -> None:
    tasks = bool(plan.get("options", {}).get("tasks"))
    if "http" in plan:
        toolset: MCPToolset[Any] = MCPToolset(
            plan["http"], init_timeout=STEP_WAIT, read_timeout=STEP_WAIT
        )
    else:
        stdio = plan["stdio"]
        transport = StdioTransport(
            stdio["command"], stdio["args"], env=stdio["env"], cwd=stdio["cwd"]
        )
        toolset = MCPToolset(transport, init_timeout=STEP_WAIT, read_timeout=STEP_WAIT)
    async with toolset:
        await run_steps(plan["steps"], handlers(toolset, tasks))


if __name__ == "__main__":
    asyncio.run(main(read_plan()))
