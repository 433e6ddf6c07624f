"""Tests for the demo tools of spec Appendix A (mcplite.demo)."""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from conftest import RunningServer, make_config, start_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mcplite.demo
from mcplite import Dispatcher, InvalidParams, Partial, ResponseType, Result
from mcplite.core.schema import compile_schema
from mcplite.core.tools import Kind
from mcplite.demo import tools as demo_tools
from mcplite.testing import InMemoryClient

WAIT = 5.0  # upper bound of every wait in this file


def serve(made: list[Dispatcher], **overrides: Any) -> Dispatcher:
    dispatcher = Dispatcher(demo_tools, make_config(**overrides))
    made.append(dispatcher)
    return dispatcher


@pytest.fixture
def fast_steps(monkeypatch: pytest.MonkeyPatch) -> float:
    """Comprehensive analysis in 6 x 50 ms instead of 6 x 1 s."""
    monkeypatch.setattr(mcplite.demo, "STEP_SECONDS", 0.05)
    return 0.05


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


# --- discovery ---------------------------------------------------------------------------


def test_the_demo_registry_has_the_appendix_tools_with_their_types() -> None:
    definitions = {t.name: t.definition() for t in demo_tools}
    assert set(definitions) == {"echo", "search_documents", "analyze_dataset", "generate_report"}
    assert definitions["search_documents"]["@type"] == "query"
    assert definitions["analyze_dataset"]["@type"] == "analysis"
    assert definitions["generate_report"]["@type"] == "generation"
    assert definitions["search_documents"]["description"] == "Search through available documents."
    schema = definitions["search_documents"]["inputSchema"]
    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 10,
    }
    analyze = definitions["analyze_dataset"]["inputSchema"]
    assert set(analyze["properties"]) == {"dataset_id", "analysis_type"}  # no ctx
    assert analyze["properties"]["analysis_type"]["enum"] == ["quick", "comprehensive"]


async def test_echo_returns_its_text(dispatchers: list[Dispatcher]) -> None:
    dispatcher = serve(dispatchers)
    result = await dispatcher.call("echo", {"text": "hello, world"})
    assert result.body == {"content": [text("hello, world")]}


# --- search_documents ------------------------------------------------------------------------


async def test_search_documents_returns_best_first_hits_with_id_title_and_excerpt(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers)
    result = await dispatcher.call("search_documents", {"query": "redeem promise token"})
    assert result.response_type is ResponseType.ANSWER
    hits = result.body["content"]
    assert len(hits) >= 2
    for hit in hits:
        assert set(hit) == {"document_id", "title", "excerpt", "score"}
        assert hit["document_id"].startswith("doc_")
        assert hit["title"] and hit["excerpt"]
    scores = [hit["score"] for hit in hits]
    assert scores == sorted(scores, reverse=True)
    top = hits[0]
    assert top["title"] == "Promises and the Redeem Tool"
    assert top["document_id"] == "doc_promises_and_the_redeem_tool"
    assert any(w in top["excerpt"].lower() for w in ("redeem", "promise", "token"))


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_search_documents_respects_the_limit(
    dispatchers: list[Dispatcher], limit: int
) -> None:
    dispatcher = serve(dispatchers)
    everything = await dispatcher.call("search_documents", {"query": "mcp tools server"})
    limited = await dispatcher.call(
        "search_documents", {"query": "mcp tools server", "limit": limit}
    )
    assert len(everything.body["content"]) > 3
    assert limited.body["content"] == everything.body["content"][:limit]


async def test_search_documents_default_limit_is_ten(dispatchers: list[Dispatcher]) -> None:
    dispatcher = serve(dispatchers)
    result = await dispatcher.call("search_documents", {"query": "the a of mcp grpc http tools"})
    assert 1 <= len(result.body["content"]) <= 10


@pytest.mark.parametrize("limit", [0, 101, 500])
async def test_search_documents_refuses_a_limit_out_of_range(
    dispatchers: list[Dispatcher], limit: int
) -> None:
    dispatcher = serve(dispatchers)
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("search_documents", {"query": "mcp", "limit": limit})
    assert caught.value.data is not None
    assert [e["field"] for e in caught.value.data["errors"]] == ["limit"]


async def test_search_documents_with_no_match_returns_no_hits(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers)
    result = await dispatcher.call("search_documents", {"query": "xylophone zeppelin"})
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": []}


@pytest.mark.parametrize("query", ["   ", "\t\n", "?!", "a"])
async def test_search_documents_with_nothing_searchable_asks_for_a_query(
    dispatchers: list[Dispatcher], query: str
) -> None:
    dispatcher = serve(dispatchers)
    result = await dispatcher.call("search_documents", {"query": query})
    assert result.response_type is ResponseType.ELICITATION
    elicitation = result.body["elicitation"]
    assert elicitation["message"]
    assert elicitation["requestedSchema"]["required"] == ["query"]
    assert result.to_json()["_meta"]["response_type"] == "elicitation"


# --- analyze_dataset ---------------------------------------------------------------------------


async def test_a_quick_analysis_answers_at_once_with_summary_statistics(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers)
    result = await dispatcher.call("analyze_dataset", {"dataset_id": "sales_2024"})
    assert result.response_type is ResponseType.ANSWER
    [summary] = result.body["content"]
    assert summary["dataset_id"] == "sales_2024"
    assert summary["analysis_type"] == "quick"
    assert summary["rows"] == 200
    assert summary["min"] <= summary["mean"] <= summary["max"]
    assert "stdev" not in summary
    again = await dispatcher.call("analyze_dataset", {"dataset_id": "sales_2024"})
    assert again.body == result.body  # the same dataset gives the same numbers


async def test_analysing_a_missing_dataset_is_a_failure(dispatchers: list[Dispatcher]) -> None:
    dispatcher = serve(dispatchers)
    for analysis_type in ("quick", "comprehensive"):
        result = await dispatcher.call(
            "analyze_dataset", {"dataset_id": "missing_42", "analysis_type": analysis_type}
        )
        assert result.response_type is ResponseType.FAILURE
        assert result.body["isError"] is True
        assert result.body["failure"]["reason"] == "not_found"
        assert "missing_42" in result.body["failure"]["message"]


async def test_a_quick_analysis_of_a_huge_dataset_asks_for_more_resources(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers)
    result = await dispatcher.call(
        "analyze_dataset", {"dataset_id": "huge_logs", "analysis_type": "quick"}
    )
    assert result.response_type is ResponseType.MORE_RESOURCES
    assert result.body["resources"]["time_seconds"] == 60
    assert "huge_logs" in result.body["resources"]["message"]
    assert result.to_json()["_meta"]["response_type"] == "request-for-more-resource"


async def test_analyze_dataset_refuses_an_unknown_analysis_type_and_an_empty_id(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers)
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("analyze_dataset", {"dataset_id": "", "analysis_type": "deep"})
    assert caught.value.data is not None
    fields = {e["field"] for e in caught.value.data["errors"]}
    assert fields == {"dataset_id", "analysis_type"}


async def test_a_comprehensive_analysis_becomes_a_promise_with_progress_then_the_full_summary(
    dispatchers: list[Dispatcher], fast_steps: float
) -> None:
    dispatcher = serve(dispatchers, promise_after=0.01)
    promised = await asyncio.wait_for(
        dispatcher.call(
            "analyze_dataset",
            {"dataset_id": "large_dataset_001", "analysis_type": "comprehensive"},
        ),
        WAIT,
    )
    assert promised.response_type is ResponseType.PROMISE
    token = promised.extra_meta["promise_token"]
    assert token.startswith("prom_")

    pending = await dispatcher.call("redeem", {"promise": token})
    assert pending.response_type is ResponseType.PROMISE
    meta = pending.to_json()["_meta"]
    assert meta["promise_token"] == token
    assert meta["progress"]["total"] == 6
    assert 0 <= meta["progress"]["progress"] < 6
    assert meta["progress"]["message"].startswith("pass ")
    assert meta["estimated_completion"].endswith("Z")

    started = time.perf_counter()
    done = await asyncio.wait_for(
        dispatcher.call("redeem", {"promise": token, "wait": 10}), WAIT * 2
    )
    assert time.perf_counter() - started < WAIT
    assert done.response_type is ResponseType.ANSWER
    [summary] = done.body["content"]
    assert summary["analysis_type"] == "comprehensive"
    assert summary["rows"] == 200
    assert {"stdev", "median", "quartiles"} <= set(summary)
    assert len(summary["quartiles"]) == 3
    q1, q2, q3 = summary["quartiles"]
    assert summary["min"] <= q1 <= q2 <= q3 <= summary["max"]
    assert q2 == pytest.approx(summary["median"], abs=1e-3)
    assert summary["stdev"] > 0


async def test_a_comprehensive_analysis_of_a_huge_dataset_is_not_refused(
    dispatchers: list[Dispatcher], fast_steps: float
) -> None:
    dispatcher = serve(dispatchers, promise_after=30)
    result = await asyncio.wait_for(
        dispatcher.call(
            "analyze_dataset", {"dataset_id": "huge_logs", "analysis_type": "comprehensive"}
        ),
        WAIT,
    )
    assert result.response_type is ResponseType.ANSWER
    assert "stdev" in result.body["content"][0]


async def test_the_comprehensive_numbers_match_the_statistics_module(
    dispatchers: list[Dispatcher], fast_steps: float
) -> None:
    dispatcher = serve(dispatchers, promise_after=30)
    quick = await dispatcher.call("analyze_dataset", {"dataset_id": "d1"})
    full = await asyncio.wait_for(
        dispatcher.call("analyze_dataset", {"dataset_id": "d1", "analysis_type": "comprehensive"}),
        WAIT,
    )
    q, f = quick.body["content"][0], full.body["content"][0]
    assert {k: q[k] for k in ("mean", "min", "max", "rows")} == {
        k: f[k] for k in ("mean", "min", "max", "rows")
    }
    assert f["stdev"] == pytest.approx(statistics.stdev(mcplite.demo._dataset("d1")), abs=1e-3)


# --- generate_report ----------------------------------------------------------------------------


async def test_generate_report_streams_four_sections_then_the_whole_report(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers)
    stream = dispatcher.stream("generate_report", {"topic": "quarterly results"})

    async def drain() -> list[Partial | Result]:
        return [item async for item in stream]

    items = await asyncio.wait_for(drain(), WAIT)
    parts = [item for item in items if isinstance(item, Partial)]
    assert len(parts) == 4
    assert len(items) == 5
    assert parts[0].value.startswith("Quarterly Results Report\n\nExecutive Summary\n")
    assert parts[1].value.startswith("\n\nRevenue\n")
    assert "15%" in parts[1].value
    assert parts[2].value.startswith("\n\nCosts\n")
    assert parts[3].value.startswith("\n\nOutlook\n")
    final = items[-1]
    assert isinstance(final, Result)
    assert final.response_type is ResponseType.ANSWER
    assert final.body == {"content": [text("".join(p.value for p in parts))]}


async def test_generate_report_called_without_streaming_gives_the_whole_report(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers)
    result = await asyncio.wait_for(
        dispatcher.call("generate_report", {"topic": "quarterly results"}), WAIT
    )
    [item] = result.body["content"]
    for title in ("Executive Summary", "Revenue", "Costs", "Outlook"):
        assert title in item["text"]


# --- over HTTP: the promise flow of spec A.3 ---------------------------------------------------


@pytest.fixture
def quick_promise_server(fast_steps: float) -> Iterator[RunningServer]:
    server = start_server(demo_tools, make_config(promise_after=0.01))
    try:
        yield server
    finally:
        server.stop()


def test_the_demo_plays_the_promise_flow_of_appendix_a3_over_http(
    quick_promise_server: RunningServer,
) -> None:
    server = quick_promise_server
    reply = server.rpc(
        "tools/call",
        {
            "name": "analyze_dataset",
            "arguments": {"dataset_id": "large_dataset_001", "analysis_type": "comprehensive"},
        },
        request_id="analysis-001",
    )
    assert reply["id"] == "analysis-001"
    meta = reply["result"]["_meta"]
    assert meta["response_type"] == "promise"
    token = meta["promise_token"]
    redeemed = server.rpc(
        "tools/call",
        {"name": "redeem", "arguments": {"promise": token, "wait": 10}},
        request_id="redeem-001",
    )
    assert redeemed["id"] == "redeem-001"
    result = redeemed["result"]
    assert result["_meta"]["response_type"] == "answer"
    assert "quartiles" in result["content"][0]


def test_the_demo_server_answers_a_search_over_http(demo_server: RunningServer) -> None:
    reply = demo_server.call("search_documents", {"query": "server-sent events", "limit": 1})
    result = reply["result"]
    assert result["_meta"]["response_type"] == "answer"
    assert [hit["title"] for hit in result["content"]] == ["Streaming with Server-Sent Events"]


# --- any input the schema accepts: an outcome, never an internal error --------------

# Strings where the demo's string handling could break: lone surrogates (JSON's
# "\ud800" decodes to one), NUL, nothing searchable, and the prefixes the demo
# treats specially, glued to anything.
_TRICKY = ["\ud800", "\udfff", "a\udc00b", "\x00", " ", "?!", "missing\ud800", "huge\udbff"]
_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=24)  # Cs included


def _strings(schema: Mapping[str, Any]) -> st.SearchStrategy[str]:
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    glued = st.builds(str.__add__, st.sampled_from(["missing", "huge", "doc_"]), _ANY_TEXT)
    options = st.one_of(st.sampled_from(_TRICKY), _ANY_TEXT, glued)
    return options.filter(lambda s: low <= len(s) and (high is None or len(s) <= high))


def _values(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under ``schema``, for the schema shapes the demo tools use."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        return _strings(schema)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        return st.floats(schema.get("minimum"), schema.get("maximum"), allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    raise AssertionError(f"teach this test to generate {schema!r}")


def _arguments(schema: Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {name: _values(sub) for name, sub in properties.items() if name in required},
        optional={name: _values(sub) for name, sub in properties.items() if name not in required},
    )


async def _outcome(name: str, arguments: dict[str, Any]) -> None:
    """Call the tool in memory (the JSON trip included); raises what the client
    raises, InternalServerError (-32603) among it."""
    tool = next(t for t in demo_tools if t.name == name)
    async with InMemoryClient(demo_tools, make_config(promise_after=WAIT)) as client:
        if tool.kind is Kind.STREAM:
            items = [item async for item in client.stream(name, arguments)]
            assert items and not isinstance(items[-1], Partial)
        response = await client.call(name, arguments)
        assert response.response_type in {
            "answer",
            "failure",
            "elicitation",
            "request-for-more-resource",
        }


@pytest.mark.parametrize("name", sorted(t.name for t in demo_tools))
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_demo_tool_answers_any_arguments_its_schema_accepts_without_an_internal_error(
    name: str, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcplite.demo, "STEP_SECONDS", 0.0)  # comprehensive: no waiting
    monkeypatch.setattr(mcplite.demo, "SECTION_SECONDS", 0.0)
    schema = next(t for t in demo_tools if t.name == name).input_schema
    arguments = data.draw(_arguments(schema), label="arguments")
    compile_schema(schema)(arguments)  # the generator's promise: valid input
    asyncio.run(asyncio.wait_for(_outcome(name, arguments), WAIT))


async def test_analyze_dataset_answers_a_lone_surrogate_id_it_accepts() -> None:
    async with InMemoryClient(demo_tools, make_config()) as client:
        response = await client.call("analyze_dataset", {"dataset_id": "\ud800"})
    assert response.response_type == "answer"
    [summary] = response.content
    assert summary["dataset_id"] == "\ud800"
    assert summary["rows"] == 200
    assert not math.isnan(summary["mean"])
