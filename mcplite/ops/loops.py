"""Which event loop a serving process runs: asyncio's own, or uvloop's.

``mcplite serve``, ``stdio`` and ``dev`` take ``--loop auto|asyncio|uvloop``;
without it, ``$MCPLITE_LOOP`` says, else ``auto``: uvloop when it can be
imported (``pip install 'mcplite[uvloop]'``), else asyncio's loop.  The loop is
made by :class:`asyncio.Runner`'s ``loop_factory``, not installed as a global
event loop policy: what else the process runs (a tool's own ``asyncio.run``, a
thread's loop) keeps asyncio's.  The workers of ``serve --workers N`` run the
loop their supervisor settled on.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

__all__ = ["ENVIRONMENT_VARIABLE", "LOOPS", "choose_loop", "run_on"]

#: What ``--loop`` takes.
LOOPS = ("auto", "asyncio", "uvloop")
#: The environment variable that sets ``--loop``'s default.
ENVIRONMENT_VARIABLE = "MCPLITE_LOOP"

_T = TypeVar("_T")


def choose_loop(given: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The loop to run, ``"asyncio"`` or ``"uvloop"``: ``given`` (``--loop``), else
    ``$MCPLITE_LOOP``, else ``auto``.  Raises ValueError, with a line for the user,
    for an ``$MCPLITE_LOOP`` that is none of :data:`LOOPS` and for ``uvloop`` when
    it cannot be imported."""
    if given is not None:
        choice, source = given, f"--loop {given}"
    else:
        text = environ.get(ENVIRONMENT_VARIABLE, "")
        choice = text.strip().lower() or "auto"
        source = f"{ENVIRONMENT_VARIABLE}={text}"
        if choice not in LOOPS:
            raise ValueError(f"{source}: expected one of {', '.join(LOOPS)}")
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError as exc:
        if choice == "auto":
            return "asyncio"
        missing = isinstance(exc, ModuleNotFoundError) and exc.name == "uvloop"
        why = "is not installed" if missing else f"cannot be imported ({exc})"
        raise ValueError(
            f"{source}: uvloop {why}; install it with pip install 'mcplite[uvloop]', "
            "or use --loop asyncio"
        ) from None
    return "uvloop"


def run_on(loop: str, main: Coroutine[Any, Any, _T]) -> _T:
    """Run ``main`` on a new event loop of the kind ``loop`` names (a value of
    :func:`choose_loop`) until it returns, as :func:`asyncio.run` does."""
    with asyncio.Runner(loop_factory=_factory(loop)) as runner:
        return runner.run(main)


def _factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    # asyncio's own, whatever event loop policy the process was given.
    if sys.platform == "win32":
        return asyncio.ProactorEventLoop
    return asyncio.SelectorEventLoop
