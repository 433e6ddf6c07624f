"""Streaming over SSE (spec 4.3, A.4): framing, event order, heartbeats, errors,
cancellation on disconnect and backpressure against a slow reader.

The stream is read byte by byte from a raw socket with the parser in
``sse_client.py``, and once with the stdlib ``http.client``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import (
    BASE,
    WAIT,
    RunningServer,
    StartServer,
    call_message,
    notification,
    server_factory,
)
from http_support import JSON_HEADERS, RECV, SSE_HEADERS, open_stream, stream_request
from sse_client import Event, RawHttp, connect, parse_events

from mcplite import Failure, Tools
from mcplite.bindings.http import sse

ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
STREAM_ID = "stream-001"
PART = "x" * 65536
MULTILINE = 'line one\nline two\r\nline three\rend \u2028 "quoted"\t\\ \x85 \u00e9'


@dataclass
class Probe:
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # set on the server loop
    never: asyncio.Event = field(default_factory=asyncio.Event)
    closed: threading.Event = field(default_factory=threading.Event)  # a generator's finally ran
    cond: threading.Condition = field(default_factory=threading.Condition)
    yielded: int = 0


def make_tools(probe: Probe) -> Tools:
    tools = Tools()

    @tools.tool(promise_after=math.inf)
    async def quiet() -> AsyncIterator[str]:
        """Yield, fall silent until the test opens the gate, yield again."""
        yield "before"
        await probe.gate.wait()
        yield "after"

    @tools.tool(promise_after=math.inf)
    async def multiline() -> AsyncIterator[str]:
        """Parts with line breaks and other awkward characters."""
        yield MULTILINE
        yield "\n"
        yield ""

    @tools.tool(promise_after=math.inf)
    async def explode() -> AsyncIterator[str]:
        """Fail after the first part."""
        yield "partial"
        raise RuntimeError("secret stack detail")

    @tools.tool(promise_after=math.inf)
    async def plain(text: str = "just one") -> str:
        """Not a generator."""
        return text

    @tools.tool(promise_after=math.inf)
    async def records() -> AsyncIterator[dict[str, int]]:
        """Structured parts."""
        yield {"n": 1}
        yield {"n": 2}

    @tools.tool(promise_after=math.inf)
    async def gives_up() -> AsyncIterator[Any]:
        """A part, then a business failure as the outcome."""
        yield "looking"
        yield Failure("nothing found", reason="empty")

    @tools.tool(promise_after=math.inf)
    async def bad_part() -> AsyncIterator[Any]:
        """A part JSON cannot hold."""
        yield "fine"
        yield {"ratio": math.nan}

    @tools.tool(promise_after=math.inf)
    async def hang() -> AsyncIterator[str]:
        """One part, then silence forever; records that its finally ran."""
        try:
            yield "tick"
            await probe.never.wait()
            yield "unreachable"
        finally:
            probe.closed.set()

    @tools.tool(promise_after=math.inf)
    async def firehose() -> AsyncIterator[str]:
        """64 KiB parts forever, counted."""
        try:
            while True:
                with probe.cond:
                    probe.yielded += 1
                    probe.cond.notify_all()
                yield PART
        finally:
            probe.closed.set()

    return tools


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def serve(probe: Probe) -> Iterator[StartServer]:
    """``serve(**config)`` starts a server of the test tools; all stop at teardown."""
    with server_factory(lambda: make_tools(probe)) as start:
        yield start


def read_stream(server: RunningServer, name: str, arguments: Any = None) -> list[Event]:
    sock, reader, head = open_stream(server, name, arguments)
    with sock:
        assert head.status == 200
        assert (head.header("content-type") or "").startswith("text/event-stream")
        try:
            return list(reader.events(head))
        except EOFError as exc:
            pytest.fail(f"the stream was cut off instead of ending: {exc}")


def assert_done_meta(event: Event, response_type: str = "answer") -> dict[str, Any]:
    assert event.event == "done"
    result: dict[str, Any] = event.json()
    meta = result["_meta"]
    assert meta["response_type"] == response_type
    assert ISO_UTC.match(meta["timestamp"])
    assert isinstance(meta["processing_time_ms"], int | float)
    return result


# --- A.4: the demo report ------------------------------------------------------


def test_generate_report_streams_messages_then_one_done_event(demo_server: RunningServer) -> None:
    sock, reader, head = open_stream(demo_server, "generate_report", {"topic": "quarterly results"})
    with sock:
        assert head.status == 200
        assert (head.header("content-type") or "").startswith("text/event-stream")
        assert head.header("cache-control") == "no-cache"
        events = list(reader.events(head))
    names = [e.event for e in events]
    assert names[-1] == "done"
    assert set(names[:-1]) == {"message"}, names
    assert len(names) >= 3
    partials = [e.json() for e in events[:-1]]
    for partial in partials:
        assert list(partial) == ["partial"]
        assert isinstance(partial["partial"], str)
    assert partials[0]["partial"].startswith("Quarterly Results Report\n\nExecutive Summary")
    result = assert_done_meta(events[-1])
    report = "".join(p["partial"] for p in partials)
    assert result["content"] == [{"type": "text", "text": report}]
    assert "Revenue" in report


def test_the_stdlib_client_reads_the_same_stream(demo_server: RunningServer) -> None:
    conn = demo_server.connection()
    try:
        body = json.dumps(call_message("generate_report", {"topic": "q4"}, STREAM_ID)).encode()
        conn.request(
            "POST",
            BASE + "/calltools",
            body=body,
            headers={**JSON_HEADERS, **SSE_HEADERS},
        )
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("content-type", "").startswith("text/event-stream")
        events = parse_events(response.read())
        # The stream ended cleanly: the connection is reusable.
        conn.request(
            "POST", BASE + "/tools", body=b"{}", headers={"Content-Type": "application/json"}
        )
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert [e.event for e in events][-1] == "done"
    assert all(e.event == "message" for e in events[:-1])
    assert_done_meta(events[-1])


def test_the_connection_is_reusable_after_a_stream(serve: StartServer) -> None:
    server = serve()
    with connect(server.port, RECV) as sock:
        reader = RawHttp(sock)
        for _ in range(2):
            sock.sendall(stream_request("records"))
            head = reader.read_head()
            assert [e.event for e in reader.events(head)] == ["message", "message", "done"]


# --- framing ---------------------------------------------------------------------


def test_parts_with_line_breaks_are_framed_without_raw_newlines_and_reassembled(
    serve: StartServer,
) -> None:
    events = read_stream(serve(), "multiline")
    assert [e.event for e in events] == ["message", "message", "message", "done"]
    assert [e.json()["partial"] for e in events[:3]] == [MULTILINE, "\n", ""]
    for event in events:
        # JSON escapes CR and LF: each frame is one event line and one data line.
        assert [line.split(b":", 1)[0] for line in event.lines] == [b"event", b"data"]
    done = assert_done_meta(events[-1])
    assert done["content"] == [{"type": "text", "text": MULTILINE + "\n"}]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ("a\nb", "a\nb"),
        ("a\r\nb\rc", "a\nb\nc"),  # SSE normalises every line break to LF
        ("trailing\n", "trailing\n"),
        ("", ""),
        ("data: fake\n\nevent: done", "data: fake\n\nevent: done"),
    ],
)
def test_a_raw_line_break_in_a_payload_is_split_into_data_lines_and_cannot_end_a_frame(
    payload: str, expected: str
) -> None:
    framed = sse.frame("message", payload)
    events = parse_events(framed + sse.frame("done", "{}"))
    assert [(e.event, e.data) for e in events] == [("message", expected), ("done", "{}")]


# --- heartbeats --------------------------------------------------------------


def test_a_silent_tool_gets_heartbeats_until_it_speaks_again(
    serve: StartServer, probe: Probe
) -> None:
    server = serve(heartbeat=0.05)
    sock, reader, head = open_stream(server, "quiet")
    seen: list[Event] = []
    with sock:
        for event in reader.events(head):
            seen.append(event)
            if event.event == "heartbeat" and not probe.gate.is_set():
                assert event.json() == {}
                server.call_soon(probe.gate.set)
    names = [e.event for e in seen]
    assert [e.event for e in seen if e.event != "heartbeat"] == ["message", "message", "done"]
    first, second = names.index("message"), len(names) - 1 - names[::-1].index("message")
    assert "heartbeat" in names[first:second], names
    assert [e.json()["partial"] for e in seen if e.event == "message"] == ["before", "after"]


# --- errors ------------------------------------------------------------------


def test_a_tool_failing_mid_stream_ends_it_with_an_error_event(
    serve: StartServer,
) -> None:
    events = read_stream(serve(), "explode")
    assert [e.event for e in events] == ["message", "error"]
    error = events[1].json()
    assert error["code"] == -32603
    assert error["data"]["error_id"]
    assert "secret stack detail" not in events[1].data
    assert "Traceback" not in events[1].data


def test_a_part_that_json_cannot_hold_ends_the_stream_with_an_error_event(
    serve: StartServer,
) -> None:
    server = serve()
    events = read_stream(server, "bad_part")
    assert [e.event for e in events] == ["message", "error"], events
    assert events[1].json()["code"] == -32603
    leftover = server.settle(set(), 2.0)
    assert not leftover, leftover


def test_a_business_failure_in_a_stream_is_a_done_event_of_type_failure(
    serve: StartServer,
) -> None:
    events = read_stream(serve(), "gives_up")
    assert [e.event for e in events] == ["message", "done"]
    result = assert_done_meta(events[1], "failure")
    assert result["isError"] is True
    assert result["failure"]["reason"] == "empty"


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [("generate_reprot", {"topic": "x"}, -32601), ("generate_report", {"topic": 5}, -32602)],
)
def test_an_error_before_the_tool_starts_is_plain_json_rpc_not_a_stream(
    demo_server: RunningServer, name: str, arguments: dict[str, Any], code: int
) -> None:
    status, headers, body = demo_server.post(
        "/rpc", call_message(name, arguments, STREAM_ID), SSE_HEADERS
    )
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    reply = json.loads(body)
    assert reply["id"] == STREAM_ID
    assert reply["error"]["code"] == code
    if code == -32601:
        assert reply["error"]["data"]["suggestion"] == "Did you mean 'generate_report'?"


def test_a_method_other_than_tools_call_with_sse_accept_gets_plain_json(
    demo_server: RunningServer,
) -> None:
    message = {"jsonrpc": "2.0", "id": 4, "method": "ping"}
    status, headers, body = demo_server.post("/rpc", message, SSE_HEADERS)
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body) == {"jsonrpc": "2.0", "id": 4, "result": {}}


def test_a_notification_with_sse_accept_gets_202_and_no_stream(
    serve: StartServer,
) -> None:
    server = serve()
    status, _, body = server.post("/rpc", notification("plain"), SSE_HEADERS)
    assert (status, body) == (202, b"")


# --- non-streaming tools and non-SSE callers -----------------------------------


def test_a_plain_tool_called_as_a_stream_gets_one_done_event(
    serve: StartServer,
) -> None:
    events = read_stream(serve(), "plain", {"text": "only this"})
    assert [e.event for e in events] == ["done"]
    assert assert_done_meta(events[0])["content"] == [{"type": "text", "text": "only this"}]


def test_structured_parts_stream_as_they_are_and_add_up_to_a_list(
    serve: StartServer,
) -> None:
    events = read_stream(serve(), "records")
    assert [e.json() for e in events[:2]] == [{"partial": {"n": 1}}, {"partial": {"n": 2}}]
    assert assert_done_meta(events[2])["content"] == [{"n": 1}, {"n": 2}]


def test_a_streaming_tool_called_without_sse_answers_its_parts_joined(
    demo_server: RunningServer,
) -> None:
    reply = demo_server.call("generate_report", {"topic": "quarterly results"})
    content = reply["result"]["content"]
    assert len(content) == 1 and content[0]["type"] == "text"
    assert content[0]["text"].startswith("Quarterly Results Report\n\nExecutive Summary")
    assert "Outlook" in content[0]["text"]
    assert reply["result"]["_meta"]["response_type"] == "answer"


# --- cancellation and backpressure -----------------------------------------------


def assert_stopped_leaving_nothing(
    server: RunningServer, probe: Probe, baseline: set[asyncio.Task[Any]]
) -> None:
    """The tool's ``finally`` ran within 2 s of its client leaving, and no call or task
    beyond ``baseline`` is left on the server."""
    assert probe.closed.wait(2.0), "the tool still runs 2 s after its client left"
    leftover = server.settle(baseline, 1.0)
    assert not leftover, leftover


@pytest.mark.parametrize(
    "heartbeat", [0.05, 30.0], ids=["heartbeats on", "the next heartbeat 30 s away"]
)
def test_a_client_that_closes_mid_stream_stops_the_tool_at_once_and_leaks_nothing(
    serve: StartServer, probe: Probe, heartbeat: float
) -> None:
    # An ordinary close() sends FIN, not RST.  During a stream the request is
    # complete, so end-of-input can only mean the client is gone: the tool must
    # stop now, not at the next heartbeat write (30 s away in the second case).
    server = serve(heartbeat=heartbeat)
    baseline = server.tasks()
    sock, reader, head = open_stream(server, "hang")
    with sock:
        first = next(reader.events(head))
        assert first.json() == {"partial": "tick"}
        assert server.dispatcher.active == 1
    assert_stopped_leaving_nothing(server, probe, baseline)


def test_a_slow_reader_holds_the_generator_back(serve: StartServer, probe: Probe) -> None:
    server = serve()
    baseline = server.tasks()
    sock, _, head = open_stream(server, "firehose", rcvbuf=32 * 1024)
    with sock:
        assert head.status == 200
        # Stop reading.  Wait (bounded) until no part has been yielded for 0.3 s.
        deadline = time.monotonic() + WAIT
        with probe.cond:
            while True:
                count = probe.yielded

                def grew(n: int = count) -> bool:
                    return probe.yielded != n

                if not probe.cond.wait_for(grew, timeout=0.3):
                    break
                assert time.monotonic() < deadline, f"still yielding: {probe.yielded} parts"
        stalled_at = probe.yielded
    assert 2 <= stalled_at < 200, stalled_at
    assert_stopped_leaving_nothing(server, probe, baseline)
