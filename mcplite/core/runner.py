"""The runner: the one place where user code is awaited, with one exception ladder.

Async tools are awaited on the loop; sync tools run in a thread pool (a blocking
tool never stalls the loop); async generators are iterated, each part handed to
whoever streams them.  Whatever the kind, a tool ends in exactly one way:

- it returns (or yields last) a value: that value's :data:`~mcplite.core.outcomes.Outcome`;
- it raises :class:`~mcplite.core.outcomes.Failure`: a failure outcome;
- it raises an :class:`~mcplite.core.errors.MCPLiteError`: that protocol error, raised;
- it raises anything else (a stray ``CancelledError`` included): an
  :class:`~mcplite.core.errors.InternalError` carrying an error id, the traceback logged;
- its task is cancelled (the caller left, the promise was cancelled): cancellation
  goes on up.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import secrets
import sys
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .errors import InternalError, MCPLiteError
from .outcomes import OUTCOME_TYPES, Failure, Outcome, outcome_of
from .tools import Kind, Tool

__all__ = [
    "EAGER_TASKS",
    "PartSink",
    "Runner",
    "abandon",
    "aggregate",
    "being_cancelled",
    "internal_error",
    "start_task",
    "wake",
]

T = TypeVar("T")

log = logging.getLogger("mcplite")

PartSink = Callable[[Any], Awaitable[None]]
"""Where a streaming tool's parts go, one at a time (awaited: backpressure)."""


def aggregate(parts: list[Any]) -> Any:
    """What a stream's parts add up to when one final value is wanted.

    All-string parts are joined into one string (one text item); any other
    parts become the list of parts (one content item each).
    """
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return list(parts)


def internal_error(tool: str, exc: BaseException, why: str | None = None) -> InternalError:
    """Log an unexpected exception with an id; the error sent carries only the id
    (and ``why``, when it is not that the tool raised)."""
    error_id = secrets.token_hex(6)
    log.error(
        "tool %r %s (error id %s)",
        tool,
        why or "raised",
        error_id,
        exc_info=exc,
        extra={"error_id": error_id},
    )
    said = f": {why}" if why else ""
    error = InternalError(
        f"Internal error in tool '{tool}'{said} (error id {error_id})", {"error_id": error_id}
    )
    text = str(exc)
    error.detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return error


#: Whether :func:`start_task` starts tasks eagerly (Python 3.12+).
EAGER_TASKS = sys.version_info >= (3, 12)

if sys.version_info >= (3, 12):

    def start_task(coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """A task that starts eagerly: a coroutine that finishes without
        suspending is done before this returns, with no trip through the loop
        (and with the task set as current, so asyncio.timeout and TaskGroup work)."""
        return asyncio.Task(coro, loop=asyncio.get_running_loop(), name=name, eager_start=True)

else:

    def start_task(coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """A task (eager from Python 3.12 on; scheduled on 3.11)."""
        return asyncio.get_running_loop().create_task(coro, name=name)


def wake(waiter: asyncio.Future[None] | None) -> None:
    """Resolve ``waiter`` (a future one coroutine awaits for news) unless there is
    none or it is done already."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def abandon(task: asyncio.Future[Any]) -> None:
    """Stop waiting for ``task`` (its client has gone, or the server is closing):
    cancel it if it still runs, and read how it ended once it does, so that
    asyncio never reports "Task exception was never retrieved" (any client could
    fill the error log with those).  A protocol error is dropped, whoever it was
    for has gone; anything else is a bug of ours: logged."""
    if task.done():
        _read_abandoned(task)
    else:
        task.cancel()
        task.add_done_callback(_read_abandoned)


def _read_abandoned(task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, MCPLiteError):
        log.error("a call nobody waited for any more failed", exc_info=exc)


def being_cancelled() -> bool:
    """Whether the running task was asked to cancel (vs. a stray CancelledError)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


class Runner:
    """Runs tools to their outcome; ``sync_workers`` sizes the thread pool for sync tools."""

    def __init__(self, sync_workers: int | None = None) -> None:
        self._executor = ThreadPoolExecutor(sync_workers, thread_name_prefix="mcplite")
        self._task_names: dict[str, str] = {}  # one name string per tool, not per task

    async def run(self, tool: Tool, args: dict[str, Any], parts: PartSink | None = None) -> Outcome:
        """Run ``tool`` with validated ``args`` to its outcome.

        A streaming tool's parts go to ``parts`` as they come (and are gathered
        into the final answer when it yields no outcome of its own).  Raises
        :class:`MCPLiteError` for protocol errors, ``CancelledError`` when cancelled.
        """
        try:
            if tool.kind is Kind.ASYNC:
                running = tool.fn(**args)
                del args  # the tool's frame has them; a pending promise keeps no copy
                value = await running
            elif tool.kind is Kind.SYNC:
                loop = asyncio.get_running_loop()
                # In a copy of this context, as asyncio.to_thread runs a function:
                # the tool sees the caller's context variables (a tracing span).
                run = contextvars.copy_context().run
                value = await loop.run_in_executor(
                    self._executor, functools.partial(run, tool.fn, **args)
                )
            else:
                value = await self._iterate(tool, args, parts)
        except (Exception, asyncio.CancelledError) as exc:
            return self._settle(tool, exc, being_cancelled())
        return outcome_of(value)

    def start(self, tool: Tool, args: dict[str, Any]) -> asyncio.Task[Any]:
        """Run ``tool`` in a task of its own, for a call that may outlive its
        caller's request (a promise); read the outcome with :meth:`outcome`.

        An async tool's coroutine *is* the task, with no frame of ours around it:
        a pending promise holds the tool's frame and the task, nothing more.
        """
        name = self._task_names.get(tool.name)
        if name is None:
            name = self._task_names[tool.name] = f"mcplite:{tool.name}"
        if tool.kind is Kind.ASYNC:
            return start_task(tool.fn(**args), name)
        return start_task(self.run(tool, args), name)

    def outcome(self, tool: Tool, task: asyncio.Task[Any]) -> Outcome:
        """The outcome of a task from :meth:`start` that is done: the ladder of
        :meth:`run`.  ``CancelledError`` when the task was cancelled by request."""
        try:
            value = task.result()
        except (Exception, asyncio.CancelledError) as exc:
            return self._settle(tool, exc, task.cancelling() > 0)
        return outcome_of(value)

    def _settle(self, tool: Tool, exc: BaseException, asked_to_cancel: bool) -> Outcome:
        """The exception ladder: a failure is an outcome; everything else raises."""
        if isinstance(exc, Failure):
            return exc
        if isinstance(exc, MCPLiteError):
            raise exc
        if isinstance(exc, asyncio.CancelledError) and asked_to_cancel:
            raise exc
        # Anything else, including a CancelledError a tool raised of its own accord.
        raise internal_error(tool.name, exc) from None

    async def _iterate(self, tool: Tool, args: dict[str, Any], sink: PartSink | None) -> Any:
        parts: list[Any] = []
        agen = tool.fn(**args)
        try:
            async for item in agen:
                if isinstance(item, OUTCOME_TYPES):
                    return item
                parts.append(item)
                if sink is not None:
                    await sink(item)
        finally:
            await agen.aclose()
        return aggregate(parts)

    def close(self) -> None:
        """Stop the thread pool; queued sync calls are dropped."""
        self._executor.shutdown(wait=False, cancel_futures=True)
