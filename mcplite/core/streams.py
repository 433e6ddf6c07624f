"""A streamed call: the tool's parts, progress and end, handed to a binding one at a time.

:meth:`mcplite.core.dispatch.Dispatcher.stream` admits the call and starts a
:class:`ToolStream`; the binding reads it with :meth:`ToolStream.next` (or
``async for``) and closes it with :meth:`ToolStream.aclose`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .context import IN_PROCESS, RequestContext
from .envelope import Result
from .errors import MCPLiteError
from .middleware import ToolCall, chain
from .outcomes import Partial, ProgressUpdate
from .runner import internal_error, wake
from .tools import Context, Kind, Progress, Tool

if TYPE_CHECKING:
    from .dispatch import Dispatcher

__all__ = ["ToolStream"]


class _StreamError:
    __slots__ = ("error",)

    def __init__(self, error: MCPLiteError) -> None:
        self.error = error


#: What a stream holds for its binding: parts and progress, then the end.
_Item = Partial | ProgressUpdate | Result | _StreamError


class ToolStream:
    """A running streamed call.

    The tool runs in its own task and hands each part over one at a time: the
    generator is not advanced until the binding has taken the previous part, so
    a slow reader holds the tool back instead of filling memory.  Progress the
    tool reports (see :meth:`Dispatcher.stream`) comes in its place among the
    parts and never holds the tool back: a report not taken yet is replaced by
    the next one, so at most three items wait (report, part, report).

    Nothing here runs in a task of the binding's: :meth:`next` waits on a future
    of its own, with its own timer, so a binding that stops reading (its client
    gone) leaves no task whose exception nobody retrieves.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        tool: Tool,
        args: dict[str, Any],
        context: RequestContext = IN_PROCESS,
        ctx: Context | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self.tool = tool
        self._context = context
        self._ctx = ctx  # the tool's Context argument, if it takes one
        self._loop = loop = asyncio.get_running_loop()
        self._items: collections.deque[_Item] = collections.deque()
        self._parts = 0  # parts and ends in _items: at most one (backpressure)
        self._reader: asyncio.Future[None] | None = None  # next() waiting for an item
        self._writer: asyncio.Future[None] | None = None  # the tool waiting for room
        self._interrupted: MCPLiteError | None = None
        self._t0 = time.perf_counter()
        self._task = loop.create_task(self._produce(args))
        self._finished = False  # the end was taken (or the stream closed)
        self._closed = False
        self._released = False
        dispatcher.active += 1
        dispatcher.streams += 1
        # A task cancelled before its first step never runs its finally: the
        # callback covers that case; _produce releases at once otherwise.
        self._task.add_done_callback(self._release)

    def _release(self, _: object = None) -> None:
        if not self._released:
            self._released = True
            self._dispatcher.active -= 1
            self._dispatcher.streams -= 1

    async def _put(self, item: Partial | Result | _StreamError) -> None:
        """Hand a part (or the end) over, once the one before it was taken."""
        while self._parts and not self._closed:
            self._writer = waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._writer = None
        if self._closed:
            return  # nobody will take it
        self._items.append(item)
        self._parts += 1
        wake(self._reader)

    async def _put_part(self, value: Any) -> None:
        await self._put(Partial(value))

    def reported(self, progress: Progress) -> None:
        """The tool reported ``progress`` (a :class:`Progress` sink): pass it on.
        Called on the loop, or from a sync tool's worker thread."""
        update = ProgressUpdate(progress.progress or 0, progress.total, progress.message)
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._offer(update)
        else:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
                self._loop.call_soon_threadsafe(self._offer, update)

    def _offer(self, update: ProgressUpdate) -> None:
        if self._finished:
            return
        items = self._items
        if items and isinstance(items[-1], ProgressUpdate):
            items[-1] = update  # not taken yet: the newer report says more
        else:
            items.append(update)
        wake(self._reader)

    async def _run(self, call: ToolCall) -> Result:
        """The innermost step of the middleware chain: run the tool, its parts
        handed over as they come."""
        started, t0 = time.time(), time.perf_counter()
        tool, args = call.tool, call.arguments
        if tool.kind is Kind.SYSTEM:
            result: Result = await tool.fn(call.context, **args)
            return result
        if self._ctx is not None and tool.context_param is not None:
            args = {**args, tool.context_param: self._ctx}
        outcome = await self._dispatcher.runner.run(tool, args, self._put_part)
        return Result(outcome, started, (time.perf_counter() - t0) * 1000)

    async def _produce(self, args: dict[str, Any]) -> None:
        t0 = self._t0
        item: Result | _StreamError
        try:
            call = ToolCall(self.tool, args, self._context)
            middleware = self._dispatcher.middleware
            item = await (chain(middleware, self._run) if middleware else self._run)(call)
        except Exception as exc:
            # The runner turns whatever a tool raises into an MCPLiteError; anything
            # else is a system tool's (a promise store that fails): an internal error.
            error = exc if isinstance(exc, MCPLiteError) else internal_error(self.tool.name, exc)
            item = _StreamError(error)
            metrics = self._dispatcher.metrics
            if metrics.on:
                binding, name = self._context.binding, self.tool.name
                metrics.call_error(binding, name, error.jsonrpc_code, time.perf_counter() - t0)
        else:
            metrics = self._dispatcher.metrics
            if metrics.on and isinstance(item, Result):
                kind = item.response_type.value
                metrics.call(self._context.binding, self.tool.name, kind, time.perf_counter() - t0)
        self._release()  # the tool is done: no longer a call in flight
        await self._put(item)

    async def next(self, timeout: float | None = None) -> Partial | ProgressUpdate | Result | None:
        """The next part, progress report (see :meth:`Dispatcher.stream`) or the
        final result; None if ``timeout`` passes first.

        Raises :class:`MCPLiteError` if the tool fails mid-stream (or the stream
        was :meth:`interrupt`-ed), and ``StopAsyncIteration`` after the final
        result was taken.
        """
        if self._finished:
            raise StopAsyncIteration
        if not self._items and self._interrupted is None:
            loop = self._loop
            self._reader = waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, wake, waiter)
            try:
                await waiter
            finally:
                self._reader = None
                if timer is not None:
                    timer.cancel()
            if not self._items and self._interrupted is None:
                return None
        if self._interrupted is not None:
            self._finished = True
            raise self._interrupted
        item = self._items.popleft()
        if isinstance(item, ProgressUpdate):
            return item
        self._parts -= 1
        wake(self._writer)
        if isinstance(item, Partial):
            return item
        self._finished = True
        if isinstance(item, _StreamError):
            raise item.error
        return item

    def interrupt(self, error: MCPLiteError) -> None:
        """End the stream early with ``error`` (the server is shutting down): the
        :meth:`next` waiting now, or the next one, raises it, and what the tool
        has not handed over yet is dropped.  :meth:`aclose` still stops the tool."""
        if not self._finished:
            self._interrupted = error
            wake(self._reader)

    def __aiter__(self) -> AsyncIterator[Partial | Result]:
        return self

    async def __anext__(self) -> Partial | Result:
        """The next part or the result (progress reports, if asked for, are skipped:
        :meth:`next` gives them)."""
        while True:
            item = await self.next()
            if not isinstance(item, ProgressUpdate):
                assert item is not None
                return item

    async def aclose(self, timeout: float = 5.0, *, disconnected: bool = False) -> None:
        """Stop the tool (its ``finally`` runs) and wait for it, at most ``timeout`` s.

        ``disconnected``: the binding closes the stream because its client went
        away; a tool stopped by it is counted with the outcome ``disconnected``
        (``mcplite_calls_total``).
        """
        self._finished = self._closed = True
        self._items.clear()
        wake(self._writer)
        task = self._task
        if not task.done():
            metrics = self._dispatcher.metrics
            if disconnected and not self._released and metrics.on:
                elapsed = time.perf_counter() - self._t0
                metrics.call(self._context.binding, self.tool.name, "disconnected", elapsed)
            task.cancel()
            await asyncio.wait((task,), timeout=timeout)
