"""Streams of ``POST /mcp`` opened and dropped by the thousand.

2026 ``subscriptions/listen`` streams, 2025 and 2026 calls answered as SSE
(a tool reporting progress, a 2025 tool asking the client a question it will
never answer) and ``GET``/``DELETE`` on the endpoint (405: the endpoint is
stateless, so there is no GET stream to open), each closed by its client in
every way a client leaves: FIN, FIN after reading to the end, RST, and before
the answer started.  Afterwards the server holds no subscription, connection,
task, call in flight or question to a client; the objects it keeps (counted by
type, as tests/test_memory.py counts them) do not grow with the number of
streams; and nothing was logged at ERROR (:func:`mcp_hostile_support.watch`).
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import WAIT
from mcp_hostile_support import (
    LEGACY_HEADERS,
    Hostile,
    leave,
    legacy_message,
    modern_headers,
    modern_message,
    start_hostile,
    wait_on_loop,
    watch,
)
from sse_client import RawHttp, connect, request_bytes

#: How the client leaves, in turn.
WAYS = ("close", "half-close", "reset", "before-the-answer")
#: Streams opened before the first count of objects (caches, free lists).
WARM_UP = 100
#: Objects of one type the server may gain over a whole run (not one per stream).
GROWTH_BOUND = 10
#: Timers cancelled to make asyncio sweep the cancelled ones from its heap.
SWEEP = 1000
#: The types counted: the server's own, the event loop's, the HTTP parser's.
WATCHED = ("mcplite", "asyncio", "h11")


@pytest.fixture(scope="module")
def server() -> Iterator[Hostile]:
    running = start_hostile()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(autouse=True)
def watched(server: Hostile) -> Iterator[None]:
    with watch(server):
        yield


def census(server: Hostile) -> Counter[str]:
    """The objects of :data:`WATCHED` modules alive in the process, by type,
    counted on the server's loop once it is idle."""

    async def count() -> Counter[str]:
        for _ in range(10):  # what the last streams left to run
            await asyncio.sleep(0)
        # Timers set and cancelled (a deadline that did not fire) stay in the
        # loop's heap until most of it is cancelled: cancel enough to sweep them.
        loop = asyncio.get_running_loop()
        for timer in [loop.call_later(3600, print) for _ in range(SWEEP)]:
            timer.cancel()
        await asyncio.sleep(0)
        gc.collect()
        counts: Counter[str] = Counter()
        for obj in gc.get_objects():
            kind = type(obj)
            # Not every type's __module__ is a string (some extension types give a
            # descriptor): only the watched modules' own types are counted.
            module = kind.__dict__.get("__module__")
            if isinstance(module, str) and module.startswith(WATCHED):
                counts[f"{module}.{kind.__qualname__}"] += 1
        return counts

    counted: Counter[str] = server.run(count())
    return counted


def drop_many(server: Hostile, rounds: int, one: Callable[[int], None]) -> None:
    """``one(i)`` for :data:`WARM_UP` rounds, then ``rounds`` more between two
    counts of objects; no type may grow by more than :data:`GROWTH_BOUND`."""
    for i in range(WARM_UP):
        one(i)
    settle(server)
    before = census(server)
    for i in range(rounds):
        one(i)
    settle(server)
    after = census(server)
    grown = {
        kind: after[kind] - before[kind]
        for kind in after
        if after[kind] - before[kind] > GROWTH_BOUND
    }
    assert grown == {}, grown


def settle(server: Hostile) -> None:
    mcp = server.http.mcp
    wait_on_loop(server, lambda: not server.http.connections, "connections left open")
    wait_on_loop(server, lambda: mcp.subscription_count == 0, "subscriptions left")
    wait_on_loop(server, lambda: server.dispatcher.active == 0, "calls still active")


def stream_and_leave(
    server: Hostile, message: dict[str, Any], headers: dict[str, str], way: str
) -> None:
    """POST ``message``; read the head and the first event of its SSE answer
    (unless the client leaves before the answer); leave ``way``."""
    sock = connect(server.port, WAIT)
    try:
        sock.sendall(request_bytes("/mcp", message, headers=headers))
        if way != "before-the-answer":
            reader = RawHttp(sock)
            head = reader.read_head()
            assert head.status == 200, head
            assert (head.header("content-type") or "").startswith("text/event-stream")
            first = next(reader.events(head)).json()
            assert "method" in first, first  # a notification or a request: not the end
    finally:
        leave(sock, "reset" if way == "before-the-answer" else way)


def test_a_thousand_listens_dropped_every_way_leave_nothing_behind(server: Hostile) -> None:
    def listen(i: int) -> None:
        params = {"notifications": {"toolsListChanged": True, "promptsListChanged": i % 2 == 0}}
        message = modern_message("subscriptions/listen", params, f"listen-{i}")
        stream_and_leave(server, message, modern_headers(message), WAYS[i % len(WAYS)])

    drop_many(server, 1000, listen)


def test_calls_answered_as_streams_dropped_every_way_stop_and_leave_nothing_behind(
    server: Hostile,
) -> None:
    held = server.runs.counts.get("hold", 0)

    def call(i: int) -> None:
        way = WAYS[i % len(WAYS)]
        if i % 3 == 0:  # 2026: progress, then the tool waits for the client to leave
            params = {"name": "hold", "arguments": {}}
            message = modern_message("tools/call", params, i, progressToken=i)
            stream_and_leave(server, message, modern_headers(message), way)
        elif i % 3 == 1:  # 2025: the same tool
            params = {"name": "hold", "arguments": {}, "_meta": {"progressToken": "p"}}
            stream_and_leave(server, legacy_message("tools/call", params, i), LEGACY_HEADERS, way)
        else:  # 2025: the tool asks the client, who leaves instead of answering
            params = {"name": "greet", "arguments": {}}
            stream_and_leave(server, legacy_message("tools/call", params, i), LEGACY_HEADERS, way)

    drop_many(server, 300, call)
    assert server.runs.counts["hold"] > held  # the streams did reach the tool


def test_get_and_delete_by_the_thousand_are_405_and_leave_no_connection(
    server: Hostile,
) -> None:
    def refused(i: int) -> None:
        method = "GET" if i % 2 == 0 else "DELETE"
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": f"s-{i}", "Last-Event-ID": "1"}
        sock = connect(server.port, WAIT)
        try:
            sock.sendall(request_bytes("/mcp", b"", method=method, headers=headers))
            way = WAYS[i % 3]  # each answered, then left
            response = RawHttp(sock).read_response()
            assert response.status == 405 and response.head.header("allow") == "POST"
        finally:
            leave(sock, way)

    drop_many(server, 1000, refused)
