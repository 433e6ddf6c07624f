"""The official ``mcp`` Python client (2.3.0) against mcplite's MCP endpoint.

A peer we did not write, over streamable HTTP, in both revisions: ``mode="auto"``
probes ``server/discover`` and speaks 2026-07-28; ``mode="legacy"`` runs the
2025-11-25 ``initialize`` handshake.  Every demo tool is driven end to end (the
answer, the structured search, the failure, the promise, the stream, the
elicitation, answered through the client's callback in both eras), and a small
tools module of the test's own shows progress and two questions asked at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import mcp_types as types
import pytest
from conftest import WAIT, RunningServer, make_config, serve_process, start_server
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

import mcplite.demo
from mcplite import Context, MemoryStore, Tools
from mcplite.core.outcomes import InputRequired

#: era -> (the client's mode, the version it must end up speaking)
ERAS = {"2026": ("auto", "2026-07-28"), "2025": ("legacy", "2025-11-25")}
DEMO_TOOLS = ["echo", "search_documents", "analyze_dataset", "generate_report"]


@pytest.fixture(params=sorted(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def demo() -> Iterator[RunningServer]:
    """The demo tools on an ephemeral port (shared: every call here is stateless)."""
    server = start_server(mcplite.demo.tools, make_config())
    try:
        yield server
    finally:
        server.stop()


def url_of(port: int) -> str:
    return f"http://127.0.0.1:{port}/mcp"


@asynccontextmanager
async def connected(port: int, era: str, **options: Any) -> AsyncIterator[Client]:
    """An official client connected in ``era``; every wait in the block is bounded."""
    mode, version = ERAS[era]
    async with asyncio.timeout(WAIT):
        async with Client(url_of(port), mode=mode, read_timeout_seconds=WAIT, **options) as client:
            assert client.protocol_version == version
            yield client


def only_text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1, result.content
    block = result.content[0]
    assert isinstance(block, types.TextContent), block
    return block.text


# --- the demo, in both eras ---------------------------------------------------------------


async def test_the_client_connects_and_lists_the_demo_tools(demo: RunningServer, era: str) -> None:
    async with connected(demo.port, era) as client:
        assert client.server_info is not None
        assert client.server_info.name == "mcplite"
        assert client.server_info.version == mcplite.__version__
        assert client.server_capabilities.tools is not None
        listed = await client.list_tools()
    assert [tool.name for tool in listed.tools] == DEMO_TOOLS
    search = listed.tools[1]
    assert search.description == "Search through available documents."
    assert search.input_schema["properties"]["query"]["type"] == "string"
    assert search.input_schema["required"] == ["query"]


async def test_echo_answers_its_text(demo: RunningServer, era: str) -> None:
    async with connected(demo.port, era) as client:
        result = await client.call_tool("echo", {"text": "hello, MCP ✓"})
    assert result.is_error is False
    assert only_text(result) == "hello, MCP ✓"


async def test_a_search_answers_json_text_and_the_same_structured_content(
    demo: RunningServer, era: str
) -> None:
    async with connected(demo.port, era) as client:
        result = await client.call_tool("search_documents", {"query": "promise token", "limit": 3})
    assert result.is_error is False
    assert result.structured_content is not None
    # 2026 sends the list itself; 2025 only objects, so the list is wrapped.
    hits = result.structured_content["result"] if era == "2025" else result.structured_content
    assert 1 <= len(hits) <= 3
    assert all(set(hit) == {"document_id", "title", "excerpt", "score"} for hit in hits)
    assert json.loads(only_text(result)) == hits


async def test_a_business_failure_is_a_tool_error_result(demo: RunningServer, era: str) -> None:
    async with connected(demo.port, era) as client:
        result = await client.call_tool("analyze_dataset", {"dataset_id": "missing-sales"})
    assert result.is_error is True
    assert only_text(result) == "dataset 'missing-sales' does not exist"


async def test_a_streamed_report_arrives_whole(demo: RunningServer, era: str) -> None:
    async with connected(demo.port, era) as client:
        result = await client.call_tool("generate_report", {"topic": "sales"})
    assert result.is_error is False
    report = "".join(block.text for block in result.content if isinstance(block, types.TextContent))
    titles = ["Executive Summary", "Revenue", "Costs", "Outlook"]
    positions = [report.find(title) for title in titles]
    assert all(p >= 0 for p in positions), report
    assert positions == sorted(positions)
    assert report.startswith("Sales Report")


async def test_an_unknown_tool_is_an_invalid_params_error(demo: RunningServer, era: str) -> None:
    async with connected(demo.port, era) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("no_such_tool", {})
    assert caught.value.code == -32602
    assert "no_such_tool" in caught.value.message


async def test_invalid_arguments_are_a_tool_error_the_model_can_read(
    demo: RunningServer, era: str
) -> None:
    async with connected(demo.port, era) as client:
        refused = await client.call_tool("analyze_dataset", {"dataset_id": ""})
        # The session goes on after it.
        assert only_text(await client.call_tool("echo", {"text": "after"})) == "after"
    assert refused.is_error is True
    assert "dataset_id" in only_text(refused)


async def test_a_promise_completes_on_the_same_call_without_the_tasks_extension(
    era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Six short steps instead of six seconds; a 50 ms promise deadline, so the call
    # does become a promise on the server, which the client never hears of.
    monkeypatch.setattr(mcplite.demo, "STEP_SECONDS", 0.05)
    server = start_server(mcplite.demo.tools, make_config(promise_after=0.05))
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    try:
        async with connected(server.port, era) as client:
            result = await client.call_tool(
                "analyze_dataset",
                {"dataset_id": "sales-2024", "analysis_type": "comprehensive"},
                progress_callback=on_progress,
            )
        store = server.dispatcher.promises
        assert isinstance(store, MemoryStore)
        assert server.call_soon(lambda: len(store)) == 1  # it was a promise on the server
    finally:
        server.stop()
    assert result.is_error is False
    summary = result.structured_content
    assert summary is not None
    assert summary["analysis_type"] == "comprehensive"
    assert {"stdev", "median", "quartiles"} <= set(summary)
    steps = mcplite.demo.COMPREHENSIVE_STEPS
    assert reports == [(step, steps, f"pass {step + 1} of {steps}") for step in range(steps)]


# --- elicitation ---------------------------------------------------------------------------


async def test_an_elicitation_is_answered_through_the_clients_callback(
    demo: RunningServer, era: str
) -> None:
    # 2026: an input_required result the client answers by calling again; 2025: a
    # request on the call's stream the client answers with a POST.  One callback.
    asked: list[types.ElicitRequestParams] = []

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"query": "MCP protocol"})

    async with connected(demo.port, era, elicitation_callback=elicit) as client:
        result = await client.call_tool("search_documents", {"query": "??"})
    assert len(asked) == 1
    assert isinstance(asked[0], types.ElicitRequestFormParams)
    assert asked[0].message.startswith("What should I search for?")
    assert asked[0].requested_schema["required"] == ["query"]
    assert result.is_error is False
    assert result.structured_content is not None
    hits = result.structured_content["result"] if era == "2025" else result.structured_content
    assert hits, result


async def test_a_declined_elicitation_ends_as_a_tool_error(demo: RunningServer, era: str) -> None:
    async def decline(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with connected(demo.port, era, elicitation_callback=decline) as client:
        result = await client.call_tool("search_documents", {"query": "??"})
    assert result.is_error is True


# --- progress and input requests, from tools of the test's own ---------------------------


def own_tools() -> Tools:
    tools = Tools()

    @tools.tool
    async def count(steps: int = 3, ctx: Context | None = None) -> str:
        """Report progress once per step."""
        assert ctx is not None
        for step in range(1, steps + 1):
            ctx.report_progress(step, steps, f"step {step} of {steps}")
            await asyncio.sleep(0)
        return f"counted {steps}"

    @tools.tool
    async def profile(ctx: Context | None = None) -> Any:
        """Ask two questions at once; keep a state between the rounds."""
        assert ctx is not None
        answers = ctx.input_responses
        if not {"name", "city"} <= set(answers):
            return InputRequired(
                {
                    key: {
                        "method": "elicitation/create",
                        "params": {
                            "message": f"Your {key}?",
                            "requestedSchema": {
                                "type": "object",
                                "properties": {key: {"type": "string"}},
                                "required": [key],
                            },
                        },
                    }
                    for key in ("name", "city")
                },
                state="asked-once",
            )
        name = answers["name"]["content"]["name"]
        city = answers["city"]["content"]["city"]
        return f"{name} from {city} ({ctx.request_state})"

    return tools


@pytest.fixture(scope="module")
def own() -> Iterator[RunningServer]:
    server = start_server(own_tools(), make_config())
    try:
        yield server
    finally:
        server.stop()


async def test_progress_reaches_the_clients_callback_before_the_result(
    own: RunningServer, era: str
) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with connected(own.port, era) as client:
        result = await client.call_tool("count", {"steps": 4}, progress_callback=on_progress)
    assert only_text(result) == "counted 4"
    assert reports == [(step, 4, f"step {step} of 4") for step in range(1, 5)]


async def test_several_input_requests_are_answered_in_one_round(
    own: RunningServer, era: str
) -> None:
    asked: list[str] = []

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        key = "name" if "name" in params.message else "city"
        return types.ElicitResult(
            action="accept", content={key: {"name": "Ada", "city": "Turin"}[key]}
        )

    async with connected(own.port, era, elicitation_callback=elicit) as client:
        result = await client.call_tool("profile", {})
    assert sorted(asked) == ["Your city?", "Your name?"]
    assert result.is_error is False
    assert only_text(result) == "Ada from Turin (asked-once)"


# --- outputSchema and JSON Schema 2020-12, checked by the client itself ----------------------


@dataclass
class Forecast:
    city: str
    celsius: float
    tags: list[str] = field(default_factory=list)
    note: str | None = None


class Totals(TypedDict):
    count: int
    mean: NotRequired[float]


#: A hand-written 2020-12 inputSchema: $defs, $anchor, $ref, if/then/else.
CONTACT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object"}},
    "properties": {"address": {"$ref": "#/$defs/address"}, "phone": {"type": "string"}},
    "if": {"required": ["address"]},
    "then": {"required": ["phone"]},
    "additionalProperties": False,
}


def shaped_tools() -> Tools:
    tools = Tools()

    @tools.tool
    async def forecast(city: str) -> Forecast:
        """A dataclass answer: structuredContent with an outputSchema."""
        return Forecast(city, 21.5, ["sunny"])

    @tools.tool
    def totals(values: list[float]) -> Totals:
        """A TypedDict answer."""
        return {"count": len(values), "mean": sum(values) / len(values)}

    @tools.tool
    def broken(city: str) -> Forecast:
        """Says Forecast, answers something else: the client must notice."""
        return {"city": city}  # type: ignore[return-value]

    @tools.tool(schema=CONTACT_SCHEMA)
    def contact(**arguments: Any) -> str:
        return "noted"

    return tools


async def test_the_client_validates_structured_content_against_the_output_schema(
    era: str,
) -> None:
    server = start_server(shaped_tools(), make_config())
    try:
        async with connected(server.port, era) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            forecast = await client.call_tool("forecast", {"city": "Turin"})
            totals = await client.call_tool("totals", {"values": [1, 2, 3]})
            with pytest.raises(RuntimeError, match="Invalid structured content"):
                await client.call_tool("broken", {"city": "Turin"})
            noted = await client.call_tool("contact", {"address": {}, "phone": "555"})
            refused = await client.call_tool("contact", {"address": {}})
    finally:
        server.stop()
    schema = listed["forecast"].output_schema
    assert schema is not None
    assert schema["required"] == ["city", "celsius", "tags", "note"]
    assert listed["contact"].output_schema is None
    assert listed["contact"].input_schema == CONTACT_SCHEMA  # exactly as written
    assert forecast.structured_content == {
        "city": "Turin",
        "celsius": 21.5,
        "tags": ["sunny"],
        "note": None,
    }
    assert totals.structured_content == {"count": 3, "mean": 2.0}
    assert only_text(noted) == "noted"
    assert refused.is_error is True
    assert "phone" in only_text(refused)


# --- the real command ----------------------------------------------------------------------


async def test_the_client_drives_the_demo_served_by_the_command(era: str) -> None:
    with serve_process("mcplite.demo", "--http", "127.0.0.1:0", "--no-grpc") as process:
        async with connected(process.http_port, era) as client:
            listed = await client.list_tools()
            result = await client.call_tool("echo", {"text": "from the command"})
    assert [tool.name for tool in listed.tools] == DEMO_TOOLS
    assert only_text(result) == "from the command"


def valued_tools() -> Tools:
    tools = Tools()

    @tools.tool
    def squares(n: int) -> list[int]:
        """A list answer."""
        return [i * i for i in range(n)]

    @tools.tool
    def count(values: list[float]) -> int:
        """A number answer is a text block: no outputSchema."""
        return len(values)

    @tools.tool
    def flags(n: int) -> list[bool]:
        """A list of booleans."""
        return [True] * n

    @tools.tool
    def rows(n: int) -> list[Totals]:
        """A list of objects that are never content blocks."""
        return [{"count": i} for i in range(n)]

    @tools.tool
    def words(n: int) -> list[str]:
        """Strings are text items: no outputSchema."""
        return ["w"] * n

    return tools


async def test_a_list_or_number_answer_has_an_output_schema_the_client_checks(era: str) -> None:
    server = start_server(valued_tools(), make_config())
    try:
        async with connected(server.port, era) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            squares = await client.call_tool("squares", {"n": 4})
            count = await client.call_tool("count", {"values": [1.0, 2.0]})
            flags = await client.call_tool("flags", {"n": 2})
            rows = await client.call_tool("rows", {"n": 2})
    finally:
        server.stop()
    array = {"type": "array", "items": {"type": "integer"}}
    if era == "2026":  # structuredContent may be any JSON value: the value itself
        assert listed["squares"].output_schema == array
        assert squares.structured_content == [0, 1, 4, 9]
        assert flags.structured_content == [True, True]
        assert rows.structured_content == [{"count": 0}, {"count": 1}]
    else:  # 2025: an object, the value as its "result"
        assert listed["squares"].output_schema == {
            "type": "object",
            "properties": {"result": array},
            "required": ["result"],
        }
        assert squares.structured_content == {"result": [0, 1, 4, 9]}
        assert flags.structured_content == {"result": [True, True]}
        assert rows.structured_content == {"result": [{"count": 0}, {"count": 1}]}
    assert listed["count"].output_schema is None
    assert only_text(count) == "2"
    assert listed["words"].output_schema is None
    assert squares.is_error is flags.is_error is rows.is_error is False
