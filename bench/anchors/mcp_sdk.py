"""The official MCP Python SDK serving the same echo tool, as a user would deploy it.

``MCPServer`` (``mcp`` 2.x; FastMCP in 1.x) with ``stateless_http=True`` and
``json_response=True`` (one JSON answer per POST, no session), served by uvicorn
with one worker and no access log.  Endpoint: ``POST /mcp``; the client must send
``Accept: application/json, text/event-stream``; with ``mcp-protocol-version:
2025-06-18`` the SDK takes its stateless 2025 path without an ``initialize``.

With ``--payload`` it also serves the tools of the big-payload phase as
``bench.payloadtools`` defines them: ``big_text(text: str) -> str`` (unstructured:
one text block, as mcplite answers a string) and ``big_records(records:
list[Record]) -> dict`` (the records checked by pydantic; one JSON text block and
``structuredContent``, as mcplite answers plain data on MCP).

Run: ``python bench/anchors/mcp_sdk.py --port 8080 [--arg text] [--payload]``
"""

from __future__ import annotations

import argparse
import inspect
import logging
from typing import Any


def add_payload_tools(server: Any) -> None:
    """``big_text`` and ``big_records``, the tools of ``bench.payloadtools`` (not imported
    here: it would load mcplite into this process and its memory figures)."""
    from typing_extensions import TypedDict  # pydantic wants it on Python < 3.12

    class Record(TypedDict):
        id: int
        name: str
        email: str
        score: float
        active: bool
        tags: list[str]
        note: str

    async def big_text(text: str) -> str:
        return text

    async def big_records(records: list[Record]) -> dict[str, Any]:
        return {"records": records}

    # This module's annotations are strings (the __future__ import) naming a local class.
    big_records.__annotations__ = {"records": list[Record], "return": dict[str, Any]}

    server.tool(name="big_text", description="Answer text.", structured_output=False)(big_text)
    server.tool(name="big_records", description="Answer the records.")(big_records)


def build_app(arg: str, payload: bool = False) -> Any:
    import importlib

    try:  # mcp 2.x
        server_cls = importlib.import_module("mcp.server.mcpserver").MCPServer
    except ImportError:  # mcp 1.x
        server_cls = importlib.import_module("mcp.server.fastmcp").FastMCP
    server = server_cls("bench", log_level="WARNING")

    # Same tool as mcplite's demo echo; the argument name follows it.
    def echo(**kwargs: str) -> str:
        return kwargs[arg]

    echo.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, annotation=str)],
        return_annotation=str,
    )
    echo.__annotations__ = {arg: str, "return": str}
    server.tool(name="echo", description="Echo the text back.")(echo)
    if payload:
        add_payload_tools(server)
    return server.streamable_http_app(stateless_http=True, json_response=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--arg", default="text", help="name of the echo argument")
    parser.add_argument("--payload", action="store_true", help="serve big_text and big_records")
    args = parser.parse_args()
    import uvicorn

    logging.getLogger("mcp").setLevel(logging.WARNING)
    uvicorn.run(
        build_app(args.arg, args.payload),
        host=args.host,
        port=args.port,
        workers=1,
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
