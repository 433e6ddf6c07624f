"""What a tool reports of its progress reaches the clients of its stream.

``ctx.report_progress(p, total, message)`` becomes, in its place among the parts,
an ``event: progress`` on an MCP-lite SSE stream and a ``ToolResponse`` without
``meta`` whose result is ``{"progress", "total", "message"}`` on gRPC
``CallToolStream`` (spec 5.3: server-pushed updates).  The peers are raw sockets
and grpcio from our proto and the spec's; then the mcplite client, whose
``on_progress`` hears them.  A report never holds the tool back: the binding gets
the newest one not taken yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from conftest import BASE, WAIT, RunningServer, call_message, make_config, serve, start_server
from grpc_support import protos, to_python
from sse_client import Event, RawHttp, connect, request_bytes

from mcplite import Context, Dispatcher, Partial, ProgressUpdate, Result, Tools
from mcplite.client import Client, Response
from mcplite.client.sync import SyncClient

STEPS = 3


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool
    async def crunch(ctx: Context, steps: int = STEPS) -> AsyncIterator[str]:
        """Report each step, then yield its part."""
        for step in range(1, steps + 1):
            ctx.report_progress(step, steps, f"step {step}")
            yield f"part {step} "

    @tools.tool
    def blocking(ctx: Context) -> str:
        """A sync tool: it reports from its worker thread."""
        ctx.report_progress(1, 2, "halfway")
        return "done"

    @tools.tool
    async def quiet(ctx: Context) -> str:
        """Reports nothing."""
        return "nothing to say"

    @tools.tool
    async def flood(ctx: Context) -> AsyncIterator[str]:
        """Many reports with no pause, then one part."""
        for step in range(100):
            ctx.report_progress(step)
        yield "after the flood"

    return tools


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    running = start_server(make_tools(), make_config(heartbeat=WAIT), grpc=True)
    try:
        yield running
    finally:
        running.stop()


def sse_events(server: RunningServer, name: str, arguments: Any = None) -> list[Event]:
    """Every event of ``name`` called with ``Accept: text/event-stream`` on /calltools."""
    sock = connect(server.port, WAIT)
    try:
        body = call_message(name, arguments)
        accept = {"Accept": "text/event-stream"}
        sock.sendall(request_bytes(BASE + "/calltools", body, headers=accept))
        reader = RawHttp(sock)
        head = reader.read_head()
        assert head.status == 200
        assert (head.header("content-type") or "").startswith("text/event-stream")
        return list(reader.events(head))
    finally:
        sock.close()


def expected_steps() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for step in range(1, STEPS + 1):
        out.append(("progress", {"progress": step, "total": STEPS, "message": f"step {step}"}))
        out.append(("message", {"partial": f"part {step} "}))
    return out


# --- MCP-lite over SSE -------------------------------------------------------------


def test_each_report_is_a_progress_event_in_its_place_among_the_parts(
    server: RunningServer,
) -> None:
    events = sse_events(server, "crunch")
    assert [(e.event, e.json()) for e in events[:-1]] == expected_steps()
    assert events[-1].event == "done"
    assert events[-1].json()["_meta"]["response_type"] == "answer"


def test_a_sync_tool_reports_from_its_worker_thread_before_its_result(
    server: RunningServer,
) -> None:
    events = sse_events(server, "blocking")
    assert [e.event for e in events] == ["progress", "done"]
    assert events[0].json() == {"progress": 1, "total": 2, "message": "halfway"}
    assert events[1].json()["content"] == [{"type": "text", "text": "done"}]


def test_a_tool_that_reports_nothing_streams_as_before(server: RunningServer) -> None:
    assert [e.event for e in sse_events(server, "quiet")] == ["done"]


def test_a_flood_of_reports_not_taken_yet_is_sent_as_the_newest_alone(
    server: RunningServer,
) -> None:
    # The hundred reports came before the tool let anyone run: the newest is sent.
    events = sse_events(server, "flood")
    assert [(e.event, e.json()) for e in events[:-1]] == [
        ("progress", {"progress": 99}),
        ("message", {"partial": "after the flood"}),
    ]
    assert events[-1].event == "done"


def test_a_json_call_has_no_progress_in_its_answer(server: RunningServer) -> None:
    reply = server.call("blocking")
    assert reply["result"]["content"] == [{"type": "text", "text": "done"}]
    assert "progress" not in reply["result"]["_meta"]


# --- gRPC CallToolStream ------------------------------------------------------------


@pytest.mark.parametrize("proto", ["ours", "spec"])
def test_grpc_stream_reports_are_messages_without_meta_in_their_place(
    server: RunningServer, proto: str
) -> None:
    messages = protos()[proto]
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
        stub = messages.stub(channel)
        responses = list(stub.CallToolStream(messages.request("crunch"), timeout=WAIT))
    *steps, final = responses
    assert [r.HasField("meta") for r in steps] == [False] * (2 * STEPS)
    kinds = [("progress" if "progress" in r.result.fields else "message") for r in steps]
    received = list(zip(kinds, [to_python(r.result) for r in steps], strict=True))
    assert received == expected_steps()
    assert final.HasField("meta")
    assert final.meta.response_type == messages.enum_value("ResponseType", "ANSWER")


# --- the mcplite client ----------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "grpc"])
async def test_the_client_hands_each_report_to_on_progress_in_order(
    server: RunningServer, transport: str
) -> None:
    url = f"http://127.0.0.1:{server.port}" if transport == "http" else None
    url = url or f"grpc://127.0.0.1:{server.grpc_port}"
    seen: list[Partial | ProgressUpdate | Response] = []
    async with Client(url, timeout=WAIT) as client:
        async for item in client.stream("crunch", on_progress=seen.append):
            seen.append(item)
    expected: list[Any] = []
    for step in range(1, STEPS + 1):
        expected += [ProgressUpdate(step, STEPS, f"step {step}"), Partial(f"part {step} ")]
    assert seen[:-1] == expected
    final = seen[-1]
    assert isinstance(final, Response) and final.response_type == "answer"


def test_the_client_without_on_progress_yields_the_parts_and_the_result_as_before(
    server: RunningServer,
) -> None:
    with SyncClient(f"http://127.0.0.1:{server.port}", timeout=WAIT) as client:
        items = list(client.stream("crunch"))
        heard: list[ProgressUpdate] = []
        assert len(list(client.stream("blocking", on_progress=heard.append))) == 1
    assert [type(item) for item in items] == [Partial] * STEPS + [Response]
    assert heard == [ProgressUpdate(1, 2, "halfway")]


# --- in-process: the stream itself ----------------------------------------------------


async def test_reports_the_binding_has_not_taken_are_one_report_the_newest(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, make_tools())
    stream = dispatcher.stream("flood", progress=True)
    try:
        items = [await asyncio.wait_for(stream.next(), WAIT) for _ in range(3)]
    finally:
        await stream.aclose()
    assert items[0] == ProgressUpdate(99)
    assert items[1] == Partial("after the flood")
    assert isinstance(items[2], Result)


async def test_without_progress_asked_for_the_stream_has_parts_and_a_result_only(
    dispatchers: list[Dispatcher],
) -> None:
    dispatcher = serve(dispatchers, make_tools())
    stream = dispatcher.stream("crunch")
    items = [item async for item in stream]
    assert [type(item) for item in items] == [Partial] * STEPS + [Result]
    asked = dispatcher.stream("crunch", progress=True)
    iterated = [item async for item in asked]  # async for skips the reports
    assert [type(item) for item in iterated] == [Partial] * STEPS + [Result]
