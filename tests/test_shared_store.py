"""Two independent ``mcplite serve`` processes sharing one promise store
(``--promise-store``) and one secret: a promise made through one is redeemed,
waited on and cancelled through the other, over HTTP (MCP-lite)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from conftest import serve_process
from redis_support import running_redis

SECRET = "shared-secret-for-two-servers-0123456789"
TOOLS = """
import asyncio
from mcplite import ALWAYS, Context, Tools

tools = Tools()

@tools.tool(promise_after=ALWAYS)
async def slow(seconds: float, ctx: Context) -> str:
    ctx.report_progress(1, 2, "halfway")
    await asyncio.sleep(seconds)
    return f"slept {seconds}"
"""


def call(port: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        conn.request(
            "POST", "/mcp-lite/v1/rpc", json.dumps(message), {"Content-Type": "application/json"}
        )
        reply: dict[str, Any] = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return reply


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'promises.db'}"
    else:
        with running_redis() as url:
            yield url


def two_servers(stack: ExitStack, tmp_path: Path, store_url: str) -> tuple[int, int]:
    (tmp_path / "shared_tools.py").write_text(TOOLS)
    ports = []
    for _ in range(2):
        server = stack.enter_context(
            serve_process(
                "shared_tools",
                "--http",
                "127.0.0.1:0",
                "--no-grpc",
                "--secret",
                SECRET,
                "--promise-store",
                store_url,
                extra_path=tmp_path,
            )
        )
        ports.append(server.http_port)
    return ports[0], ports[1]


def test_a_promise_made_through_one_server_is_redeemed_through_the_other(
    tmp_path: Path, store_url: str
) -> None:
    with ExitStack() as stack:
        a, b = two_servers(stack, tmp_path, store_url)
        made = call(a, "slow", {"seconds": 0.3})["result"]
        assert made["_meta"]["response_type"] == "promise"
        token = made["_meta"]["promise_token"]
        pending = call(b, "redeem", {"promise": token})["result"]
        assert pending["_meta"]["response_type"] == "promise"
        assert pending["_meta"]["progress"]["message"] == "halfway"
        done = call(b, "redeem", {"promise": token, "wait": 10})["result"]
        assert done["_meta"]["response_type"] == "answer"
        assert done["content"] == [{"type": "text", "text": "slept 0.3"}]


def test_a_promise_made_through_one_server_is_cancelled_through_the_other(
    tmp_path: Path, store_url: str
) -> None:
    with ExitStack() as stack:
        a, b = two_servers(stack, tmp_path, store_url)
        token = call(a, "slow", {"seconds": 60})["result"]["_meta"]["promise_token"]
        cancelled = call(b, "cancel", {"promise": token})["result"]
        assert cancelled["structuredContent"] == {"cancelled": True}
        after = call(a, "redeem", {"promise": token, "wait": 5})["result"]
        assert after["failure"]["reason"] == "cancelled"


def test_an_unknown_store_url_is_one_error_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcplite",
            "serve",
            "mcplite.demo",
            "--http",
            "127.0.0.1:0",
            "--no-grpc",
            "--promise-store",
            "ftp://nowhere",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--promise-store" in done.stderr
