"""Tests for mcplite.core.dispatch: lookup, validation, the runner, streams, overload."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pytest
from conftest import make_config, serve

from mcplite import (
    NEVER,
    Answer,
    Context,
    Dispatcher,
    Elicitation,
    Failure,
    Field,
    InternalError,
    InvalidParams,
    MCPLiteError,
    Overloaded,
    Partial,
    ResponseType,
    Result,
    ToolNotFound,
    Tools,
    ToolStream,
)
from mcplite.core.dispatch import aggregate
from mcplite.core.envelope import to_result
from mcplite.core.outcomes import Promised

WAIT = 5.0  # upper bound of every wait in this file


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def result_body(outcome: Any) -> dict[str, Any]:
    return to_result(outcome, 0.0, 0.0).body


def other_tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}


async def collect(stream: ToolStream) -> list[Partial | Result]:
    async def drain() -> list[Partial | Result]:
        return [item async for item in stream]

    return await asyncio.wait_for(drain(), WAIT)


def demo_like_tools() -> Tools:
    tools = Tools()

    @tools.tool(type="query")
    async def search_documents(
        query: str, limit: Annotated[int, Field(ge=1, le=100)] = 10
    ) -> dict[str, Any]:
        """Search."""
        return {"query": query, "limit": limit}

    @tools.tool(type="analysis")
    async def analyze_dataset(dataset_id: str) -> str:
        """Analyse."""
        return dataset_id

    return tools


# --- call(): lookup and validation ------------------------------------------------------


async def test_a_call_runs_the_tool_and_wraps_its_value_in_an_answer(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def greet(name: str) -> str:
        return f"hello {name}"

    dispatcher = serve(dispatchers, tools)
    before = time.time()
    result = await dispatcher.call("greet", {"name": "ada"})
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": [text("hello ada")]}
    assert before <= result.timestamp <= time.time()
    assert result.processing_time_ms >= 0
    assert dispatcher.active == 0


async def test_none_arguments_mean_no_arguments(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()

    @tools.tool
    async def ping() -> str:
        return "pong"

    dispatcher = serve(dispatchers, tools)
    assert (await dispatcher.call("ping", None)).body == {"content": [text("pong")]}
    assert (await dispatcher.call("ping")).body == {"content": [text("pong")]}


async def test_an_unknown_tool_raises_tool_not_found_with_names_and_a_suggestion(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, demo_like_tools())
    with pytest.raises(ToolNotFound) as caught:
        await dispatcher.call("serch_documents", {"query": "x"})
    error = caught.value
    assert error.jsonrpc_code == -32601
    assert error.grpc_status == 5
    assert error.message == "Tool not found"
    assert error.data == {
        "requested_tool": "serch_documents",
        "available_tools": ["redeem", "cancel", "search_documents", "analyze_dataset"],
        "suggestion": "Did you mean 'search_documents'?",
    }
    assert error.to_jsonrpc()["data"] == error.data


async def test_an_unknown_tool_far_from_every_name_gets_no_suggestion(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, demo_like_tools())
    with pytest.raises(ToolNotFound) as caught:
        await dispatcher.call("zzz", {})
    assert caught.value.data is not None
    assert caught.value.data["requested_tool"] == "zzz"
    assert "suggestion" not in caught.value.data


async def test_a_tool_name_that_is_part_of_the_request_is_suggested(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, demo_like_tools())
    with pytest.raises(ToolNotFound) as caught:
        await dispatcher.call("analyze_dataset_v2", {})
    assert caught.value.data is not None
    assert caught.value.data["suggestion"] == "Did you mean 'analyze_dataset'?"


async def test_invalid_arguments_raise_invalid_params_naming_every_field(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    ran: list[bool] = []

    @tools.tool
    async def search(
        query: str,
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        tags: list[str] | None = None,
    ) -> str:
        ran.append(True)
        return query

    dispatcher = serve(dispatchers, tools)
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("search", {"limit": 500, "tags": ["ok", 7], "extra": 1})
    error = caught.value
    assert error.jsonrpc_code == -32602
    assert error.grpc_status == 3
    assert error.data is not None
    errors = {e["field"]: e["message"] for e in error.data["errors"]}
    assert set(errors) == {"query", "limit", "tags[1]", "extra"}
    assert "500" in errors["limit"] and "100" in errors["limit"]
    for name in ("query", "limit", "tags[1]", "extra"):
        assert name in error.message
    assert ran == []
    assert dispatcher.active == 0


@pytest.mark.parametrize("arguments", [[1, 2], "query", 3])
async def test_arguments_that_are_not_an_object_raise_invalid_params(
    dispatchers: list[Dispatcher], arguments: Any
) -> None:
    dispatcher = serve(dispatchers, demo_like_tools())
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("search_documents", arguments)
    assert caught.value.data == {
        "errors": [{"field": "arguments", "message": "expected an object"}]
    }


async def test_defaults_from_the_schema_are_filled_in(dispatchers: list[Dispatcher]) -> None:
    dispatcher = serve(dispatchers, demo_like_tools())
    tool = dispatcher.tool("search_documents")
    assert dispatcher.validate(tool, {"query": "mcp"}) == {"query": "mcp", "limit": 10}
    result = await dispatcher.call("search_documents", {"query": "mcp"})
    assert result.body == {"content": [{"query": "mcp", "limit": 10}]}


async def test_validation_does_not_change_the_callers_arguments(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, demo_like_tools())
    arguments = {"query": "mcp"}
    await dispatcher.call("search_documents", arguments)
    assert arguments == {"query": "mcp"}


def test_a_user_tool_named_like_a_system_tool_is_refused() -> None:
    tools = Tools()

    @tools.tool
    async def redeem(promise: str) -> str:
        return promise

    with pytest.raises(ValueError, match="redeem"):
        Dispatcher(tools, make_config())


def test_tool_definitions_list_redeem_and_cancel_as_system_tools_first(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, demo_like_tools())
    definitions = dispatcher.tool_definitions()
    assert [d["name"] for d in definitions] == [
        "redeem",
        "cancel",
        "search_documents",
        "analyze_dataset",
    ]
    redeem, cancel = definitions[0], definitions[1]
    assert redeem["@type"] == "system"
    assert redeem["inputSchema"]["required"] == ["promise"]
    assert redeem["inputSchema"]["properties"]["promise"]["type"] == "string"
    assert cancel["@type"] == "system"
    assert cancel["inputSchema"]["required"] == ["promise"]
    assert dispatcher.tool_definitions() is definitions  # built once


# --- the runner --------------------------------------------------------------------------


async def test_a_sync_tool_runs_in_a_worker_thread_not_on_the_loop(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    def where() -> int:
        return threading.get_ident()

    dispatcher = serve(dispatchers, tools)
    result = await dispatcher.call("where", {})
    [item] = result.body["content"]
    assert int(item["text"]) != threading.get_ident()


async def test_a_blocking_sync_tool_does_not_stall_the_loop(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    released = threading.Event()

    @tools.tool(promise_after=NEVER)
    def blocking() -> bool:
        # Released by a coroutine on the loop: only possible if the loop is free.
        return released.wait(WAIT)

    async def release() -> None:
        released.set()

    dispatcher = serve(dispatchers, tools)
    result, _ = await asyncio.wait_for(
        asyncio.gather(dispatcher.call("blocking", {}), release()), WAIT * 2
    )
    assert result.body == {"content": [text("true")]}


async def test_an_exception_in_a_tool_becomes_internal_error_with_an_id_that_is_logged(
    dispatchers: list[Dispatcher], caplog: pytest.LogCaptureFixture
) -> None:
    tools = Tools()

    @tools.tool
    async def crash() -> str:
        raise RuntimeError("database password is hunter2")

    dispatcher = serve(dispatchers, tools)
    with caplog.at_level(logging.ERROR, logger="mcplite"), pytest.raises(InternalError) as caught:
        await dispatcher.call("crash", {})
    error = caught.value
    assert error.jsonrpc_code == -32603
    assert error.grpc_status == 13
    assert error.data is not None
    error_id = error.data["error_id"]
    assert isinstance(error_id, str) and error_id
    assert error_id in error.message
    assert "hunter2" not in error.message and "hunter2" not in str(error.data)
    records = [r for r in caplog.records if error_id in r.getMessage()]
    assert len(records) == 1
    assert records[0].name == "mcplite"
    assert records[0].exc_info is not None
    assert "hunter2" in str(records[0].exc_info[1])
    assert dispatcher.active == 0


async def test_an_exception_in_a_sync_tool_becomes_internal_error_too(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    def crash() -> str:
        raise KeyError("missing")

    dispatcher = serve(dispatchers, tools)
    with pytest.raises(InternalError) as caught:
        await dispatcher.call("crash", {})
    assert caught.value.data is not None and caught.value.data["error_id"]


async def test_two_crashes_get_different_error_ids(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()

    @tools.tool
    async def crash() -> str:
        raise RuntimeError("boom")

    dispatcher = serve(dispatchers, tools)
    ids = set()
    for _ in range(2):
        with pytest.raises(InternalError) as caught:
            await dispatcher.call("crash", {})
        assert caught.value.data is not None
        ids.add(caught.value.data["error_id"])
    assert len(ids) == 2


async def test_a_protocol_error_raised_by_a_tool_passes_through_unchanged(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    own = InvalidParams.from_fields([("when", "must be in the future")])

    @tools.tool
    async def book(when: str) -> str:
        raise own

    dispatcher = serve(dispatchers, tools)
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("book", {"when": "yesterday"})
    assert caught.value is own


async def test_a_raised_failure_becomes_a_failure_result(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()

    @tools.tool
    async def buy(item: str) -> str:
        raise Failure(f"{item} is out of stock", reason="out_of_stock", retryable=True)

    @tools.tool
    def buy_sync(item: str) -> str:
        raise Failure(f"{item} is out of stock", reason="out_of_stock", retryable=True)

    dispatcher = serve(dispatchers, tools)
    for name in ("buy", "buy_sync"):
        result = await dispatcher.call(name, {"item": "tea"})
        assert result.response_type is ResponseType.FAILURE
        assert result.body == {
            "content": [text("tea is out of stock")],
            "isError": True,
            "failure": {
                "message": "tea is out of stock",
                "retryable": True,
                "reason": "out_of_stock",
            },
        }


async def test_a_returned_failure_becomes_a_failure_result(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()

    @tools.tool
    async def buy(item: str) -> str | Failure:
        return Failure(f"{item} is out of stock")

    dispatcher = serve(dispatchers, tools)
    result = await dispatcher.call("buy", {"item": "tea"})
    assert result.response_type is ResponseType.FAILURE
    assert result.body["isError"] is True
    assert result.to_json()["_meta"]["response_type"] == "failure"


async def test_a_returned_elicitation_becomes_an_elicitation_result(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def book(city: str | None = None) -> str | Elicitation:
        if city is None:
            return Elicitation("Which city?", {"type": "object"})
        return city

    dispatcher = serve(dispatchers, tools)
    result = await dispatcher.call("book", {})
    assert result.response_type is ResponseType.ELICITATION
    assert result.body["elicitation"]["message"] == "Which city?"


async def test_a_call_beyond_max_concurrent_calls_is_refused_with_overloaded(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    started = asyncio.Event()
    release = asyncio.Event()

    @tools.tool(promise_after=NEVER)
    async def hold() -> str:
        started.set()
        await release.wait()
        return "held"

    @tools.tool
    async def quick() -> str:
        return "quick"

    dispatcher = serve(dispatchers, tools, max_concurrent_calls=1, retry_after=2.5)
    first = asyncio.create_task(dispatcher.call("hold", {}))
    try:
        await asyncio.wait_for(started.wait(), WAIT)
        assert dispatcher.active == 1
        with pytest.raises(Overloaded) as caught:
            await dispatcher.call("quick", {})
        error = caught.value
        assert error.jsonrpc_code == -32000
        assert error.grpc_status == 8
        assert error.data == {"retry_after": 2.5}
        with pytest.raises(Overloaded):
            dispatcher.stream("quick", {})
        release.set()
        result = await asyncio.wait_for(first, WAIT)
    finally:
        first.cancel()
    assert result.body == {"content": [text("held")]}
    assert dispatcher.active == 0
    assert (await dispatcher.call("quick", {})).body == {"content": [text("quick")]}


async def test_a_cancelled_caller_cancels_the_running_tool(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def body() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    tools.add(body, name="under_deadline")  # the server default: 5 s before a promise
    tools.add(body, name="never_promised", promise_after=NEVER)

    dispatcher = serve(dispatchers, tools)
    for name in ("under_deadline", "never_promised"):
        started.clear()
        cancelled.clear()
        caller = asyncio.create_task(dispatcher.call(name, {}))
        await asyncio.wait_for(started.wait(), WAIT)
        caller.cancel()
        await asyncio.wait_for(cancelled.wait(), WAIT)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(caller, WAIT)
        assert dispatcher.active == 0
        await asyncio.wait_for(asyncio.gather(*other_tasks()), WAIT)
        assert other_tasks() == set()
        assert len(dispatcher.promises) == 0  # type: ignore[arg-type]


# --- streams -----------------------------------------------------------------------------


async def test_a_stream_yields_each_part_then_one_final_result(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def words(n: int) -> AsyncIterator[str]:
        for i in range(n):
            yield f"w{i} "

    dispatcher = serve(dispatchers, tools)
    stream = dispatcher.stream("words", {"n": 3})
    items = await collect(stream)
    assert items[:3] == [Partial("w0 "), Partial("w1 "), Partial("w2 ")]
    assert len(items) == 4
    final = items[3]
    assert isinstance(final, Result)
    assert final.response_type is ResponseType.ANSWER
    assert final.body == {"content": [text("w0 w1 w2 ")]}
    with pytest.raises(StopAsyncIteration):
        await stream.next()
    assert dispatcher.active == 0


async def test_stream_next_returns_none_when_nothing_comes_in_time_and_loses_nothing(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    go = asyncio.Event()

    @tools.tool
    async def slow_part() -> AsyncIterator[str]:
        await go.wait()
        yield "late"

    dispatcher = serve(dispatchers, tools)
    stream = dispatcher.stream("slow_part", {})
    assert await stream.next(timeout=0.01) is None
    go.set()
    assert await stream.next(timeout=WAIT) == Partial("late")
    final = await stream.next(timeout=WAIT)
    assert isinstance(final, Result)
    assert final.body == {"content": [text("late")]}


async def test_stream_errors_for_lookup_and_validation_come_before_anything_runs(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    ran: list[bool] = []

    @tools.tool
    async def parts(n: int) -> AsyncIterator[int]:
        ran.append(True)
        yield n

    dispatcher = serve(dispatchers, tools)
    with pytest.raises(ToolNotFound):
        dispatcher.stream("partz", {"n": 1})
    with pytest.raises(InvalidParams):
        dispatcher.stream("parts", {"n": "one"})
    assert ran == []
    assert dispatcher.active == 0
    assert other_tasks() == set()


@pytest.mark.parametrize(
    ("outcome", "response_type"),
    [
        (Failure("ran out of paper", reason="paper"), ResponseType.FAILURE),
        (Elicitation("Which format?", {"type": "object"}), ResponseType.ELICITATION),
        (Answer([{"type": "text", "text": "the real answer"}]), ResponseType.ANSWER),
    ],
)
async def test_an_outcome_yielded_by_a_generator_ends_the_stream_as_the_final_result(
    dispatchers: list[Dispatcher], outcome: Any, response_type: ResponseType
) -> None:
    tools = Tools()
    after_outcome: list[bool] = []
    closed = asyncio.Event()

    @tools.tool
    async def report() -> AsyncIterator[Any]:
        try:
            yield "part one"
            yield outcome
            after_outcome.append(True)
            yield "never sent"
        finally:
            closed.set()

    dispatcher = serve(dispatchers, tools)
    items = await collect(dispatcher.stream("report", {}))
    assert items[0] == Partial("part one")
    assert len(items) == 2
    final = items[1]
    assert isinstance(final, Result)
    assert final.response_type is response_type
    assert final.body == result_body(outcome)
    assert after_outcome == []
    assert closed.is_set()


async def test_a_failure_raised_mid_stream_ends_it_with_a_failure_result(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def report() -> AsyncIterator[str]:
        yield "intro"
        raise Failure("source unavailable", reason="source")

    dispatcher = serve(dispatchers, tools)
    items = await collect(dispatcher.stream("report", {}))
    assert items[0] == Partial("intro")
    final = items[1]
    assert isinstance(final, Result)
    assert final.response_type is ResponseType.FAILURE
    assert final.body["failure"]["reason"] == "source"


def test_aggregate_joins_all_string_parts_and_lists_any_other_parts() -> None:
    assert aggregate(["Quarterly ", "Report"]) == "Quarterly Report"
    assert aggregate(["one"]) == "one"
    assert aggregate([{"a": 1}, {"b": 2}]) == [{"a": 1}, {"b": 2}]
    assert aggregate(["text", {"b": 2}]) == ["text", {"b": 2}]
    assert aggregate([1, 2]) == [1, 2]


async def test_a_stream_of_objects_ends_with_the_list_of_them(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def rows() -> AsyncIterator[dict[str, int]]:
        yield {"row": 1}
        yield {"row": 2}

    dispatcher = serve(dispatchers, tools)
    items = await collect(dispatcher.stream("rows", {}))
    final = items[-1]
    assert isinstance(final, Result)
    assert final.body == {"content": [{"row": 1}, {"row": 2}]}


async def test_a_plain_tool_streamed_gives_exactly_one_final_result(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def plain(x: int) -> dict[str, int]:
        return {"x": x}

    @tools.tool
    def plain_sync(x: int) -> str:
        return str(x)

    dispatcher = serve(dispatchers, tools)
    items = await collect(dispatcher.stream("plain", {"x": 1}))
    assert len(items) == 1
    assert isinstance(items[0], Result)
    assert items[0].body == {"content": [{"x": 1}]}
    items = await collect(dispatcher.stream("plain_sync", {"x": 2}))
    assert len(items) == 1
    assert isinstance(items[0], Result)
    assert items[0].body == {"content": [text("2")]}


async def test_a_plain_tool_that_crashes_when_streamed_raises_internal_error(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def crash() -> str:
        raise RuntimeError("boom")

    dispatcher = serve(dispatchers, tools)
    stream = dispatcher.stream("crash", {})
    with pytest.raises(InternalError):
        await asyncio.wait_for(stream.next(), WAIT)


async def test_an_exception_mid_stream_raises_an_mcplite_error_from_next(
    dispatchers: list[Dispatcher], caplog: pytest.LogCaptureFixture
) -> None:
    tools = Tools()

    @tools.tool
    async def flaky() -> AsyncIterator[str]:
        yield "first"
        raise ValueError("disk on fire")

    dispatcher = serve(dispatchers, tools)
    stream = dispatcher.stream("flaky", {})
    with caplog.at_level(logging.ERROR, logger="mcplite"):
        assert await asyncio.wait_for(stream.next(), WAIT) == Partial("first")
        with pytest.raises(MCPLiteError) as caught:
            await asyncio.wait_for(stream.next(), WAIT)
    error = caught.value
    assert isinstance(error, InternalError)
    assert error.data is not None
    assert "disk on fire" not in error.message
    assert any(error.data["error_id"] in r.getMessage() for r in caplog.records)
    with pytest.raises(StopAsyncIteration):
        await stream.next()


async def test_aclose_runs_the_generators_finally_and_leaves_no_task(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    finished = asyncio.Event()
    waiting = asyncio.Event()

    @tools.tool
    async def endless() -> AsyncIterator[str]:
        try:
            yield "tick"
            waiting.set()
            await asyncio.Event().wait()
            yield "never"
        finally:
            finished.set()

    dispatcher = serve(dispatchers, tools)
    stream = dispatcher.stream("endless", {})
    assert await asyncio.wait_for(stream.next(), WAIT) == Partial("tick")
    await asyncio.wait_for(waiting.wait(), WAIT)
    await asyncio.wait_for(stream.aclose(), WAIT)
    assert finished.is_set()
    assert other_tasks() == set()
    assert dispatcher.active == 0
    with pytest.raises(StopAsyncIteration):
        await stream.next()


async def test_aclose_of_a_stream_nobody_reads_stops_the_generator_at_its_yield(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    finished = asyncio.Event()
    second = asyncio.Event()
    produced: list[int] = []

    @tools.tool
    async def firehose() -> AsyncIterator[int]:
        try:
            for i in range(1_000_000):
                produced.append(i)
                if i == 1:
                    second.set()  # the first part fills the queue; this one waits
                yield i
        finally:
            finished.set()

    dispatcher = serve(dispatchers, tools)
    stream = dispatcher.stream("firehose", {})
    await asyncio.wait_for(second.wait(), WAIT)
    await stream.aclose()
    assert finished.is_set()
    assert len(produced) <= 2  # back pressure: a queue of one, nobody reading
    assert other_tasks() == set()
    assert dispatcher.active == 0


async def test_a_streaming_tool_called_with_call_aggregates_its_parts(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    closed = asyncio.Event()

    @tools.tool
    async def words() -> AsyncIterator[str]:
        try:
            yield "Quarterly "
            yield "Report"
        finally:
            closed.set()

    @tools.tool
    async def rows() -> AsyncIterator[dict[str, int]]:
        yield {"row": 1}
        yield {"row": 2}

    @tools.tool
    async def refuses() -> AsyncIterator[Any]:
        yield "partial work"
        yield Failure("quota exceeded", reason="quota")

    dispatcher = serve(dispatchers, tools)
    assert (await dispatcher.call("words", {})).body == {"content": [text("Quarterly Report")]}
    assert closed.is_set()
    assert (await dispatcher.call("rows", {})).body == {"content": [{"row": 1}, {"row": 2}]}
    refused = await dispatcher.call("refuses", {})
    assert refused.response_type is ResponseType.FAILURE
    assert refused.body["failure"]["reason"] == "quota"


async def test_a_streaming_tool_that_crashes_under_call_raises_internal_error(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def flaky() -> AsyncIterator[str]:
        yield "first"
        raise ValueError("nope")

    dispatcher = serve(dispatchers, tools)
    with pytest.raises(InternalError):
        await dispatcher.call("flaky", {})


async def test_a_stream_gives_a_context_tool_its_context(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()

    @tools.tool
    async def progress(ctx: Context) -> AsyncIterator[str]:
        ctx.report_progress(1, 2, "half")
        yield ctx.tool

    dispatcher = serve(dispatchers, tools)
    items = await collect(dispatcher.stream("progress", {}))
    assert items[0] == Partial("progress")


async def test_an_infinite_promise_after_in_config_is_accepted(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def ok() -> str:
        return "ok"

    dispatcher = serve(dispatchers, tools, promise_after=math.inf)
    assert (await dispatcher.call("ok", {})).response_type is ResponseType.ANSWER


async def cancelled_inside() -> str:
    """Awaits a future that someone else cancelled: a CancelledError the call did not ask for."""
    orphan = asyncio.get_running_loop().create_future()
    orphan.cancel()
    await orphan
    return "never"


async def test_a_cancelled_error_from_inside_a_tool_nobody_cancelled_is_an_internal_error(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    tools.add(cancelled_inside, name="under_deadline")
    tools.add(cancelled_inside, name="never_promised", promise_after=NEVER)
    dispatcher = serve(dispatchers, tools)
    for name in ("under_deadline", "never_promised"):
        # The caller was not cancelled: a CancelledError escaping call() would make a
        # binding drop the request with no answer (over HTTP the client hangs).
        with pytest.raises(InternalError):
            await asyncio.wait_for(dispatcher.call(name, {}), WAIT)
        current = asyncio.current_task()
        assert current is not None and current.cancelling() == 0


async def test_a_promised_tool_that_fails_unexpectedly_redeems_as_one_logged_internal_error(
    dispatchers: list[Dispatcher], caplog: pytest.LogCaptureFixture
) -> None:
    # A promised call's task runs the tool's own coroutine: the exception ladder is
    # applied to the finished task, for an exception and for a stray CancelledError.
    tools = Tools()
    release = asyncio.Event()

    @tools.tool(promise_after=0)
    async def crash_later() -> str:
        await release.wait()
        raise RuntimeError("after the promise")

    @tools.tool(promise_after=0)
    async def cancelled_later() -> str:
        await release.wait()
        return await cancelled_inside()

    dispatcher = serve(dispatchers, tools)
    with caplog.at_level(logging.ERROR, logger="mcplite"):
        tokens = {}
        for name in ("crash_later", "cancelled_later"):
            promised = (await dispatcher.call(name, {})).outcome
            assert isinstance(promised, Promised)
            tokens[name] = promised.token
        assert dispatcher.pending_promises == 2
        release.set()
        for name, token in tokens.items():
            with pytest.raises(InternalError) as first:
                await dispatcher.redeem(token, wait=WAIT)
            with pytest.raises(InternalError) as again:
                await dispatcher.redeem(token)
            assert first.value.data is not None and again.value.data is not None
            error_id = first.value.data["error_id"]
            assert again.value.data["error_id"] == error_id, name
            logged = [r for r in caplog.records if error_id in r.getMessage()]
            assert len(logged) == 1, name


async def test_a_cancelled_error_from_inside_a_streaming_tool_ends_the_stream_with_an_error(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def parts() -> AsyncIterator[str]:
        yield "first"
        await cancelled_inside()
        yield "never"

    tools.add(cancelled_inside, name="plain")
    dispatcher = serve(dispatchers, tools)
    stream = dispatcher.stream("parts", {})
    assert await stream.next(timeout=WAIT) == Partial("first")
    # Not None (a timeout, as if the tool were still working): the tool is over.
    with pytest.raises(InternalError):
        await stream.next(timeout=WAIT)
    stream = dispatcher.stream("plain", {})
    with pytest.raises(InternalError):
        await stream.next(timeout=WAIT)


def test_a_dispatcher_also_takes_a_plain_list_of_tools(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()

    @tools.tool
    async def one() -> int:
        return 1

    dispatcher = Dispatcher(list(tools), make_config())
    dispatchers.append(dispatcher)
    assert [d["name"] for d in dispatcher.tool_definitions()] == ["redeem", "cancel", "one"]


# --- system tools as streams ---------------------------------------------------------


async def test_redeem_asked_for_as_a_stream_answers_instead_of_hanging() -> None:
    # A client that takes only SSE gets redeem as a stream: the system tool must
    # get its caller's context there too (it hung, its task dead, before).
    dispatcher = Dispatcher(demo_like_tools(), make_config(promise_after=0))
    call = await dispatcher.call("analyze_dataset", {"dataset_id": "d"})
    assert isinstance(call.outcome, Promised)
    token = call.outcome.token
    items = await collect(dispatcher.stream("redeem", {"promise": token, "wait": 1}))
    assert isinstance(items[-1], Result)
    assert items[-1].response_type.value == "answer"
    with pytest.raises(MCPLiteError, match="invalid promise token"):
        await collect(dispatcher.stream("redeem", {"promise": "prom_" + "x" * 76}))
    await dispatcher.close()
