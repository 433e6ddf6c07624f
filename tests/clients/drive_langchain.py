"""LangChain's MCP adapters (``langchain-mcp-adapters``) as a driver (plan and
outcomes: driving.py).

Run as ``python -m clients.drive_langchain`` from ``tests/`` by the langchain
venv's Python (the adapters need ``mcp<2``; see install.py).  One session
(``MultiServerMCPClient.session``) serves every step, as an agent keeps one
for a stdio server.  Tools are LangChain tools, invoked with a tool call as an
agent invokes them: a tool error comes back as a ``ToolMessage`` with
``status="error"``.  LangChain has no way to list prompts (``get_prompt`` stands
in for it) and no way to cancel a call; its prompt messages take text only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.prompts import load_mcp_prompt
from langchain_mcp_adapters.resources import load_mcp_resources
from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool, load_mcp_tools
from mcp.types import Tool

from .driving import STEP_WAIT, Handler, Plan, joined, read_plan, run_steps


def text_of(content: Any) -> str:
    """A ToolMessage's content (a string, or content blocks) as text."""
    if isinstance(content, str):
        return content
    return joined(
        [
            str(block["text"]) if isinstance(block, dict) else str(block)
            for block in content
            if not isinstance(block, dict) or block.get("type") == "text"
        ]
    )


def handlers(session: Any) -> dict[str, Handler]:
    tools: dict[str, Any] = {}

    async def tool_named(name: str) -> Any:
        if not tools:
            tools.update({tool.name: tool for tool in await load_mcp_tools(session)})
        if name in tools:
            return tools[name]
        # A tool the server does not list (a stale list): the adapter's own converter.
        stale = Tool.model_validate({"name": name, "inputSchema": {"type": "object"}})
        return convert_mcp_tool_to_langchain_tool(session, stale)

    async def list_tools(step: dict[str, Any]) -> dict[str, Any]:
        return {"names": [tool.name for tool in await load_mcp_tools(session)]}

    async def call_tool(step: dict[str, Any]) -> dict[str, Any]:
        tool = await tool_named(step["name"])
        call = {"name": step["name"], "args": step["arguments"], "id": step["id"]}
        message = await tool.ainvoke({**call, "type": "tool_call"})
        artifact = message.artifact or {}
        return {
            "is_error": message.status == "error",
            "text": text_of(message.content),
            "structured": artifact.get("structured_content"),
        }

    async def long_call(step: dict[str, Any]) -> dict[str, Any]:
        return {**await call_tool(step), "via": "request"}

    async def get_prompt(step: dict[str, Any]) -> dict[str, Any]:
        messages = await load_mcp_prompt(session, step["name"], arguments=step["arguments"])
        return {
            "messages": [
                {
                    "role": "user" if message.type == "human" else "assistant",
                    "kind": "text",
                    "text": str(message.content),
                }
                for message in messages
            ]
        }

    async def read_resource(step: dict[str, Any]) -> dict[str, Any]:
        blobs = await load_mcp_resources(session, uris=[step["uri"]])
        return {
            "contents": [
                {
                    "uri": blob.metadata.get("uri"),
                    "mime_type": blob.mimetype,
                    "text": blob.as_string(),
                }
                for blob in blobs
            ]
        }

    return {
        "list_tools": list_tools,
        "call_tool": call_tool,
        "long_call": long_call,
        "get_prompt": get_prompt,
        "read_resource": read_resource,
    }


async def main(plan: Plan) -> None:
    connection: dict[str, Any]
    if "http" in plan:
        connection = {"transport": "streamable_http", "url": plan["http"], "timeout": STEP_WAIT}
    else:
        connection = {"transport": "stdio", **plan["stdio"]}
    client = MultiServerMCPClient({"mcplite": connection})
    async with client.session("mcplite") as session:
        await run_steps(plan["steps"], handlers(session))


if __name__ == "__main__":
    asyncio.run(main(read_plan()))
