"""The OpenAI Agents SDK's MCP servers (``agents.mcp.MCPServerStreamableHttp`` and
``MCPServerStdio``) as a driver (plan and outcomes: driving.py).

Run as ``python -m clients.drive_openai_agents`` from ``tests/``.  The SDK's
default ``client_session_timeout_seconds`` (5 s) is shorter than a promise
deadline, so a long call would time out on it: the driver sets it to the step
bound, as a host serving long tools must.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp

from .driving import STEP_WAIT, Handler, Plan, joined, read_plan, run_steps


def texts_of(blocks: list[Any]) -> list[str]:
    return [block.text for block in blocks if isinstance(block, mcp_types.TextContent)]


def call_outcome(result: mcp_types.CallToolResult) -> dict[str, Any]:
    return {
        "is_error": bool(result.is_error),
        "text": joined(texts_of(result.content)),
        "structured": result.structured_content,
    }


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


def handlers(server: MCPServerStdio | MCPServerStreamableHttp) -> dict[str, Handler]:
    async def list_tools(step: dict[str, Any]) -> dict[str, Any]:
        return {"names": [tool.name for tool in await server.list_tools()]}

    async def list_prompts(step: dict[str, Any]) -> dict[str, Any]:
        return {"names": [prompt.name for prompt in (await server.list_prompts()).prompts]}

    async def call_tool(step: dict[str, Any]) -> dict[str, Any]:
        return call_outcome(await server.call_tool(step["name"], step["arguments"]))

    async def long_call(step: dict[str, Any]) -> dict[str, Any]:
        return {**await call_tool(step), "via": "request"}

    async def get_prompt(step: dict[str, Any]) -> dict[str, Any]:
        result = await server.get_prompt(step["name"], step["arguments"])
        return {"messages": [message_outcome(message) for message in result.messages]}

    async def read_resource(step: dict[str, Any]) -> dict[str, Any]:
        result = await server.read_resource(step["uri"])
        return {
            "contents": [
                {
                    "uri": str(content.uri),
                    "mime_type": content.mime_type,
                    "text": getattr(content, "text", None),
                }
                for content in result.contents
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
    server: MCPServerStdio | MCPServerStreamableHttp
    if "http" in plan:
        server = MCPServerStreamableHttp(
            {"url": plan["http"]}, client_session_timeout_seconds=STEP_WAIT
        )
    else:
        stdio = plan["stdio"]
        server = MCPServerStdio(
            {
                "command": stdio["command"],
                "args": stdio["args"],
                "env": stdio["env"],
                "cwd": stdio["cwd"],
            },
            client_session_timeout_seconds=STEP_WAIT,
        )
    async with server:
        await run_steps(plan["steps"], handlers(server))


if __name__ == "__main__":
    asyncio.run(main(read_plan()))
