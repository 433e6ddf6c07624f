"""The FastMCP client against mcplite, over ``/mcp`` and over stdio, in two flavours:
fastmcp 4.2.3 (the ``clients`` extra; it speaks 2026-07-28, and a long call
completes on its own request), and fastmcp 4.1.4 with ``fastmcp-tasks`` 4.1.4 (the
tasks venv: the client declares the tasks extension, so the long call becomes a
task it polls with ``tasks/get``; fastmcp-tasks has no 4.2 release).  Driven by
``drive_fastmcp.py``; a call is cancelled by cancelling the caller's task."""

from __future__ import annotations

import sys

import pytest

from . import install
from .conftest import TEST_WAIT, TESTS
from .contract import Cancellation, Driver

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_WAIT)]
MODULE = "clients.drive_fastmcp"


class TestFastMCP(Cancellation):
    @pytest.fixture(scope="class")
    @classmethod
    def driver(cls) -> Driver:
        return Driver([sys.executable, "-m", MODULE], TESTS)


class TestFastMCPWithTasks(Cancellation):
    long_call_via = "task"

    @pytest.fixture(scope="class")
    @classmethod
    def driver(cls) -> Driver:
        return Driver([str(install.venv_python("tasks")), "-m", MODULE], TESTS, {"tasks": True})
