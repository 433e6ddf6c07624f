"""Dispatch: look a tool up, validate its arguments, run it, wrap the outcome.

This is the one path every binding goes through.  It is also the runner, the
one place where user code is awaited: async tools on the loop, sync tools in a
thread pool (a blocking tool never stalls the loop), async generators iterated
for streams, and promise deadlines that turn a long call into a promise.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import logging
import math
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar, overload

from .config import Config
from .envelope import (
    Answer,
    Elicitation,
    Failure,
    MoreResources,
    Partial,
    ResponseType,
    Result,
    iso_timestamp,
    to_result,
)
from .errors import (
    InternalError,
    InvalidParams,
    MCPLiteError,
    Overloaded,
    PromiseTableFull,
    ToolNotFound,
)
from .promises import PromiseEntry, PromiseStore, PromiseTable, TokenSealer
from .schema import SchemaError
from .tools import Context, Kind, Progress, Tool, Tools

__all__ = ["Dispatcher", "ToolStream", "aggregate", "start_task"]

log = logging.getLogger("mcplite")

_OUTCOMES = (Answer, Failure, Elicitation, MoreResources, Result)


def aggregate(parts: list[Any]) -> Any:
    """What a stream's parts add up to when one final value is wanted.

    All-string parts are joined into one string (one text item); any other
    parts become the list of parts (one content item each).
    """
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return list(parts)


def _server_secret(config: Config) -> bytes:
    if config.secret is not None:
        return config.secret
    env = os.environ.get("MCPLITE_SECRET")
    if env:
        return env.encode()
    log.warning(
        "no promise secret given (--secret or MCPLITE_SECRET): using a random one; "
        "promise tokens will not survive a restart"
    )
    return secrets.token_bytes(32)


class Dispatcher:
    """Serves the tools of a registry to any binding.

    :meth:`call` and :meth:`stream` raise :class:`~mcplite.errors.MCPLiteError`
    subclasses for protocol errors (unknown tool, invalid arguments, overload,
    a crash inside a tool); every business outcome is a :class:`Result`.
    """

    def __init__(
        self,
        tools: Tools | Iterable[Tool],
        config: Config | None = None,
        *,
        promises: PromiseStore | None = None,
    ) -> None:
        self.config = config = config or Config()
        self.sealer = TokenSealer(_server_secret(config), config.previous_secrets)
        self.promises: PromiseStore = (
            promises
            if promises is not None
            else PromiseTable(
                self.sealer,
                ttl=config.promise_ttl,
                max_entries=config.max_promises,
                retry_after=config.retry_after,
            )
        )
        self._tools: dict[str, Tool] = {}
        for tool in (*self._system_tools(), *tools):
            if tool.name in self._tools:
                raise ValueError(f"a tool named {tool.name!r} is already registered")
            self._tools[tool.name] = tool
        self._definitions = [t.definition() for t in self._tools.values()]
        self._names = list(self._tools)
        self._executor = ThreadPoolExecutor(config.sync_workers, thread_name_prefix="mcplite")
        self.active = 0  # calls and streams in flight

    # -- discovery ----------------------------------------------------------

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Every tool's discovery entry, system tools included (built once)."""
        return self._definitions

    def tool(self, name: str) -> Tool:
        """The tool called ``name``; raises :class:`ToolNotFound` with a suggestion."""
        tool = self._tools.get(name)
        if tool is None:
            raise ToolNotFound(name, self._names, self._closest(name))
        return tool

    def _closest(self, name: str) -> str | None:
        """The registered name closest to ``name`` (A.5's suggestion), if any is close.

        A name containing the request (or contained in it) wins; otherwise the
        best similarity ratio of at least 0.3, which still catches a wrong word
        in a long name while leaving unrelated names unsuggested.
        """
        lowered = name.lower()
        contains = [n for n in self._names if lowered and (lowered in n or n in lowered)]
        if contains:
            return min(contains, key=lambda n: abs(len(n) - len(name)))
        close = difflib.get_close_matches(name, self._names, n=1, cutoff=0.3)
        return close[0] if close else None

    # -- calls --------------------------------------------------------------

    def validate(self, tool: Tool, arguments: Any) -> dict[str, Any]:
        """Arguments checked against the tool's schema, defaults filled in.

        Raises :class:`InvalidParams` naming every offending field.
        """
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise InvalidParams.from_fields([("arguments", "expected an object")])
        try:
            return tool.arguments(tool.checker(arguments))
        except SchemaError as exc:
            raise InvalidParams.from_fields([(e.path, e.message) for e in exc.errors]) from None

    def _admit(self) -> None:
        if self.active >= self.config.max_concurrent_calls:
            raise Overloaded(
                f"Too many concurrent calls (max {self.config.max_concurrent_calls})",
                retry_after=self.config.retry_after,
            )

    async def call(self, name: str, arguments: Any = None) -> Result:
        """Run tool ``name`` and return its outcome (possibly a promise)."""
        tool = self.tool(name)
        args = self.validate(tool, arguments)
        self._admit()
        self.active += 1
        try:
            # One coroutine for lookup, deadline and promise: every await level
            # costs a little on the hot path.
            return await self._run(tool, args)
        finally:
            self.active -= 1

    def _run(self, tool: Tool, args: dict[str, Any]) -> Coroutine[Any, Any, Result]:
        started, t0 = time.time(), time.perf_counter()
        deadline = tool.promise_after
        if deadline is None:
            deadline = self.config.promise_after
        if tool.context_param is None and math.isinf(deadline):
            return self._complete(tool, args, started, t0)  # awaited by call() directly
        return self._run_with_deadline(tool, args, started, t0, deadline)

    async def _run_with_deadline(
        self, tool: Tool, args: dict[str, Any], started: float, t0: float, deadline: float
    ) -> Result:
        progress = None
        if tool.context_param is not None:
            progress = Progress()
            args = {**args, tool.context_param: Context(tool.name, progress)}
        if math.isinf(deadline):
            return await self._complete(tool, args, started, t0)

        if deadline == 0 and not self._has_room():
            raise PromiseTableFull(retry_after=self.config.retry_after)
        task = start_task(self._complete(tool, args, started, t0, True))
        promised = False
        try:
            # ALWAYS (0) means a promise even for a tool that is already done.
            if deadline > 0 and await _wait_done(task, deadline):
                return _unwrap(task.result())
            try:
                entry = self.promises.put(tool.name, task, progress)
            except PromiseTableFull:
                task.cancel()
                raise
            promised = True
            return self.promise_result(entry, started, t0)
        finally:
            if not promised and not task.done():
                task.cancel()  # the caller went away before an answer or a promise

    def _has_room(self) -> bool:
        has_room = getattr(self.promises, "has_room", None)
        return bool(has_room()) if has_room is not None else True

    @overload
    async def _complete(
        self, tool: Tool, args: dict[str, Any], started: float, t0: float
    ) -> Result: ...

    @overload
    async def _complete(
        self, tool: Tool, args: dict[str, Any], started: float, t0: float, keep: Literal[True]
    ) -> Result | MCPLiteError: ...

    async def _complete(
        self, tool: Tool, args: dict[str, Any], started: float, t0: float, keep: bool = False
    ) -> Result | MCPLiteError:
        """Run the tool and wrap its outcome.  Protocol errors are raised, or with
        ``keep`` returned: a promised task then never ends in an exception, so it
        needs no callback to mark one retrieved (memory per pending promise)."""
        try:
            if tool.kind is Kind.ASYNC:
                running = tool.fn(**args)
                del args  # the tool's frame has them; a pending promise keeps no copy
                value = await running
            elif tool.kind is Kind.SYNC:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(
                    self._executor, functools.partial(tool.fn, **args)
                )
            else:
                value = await self._drain(tool, args)
        except Failure as failure:
            value = failure
        except MCPLiteError as exc:
            if keep:
                return exc.with_traceback(None)
            raise
        except asyncio.CancelledError as exc:
            if _being_cancelled():
                raise
            # A tool that raises CancelledError of its own accord has a bug.
            if keep:
                return self.internal_error(tool.name, exc)
            raise self.internal_error(tool.name, exc) from None
        except Exception as exc:
            if keep:
                return self.internal_error(tool.name, exc)
            raise self.internal_error(tool.name, exc) from None
        if isinstance(value, Result):
            return value
        return to_result(value, started, (time.perf_counter() - t0) * 1000)

    async def _drain(self, tool: Tool, args: dict[str, Any]) -> Any:
        parts: list[Any] = []
        agen = tool.fn(**args)
        try:
            async for item in agen:
                if isinstance(item, _OUTCOMES):
                    return item
                parts.append(item)
        finally:
            await agen.aclose()
        return aggregate(parts)

    def internal_error(self, tool: str, exc: BaseException) -> InternalError:
        """Log an unexpected exception with an id; the error sent carries only the id."""
        error_id = secrets.token_hex(6)
        log.error("tool %r raised (error id %s)", tool, error_id, exc_info=exc)
        return InternalError(
            f"Internal error in tool '{tool}' (error id {error_id})", {"error_id": error_id}
        )

    def promise_result(self, entry: PromiseEntry, started: float, t0: float) -> Result:
        extra: dict[str, Any] = {
            "promise_token": self.promises.token(entry),
            "expires_at": iso_timestamp(entry.expires_at),
        }
        if entry.progress is not None:
            progress = entry.progress.snapshot()
            if progress:
                extra["progress"] = progress
            if entry.progress.estimated_completion is not None:
                extra["estimated_completion"] = iso_timestamp(entry.progress.estimated_completion)
        elapsed = (time.perf_counter() - t0) * 1000
        return Result(ResponseType.PROMISE, {"content": []}, started, elapsed, extra)

    # -- streams ------------------------------------------------------------

    def stream(self, name: str, arguments: Any = None) -> ToolStream:
        """Start a streamed call: an async iterator of :class:`Partial` then one :class:`Result`.

        Raises :class:`ToolNotFound`, :class:`InvalidParams` or :class:`Overloaded`
        before anything runs.  Close it (``aclose``) to stop the tool.
        """
        tool = self.tool(name)
        args = self.validate(tool, arguments)
        self._admit()
        return ToolStream(self, tool, args)

    # -- system tools: redeem and cancel ------------------------------------

    def _system_tools(self) -> list[Tool]:
        system = Tools()
        token = {
            "type": "string",
            "description": "The promise token received from a previous operation",
        }
        system.add(
            self._redeem,
            name="redeem",
            type="system",
            description="Redeem a promise token to get the result of a long-running operation",
            schema={
                "type": "object",
                "required": ["promise"],
                "properties": {
                    "promise": token,
                    "wait": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": self.config.max_redeem_wait,
                        "default": 0,
                        "description": "Seconds to wait for the outcome before answering "
                        "with the promise again (long poll)",
                    },
                },
            },
            promise_after=math.inf,
        )
        system.add(
            self._cancel,
            name="cancel",
            type="system",
            description="Cancel the long-running operation behind a promise token",
            schema={"type": "object", "required": ["promise"], "properties": {"promise": token}},
            promise_after=math.inf,
        )
        return list(system)

    async def _redeem(self, promise: str, wait: float = 0, **_: Any) -> Result:
        started, t0 = time.time(), time.perf_counter()
        entry = self.promises.get(promise)
        # A cancelled entry says so at once, even before its task has unwound.
        if not entry.cancelled and not await self.promises.wait(entry, wait):
            return self.promise_result(entry, started, t0)
        task = entry.task
        if entry.cancelled or task.cancelled():
            elapsed = (time.perf_counter() - t0) * 1000
            return to_result(
                Failure("the operation was cancelled", reason="cancelled"), started, elapsed
            )
        exc = task.exception()
        if exc is not None:  # a store whose tasks raise rather than return errors
            raise exc.with_traceback(None)
        return _unwrap(task.result())

    async def _cancel(self, promise: str, **_: Any) -> Answer:
        entry = self.promises.get(promise)
        cancelled = self.promises.cancel(entry)
        text = "cancelled" if cancelled else "already finished"
        return Answer([{"type": "text", "text": text}], {"cancelled": cancelled})

    def close(self) -> None:
        """Cancel promised tasks and stop the thread pool (server shutdown)."""
        close = getattr(self.promises, "close", None)
        if close is not None:
            close()
        self._executor.shutdown(wait=False, cancel_futures=True)


class _StreamError:
    __slots__ = ("error",)

    def __init__(self, error: MCPLiteError) -> None:
        self.error = error


class ToolStream:
    """A running streamed call.

    The tool runs in its own task and hands each part over through a queue of
    one: the generator is not advanced until the binding has taken the previous
    part, so a slow reader holds the tool back instead of filling memory.
    """

    def __init__(self, dispatcher: Dispatcher, tool: Tool, args: dict[str, Any]) -> None:
        self._dispatcher = dispatcher
        self.tool = tool
        self._queue: asyncio.Queue[Partial | Result | _StreamError] = asyncio.Queue(1)
        self._task = asyncio.get_running_loop().create_task(self._produce(args))
        self._finished = False
        self._released = False
        dispatcher.active += 1
        # A task cancelled before its first step never runs its finally: the
        # callback covers that case; _produce releases at once otherwise.
        self._task.add_done_callback(self._release)

    def _release(self, _: object = None) -> None:
        if not self._released:
            self._released = True
            self._dispatcher.active -= 1

    async def _produce(self, args: dict[str, Any]) -> None:
        tool = self.tool
        started, t0 = time.time(), time.perf_counter()
        if tool.context_param is not None:
            args = {**args, tool.context_param: Context(tool.name)}
        item: Result | _StreamError
        if tool.kind is not Kind.STREAM:
            try:
                item = await self._dispatcher._complete(tool, args, started, t0)
            except MCPLiteError as exc:
                item = _StreamError(exc)
            self._release()  # the tool is done: no longer a call in flight
            await self._queue.put(item)
            return
        parts: list[Any] = []
        final: Any = None
        agen = tool.fn(**args)
        try:
            try:
                async for part in agen:
                    if isinstance(part, _OUTCOMES):
                        final = part
                        break
                    parts.append(part)
                    await self._queue.put(Partial(part))
            finally:
                await agen.aclose()
            value = final if final is not None else aggregate(parts)
            item = (
                value
                if isinstance(value, Result)
                else to_result(value, started, (time.perf_counter() - t0) * 1000)
            )
        except Failure as failure:
            item = to_result(failure, started, (time.perf_counter() - t0) * 1000)
        except MCPLiteError as exc:
            item = _StreamError(exc)
        except asyncio.CancelledError as exc:
            if _being_cancelled():
                raise
            item = _StreamError(self._dispatcher.internal_error(tool.name, exc))
        except Exception as exc:
            item = _StreamError(self._dispatcher.internal_error(tool.name, exc))
        self._release()  # the tool is done: no longer a call in flight
        await self._queue.put(item)

    async def next(self, timeout: float | None = None) -> Partial | Result | None:
        """The next part or the final result; None if ``timeout`` passes first.

        Raises :class:`MCPLiteError` if the tool fails mid-stream, and
        ``StopAsyncIteration`` after the final result was taken.
        """
        if self._finished:
            raise StopAsyncIteration
        if timeout is None:
            item = await self._queue.get()
        else:
            try:
                item = await asyncio.wait_for(self._queue.get(), timeout)
            except TimeoutError:
                return None
        if isinstance(item, Partial):
            return item
        self._finished = True
        if isinstance(item, _StreamError):
            raise item.error
        return item

    def __aiter__(self) -> AsyncIterator[Partial | Result]:
        return self

    async def __anext__(self) -> Partial | Result:
        item = await self.next()
        assert item is not None
        return item

    async def aclose(self, timeout: float = 5.0) -> None:
        """Stop the tool (its ``finally`` runs) and wait for it, at most ``timeout`` s."""
        self._finished = True
        task = self._task
        if not task.done():
            task.cancel()
            await asyncio.wait((task,), timeout=timeout)


T = TypeVar("T")


def _unwrap(outcome: Result | MCPLiteError) -> Result:
    if isinstance(outcome, MCPLiteError):
        raise outcome
    return outcome


def _being_cancelled() -> bool:
    """Whether the running task was asked to cancel (vs. a stray CancelledError)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


if sys.version_info >= (3, 12):

    def start_task(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task that starts eagerly: a coroutine that finishes without
        suspending is done before this returns, with no trip through the loop
        (and with the task set as current, so asyncio.timeout and TaskGroup work)."""
        return asyncio.Task(coro, loop=asyncio.get_running_loop(), eager_start=True)

else:

    def start_task(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task (eager from Python 3.12 on; scheduled on 3.11)."""
        return asyncio.get_running_loop().create_task(coro)


async def _wait_done(fut: asyncio.Future[Any], timeout: float) -> bool:
    """Wait for ``fut`` up to ``timeout`` seconds without cancelling it."""
    if fut.done():
        return True
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def release(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    handle = loop.call_later(timeout, release)
    fut.add_done_callback(release)
    try:
        await waiter
    finally:
        handle.cancel()
        fut.remove_done_callback(release)
    return fut.done()
