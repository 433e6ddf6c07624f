"""Repeated calls leave nothing behind: object counts before and after, as grpclib's
``tests/test_memory.py`` checks its own.

Each test warms a connection up (first calls fill caches), takes a census of the
objects the collector tracks (after a collection), makes :data:`CALLS` more calls
on the same keep-alive connection, and takes another.  No type of mcplite, h11,
h2, hpack, grpclib, multidict or asyncio may have more objects than before, and
all objects together may grow by :data:`TOTAL_BOUND` at most (the census's own
bookkeeping): a leak of one object a call would show :data:`CALLS` times over.
Over HTTP the interpreter's count of allocated memory blocks may not grow by more
than :data:`BLOCKS_BOUND` either, which also sees what the collector does not
track (strings, numbers, a dict of them).  Not over gRPC: h2 remembers how each
closed stream ended (an int per stream, up to a bound: 1024 streams on the
server, ``CLOSED_STREAMS_KEPT``, and h2's own 65,536 on the client), by design.

The calls run through :mod:`mcplite.testing`'s in-memory transports, so the
server and the client are both in this process, on this loop, and nothing else
runs between two censuses.  Before each, the timers that calls set and cancelled
(deadlines that did not fire), which asyncio leaves in its heap until their time
or until most of the heap is cancelled timers, are swept out by cancelling many
more.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections import Counter
from collections.abc import Awaitable, Callable

from conftest import BASE, WAIT, make_config
from grpclib.client import UnaryUnaryMethod

from mcplite import Tools
from mcplite.client.grpc import BytesCodec
from mcplite.protocols.protobuf import decode_tool_response, encode_tool_request
from mcplite.testing import connect

WARM_UP = 50
CALLS = 200
#: Objects the whole heap may gain over CALLS calls.
TOTAL_BOUND = 10
#: Memory blocks the HTTP calls may add over CALLS calls.
BLOCKS_BOUND = 20
#: Timers cancelled to make asyncio sweep the cancelled ones from its heap.
SWEEP = 1000
#: Loop turns given to what a call leaves running (a handler's last step) before a census.
SETTLE_TURNS = 20
WATCHED = ("mcplite", "h11", "h2", "hpack", "grpclib", "multidict", "asyncio")


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    return tools


async def quiesce() -> None:
    """Let the calls' last steps run, sweep out cancelled timers, collect."""
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    sweep = [loop.call_later(3600, print) for _ in range(SWEEP)]
    for timer in sweep:
        timer.cancel()
    del sweep
    await asyncio.sleep(0)  # the loop's next turn drops every cancelled timer
    gc.collect()


async def census() -> Counter[str]:
    """Objects tracked by the collector, by type, and their ``(total)``."""
    await quiesce()
    counts: Counter[str] = Counter()
    for obj in gc.get_objects():
        kind = type(obj)
        counts[f"{kind.__module__}.{kind.__qualname__}"] += 1
    counts["(total)"] = sum(counts.values())
    return counts


def watched(name: str) -> bool:
    return name.split(".", 1)[0] in WATCHED


async def growth(call: Callable[[], Awaitable[None]]) -> tuple[Counter[str], dict[str, int]]:
    """The census after the warm-up, and what CALLS more calls added to it; then what
    CALLS more calls added to the ``(blocks)`` allocated (counted apart, so that no
    census is alive in between)."""
    for _ in range(WARM_UP):
        await call()
    before = await census()
    for _ in range(CALLS):
        await call()
    after = await census()
    grown = {k: after[k] - before[k] for k in after.keys() | before.keys() if after[k] > before[k]}
    del after
    await quiesce()
    blocks = sys.getallocatedblocks()
    for _ in range(CALLS):
        await call()
    await quiesce()
    grown["(blocks)"] = sys.getallocatedblocks() - blocks
    return before, grown


def assert_nothing_left_behind(grown: dict[str, int], *, blocks: bool = True) -> None:
    assert {k: n for k, n in grown.items() if watched(k)} == {}
    assert grown.get("(total)", 0) <= TOTAL_BOUND, grown
    if blocks:
        assert grown.get("(blocks)", 0) <= BLOCKS_BOUND, grown


async def test_http_keep_alive_calls_leave_no_objects_behind() -> None:
    async with connect(make_tools(), make_config(), timeout=WAIT) as client:

        async def call() -> None:
            assert (await client.call("echo", {"text": "x"})).text == "x"

        before, grown = await growth(call)
        assert client.session.connections_opened == 1  # one keep-alive connection
    assert before["mcplite.bindings.http.connection.HttpConnection"] == 1
    assert_nothing_left_behind(grown)


async def test_raw_http_and_error_answers_leave_no_objects_behind() -> None:
    async with connect(make_tools(), make_config(), timeout=WAIT) as client:
        wrong = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}

        async def call() -> None:
            response = await client.post(BASE + "/rpc", wrong)
            assert response.json()["error"]["code"] == -32602

        _, grown = await growth(call)
        assert client.session.connections_opened == 1
    assert_nothing_left_behind(grown)


async def test_mcp_calls_leave_no_objects_behind() -> None:
    async with connect(make_tools(), make_config(), timeout=WAIT) as client:

        async def call() -> None:
            result = await client.mcp("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            assert result["content"] == [{"type": "text", "text": "x"}]

        _, grown = await growth(call)
        assert client.session.connections_opened == 1
    assert_nothing_left_behind(grown)


async def test_grpc_calls_leave_no_objects_behind() -> None:
    # grpclib's channel itself, with no deadline: a deadline's grpc-timeout header
    # differs from call to call, and which blocks the server's HPACK memory keeps
    # (headercache.BLOCKS_KEPT) would then depend on the clock.
    async with connect(make_tools(), make_config(), timeout=WAIT) as client:
        channel = client.grpc_channel(codec=BytesCodec())
        call_tool = UnaryUnaryMethod[bytes, bytes](
            channel, "/mcplite.MCPLite/CallTool", bytes, bytes
        )
        request = encode_tool_request("echo", {"text": "x"})

        async def call() -> None:
            async with asyncio.timeout(WAIT):
                reply = await call_tool(request)
            assert decode_tool_response(reply)[0] == {"content": [{"type": "text", "text": "x"}]}

        before, grown = await growth(call)
    assert before["grpclib.protocol.Connection"] == 2  # the client's and the server's
    assert_nothing_left_behind(grown, blocks=False)
