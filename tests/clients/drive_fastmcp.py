"""The FastMCP client (``fastmcp.Client``) as a driver (plan and outcomes: driving.py).

Run as ``python -m clients.drive_fastmcp`` from ``tests/``, by the Python of the
flavour under test: this venv's (fastmcp 4.2.3), or the tasks venv's (fastmcp
4.1.4 with ``fastmcp-tasks``, which the plan's ``options.tasks`` imports: every
``Client`` then declares the tasks extension, and a long call runs as a task the
client polls through ``call_tool_task``).
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import mcp_types
from fastmcp import Client
from fastmcp.client.client import CallToolResult
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

from .driving import STEP_WAIT, Handler, Plan, joined, read_plan, run_steps


def texts_of(blocks: list[Any]) -> list[str]:
    return [block.text for block in blocks if isinstance(block, mcp_types.TextContent)]


def call_outcome(result: CallToolResult, via: str | None = None) -> dict[str, Any]:
    outcome = {
        "is_error": result.is_error,
        "text": joined(texts_of(result.content)),
        "structured": result.structured_content,
    }
    return outcome if via is None else {**outcome, "via": via}


def message_outcome(message: mcp_types.PromptMessage) -> dict[str, Any]:
    content = message.content
    if isinstance(content, mcp_types.TextContent):
        text: str | None = content.text
    elif isinstance(content, mcp_types.EmbeddedResource) and isinstance(
        content.resource, mcp_types.TextResourceContents
    ):
        text = content.resource.text
    else:
        text = None
    return {"role": message.role, "kind": content.type, "text": text}


def handlers(client: Client[Any], tasks: bool) -> dict[str, Handler]:
    async def list_tools(step: dict[str, Any]) -> dict[str, Any]:
        return {"names": [tool.name for tool in await client.list_tools()]}

    async def list_prompts(step: dict[str, Any]) -> dict[str, Any]:
        return {"names": [prompt.name for prompt in await client.list_prompts()]}

    async def call_tool(step: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(step["name"], step["arguments"], raise_on_error=False)
        return call_outcome(result)

    async def long_call(step: dict[str, Any]) -> dict[str, Any]:
        if not tasks:
            return call_outcome(
                await client.call_tool(step["name"], step["arguments"], raise_on_error=False),
                via="request",
            )
        tasks_module = importlib.import_module("fastmcp_tasks")
        task = await tasks_module.call_tool_task(
            client, step["name"], step["arguments"], raise_on_error=False
        )
        result: CallToolResult = await task.result()
        return call_outcome(result, via="task")

    async def get_prompt(step: dict[str, Any]) -> dict[str, Any]:
        result = await client.get_prompt(step["name"], step["arguments"])
        return {"messages": [message_outcome(message) for message in result.messages]}

    async def read_resource(step: dict[str, Any]) -> dict[str, Any]:
        contents = await client.read_resource(step["uri"])
        return {
            "contents": [
                {
                    "uri": str(content.uri),
                    "mime_type": content.mime_type,
                    "text": getattr(content, "text", None),
                }
                for content in contents
            ]
        }

    async def cancel_call(step: dict[str, Any]) -> dict[str, Any]:
        # Cancel the caller's task once the tool reports progress (it runs): the
        # client then abandons the request, which it signals to the server.
        running = asyncio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            running.set()

        call = asyncio.create_task(
            client.call_tool(step["name"], step["arguments"], progress_handler=on_progress)
        )
        cue = asyncio.create_task(running.wait())
        await asyncio.wait({call, cue}, return_when=asyncio.FIRST_COMPLETED)
        cue.cancel()
        if call.done():
            call.result()  # an error is the step's outcome
            return {"cancelled": False}
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            return {"cancelled": True}
        return {"cancelled": False}

    return {
        "list_tools": list_tools,
        "list_prompts": list_prompts,
        "call_tool": call_tool,
        "long_call": long_call,
        "get_prompt": get_prompt,
        "read_resource": read_resource,
        "cancel_call": cancel_call,
    }


async def main(plan: Plan) -> None:
    options = plan.get("options", {})
    tasks = bool(options.get("tasks"))
    if tasks:
        importlib.import_module("fastmcp_tasks")  # registers the client's tasks extension
    transport: StdioTransport | StreamableHttpTransport
    if "http" in plan:
        transport = StreamableHttpTransport(plan["http"])
    else:
        stdio = plan["stdio"]
        transport = StdioTransport(
            stdio["command"], stdio["args"], env=stdio["env"], cwd=stdio["cwd"]
        )
    async with Client(transport, timeout=STEP_WAIT, init_timeout=STEP_WAIT) as client:
        await run_steps(plan["steps"], handlers(client, tasks))


if __name__ == "__main__":
    asyncio.run(main(read_plan()))
