"""Streams on our own HTTP server whose client leaves, on every error path, at every point.

MCP-lite SSE (``{base}/calltools`` and ``/rpc`` with ``Accept:
text/event-stream``, redeem streams included) and MCP's ``POST /mcp`` SSE answers
in both revisions (progress, streaming tools, promises and tasks), driven by raw
sockets: each client leaves by FIN, RST or half-close (``abandon_support.HOWS``)
before the head, after it, after the first event, while the tool is held
mid-stream, or after the error.  After each, nothing is left behind
(``abandon_support.assert_released``): no task, call slot, connection or
running promise, and no ERROR from asyncio, grpclib or mcplite but a raising
tool's own line.  The promise store takes a few milliseconds to answer each
call, as a remote one does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from abandon_support import (
    HELD_POINTS,
    HOWS,
    LEGACY,
    LITE_ERRORS,
    MCP_ERRORS,
    MODERN,
    Heard,
    Probe,
    assert_quiet,
    assert_released,
    at_eof,
    each_way,
    heard,
    leave,
    mcp_call,
    mcp_request,
    modern_call,
    open_and_leave,
    outcome,
    post_and_leave,
    sealed_unknown,
    sse,
    start,
    store_of,
)
from conftest import BASE, WAIT, RunningServer, call_message
from sse_client import RawHttp, connect

from mcplite import PromiseStatus
from mcplite.protocols.mcp.protocol import TASKS_EXTENSION

__all__ = ["heard"]  # the fixture, used by name

REVISIONS = (LEGACY, MODERN)


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def server(probe: Probe) -> Iterator[RunningServer]:
    running = start(probe)
    try:
        yield running
    finally:
        running.call_soon(probe.gate.set)
        running.stop()


def post_mcp(server: RunningServer, message: dict[str, Any], headers: dict[str, str]) -> int:
    """POST ``message`` to the MCP endpoint with ``http.client``; the status."""
    conn = server.connection()
    try:
        sent = {"Content-Type": "application/json", "Accept": "application/json", **headers}
        conn.request("POST", "/mcp", body=json.dumps(message).encode(), headers=sent)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


# --- MCP-lite: a stream that answers an error, left at each point ---------------------


@pytest.mark.parametrize("path", ["/calltools", "/rpc"])
@pytest.mark.parametrize("case", sorted(LITE_ERRORS))
def test_an_mcplite_stream_answering_an_error_leaves_nothing_wherever_its_client_goes(
    server: RunningServer, probe: Probe, heard: Heard, case: str, path: str
) -> None:
    name, arguments, expected = LITE_ERRORS[case]
    if arguments is None:
        arguments = {"promise": sealed_unknown(server)}
    request = sse(BASE + path, call_message(name, arguments))
    each_way(server, probe, heard, request, expected)


def test_a_redeem_stream_of_an_expired_promise_leaves_nothing_wherever_its_client_goes(
    probe: Probe, heard: Heard
) -> None:
    server = start(probe, promise_ttl=0.2)
    try:
        status, _, body = server.post("/rpc", call_message("promised"))
        assert status == 200
        token = json.loads(body)["result"]["_meta"]["promise_token"]
        assert probe.all_finished()  # the store stopped the tool when the promise expired
        request = sse(BASE + "/calltools", call_message("redeem", {"promise": token}))
        each_way(server, probe, heard, request, ["error -32602 expired"])
    finally:
        server.stop()


def test_an_anonymous_stream_is_refused_401_and_leaves_nothing_wherever_its_client_goes(
    probe: Probe, heard: Heard, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("a-token-of-sixteen-chars\n")
    server = start(probe, auth_tokens=str(tokens))
    try:
        mcp_message, mcp_headers = mcp_call(MODERN, "held", {})
        calls = [
            (BASE + "/calltools", call_message("ticks"), {}),
            ("/mcp", mcp_message, mcp_headers),
        ]
        for path, message, headers in calls:
            for authorization in ({}, {"Authorization": "Bearer not-a-known-token"}):
                request = sse(path, message, {**headers, **authorization})
                each_way(server, probe, heard, request, ["json error -32041"])
        assert probe.started == 0
    finally:
        server.stop()


# --- MCP-lite: a stream held mid-way, left at each point --------------------------------


@pytest.mark.parametrize("point", HELD_POINTS)
def test_a_held_mcplite_stream_stops_its_tool_wherever_its_client_goes(
    server: RunningServer, probe: Probe, heard: Heard, point: str
) -> None:
    baseline = server.tasks()
    for how in HOWS:
        request = sse(BASE + "/calltools", call_message("ticks"))
        said = open_and_leave(server, probe, request, point, how)
        assert said in ([], ["message"])
        assert probe.all_finished(), how
        assert_released(server, baseline, heard)
    assert_quiet(server, heard)
    assert probe.started > 0


# --- MCP: an SSE answer carrying an error, left at each point ---------------------------


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("case", sorted(MCP_ERRORS))
def test_an_mcp_stream_answering_an_error_leaves_nothing_wherever_its_client_goes(
    server: RunningServer, probe: Probe, heard: Heard, case: str, revision: str
) -> None:
    name, arguments, expected = MCP_ERRORS[case]
    request, _ = mcp_request(revision, name, arguments)
    each_way(server, probe, heard, request, expected)


@pytest.mark.parametrize("revision", REVISIONS)
def test_an_mcp_call_that_outlives_its_promise_ends_as_a_tool_error_on_its_stream(
    probe: Probe, heard: Heard, revision: str
) -> None:
    # The call became a promise (no tasks asked for), and the promise expired
    # while the client waited on the same request: the store stopped the tool.
    server = start(probe, promise_ttl=0.2)
    try:
        request, _ = mcp_request(revision, "promised", {})
        sock = connect(server.port, WAIT)
        try:
            sock.sendall(request)
            reader = RawHttp(sock)
            head = reader.read_head()
            assert outcome(head, reader) == ["notifications/progress", "isError"]
        finally:
            sock.close()
        assert probe.all_finished()
        each_way(server, probe, heard, request, ["notifications/progress", "isError"])
    finally:
        server.stop()


# --- MCP: a stream held mid-way, left at each point -------------------------------------


@pytest.mark.parametrize("point", HELD_POINTS)
@pytest.mark.parametrize("revision", REVISIONS)
def test_a_held_mcp_stream_stops_its_tool_wherever_its_client_goes(
    server: RunningServer, probe: Probe, heard: Heard, revision: str, point: str
) -> None:
    baseline = server.tasks()
    for how in HOWS:
        request, _ = mcp_request(revision, "held", {})
        said = open_and_leave(server, probe, request, point, how)
        assert said in ([], ["message"])
        assert probe.all_finished(), how
        assert_released(server, baseline, heard)
    assert_quiet(server, heard)
    assert probe.started > 0


class AccessLines(logging.Handler):
    """The access log's records (``mcplite.access``), heard while installed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize("revision", REVISIONS)
def test_an_mcp_call_whose_client_half_closed_before_it_said_anything_is_not_streamed(
    probe: Probe, heard: Heard, revision: str
) -> None:
    # Under a stream a half-close means the client has gone (docs/http.md); one
    # that came while the call was silent (no stream yet) means the same once
    # the call says something: no stream is begun for it, the tool is stopped.
    lines = AccessLines()
    access = logging.getLogger("mcplite.access")
    level = access.level
    access.setLevel(logging.INFO)
    access.addHandler(lines)
    server = start(probe, access_log=True)
    try:
        baseline = server.tasks()
        request, _ = mcp_request(revision, "quiet_first", {})
        sock = connect(server.port, WAIT)
        try:
            sock.sendall(request)
            probe.held()
            sock.shutdown(socket.SHUT_WR)

            def fin_read() -> bool:
                return any(conn.conn.trailing_data[1] for conn in server.http.connections)

            assert server.run(until(fin_read))
            server.call_soon(probe.gate.set)
            assert at_eof(sock)  # closed with no answer: nobody to stream to
        finally:
            sock.close()
        assert probe.all_finished()
        assert_released(server, baseline, heard)
        assert_quiet(server, heard)
        (line,) = [r for r in lines.records if getattr(r, "tool", None) == "quiet_first"]
        assert (line.status, line.outcome) == (499, "client-gone")  # type: ignore[attr-defined]
    finally:
        access.removeHandler(lines)
        access.setLevel(level)
        server.stop()


async def until(check: Callable[[], bool]) -> bool:
    """Poll ``check()`` on the server's loop (its own state) until it holds: True,
    or False after ``WAIT`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not check():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_promised_mcp_call_whose_client_leaves_cancels_its_promise(
    server: RunningServer, probe: Probe, heard: Heard, revision: str
) -> None:
    # No tasks asked for: the promise is the server's own, the client never saw
    # its token; when the client goes, so does the call.
    baseline = server.tasks()
    store = store_of(server.dispatcher)
    for how in HOWS:
        request, _ = mcp_request(revision, "promised", {})
        said = open_and_leave(server, probe, request, "after-first", how, made=store.made)
        assert said == ["message"]
        assert probe.all_finished(), how
        assert_released(server, baseline, heard)  # no promise left running
    assert_quiet(server, heard)


def test_a_task_outlives_the_stream_that_started_it_and_completes(
    server: RunningServer, probe: Probe, heard: Heard
) -> None:
    # With the tasks extension the client holds the taskId: its leaving stops nothing.
    baseline = server.tasks()
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
    for how in HOWS:
        server.call_soon(probe.gate.clear)
        message, headers = modern_call("promised", {}, capabilities=capabilities)
        said = post_and_leave(server.port, sse("/mcp", message, headers), "after-end", how)
        assert said == ["notifications/progress", "result"], how
        store = store_of(server.dispatcher)
        (task,) = server.run(store.running())
        server.call_soon(probe.gate.set)
        assert probe.all_finished()
        assert_released(server, baseline, heard)
        assert server.run(store.inner.get(task)).status is PromiseStatus.DONE
    assert_quiet(server, heard)


@pytest.mark.parametrize("revision", REVISIONS)
def test_an_mcp_stream_cancelled_by_its_client_ends_and_leaves_nothing(
    server: RunningServer, probe: Probe, heard: Heard, revision: str
) -> None:
    baseline = server.tasks()
    for how in HOWS:
        request, message = mcp_request(revision, "held", {})
        sock = connect(server.port, WAIT)
        try:
            sock.sendall(request)
            reader = RawHttp(sock)
            head = reader.read_head()
            events = reader.events(head)
            assert next(events).json()["method"] == "notifications/progress"
            probe.held()
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": message["id"]},
            }
            status = post_mcp(server, cancel, {"MCP-Protocol-Version": revision})
            assert status == 202
            assert list(events) == []  # MCP answers a cancelled request nothing
        finally:
            leave(sock, how)
        assert probe.all_finished(), how
        assert_released(server, baseline, heard)
    assert_quiet(server, heard)


# --- MCP-lite: a redeem stream long-polling a promise that is cancelled --------------------


def test_a_redeem_stream_of_a_cancelled_promise_ends_done_and_leaves_nothing(
    server: RunningServer, probe: Probe, heard: Heard
) -> None:
    baseline = server.tasks()
    for how in HOWS:
        reply = server.call("promised")
        token = reply["result"]["_meta"]["promise_token"]
        redeem = call_message("redeem", {"promise": token, "wait": WAIT})
        sock = connect(server.port, WAIT)
        try:
            sock.sendall(sse(BASE + "/calltools", redeem))
            reader = RawHttp(sock)
            head = reader.read_head()
            assert head.status == 200
            cancelled = server.call("cancel", {"promise": token})["result"]
            assert cancelled["content"] == [{"type": "text", "text": "cancelled"}], cancelled
            events = list(reader.events(head))
            assert [event.event for event in events] == ["done"]
            assert events[0].json()["_meta"]["response_type"] == "failure"
        finally:
            leave(sock, how)
        assert probe.all_finished(), how
        assert_released(server, baseline, heard)
    assert_quiet(server, heard)


@pytest.mark.parametrize("point", ["before-head", "after-head"])
def test_a_redeem_stream_left_mid_poll_leaves_its_promise_running_for_the_next(
    server: RunningServer, probe: Probe, heard: Heard, point: str
) -> None:
    # The promise is the client's (it holds the token): a redeem that goes stops
    # nothing; the promise completes, and is redeemable.
    baseline = server.tasks()
    for how in HOWS:
        server.call_soon(probe.gate.clear)
        token = server.call("promised")["result"]["_meta"]["promise_token"]
        redeem = call_message("redeem", {"promise": token, "wait": WAIT})
        assert post_and_leave(server.port, sse(BASE + "/calltools", redeem), point, how) is None
        assert server.run(store_of(server.dispatcher).running()) != []
        server.call_soon(probe.gate.set)
        assert probe.all_finished()
        done = server.call("redeem", {"promise": token})
        assert done["result"]["content"] == [{"type": "text", "text": "kept"}], done
        assert_released(server, baseline, heard)
    assert_quiet(server, heard)
