"""Tools for the memory figures: what a promise costs the framework itself.

``hold`` always answers with a promise and then waits, holding nothing of its
own, so RSS growth per pending promise is mcplite's bookkeeping (task, entry,
token) rather than a tool's working data.
"""

from __future__ import annotations

import asyncio

from mcplite import ALWAYS, Tools

tools = Tools()


@tools.tool(promise_after=ALWAYS)
async def hold(seconds: float = 600.0) -> str:
    """Wait ``seconds`` as a promise; the benchmark never redeems it."""
    await asyncio.sleep(seconds)
    return "done"


@tools.tool(promise_after=float("inf"))
async def echo(text: str) -> str:
    """The workload of the idle-connection figure, as in the demo."""
    return text
