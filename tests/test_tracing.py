"""Tracing with OpenTelemetry: a span per call, in the caller's trace, on every binding.

A server started as ``mcplite serve`` starts it gets :class:`~mcplite.tracing.Tracing`
with a tracer provider of the test's own, whose spans go to the SDK's in-memory
exporter; calls come over MCP-lite HTTP (``http.client``, a ``traceparent``
header), gRPC (grpcio built from our .proto, ``traceparent`` metadata) and MCP
2026 (``_meta.traceparent``).  Subprocesses check that nothing loads
OpenTelemetry unless tracing is asked for, and what asking without it says.
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from conftest import PROCESS_WAIT, WAIT, RunningServer, make_config, start_server
from grpc_support import protos
from http_support import mcp_tools_call
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from mcplite import Dispatcher, Failure, Tools
from mcplite.tracing import (
    BINDING,
    ERROR_TYPE,
    METHOD,
    PROMISE_EXPIRES_AT,
    PROMISE_ID,
    RESPONSE_TYPE,
    STATUS_CODE,
    TOOL_NAME,
    Tracing,
)

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331


def traceparent(trace_id: int = TRACE_ID, span_id: int = SPAN_ID) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def make_tools(provider: TracerProvider) -> Tools:
    tools = Tools()
    inner = provider.get_tracer("the-tool")

    @tools.tool(promise_after=math.inf)
    async def echo(text: str) -> str:
        return text

    @tools.tool(promise_after=math.inf)
    async def refuse() -> str:
        raise Failure("no stock", reason="out-of-stock")

    @tools.tool(promise_after=math.inf)
    async def crash() -> str:
        raise RuntimeError("a bug")

    @tools.tool(promise_after=0)  # always a promise, the tool going on in a task
    async def later(text: str) -> str:
        with inner.start_as_current_span("inside the tool"):
            return text.upper()

    @tools.tool(promise_after=math.inf)
    def in_a_thread(text: str) -> str:  # a sync tool: run in a worker thread
        with inner.start_as_current_span("inside the sync tool"):
            return text

    return tools


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()  # the test's own, not the global one
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def server(provider: TracerProvider) -> Iterator[RunningServer]:
    running = start_server(make_tools(provider), make_config(), grpc=True)
    try:
        running.call_soon(functools.partial(running.dispatcher.use, Tracing(provider)))
        yield running
    finally:
        running.stop()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """The exporter, emptied before the test."""
    exporter.clear()
    yield exporter


def only_span(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = [s for s in exporter.get_finished_spans() if s.name == name]
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def assert_child_of_caller(span: ReadableSpan, trace_id: int = TRACE_ID) -> None:
    assert span.context is not None and span.parent is not None
    assert span.context.trace_id == trace_id
    assert (span.parent.trace_id, span.parent.span_id) == (trace_id, SPAN_ID)
    assert span.parent.is_remote


def post_call(
    server: RunningServer, name: str, arguments: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    message["params"] = {"name": name, "arguments": arguments}
    status, _, body = server.post("/rpc", message, headers)
    reply: dict[str, Any] = json.loads(body)
    assert status in (200, 404, 500), (status, reply)
    return reply


def mcp_call(
    server: RunningServer, name: str, arguments: dict[str, Any], meta: dict[str, Any], header: str
) -> dict[str, Any]:
    """tools/call over MCP 2026-07-28 with ``http.client``, ``meta`` added to its
    ``_meta`` and ``header`` sent as its ``traceparent`` header."""
    status, reply = mcp_tools_call(
        server,
        name,
        arguments,
        meta=meta,
        headers={"Accept": "application/json", "traceparent": header},
    )
    assert status == 200, reply
    return reply


def test_an_http_call_is_a_server_span_in_the_caller_s_trace(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    reply = post_call(server, "echo", {"text": "hi"}, {"traceparent": traceparent()})
    assert reply["result"]["content"] == [{"type": "text", "text": "hi"}]
    span = only_span(spans, "tools/call echo")
    assert span.kind is SpanKind.SERVER
    assert_child_of_caller(span)
    assert dict(span.attributes or {}) == {
        METHOD: "tools/call",
        TOOL_NAME: "echo",
        BINDING: "http",
        RESPONSE_TYPE: "answer",
    }
    assert span.status.status_code is StatusCode.UNSET


def test_a_grpc_call_takes_its_trace_from_the_metadata(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    spec = protos()["ours"]
    target = f"127.0.0.1:{server.grpc_port}"
    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        spec.stub(channel).CallTool(
            spec.request("echo", {"text": "hi"}),
            timeout=WAIT,
            metadata=[("traceparent", traceparent())],
        )
    span = only_span(spans, "tools/call echo")
    assert_child_of_caller(span)
    assert (span.attributes or {})[BINDING] == "grpc"


def test_an_mcp_call_takes_its_trace_from_meta_before_the_headers(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    other = traceparent(0x1234, 0x5678)  # the header's: _meta wins
    meta = {"traceparent": traceparent(), "tracestate": "vendor=value"}
    reply = mcp_call(server, "echo", {"text": "hi"}, meta, other)
    assert reply["result"]["content"] == [{"type": "text", "text": "hi"}]
    span = only_span(spans, "tools/call echo")
    assert_child_of_caller(span)
    assert span.context is not None and span.context.trace_state.get("vendor") == "value"
    assert (span.attributes or {})[BINDING] == "mcp"


def test_an_mcp_call_without_meta_traceparent_takes_the_header(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    mcp_call(server, "echo", {"text": "hi"}, {}, traceparent())
    assert_child_of_caller(only_span(spans, "tools/call echo"))


def test_a_business_failure_is_not_a_span_error_but_a_protocol_error_is(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    reply = post_call(server, "refuse", {}, {})
    assert reply["result"]["isError"] is True
    failed = only_span(spans, "tools/call refuse")
    assert (failed.attributes or {})[RESPONSE_TYPE] == "failure"
    assert failed.status.status_code is StatusCode.UNSET

    reply = post_call(server, "crash", {}, {})
    assert reply["error"]["code"] == -32603
    crashed = only_span(spans, "tools/call crash")
    assert crashed.status.status_code is StatusCode.ERROR
    attributes = dict(crashed.attributes or {})
    assert (attributes[STATUS_CODE], attributes[ERROR_TYPE]) == ("-32603", "-32603")
    assert RESPONSE_TYPE not in attributes


def test_calls_refused_before_the_chain_get_no_span(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    assert post_call(server, "nope", {}, {})["error"]["code"] == -32601  # unknown tool
    assert post_call(server, "echo", {"text": 3}, {})["error"]["code"] == -32602  # invalid
    assert spans.get_finished_spans() == ()


def test_a_redeem_links_to_the_call_that_made_the_promise(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    reply = post_call(server, "later", {"text": "hi"}, {"traceparent": traceparent()})
    meta = reply["result"]["_meta"]
    assert meta["response_type"] == "promise"
    token = meta["promise_token"]
    first = only_span(spans, "tools/call later")
    assert_child_of_caller(first)
    attributes = dict(first.attributes or {})
    assert attributes[RESPONSE_TYPE] == "promise"
    assert attributes[PROMISE_EXPIRES_AT] == meta["expires_at"]
    assert isinstance(attributes[PROMISE_ID], str) and len(attributes[PROMISE_ID]) == 32
    assert token not in json.dumps(attributes)  # a bearer secret stays out of traces

    other_caller = traceparent(0x77, 0x88)
    redeemed = post_call(
        server, "redeem", {"promise": token, "wait": WAIT}, {"traceparent": other_caller}
    )
    assert redeemed["result"]["content"] == [{"type": "text", "text": "HI"}]
    redeem = only_span(spans, "tools/call redeem")
    assert redeem.context is not None and redeem.context.trace_id == 0x77
    assert first.context is not None
    assert [link.context for link in redeem.links] == [first.context]
    assert (redeem.attributes or {})[PROMISE_ID] == attributes[PROMISE_ID]

    # The tool went on in a task after the promise: its own span is in the caller's trace.
    inside = only_span(spans, "inside the tool")
    assert inside.context is not None and inside.context.trace_id == TRACE_ID
    assert inside.parent is not None and inside.parent.span_id == first.context.span_id


async def test_in_process_a_call_is_a_child_of_the_current_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dispatcher = Dispatcher(make_tools(provider), middleware=[Tracing(provider)])
    try:
        with provider.get_tracer("test").start_as_current_span("caller") as caller:
            await dispatcher.call("echo", {"text": "hi"})
        span = only_span(exporter, "tools/call echo")
        assert span.parent is not None
        assert span.parent.span_id == caller.get_span_context().span_id
        assert (span.attributes or {})[BINDING] == "in-process"
    finally:
        await dispatcher.close()
        provider.shutdown()


async def test_a_sync_tools_own_span_is_a_child_of_the_calls_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dispatcher = Dispatcher(make_tools(provider), middleware=[Tracing(provider)])
    try:
        await dispatcher.call("in_a_thread", {"text": "hi"})
        call = only_span(exporter, "tools/call in_a_thread")
        inside = only_span(exporter, "inside the sync tool")
        assert inside.parent is not None and inside.parent.span_id == call.context.span_id
    finally:
        await dispatcher.close()
        provider.shutdown()


async def test_only_the_newest_promises_are_kept_for_links() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dispatcher = Dispatcher(make_tools(provider), middleware=[Tracing(provider, max_promises=1)])
    try:
        first = await dispatcher.call("later", {"text": "a"})
        second = await dispatcher.call("later", {"text": "b"})
        for result in (first, second):
            token = result.extra_meta["promise_token"]
            await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
        redeems = [s for s in exporter.get_finished_spans() if s.name == "tools/call redeem"]
        assert [len(s.links) for s in redeems] == [0, 1]  # the first was forgotten
    finally:
        await dispatcher.close()
        provider.shutdown()


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
    )


def test_serving_without_tracing_never_loads_opentelemetry() -> None:
    done = run_python(
        """
        import asyncio, sys
        import mcplite, mcplite.ops.serve, mcplite.ops.cli
        from mcplite.demo import tools
        from mcplite.testing import connect

        async def main():
            for binding in ("http", "grpc"):
                async with connect(tools, binding=binding, timeout=10) as client:
                    await client.call("echo", {"text": "hi"})

        asyncio.run(main())
        print(sorted(m for m in sys.modules if m.partition(".")[0] == "opentelemetry"))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_tracing_without_opentelemetry_says_what_to_install() -> None:
    done = run_python(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if it were not installed
        import mcplite
        try:
            from mcplite.tracing import Tracing
        except ImportError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'mcplite[otel]'" in done.stdout
