"""The official MCP SDK or fastmcp serving the tools of :mod:`bench.toolgen`, as a user
would write it: one server object, the functions registered with its decorator, then
``run()`` on stdio, or its stateless JSON HTTP app under uvicorn.

- ``sdk``: ``MCPServer`` (``mcp`` 2.x; ``FastMCP`` in 1.x), HTTP as in
  ``bench/anchors/mcp_sdk.py`` (``stateless_http=True``, ``json_response=True``).
- ``fastmcp``: ``fastmcp.FastMCP``, HTTP from ``http_app(stateless_http=True,
  json_response=True)``.

With ``--tools 0`` the server has ``echo`` alone (the cold-start phase); with N, the
first N generated tools (the many-tools phase).

Run: ``python bench/anchors/mcp_peers.py sdk stdio`` or
``python bench/anchors/mcp_peers.py fastmcp http --port 8080 --tools 1000``
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench.toolgen import echo, generated


def build(peer: str, count: int) -> Any:
    if peer == "sdk":
        try:  # mcp 2.x
            server_cls = importlib.import_module("mcp.server.mcpserver").MCPServer
        except ImportError:  # mcp 1.x
            server_cls = importlib.import_module("mcp.server.fastmcp").FastMCP
        server = server_cls("bench", log_level="WARNING")
    else:
        server = importlib.import_module("fastmcp").FastMCP("bench")
    for function in generated(count) if count else [echo]:
        server.tool()(function)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("peer", choices=("sdk", "fastmcp"))
    parser.add_argument("transport", choices=("stdio", "http"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tools", type=int, default=0, help="generated tools (0: echo alone)")
    args = parser.parse_args()
    server = build(args.peer, args.tools)
    if args.transport == "stdio":
        server.run()
        return
    import uvicorn

    logging.getLogger("mcp").setLevel(logging.WARNING)
    if args.peer == "sdk":
        app = server.streamable_http_app(stateless_http=True, json_response=True)
    else:
        app = server.http_app(stateless_http=True, json_response=True)
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
