"""mcplite.asgi.App under hypercorn, another ASGI 3 server than uvicorn.

Hypercorn serves the app alone, on a socket bound here (127.0.0.1, an ephemeral
port, handed over as ``fd://``), in a thread with its own loop, with its
lifespan; the official MCP client (both revisions) and mcplite's client call and
stream over it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import mcp_types as types
import pytest
from conftest import WAIT, make_config
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig
from mcp import Client as McpClient

from mcplite import Context, Tools
from mcplite.asgi import App
from mcplite.client import Client

ERAS = {"2026": ("auto", "2026-07-28"), "2025": ("legacy", "2025-11-25")}


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool
    def echo(text: str) -> str:
        """Says it back."""
        return text

    @tools.tool
    async def count(n: int, ctx: Context) -> AsyncIterator[str]:
        """Counts to n, reporting progress."""
        for i in range(1, n + 1):
            ctx.report_progress(i, n)
            yield str(i)

    return tools


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = HypercornConfig()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn's now: it closes it
    config.accesslog = None
    config.graceful_timeout = 2
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    app = App(make_tools(), config=make_config())

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="hypercorn-test", daemon=True)
    thread.start()
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(WAIT)
    assert not thread.is_alive(), "hypercorn did not stop"
    assert app.dispatcher.active == 0


@pytest.fixture(params=sorted(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


async def test_the_official_client_calls_and_hears_progress(port: int, era: str) -> None:
    mode, version = ERAS[era]
    heard: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(progress)

    url = f"http://127.0.0.1:{port}/mcp"
    async with asyncio.timeout(WAIT):
        async with McpClient(url, mode=mode, read_timeout_seconds=WAIT) as client:
            assert client.protocol_version == version
            echoed = await client.call_tool("echo", {"text": "hi"})
            counted = await client.call_tool("count", {"n": 3}, progress_callback=on_progress)
    assert isinstance(echoed.content[0], types.TextContent) and echoed.content[0].text == "hi"
    assert isinstance(counted.content[0], types.TextContent)
    assert counted.content[0].text == "123"
    assert heard == [1, 2, 3]


async def test_the_mcplite_client_calls_and_streams(port: int) -> None:
    parts: list[Any] = []
    async with Client(f"http://127.0.0.1:{port}/mcp-lite/v1", timeout=WAIT) as client:
        assert (await client.call("echo", {"text": "lite"})).text == "lite"
        async for item in client.stream("count", {"n": 2}):
            parts.append(item)
    assert [getattr(p, "value", None) for p in parts[:2]] == ["1", "2"]
