"""The tools the soak serves (``python -m bench.soak``): one of each kind of call.

``echo`` answers at once; ``count`` streams; ``job`` is always a promise (an MCP
task for a client with the tasks extension) that finishes after ``ms``; ``drip``
streams slowly, so a client can leave in the middle of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mcplite import ALWAYS, NEVER, Context, Tools

tools = Tools()


@tools.tool(promise_after=NEVER)
async def echo(text: str) -> str:
    """Answer ``text``."""
    return text


@tools.tool(promise_after=NEVER)
async def count(n: int = 5) -> AsyncIterator[int]:
    """Stream 0 .. n-1."""
    for i in range(n):
        yield i


@tools.tool(promise_after=ALWAYS)
async def job(ctx: Context, ms: int = 20) -> str:
    """A promise that finishes after ``ms`` milliseconds, reporting progress once."""
    ctx.report_progress(0, 1, "started")
    await asyncio.sleep(ms / 1000)
    return f"job of {ms} ms done"


@tools.tool(promise_after=NEVER)
async def drip(n: int = 50, ms: int = 20) -> AsyncIterator[str]:
    """Stream ``n`` parts, one every ``ms`` milliseconds."""
    for i in range(n):
        yield f"part {i}"
        await asyncio.sleep(ms / 1000)
