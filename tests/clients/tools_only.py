"""A tools-only module (no prompts, no resources) for the client interop tests.

Served as ``mcplite serve tools_only`` and ``mcplite stdio tools_only`` with this
folder on ``PYTHONPATH``.  Besides ``add``, two tools let a test see a
cancellation without sleeping: ``block_until_cancelled`` reports progress once
(the client's cue that the tool runs) and waits until it is cancelled, recording
that under its ``key``; ``was_cancelled`` answers whether that happened, waiting
a bounded time for it.  Both live in the one server process the client talks to.
"""

from __future__ import annotations

import asyncio

from mcplite import NEVER, Context, Tools

tools = Tools()

#: key -> set once the block_until_cancelled call with that key was cancelled.
_cancelled: dict[str, asyncio.Event] = {}


def _cancellation(key: str) -> asyncio.Event:
    return _cancelled.setdefault(key, asyncio.Event())


@tools.tool(promise_after=NEVER)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tools.tool(promise_after=NEVER)
async def block_until_cancelled(key: str, ctx: Context | None = None) -> str:
    """Report progress once, then wait until the call is cancelled; record that under key."""
    assert ctx is not None
    ctx.report_progress(0, 1, "blocked until cancelled")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        _cancellation(key).set()
        raise
    return "not reached"


@tools.tool(promise_after=NEVER)
async def was_cancelled(key: str, wait_seconds: float = 5.0) -> bool:
    """Whether block_until_cancelled(key) was cancelled, waiting up to wait_seconds for it."""
    try:
        await asyncio.wait_for(_cancellation(key).wait(), wait_seconds)
    except TimeoutError:
        return False
    return True
