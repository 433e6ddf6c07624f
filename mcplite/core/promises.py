"""Where a promise is stored: the store Protocol over plain records, and the
in-memory store.

A promise is a call that outlived its deadline.  Its *record* is plain data
(:class:`PromiseRecord`: status, progress, outcome, owner, expiry), so that a
store shared by several processes (SQLite, Redis) can hold it; the asyncio task
that runs the tool stays in the process that started it (its *owner*, see
:class:`mcplite.core.dispatch.Dispatcher`).  Tokens are sealed and opened by
:mod:`mcplite.core.tokens` before a store is ever touched.

An owner may die with its calls running (a worker killed, a host gone).  So
in a shared store every owner holds a *lease* that its store renews while it
has calls running; a RUNNING record whose owner's lease has lapsed resolves,
once, to :func:`worker_lost` (a retryable failure), and every waiter wakes.
Nothing waits forever on a dead process.

:class:`MemoryStore` keeps records in a dict in insertion order, which is expiry
order (every record lives ``ttl`` seconds): sweeping pops expired records from
the front and never scans the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from .envelope import Result
from .errors import MCPLiteError, PromiseTableFull, StoreUnavailable, UnknownPromise
from .outcomes import Failure

__all__ = [
    "DEFAULT_LEASE",
    "WORKER_LOST",
    "CancelListener",
    "MemoryStore",
    "Outage",
    "ProcessSide",
    "PromiseRecord",
    "PromiseStatus",
    "PromiseStore",
    "SweepTimer",
    "Waiters",
    "stop_tasks",
    "store_outcome",
    "worker_lost",
]

log = logging.getLogger("mcplite.core.promises")


class PromiseStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


@dataclass(slots=True, eq=False)
class PromiseRecord:
    """One promise as a store keeps it: plain data, no task, no future."""

    promise_id: bytes  # 16 random bytes; the token seals it with the expiry
    tool: str
    owner: str  # the process whose task runs the call
    expires_at: float  # epoch seconds
    status: PromiseStatus = PromiseStatus.RUNNING
    progress: dict[str, Any] | None = None  # progress, total, message, estimated_completion
    result: Result | None = None  # set when DONE with an outcome
    error: MCPLiteError | None = None  # set when DONE with a protocol error


CancelListener = Callable[[bytes], None]
"""Told the id of a running promise that must stop (cancelled, expired, or lost)."""

#: Seconds an owner's lease lasts in a shared store; renewed every third of it.
DEFAULT_LEASE = 10.0
#: The ``reason`` of the failure a promise resolves to when its owner was lost.
WORKER_LOST = "worker_lost"


def worker_lost(now: float) -> Result:
    """The outcome of a call whose owner was lost (its lease lapsed, or its store
    closed before the call ended): a failure that says the call may be retried.
    ``now`` (epoch seconds) is when the loss was found."""
    failure = Failure(
        "the worker running this call was lost; the call may be retried",
        reason=WORKER_LOST,
        retryable=True,
    )
    return Result(failure, now, 0.0)


class PromiseStore(Protocol):
    """What the core needs from a promise store.

    Every method but :meth:`set_progress` and :meth:`on_cancel` may suspend (a
    shared store talks to a server), and raises :class:`StoreUnavailable` while
    the store does not answer or cannot write; the store recovers by itself
    (reconnects, reopens) once it can.  Ids come from tokens that were already
    verified: a store never sees a forged one.

    **Leases.**  Each record names its ``owner``, the process whose task runs the
    call.  A store shared by several processes keeps a lease per owner (not per
    record): :meth:`create` takes or extends the lease of its ``owner``, and the
    store renews it in the background while any record it created is RUNNING.
    When a RUNNING record's owner has no live lease (the process died, hung, or
    its store closed), the first reader that sees it (:meth:`get`, :meth:`wait`)
    resolves it atomically, once, to DONE with :func:`worker_lost` as its result,
    and wakes its waiters; a wait notices within about one lease.  A live owner
    told that its record was resolved elsewhere hears it through
    :meth:`on_cancel` and stops its task.  The in-memory store has one owner, the
    process itself, that is alive as long as the store is.
    """

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        """A new RUNNING record; raises :class:`PromiseTableFull` at capacity."""
        ...

    async def has_room(self) -> bool:
        """Whether :meth:`create` would succeed now (expired records dropped first)."""
        ...

    async def complete(
        self, promise_id: bytes, result: Result | None, error: MCPLiteError | None = None
    ) -> None:
        """Store the outcome of a RUNNING record (a cancelled one stays cancelled)."""
        ...

    def set_progress(self, promise_id: bytes, progress: dict[str, Any]) -> None:
        """Record progress; a shared store may send it in the background."""
        ...

    async def get(self, promise_id: bytes) -> PromiseRecord:
        """The record; raises :class:`UnknownPromise` when there is none.

        A RUNNING record whose owner's lease has lapsed comes back DONE with
        :func:`worker_lost` (and stays so for every reader)."""
        ...

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        """The record once it is no longer RUNNING, or as it is after ``timeout`` s;
        a record whose owner is lost ends the wait within about one lease."""
        ...

    async def request_cancel(self, promise_id: bytes) -> bool:
        """Mark a RUNNING record CANCELLED and tell its owner; False if it had ended."""
        ...

    def on_cancel(self, listener: CancelListener) -> None:
        """Call ``listener(promise_id)`` when a running promise must stop."""
        ...

    async def sweep(self) -> int:
        """Drop expired records (running ones are stopped first); return how many."""
        ...

    async def close(self) -> None:
        """Stop this process's running records, end every wait and stop background
        work (server shutdown); later lookups raise :class:`UnknownPromise`.

        A store of this process only forgets *locally*: a shared store's records
        stay for the other processes (this process's running ones resolve to
        :func:`worker_lost` and its lease is released); the in-memory store's
        records die with it."""
        ...


class Outage:
    """Whether a shared store answers, as its last commands found it.

    A store down fails every request until it is back: the log hears of it once
    when it goes (WARNING, with the cause) and once when it is back, never once
    per request.  A store may refuse writes only (locked, read-only, full): a
    read that works then says nothing of the writes, and ends no outage."""

    def __init__(self, logger: logging.Logger, what: str, retry_after: float) -> None:
        self.log = logger
        self.what = what
        self.retry_after = retry_after
        self.down: str | None = None  # None, "writes" (reads work), or "all"

    def failed(self, exc: BaseException, *, write: bool = True) -> StoreUnavailable:
        """The error to raise for a command (a ``write`` or not) that failed with ``exc``."""
        if self.down is None:
            self.log.warning(
                "%s unavailable (%s: %s); calls that need it are refused as retryable "
                "until it is back",
                self.what,
                type(exc).__name__,
                exc,
            )
        if self.down != "all":
            self.down = "writes" if write else "all"
        # The wire says no more than that: where the store lives is not the client's business.
        return StoreUnavailable(retry_after=self.retry_after)

    def ok(self, *, write: bool = True) -> None:
        """A command (a ``write`` or not) succeeded."""
        if self.down is not None and (write or self.down == "all"):
            self.down = None
            self.log.warning("%s is available again", self.what)


#: The first pause before storing a promise's outcome again while the store is
#: unavailable; it doubles up to the server's ``retry_after``.
STORE_RETRY_FIRST = 0.05


async def store_outcome(
    store: PromiseStore,
    promise_id: bytes,
    outcome: Result | MCPLiteError,
    expires_at: float,
    retry_after: float,
    clock: Callable[[], float] = time.time,
) -> None:
    """Store a promise's ``outcome``, again and again while the store is
    unavailable, until it is stored or the promise expires (``expires_at``, epoch
    seconds: its token is dead by then).  Raises :class:`StoreUnavailable` when it
    expired unstored, and what else ``complete`` raises."""
    result, error = (None, outcome) if isinstance(outcome, MCPLiteError) else (outcome, None)
    pause = STORE_RETRY_FIRST
    while True:
        try:
            await store.complete(promise_id, result, error)
            return
        except StoreUnavailable:
            if clock() + pause >= expires_at:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, max(retry_after, STORE_RETRY_FIRST))


class Waiters(dict[bytes, "asyncio.Future[None]"]):
    """The waits in progress on one store, by promise id: each id has one shared
    future, set when its record may have changed (the waiters then read it again).
    Every store keeps its waits so."""

    def future(self, promise_id: bytes) -> asyncio.Future[None]:
        """The future the waits on ``promise_id`` share (a fresh one once it is set)."""
        waiter = self.get(promise_id)
        if waiter is None or waiter.done():
            waiter = self[promise_id] = asyncio.get_running_loop().create_future()
        return waiter

    def wake(self, promise_id: bytes) -> None:
        waiter = self.pop(promise_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def wake_all(self) -> None:
        waiters = list(self.values())
        self.clear()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


async def stop_tasks(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel each task still running and wait for it to end (a store's close)."""
    for task in tasks:
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


#: A store's own sweep runs no sooner than this after it is asked for (a record
#: already expired: no spin) and no later (a clock that jumps is caught up).
SWEEP_DELAY_MIN, SWEEP_DELAY_MAX = 0.05, 60.0


class SweepTimer:
    """When a store sweeps by itself: one timer, at the earliest deadline asked for
    (an expiry, epoch seconds by the store's clock), which calls ``due()``."""

    def __init__(self, clock: Callable[[], float], due: Callable[[], object]) -> None:
        self._clock = clock
        self._due = due
        self._handle: asyncio.TimerHandle | None = None
        self._deadline: float | None = None

    def at(self, deadline: float) -> None:
        """Call ``due()`` at ``deadline`` unless it is due by then already (nothing
        without a running loop: the next call made in one sets it)."""
        if self._deadline is not None and self._deadline <= deadline:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self.cancel()
        self._deadline = deadline
        delay = max(SWEEP_DELAY_MIN, min(deadline - self._clock(), SWEEP_DELAY_MAX))
        self._handle = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._handle = self._deadline = None
        self._due()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._deadline = None


class ProcessSide:
    """What a store keeps in this process, wherever its records live: the running
    records created here (``mine``), the waits, the ``on_cancel`` listeners, and
    its background tasks."""

    def __init__(self) -> None:
        self.mine: set[bytes] = set()
        self.waiters = Waiters()
        self.listeners: list[CancelListener] = []
        self.background: set[asyncio.Task[Any]] = set()

    def stopped(self, ids: Iterable[bytes]) -> None:
        """These running records must stop (cancelled, expired, lost): tell the
        listeners (their tasks end) and wake their waits."""
        for promise_id in ids:
            self.mine.discard(promise_id)
            for listener in self.listeners:
                listener(promise_id)
            self.waiters.wake(promise_id)

    def cancelled(self, promise_id: bytes, changed: bool | None) -> bool:
        """What ``request_cancel`` answers once the store marked the record:
        ``changed`` None when there is none (raises :class:`UnknownPromise`),
        False when it had ended, True when it was running (now stopped here)."""
        if changed is None:
            raise UnknownPromise()
        if changed:
            self.stopped([promise_id])
        return changed

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background (``close`` stops it)."""
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def close(self, *tasks: asyncio.Task[Any] | None) -> None:
        """Wake every wait; stop the background work and ``tasks``."""
        self.waiters.wake_all()
        await stop_tasks([*self.background, *tasks])


class MemoryStore:
    """The in-memory :class:`PromiseStore` of one process; bounded by ``max_entries``."""

    def __init__(
        self,
        *,
        ttl: float,
        max_entries: int,
        clock: Callable[[], float] = time.time,
        retry_after: float = 1.0,
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._retry_after = retry_after
        self._records: dict[bytes, PromiseRecord] = {}
        self._side = ProcessSide()
        # One timer while the store is non-empty, none while it is empty: no task
        # lives forever, and expired results are freed even with no traffic.
        self._sweeper = SweepTimer(clock, self._tick)

    def __len__(self) -> int:
        return len(self._records)

    async def has_room(self) -> bool:
        return self._has_room()

    def _has_room(self) -> bool:
        if len(self._records) < self._max:
            return True
        self._sweep()
        return len(self._records) < self._max

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        if not self._has_room():
            raise PromiseTableFull(retry_after=self._retry_after)
        record = PromiseRecord(os.urandom(16), tool, owner, self._clock() + self._ttl)
        self._records[record.promise_id] = record
        self._schedule_sweep()
        return record

    async def complete(
        self, promise_id: bytes, result: Result | None, error: MCPLiteError | None = None
    ) -> None:
        record = self._records.get(promise_id)
        if record is None or record.status is not PromiseStatus.RUNNING:
            return
        record.status = PromiseStatus.DONE
        record.result, record.error = result, error
        self._side.waiters.wake(promise_id)

    def set_progress(self, promise_id: bytes, progress: dict[str, Any]) -> None:
        record = self._records.get(promise_id)
        if record is not None:
            record.progress = progress

    async def get(self, promise_id: bytes) -> PromiseRecord:
        record = self._records.get(promise_id)
        if record is None:
            raise UnknownPromise()
        return record

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        record = await self.get(promise_id)
        if record.status is not PromiseStatus.RUNNING or timeout <= 0:
            return record
        waiter = self._side.waiters.future(promise_id)
        # asyncio.wait leaves the shared future alone when this waiter gives up.
        await asyncio.wait((waiter,), timeout=timeout)
        return await self.get(promise_id)

    async def request_cancel(self, promise_id: bytes) -> bool:
        record = await self.get(promise_id)
        if record.status is not PromiseStatus.RUNNING:
            return False
        record.status = PromiseStatus.CANCELLED
        self._side.stopped([promise_id])
        return True

    def on_cancel(self, listener: CancelListener) -> None:
        self._side.listeners.append(listener)

    async def sweep(self) -> int:
        return self._sweep()

    def _sweep(self) -> int:
        now = self._clock()
        records = self._records
        dropped = 0
        while records:
            oldest = next(iter(records.values()))
            if oldest.expires_at > now:
                break
            del records[oldest.promise_id]
            if oldest.status is PromiseStatus.RUNNING:
                log.warning("promise for %s expired while running; cancelled", oldest.tool)
                self._side.stopped([oldest.promise_id])
            dropped += 1
        return dropped

    async def close(self) -> None:
        running = [i for i, r in self._records.items() if r.status is PromiseStatus.RUNNING]
        self._side.stopped(running)
        self._records.clear()
        self._sweeper.cancel()

    def _schedule_sweep(self) -> None:
        self._sweeper.at(next(iter(self._records.values())).expires_at)

    def _tick(self) -> None:
        self._sweep()
        if self._records:
            self._schedule_sweep()
