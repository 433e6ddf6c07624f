"""Tools for the metrics, health and log tests (``tests/test_metrics.py``,
``tests/test_logs.py``), served by ``python -m mcplite serve tests.ops_tools``.

- ``echo``: the text back (an answer);
- ``refuse``: a business failure (``Failure``);
- ``crash``: a bug (raises ``RuntimeError``: an internal error with an error id);
- ``later``: always a promise (``promise_after=ALWAYS``), done at once;
- ``hold``: runs until the file ``path`` exists (the test creates it), polled every
  few milliseconds and for at most ``seconds``, so a call can be held in flight;
- ``held_promise``: the same, answered with a promise at once;
- ``trickle``: a streaming tool: one part, then (once the file ``path`` exists) another;
- ``count``: a streaming tool (``steps`` parts);
- ``admin_report``: needs the ``admin`` scope (when auth is on);
- ``pid``: the id of the process that ran it (which ``--workers`` worker).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

from mcplite import ALWAYS, Failure, Tools

tools = Tools()

POLL = 0.005  # how often ``hold`` looks for its file, in seconds


@tools.tool
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tools.tool
async def refuse(text: str = "") -> str:
    """Always a business failure."""
    raise Failure("not today", reason="refused")


@tools.tool
async def crash(text: str = "") -> str:
    """A tool with a bug: always raises."""
    raise RuntimeError("a bug in the tool")


@tools.tool(promise_after=ALWAYS)
async def later(text: str = "done") -> str:
    """Answer with a promise; its outcome is ready at once."""
    return f"later: {len(text)} characters"


async def _wait_for(path: str, seconds: float) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not os.path.exists(path):
        if loop.time() > deadline:
            return "gave up"
        await asyncio.sleep(POLL)
    return "released"


@tools.tool
async def hold(path: str, seconds: float = 15.0) -> str:
    """Run until the file ``path`` exists (at most ``seconds``)."""
    return await _wait_for(path, seconds)


@tools.tool(promise_after=ALWAYS)
async def held_promise(path: str, seconds: float = 15.0) -> str:
    """A promise that runs until the file ``path`` exists (at most ``seconds``)."""
    return await _wait_for(path, seconds)


@tools.tool
async def trickle(path: str, seconds: float = 15.0) -> AsyncIterator[str]:
    """Yield a part, wait for the file ``path`` (at most ``seconds``), yield another."""
    yield "started "
    yield await _wait_for(path, seconds)


@tools.tool
async def count(steps: int = 3) -> AsyncIterator[str]:
    """Yield ``steps`` parts."""
    for step in range(steps):
        yield f"part {step} "


@tools.tool(scopes=["admin"])
async def admin_report() -> str:
    """Something only an admin may read."""
    return "the admin report"


@tools.tool
async def pid() -> str:
    """The id of the process that ran this call."""
    return str(os.getpid())
