"""The OpenAI Agents SDK's MCP servers (``openai-agents`` 0.24, the ``clients``
extra) against mcplite: ``MCPServerStreamableHttp`` on ``/mcp`` and
``MCPServerStdio``.  Driven by ``drive_openai_agents.py``, with
``client_session_timeout_seconds`` raised above the promise deadline (its 5 s
default ends a long call with "Request 'tools/call' timed out").  The SDK has no
way to cancel a call."""

from __future__ import annotations

import sys

import pytest

from .conftest import TEST_WAIT, TESTS
from .contract import Contract, Driver

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_WAIT)]


class TestOpenAIAgents(Contract):
    @pytest.fixture(scope="class")
    @classmethod
    def driver(cls) -> Driver:
        return Driver([sys.executable, "-m", "clients.drive_openai_agents"], TESTS)
