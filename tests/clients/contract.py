"""What every MCP client must be able to do with mcplite, as test classes.

Each client's module subclasses :class:`Contract` (and :class:`Cancellation`, when
the client can cancel a call) and says how its driver runs.  A class runs its
driver twice per transport (``http``: the shared server's ``/mcp``; ``stdio``: a
``mcplite stdio`` the client starts): once through the demo steps, once through
the tools-only steps; each test checks its steps' outcomes.  The steps after an
error show whether the session survived it.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import ServeProcess

from .conftest import Outcomes, mcp_url, run_driver, stdio_target

DEMO_TOOLS = ["echo", "search_documents", "analyze_dataset", "generate_report"]
TOOLS_ONLY_TOOLS = ["add", "block_until_cancelled", "was_cancelled"]
DOCUMENT = "doc_mcp_protocol_overview"
SECTION = "## MCP Protocol Overview\n\nThe Model Context Protocol enables"
#: One letter away from ``redeem``, a system tool MCP does not list: the error for
#: it must not point at a hidden tool (``redeem``, ``cancel``).
UNKNOWN_TOOL = "redeam"
HIDDEN_TOOL = re.compile(r"\b(redeem|cancel)\b")


def step(step_id: str, op: str, **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "op": op, **fields}


def call(step_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return step(step_id, "call_tool", name=name, arguments=arguments)


@dataclass(frozen=True)
class Driver:
    """How to run one client's driver: the command, its folder, the plan's options."""

    command: list[str]
    cwd: Path
    options: dict[str, Any] = field(default_factory=dict)

    def run(self, target: dict[str, Any], steps: list[dict[str, Any]]) -> Outcomes:
        return run_driver(
            self.command, self.cwd, {**target, "options": self.options, "steps": steps}
        )


class Contract:
    """The checks every client makes, over each transport it has.

    A subclass provides the ``driver`` fixture (a :class:`Driver`), and may change
    the class attributes below where its client differs (said in its docstring).
    """

    #: How the long call completes: "request" (on its own request) or "task" (polled).
    long_call_via: ClassVar[str] = "request"
    #: The demo prompt asked for, and its messages: (role, kind, how the text starts).
    prompt_step: ClassVar[dict[str, Any]] = step(
        "prompt",
        "get_prompt",
        name="explain_section",
        arguments={"document_id": DOCUMENT, "audience": "expert"},
    )
    prompt_messages: ClassVar[list[tuple[str, str, str]]] = [
        ("user", "resource", SECTION),
        ("user", "text", "Explain the section above to an expert, in a few sentences."),
    ]
    #: The MIME type the client reports for the demo's markdown resource.
    resource_mime_type: ClassVar[str | None] = "text/markdown"
    #: How the client asks the tools-only server for prompts.
    prompts_step: ClassVar[dict[str, Any]] = step("prompts", "list_prompts")

    @pytest.fixture(scope="class", params=["http", "stdio"])
    @classmethod
    def transport(cls, request: pytest.FixtureRequest) -> str:
        name: str = request.param
        return name

    @classmethod
    def target(cls, transport: str, server: ServeProcess, module: str, tmp: Path) -> dict[str, Any]:
        """The plan's server: the HTTP server's URL, or the stdio command."""
        if transport == "http":
            return {"http": mcp_url(server)}
        return {"stdio": stdio_target(module)}

    @classmethod
    def demo_steps(cls) -> list[dict[str, Any]]:
        return [
            step("tools", "list_tools"),
            call("echo", "echo", text="hello, MCP ✓"),
            cls.prompt_step,
            step("resource", "read_resource", uri=f"mcplite-demo://corpus/{DOCUMENT}"),
            call("empty-id", "analyze_dataset", dataset_id=""),
            call("after-empty-id", "echo", text="after the empty id"),
            call("wrong-type", "analyze_dataset", dataset_id=42),
            call("after-wrong-type", "echo", text="after the wrong type"),
            call("unknown", UNKNOWN_TOOL),
            call("after-unknown", "echo", text="after the unknown tool"),
            step(
                "long",
                "long_call",
                name="analyze_dataset",
                arguments={"dataset_id": "sales-2024", "analysis_type": "comprehensive"},
            ),
        ]

    @classmethod
    def tools_only_steps(cls) -> list[dict[str, Any]]:
        return [
            step("tools", "list_tools"),
            cls.prompts_step,
            call("after-prompts", "add", a=2, b=3),
        ]

    @pytest.fixture(scope="class")
    @classmethod
    def demo(
        cls,
        driver: Driver,
        transport: str,
        demo_server: ServeProcess,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Outcomes:
        target = cls.target(transport, demo_server, "mcplite.demo", tmp_path_factory.mktemp("home"))
        return driver.run(target, cls.demo_steps())

    @pytest.fixture(scope="class")
    @classmethod
    def tools_only(
        cls,
        driver: Driver,
        transport: str,
        tools_only_server: ServeProcess,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Outcomes:
        target = cls.target(
            transport, tools_only_server, "tools_only", tmp_path_factory.mktemp("home")
        )
        return driver.run(target, cls.tools_only_steps())

    # --- the demo -------------------------------------------------------------------

    def test_the_demo_tools_are_listed(self, demo: Outcomes) -> None:
        assert demo.ok("tools")["names"] == DEMO_TOOLS

    def test_echo_answers_its_text(self, demo: Outcomes) -> None:
        result = demo.ok("echo")
        assert (result["is_error"], result["text"]) == (False, "hello, MCP ✓")

    def test_a_long_analysis_completes_with_its_whole_summary(self, demo: Outcomes) -> None:
        result = demo.ok("long")
        assert result["is_error"] is False, result
        assert result["via"] == self.long_call_via
        summary = result["structured"]
        assert summary["analysis_type"] == "comprehensive"
        assert {"dataset_id", "rows", "mean", "stdev", "median", "quartiles"} <= set(summary)

    def test_a_prompt_arrives_with_its_messages(self, demo: Outcomes) -> None:
        messages = demo.ok("prompt")["messages"]
        assert [(m["role"], m["kind"]) for m in messages] == [
            (role, kind) for role, kind, _ in self.prompt_messages
        ]
        for message, (_, _, start) in zip(messages, self.prompt_messages, strict=True):
            assert message["text"].startswith(start), message

    def test_a_resource_reads_as_the_sections_markdown(self, demo: Outcomes) -> None:
        [content] = demo.ok("resource")["contents"]
        assert content["text"].startswith(SECTION)
        assert content["mime_type"] == self.resource_mime_type

    def test_an_empty_dataset_id_is_a_tool_error_naming_the_field_and_the_session_goes_on(
        self, demo: Outcomes
    ) -> None:
        result = demo.ok("empty-id")
        assert result["is_error"] is True, result
        assert "dataset_id" in result["text"]
        assert demo.ok("after-empty-id")["text"] == "after the empty id"

    def test_a_wrongly_typed_dataset_id_is_a_tool_error_naming_the_field_and_the_session_goes_on(
        self, demo: Outcomes
    ) -> None:
        result = demo.ok("wrong-type")
        assert result["is_error"] is True, result
        assert "dataset_id" in result["text"]
        assert demo.ok("after-wrong-type")["text"] == "after the wrong type"

    def test_an_unknown_tool_is_a_json_rpc_error_that_points_at_no_hidden_tool(
        self, demo: Outcomes
    ) -> None:
        error = demo.error("unknown")
        assert error["code"] == -32602, error
        assert UNKNOWN_TOOL in error["message"]
        assert not HIDDEN_TOOL.search(error["message"] + json.dumps(error["data"])), error
        assert demo.ok("after-unknown")["text"] == "after the unknown tool"

    # --- a server with tools only ---------------------------------------------------

    def test_the_tools_only_server_lists_its_tools(self, tools_only: Outcomes) -> None:
        assert tools_only.ok("tools")["names"] == TOOLS_ONLY_TOOLS

    def test_prompts_of_a_tools_only_server_are_method_not_found_and_the_session_goes_on(
        self, tools_only: Outcomes
    ) -> None:
        error = tools_only.error("prompts")
        assert error["code"] == -32601, error
        assert tools_only.ok("after-prompts")["text"] == "5"


class Cancellation(Contract):
    """For a client that can cancel a call: it cancels one once the tool runs (the
    tool reports progress first), and the server must stop the tool."""

    @classmethod
    def tools_only_steps(cls) -> list[dict[str, Any]]:
        key = uuid.uuid4().hex  # the server is shared: this run's own record
        return [
            *super().tools_only_steps(),
            step("cancel", "cancel_call", name="block_until_cancelled", arguments={"key": key}),
            call("was-cancelled", "was_cancelled", key=key),
        ]

    def test_a_cancelled_call_stops_the_tool(self, tools_only: Outcomes) -> None:
        assert tools_only.ok("cancel") == {"cancelled": True}, "the call ended before its cue"
        stopped = tools_only.ok("was-cancelled")["text"]
        assert stopped == "true", "the tool still ran 5 s after the client cancelled it"
