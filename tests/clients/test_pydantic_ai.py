"""Pydantic AI's ``MCPToolset`` (``pydantic-ai-slim`` 2.68) against mcplite, over
``/mcp`` and over stdio, in two flavours: the ``mcp`` extra (the ``clients``
extra; a long call completes on its own request) and the ``mcp`` and
``mcp-tasks`` extras (the tasks venv: the long call takes the toolset's task
path).  Driven by ``drive_pydantic_ai.py``, calling tools as an agent does.

Pydantic AI has no way to cancel a call.  It asks a server for prompts only when
the server advertises them: on the tools-only server its ``get_prompt`` answers
-32601 itself, from the capabilities the server declared; its ``read_resource``
gives the text without the MIME type."""

from __future__ import annotations

import sys
from typing import Any, ClassVar

import pytest

from . import install
from .conftest import TEST_WAIT, TESTS
from .contract import Contract, Driver, step

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_WAIT)]
MODULE = "clients.drive_pydantic_ai"


class TestPydanticAI(Contract):
    resource_mime_type = None
    prompts_step: ClassVar[dict[str, Any]] = step(
        "prompts", "get_prompt", name="explain_section", arguments={}
    )

    @pytest.fixture(scope="class")
    @classmethod
    def driver(cls) -> Driver:
        return Driver([sys.executable, "-m", MODULE], TESTS)


class TestPydanticAIWithTasks(TestPydanticAI):
    long_call_via = "task"

    @pytest.fixture(scope="class")
    @classmethod
    def driver(cls) -> Driver:
        return Driver([str(install.venv_python("tasks")), "-m", MODULE], TESTS, {"tasks": True})
