"""The official MCP Python SDK serving the same echo tool, as a user would deploy it.

``MCPServer`` (``mcp`` 2.x; FastMCP in 1.x) with ``stateless_http=True`` and
``json_response=True`` (one JSON answer per POST, no session), served by uvicorn
with one worker and no access log.  Endpoint: ``POST /mcp``; the client must send
``Accept: application/json, text/event-stream``; with ``mcp-protocol-version:
2025-06-18`` the SDK takes its stateless 2025 path without an ``initialize``.

Run: ``python bench/anchors/mcp_sdk.py --port 8080 [--arg text]``
"""

from __future__ import annotations

import argparse
import inspect
import logging
from typing import Any


def build_app(arg: str) -> Any:
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
    return server.streamable_http_app(stateless_http=True, json_response=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--arg", default="text", help="name of the echo argument")
    args = parser.parse_args()
    import uvicorn

    logging.getLogger("mcp").setLevel(logging.WARNING)
    uvicorn.run(
        build_app(args.arg),
        host=args.host,
        port=args.port,
        workers=1,
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
