"""LangChain's MCP adapters (``langchain-mcp-adapters`` 0.3.2, on ``mcp`` 1.x: the
langchain venv) against mcplite, over ``/mcp`` (2025-11-25) and over stdio, one
session for all steps.  Driven by ``drive_langchain.py``, invoking the tools as an
agent does.

LangChain has no way to list prompts (its ``get_prompt`` asks the tools-only
server instead), none to cancel a call, and its prompt messages carry text only:
a prompt that embeds a resource (the demo's ``explain_section``) fails in the
adapter with "Unsupported prompt message content type: resource", so the
text-only ``ask_the_corpus`` stands in."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from . import install
from .conftest import TEST_WAIT, TESTS
from .contract import Contract, Driver, step

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_WAIT)]


class TestLangChain(Contract):
    prompt_step: ClassVar[dict[str, Any]] = step(
        "prompt", "get_prompt", name="ask_the_corpus", arguments={"question": "What is a promise?"}
    )
    prompt_messages: ClassVar[list[tuple[str, str, str]]] = [
        ("user", "text", "Answer this question: What is a promise?\n\nFirst call search_documents")
    ]
    prompts_step: ClassVar[dict[str, Any]] = step(
        "prompts", "get_prompt", name="explain_section", arguments={}
    )

    @pytest.fixture(scope="class")
    @classmethod
    def driver(cls) -> Driver:
        return Driver(
            [str(install.venv_python("langchain")), "-m", "clients.drive_langchain"], TESTS
        )
