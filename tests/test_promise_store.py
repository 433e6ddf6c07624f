"""The promise store contract (:class:`~mcplite.core.promises.PromiseStore`), for every store.

Each test here speaks only the Protocol (create, has_room, complete, set_progress,
get, wait, request_cancel, on_cancel, sweep, close) through the ``store_factory``
fixture, so a new store (SQLite, Redis) joins the whole file by adding one entry
to :data:`STORES`.  Records are compared field by field, never by identity: a
shared store hands out copies.  The stores: memory, SQLite (a file of its own per
store under ``tmp_path``), and Redis (a real ``redis-server`` started once for the
session, a key prefix of its own per store).

Sections:

- the contract with the real clock;
- expiry: tests that move time by hand with a :class:`FakeClock` passed as
  ``clock=`` (every store factory takes one);
- background sweeping: only for stores that free expired records with no
  traffic at all (``sweeps_in_background``);
- tokens before the store: through the :class:`~mcplite.Dispatcher`, a forged,
  tampered or expired token never reaches any store method;
- leases (the shared stores, SQLite and Redis): a record whose owner dies (a
  process killed with SIGKILL), hangs past its lease or closes its store
  resolves once, for every reader, to the retryable ``worker_lost`` failure,
  within the lease; a live owner's record never does.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import os
import struct
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict

import pytest
from conftest import SECRET, T0, DelegatingStore, FakeClock, make_config, single_changes
from redis_support import running_redis

from mcplite import (
    ALWAYS,
    Answer,
    Dispatcher,
    ExpiredToken,
    Failure,
    InternalError,
    InvalidToken,
    MemoryStore,
    Overloaded,
    PromiseRecord,
    PromiseStatus,
    PromiseStore,
    Result,
    Tools,
    UnknownPromise,
)
from mcplite.core.errors import MCPLiteError, PromiseTableFull
from mcplite.core.promises import SweepTimer
from mcplite.core.tokens import TokenSealer
from mcplite.stores.redis import RedisStore
from mcplite.stores.sqlite import SQLiteStore

WAIT = 5.0  # upper bound of every wait in this file
OWNER = "host-a/4242/0badf00d"

# --- the stores under test -------------------------------------------------------------------


class StoreOptions(TypedDict):
    ttl: float
    max_entries: int
    retry_after: float
    clock: Callable[[], float]


class StoreFactory(Protocol):
    """Makes a fresh, empty store (closed when the test ends)."""

    def __call__(
        self,
        *,
        ttl: float = 600.0,
        max_entries: int = 100,
        retry_after: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> PromiseStore: ...


@dataclass(frozen=True)
class StoreKind:
    name: str
    #: Opens a store; ``request`` gives it fixtures it may need (tmp_path, a server).
    open: Callable[[pytest.FixtureRequest, StoreOptions], PromiseStore]
    #: Frees expired records by itself, with no call to sweep(), has_room() or create().
    sweeps_in_background: bool


def open_memory_store(request: pytest.FixtureRequest, options: StoreOptions) -> PromiseStore:
    return MemoryStore(**options)


def open_sqlite_store(request: pytest.FixtureRequest, options: StoreOptions) -> PromiseStore:
    tmp_path: Path = request.getfixturevalue("tmp_path")
    # A file of its own per store: a second store is a restart with an empty table.
    return SQLiteStore(tmp_path / f"promises-{os.urandom(4).hex()}.sqlite3", **options)


def open_redis_store(request: pytest.FixtureRequest, options: StoreOptions) -> PromiseStore:
    url: str = request.getfixturevalue("redis_url")
    # Keys of its own per store: a second store is a restart with an empty table.
    return RedisStore(url, prefix=f"test-{os.urandom(4).hex()}:", **options)


STORES = [
    StoreKind("memory", open_memory_store, sweeps_in_background=True),
    StoreKind("sqlite", open_sqlite_store, sweeps_in_background=True),
    StoreKind("redis", open_redis_store, sweeps_in_background=True),
]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis server for the session (see :mod:`redis_support`)."""
    with running_redis() as url:
        yield url


@asynccontextmanager
async def opened(request: pytest.FixtureRequest, kind: StoreKind) -> AsyncIterator[StoreFactory]:
    made: list[PromiseStore] = []

    def make(
        *,
        ttl: float = 600.0,
        max_entries: int = 100,
        retry_after: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> PromiseStore:
        options = StoreOptions(
            ttl=ttl, max_entries=max_entries, retry_after=retry_after, clock=clock
        )
        store = kind.open(request, options)
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.close()


@pytest.fixture(params=STORES, ids=lambda kind: kind.name)
async def store_factory(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    async with opened(request, request.param) as make:
        yield make


@pytest.fixture(
    params=[kind for kind in STORES if kind.sweeps_in_background], ids=lambda kind: kind.name
)
async def background_sweeping_store_factory(
    request: pytest.FixtureRequest,
) -> AsyncIterator[StoreFactory]:
    async with opened(request, request.param) as make:
        yield make


@pytest.fixture
def store(store_factory: StoreFactory) -> PromiseStore:
    """A store with the default options."""
    return store_factory()


@pytest.fixture
def clock() -> FakeClock:
    """A clock at :data:`T0` that only the test moves (pass it as ``clock=``)."""
    return FakeClock()


# --- helpers ---------------------------------------------------------------------------------


class Listener:
    """An ``on_cancel`` listener recording the ids it was told to stop."""

    def __init__(self) -> None:
        self.told: list[bytes] = []
        self.called = asyncio.Event()

    def __call__(self, promise_id: bytes) -> None:
        self.told.append(promise_id)
        self.called.set()


def listen(store: PromiseStore) -> Listener:
    """A new :class:`Listener`, registered with ``store``."""
    listener = Listener()
    store.on_cancel(listener)
    return listener


def answer(text: str, timestamp: float = T0) -> Result:
    return Result(Answer([{"type": "text", "text": text}]), timestamp, 12.5)


def fields(record: PromiseRecord) -> tuple[Any, ...]:
    """What a record says, comparable across copies (errors by type, message and data)."""
    error = record.error
    shown_error = None if error is None else (type(error), error.message, error.data)
    return (
        record.promise_id,
        record.tool,
        record.owner,
        record.expires_at,
        record.status,
        record.progress,
        record.result,
        shown_error,
    )


async def waiting_on(store: PromiseStore, promise_id: bytes) -> asyncio.Task[PromiseRecord]:
    """A task in ``store.wait`` for the record (30 s at most), already waiting."""
    waiting = asyncio.create_task(store.wait(promise_id, 30))
    await asyncio.sleep(0)  # one loop turn: the waiter starts waiting before anything lands
    return waiting


async def assert_unknown(store: PromiseStore, promise_id: bytes) -> None:
    with pytest.raises(UnknownPromise):
        await store.get(promise_id)


# --- the contract ----------------------------------------------------------------------------


async def test_a_created_record_is_running_and_found_by_its_id(
    store_factory: StoreFactory, clock: FakeClock
) -> None:
    store = store_factory(ttl=600, clock=clock)
    record = await store.create("analyze_dataset", OWNER)
    assert len(record.promise_id) == 16
    assert record.tool == "analyze_dataset"
    assert record.owner == OWNER
    assert record.expires_at == T0 + 600
    assert record.status is PromiseStatus.RUNNING
    assert (record.progress, record.result, record.error) == (None, None, None)
    assert fields(await store.get(record.promise_id)) == fields(record)


async def test_every_record_gets_its_own_random_id(store_factory: StoreFactory) -> None:
    store = store_factory(max_entries=200)
    ids = {(await store.create("tool", OWNER)).promise_id for _ in range(200)}
    assert len(ids) == 200


async def test_an_unknown_id_raises_unknown_promise_on_every_lookup(
    store: PromiseStore,
) -> None:
    await store.create("tool", OWNER)
    unknown = b"\x00" * 16
    with pytest.raises(UnknownPromise) as caught:
        await store.get(unknown)
    assert caught.value.jsonrpc_code == -32602
    assert caught.value.grpc_status == 5
    assert caught.value.data == {"reason": "unknown"}
    with pytest.raises(UnknownPromise):
        await store.wait(unknown, 0)
    with pytest.raises(UnknownPromise):
        await store.wait(unknown, WAIT)  # not waited for: there is nothing to wait on
    with pytest.raises(UnknownPromise):
        await store.request_cancel(unknown)


async def test_a_second_store_does_not_know_the_first_ones_records(
    store_factory: StoreFactory,
) -> None:
    # A restart with the same secret: the token is genuine, the record is gone.
    before = store_factory()
    record = await before.create("tool", OWNER)
    after_restart = store_factory()
    await assert_unknown(after_restart, record.promise_id)


async def test_completing_an_unknown_record_or_setting_its_progress_is_harmless(
    store: PromiseStore,
) -> None:
    # A promised task may finish after its record expired and was dropped.
    await store.complete(b"\x01" * 16, answer("late"))
    await store.complete(b"\x02" * 16, None, InternalError("boom"))
    store.set_progress(b"\x03" * 16, {"progress": 1})
    await assert_unknown(store, b"\x01" * 16)


async def test_a_completed_record_is_done_with_its_result(store: PromiseStore) -> None:
    record = await store.create("tool", OWNER)
    result = answer("done")
    await store.complete(record.promise_id, result)
    done = await store.get(record.promise_id)
    assert done.status is PromiseStatus.DONE
    assert done.result == result
    assert done.error is None


async def test_a_record_completed_with_a_protocol_error_keeps_the_error(
    store: PromiseStore,
) -> None:
    record = await store.create("tool", OWNER)
    error = InternalError("Internal error in tool 'tool' (error id ab12)", {"error_id": "ab12"})
    await store.complete(record.promise_id, None, error)
    done = await store.get(record.promise_id)
    assert done.status is PromiseStatus.DONE
    assert done.result is None
    assert done.error is not None
    assert (type(done.error), done.error.message, done.error.data) == (
        InternalError,
        error.message,
        {"error_id": "ab12"},
    )
    assert isinstance(done.error, MCPLiteError)


async def test_the_first_outcome_of_a_record_is_the_one_kept(store: PromiseStore) -> None:
    record = await store.create("tool", OWNER)
    await store.complete(record.promise_id, answer("first"))
    await store.complete(record.promise_id, answer("second"))
    await store.complete(record.promise_id, None, InternalError("third"))
    done = await store.get(record.promise_id)
    assert done.result == answer("first")
    assert done.error is None


async def test_progress_is_kept_on_the_record_and_the_last_report_wins(
    store: PromiseStore,
) -> None:
    record = await store.create("tool", OWNER)
    store.set_progress(record.promise_id, {"progress": 1, "total": 10, "message": "parsing"})
    store.set_progress(
        record.promise_id,
        {"progress": 7, "total": 10, "message": "indexing", "estimated_completion": T0 + 5},
    )
    seen = await store.get(record.promise_id)
    assert seen.progress == {
        "progress": 7,
        "total": 10,
        "message": "indexing",
        "estimated_completion": T0 + 5,
    }
    assert seen.status is PromiseStatus.RUNNING


async def test_a_store_has_room_for_exactly_max_entries_records(
    store_factory: StoreFactory,
) -> None:
    store = store_factory(max_entries=3)
    for _ in range(3):
        assert await store.has_room()
        await store.create("tool", OWNER)
    assert not await store.has_room()


async def test_a_full_store_refuses_a_new_record_with_promise_table_full_and_does_not_grow(
    store_factory: StoreFactory,
) -> None:
    store = store_factory(max_entries=3, retry_after=7.0)
    kept = [await store.create("tool", OWNER) for _ in range(3)]
    for _ in range(3):
        with pytest.raises(PromiseTableFull) as caught:
            await store.create("tool", OWNER)
        error = caught.value
        assert isinstance(error, Overloaded)
        assert error.jsonrpc_code == -32000
        assert error.grpc_status == 8
        assert error.data == {"retry_after": 7.0}
        assert error.retry_after == 7.0
    assert not await store.has_room()
    for record in kept:
        assert fields(await store.get(record.promise_id)) == fields(record)


async def test_finished_and_cancelled_records_still_hold_their_place_until_they_expire(
    store_factory: StoreFactory,
) -> None:
    # Results stay redeemable until the token expires, so they count against the bound.
    store = store_factory(max_entries=2)
    done = await store.create("tool", OWNER)
    cancelled = await store.create("tool", OWNER)
    await store.complete(done.promise_id, answer("kept"))
    assert await store.request_cancel(cancelled.promise_id)
    assert not await store.has_room()
    with pytest.raises(PromiseTableFull):
        await store.create("tool", OWNER)


async def test_wait_returns_at_once_for_a_zero_timeout(store: PromiseStore) -> None:
    record = await store.create("tool", OWNER)
    seen = await asyncio.wait_for(store.wait(record.promise_id, 0), WAIT)
    assert seen.status is PromiseStatus.RUNNING


async def test_wait_returns_as_soon_as_complete_lands(store: PromiseStore) -> None:
    record = await store.create("tool", OWNER)
    result = answer("done")
    waiting = await waiting_on(store, record.promise_id)
    assert not waiting.done()
    started = time.perf_counter()
    await store.complete(record.promise_id, result)
    seen = await asyncio.wait_for(waiting, WAIT)
    assert time.perf_counter() - started < WAIT  # far below the 30 s asked for
    assert seen.status is PromiseStatus.DONE
    assert seen.result == result
    again = await store.wait(record.promise_id, 0)
    assert again.status is PromiseStatus.DONE


async def test_wait_on_a_finished_record_returns_it_without_waiting(
    store: PromiseStore,
) -> None:
    record = await store.create("tool", OWNER)
    await store.complete(record.promise_id, answer("done"))
    seen = await asyncio.wait_for(store.wait(record.promise_id, 30), WAIT)
    assert seen.result == answer("done")


async def test_wait_gives_the_running_record_back_when_its_timeout_runs_out(
    store: PromiseStore,
) -> None:
    record = await store.create("tool", OWNER)
    seen = await asyncio.wait_for(store.wait(record.promise_id, 0.05), WAIT)
    assert seen.status is PromiseStatus.RUNNING
    await store.complete(record.promise_id, answer("later"))  # still completes afterwards
    assert (await store.get(record.promise_id)).result == answer("later")


async def test_wait_returns_as_soon_as_the_record_is_cancelled(
    store: PromiseStore,
) -> None:
    record = await store.create("tool", OWNER)
    waiting = await waiting_on(store, record.promise_id)
    assert await store.request_cancel(record.promise_id)
    seen = await asyncio.wait_for(waiting, WAIT)
    assert seen.status is PromiseStatus.CANCELLED


async def test_every_waiter_wakes_even_when_another_waiter_gave_up(
    store: PromiseStore,
) -> None:
    record = await store.create("tool", OWNER)
    quitter = asyncio.create_task(store.wait(record.promise_id, 30))
    stayers = [asyncio.create_task(store.wait(record.promise_id, 30)) for _ in range(3)]
    await asyncio.sleep(0)
    quitter.cancel()  # a redeem whose client went away
    with pytest.raises(asyncio.CancelledError):
        await quitter
    await store.complete(record.promise_id, answer("done"))
    seen = await asyncio.wait_for(asyncio.gather(*stayers), WAIT)
    assert [r.status for r in seen] == [PromiseStatus.DONE] * 3


async def test_waiters_on_different_records_wake_each_for_their_own_record(
    store: PromiseStore,
) -> None:
    first = await store.create("tool", OWNER)
    second = await store.create("tool", OWNER)
    on_first = asyncio.create_task(store.wait(first.promise_id, 30))
    on_second = asyncio.create_task(store.wait(second.promise_id, 30))
    await asyncio.sleep(0)
    await store.complete(first.promise_id, answer("first"))
    assert (await asyncio.wait_for(on_first, WAIT)).result == answer("first")
    assert not on_second.done()  # still waiting, for its own record
    await store.complete(second.promise_id, answer("second"))
    assert (await asyncio.wait_for(on_second, WAIT)).result == answer("second")


async def test_request_cancel_cancels_a_running_record_and_tells_every_listener(
    store: PromiseStore,
) -> None:
    first, second = listen(store), listen(store)  # e.g. two dispatchers sharing the store
    record = await store.create("tool", OWNER)
    other = await store.create("tool", OWNER)
    assert await store.request_cancel(record.promise_id) is True
    assert (await store.get(record.promise_id)).status is PromiseStatus.CANCELLED
    assert first.told == [record.promise_id]
    assert second.told == [record.promise_id]
    assert (await store.get(other.promise_id)).status is PromiseStatus.RUNNING


async def test_request_cancel_of_a_finished_record_is_false_and_keeps_its_result(
    store: PromiseStore,
) -> None:
    listener = listen(store)
    record = await store.create("tool", OWNER)
    await store.complete(record.promise_id, answer("kept"))
    assert await store.request_cancel(record.promise_id) is False
    done = await store.get(record.promise_id)
    assert done.status is PromiseStatus.DONE
    assert done.result == answer("kept")
    assert listener.told == []


async def test_a_cancelled_record_stays_cancelled_even_if_its_outcome_comes_later(
    store: PromiseStore,
) -> None:
    listener = listen(store)
    record = await store.create("tool", OWNER)
    assert await store.request_cancel(record.promise_id) is True
    assert await store.request_cancel(record.promise_id) is False  # already over
    await store.complete(record.promise_id, answer("too late"))
    await store.complete(record.promise_id, None, InternalError("too late"))
    cancelled = await store.get(record.promise_id)
    assert cancelled.status is PromiseStatus.CANCELLED
    assert (cancelled.result, cancelled.error) == (None, None)
    assert listener.told == [record.promise_id]  # told once


async def test_close_stops_every_running_record_and_forgets_every_record(
    store: PromiseStore,
) -> None:
    listener = listen(store)
    running = [await store.create("tool", OWNER) for _ in range(3)]
    done = await store.create("tool", OWNER)
    await store.complete(done.promise_id, answer("done"))
    await store.close()
    assert sorted(listener.told) == sorted(r.promise_id for r in running)
    for record in [*running, done]:
        await assert_unknown(store, record.promise_id)


async def test_close_ends_a_pending_wait_instead_of_leaving_it_hanging(
    store: PromiseStore,
) -> None:
    record = await store.create("tool", OWNER)
    waiting = await waiting_on(store, record.promise_id)
    await store.close()
    with pytest.raises(UnknownPromise):
        await asyncio.wait_for(waiting, WAIT)


# --- expiry: tests that move a FakeClock by hand ---------------------------------------------


async def test_a_full_store_makes_room_by_dropping_expired_records(
    store_factory: StoreFactory, clock: FakeClock
) -> None:
    store = store_factory(ttl=60, max_entries=2, clock=clock)
    listener = listen(store)
    first = await store.create("tool", OWNER)
    clock.advance(30)
    second = await store.create("tool", OWNER)
    clock.advance(29.999)
    assert not await store.has_room()  # the first expires at T0 + 60, not before
    clock.advance(0.001)
    assert await store.has_room()
    third = await store.create("tool", OWNER)
    assert listener.told == [first.promise_id]  # it was running: its owner stops it
    await assert_unknown(store, first.promise_id)
    assert (await store.get(second.promise_id)).status is PromiseStatus.RUNNING
    assert fields(await store.get(third.promise_id)) == fields(third)
    with pytest.raises(PromiseTableFull):
        await store.create("tool", OWNER)


async def test_sweep_drops_only_expired_records_and_stops_the_running_ones(
    store_factory: StoreFactory, clock: FakeClock
) -> None:
    store = store_factory(ttl=100, clock=clock)
    listener = listen(store)
    running_old = await store.create("a", OWNER)
    clock.advance(5)
    finished_old = await store.create("b", OWNER)
    await store.complete(finished_old.promise_id, answer("b"))
    clock.advance(5)
    running_young = await store.create("c", OWNER)

    assert await store.sweep() == 0  # nothing expired yet
    assert listener.told == []

    clock.now = T0 + 106  # a and b expired (100, 105), c not (110)
    assert await store.sweep() == 2
    assert listener.told == [running_old.promise_id]  # a finished record needs no stop
    await assert_unknown(store, running_old.promise_id)
    await assert_unknown(store, finished_old.promise_id)
    assert (await store.get(running_young.promise_id)).status is PromiseStatus.RUNNING
    assert await store.sweep() == 0

    clock.now = T0 + 110  # exactly c's expiry
    assert await store.sweep() == 1
    assert listener.told == [running_old.promise_id, running_young.promise_id]
    await assert_unknown(store, running_young.promise_id)


async def test_an_expired_cancelled_record_is_dropped_without_stopping_it_again(
    store_factory: StoreFactory, clock: FakeClock
) -> None:
    store = store_factory(ttl=10, clock=clock)
    listener = listen(store)
    record = await store.create("tool", OWNER)
    assert await store.request_cancel(record.promise_id)
    clock.advance(10)
    assert await store.sweep() == 1
    assert listener.told == [record.promise_id]
    await assert_unknown(store, record.promise_id)


async def test_a_record_expiring_during_a_wait_ends_the_wait(
    store_factory: StoreFactory, clock: FakeClock
) -> None:
    store = store_factory(ttl=10, clock=clock)
    record = await store.create("tool", OWNER)
    waiting = await waiting_on(store, record.promise_id)
    clock.advance(10)
    assert await store.sweep() == 1
    with pytest.raises(UnknownPromise):
        await asyncio.wait_for(waiting, WAIT)


# --- background sweeping: expired records are freed with no traffic at all --------------------


async def test_the_sweep_timer_frees_expired_records_without_any_traffic(
    background_sweeping_store_factory: StoreFactory,
) -> None:
    store = background_sweeping_store_factory(ttl=0.05)
    listener = listen(store)
    finished = await store.create("a", OWNER)
    await store.complete(finished.promise_id, answer("a"))
    running = await store.create("b", OWNER)
    # No create, has_room or sweep from here on: only the store's own timer runs.
    await asyncio.wait_for(listener.called.wait(), WAIT)
    assert listener.told == [running.promise_id]
    await assert_unknown(store, finished.promise_id)  # dropped first: it expired first
    await assert_unknown(store, running.promise_id)


async def test_a_sweep_timer_keeps_the_earliest_deadline_asked_for(clock: FakeClock) -> None:
    due = asyncio.Event()
    timer = SweepTimer(clock, due.set)
    timer.at(clock() + 3600)
    timer.at(clock())  # sooner: replaces the hour
    timer.at(clock() + 7200)  # later: changes nothing
    await asyncio.wait_for(due.wait(), WAIT)


async def test_a_cancelled_sweep_timer_never_fires(clock: FakeClock) -> None:
    fired: list[bool] = []
    timer = SweepTimer(clock, lambda: fired.append(True))
    timer.at(clock())
    timer.cancel()
    again = asyncio.Event()
    SweepTimer(clock, again.set).at(clock())  # a timer set after it, and due as soon
    await asyncio.wait_for(again.wait(), WAIT)
    assert fired == []


# --- tokens before the store: a bad token never reaches it ------------------------------------


class SpyStore(DelegatingStore):
    """A :class:`PromiseStore` delegating to another, recording every lookup by id."""

    def __init__(self, inner: PromiseStore) -> None:
        super().__init__(inner)
        self.lookups: list[tuple[str, bytes]] = []
        self.created: list[PromiseRecord] = []

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        record = await self.inner.create(tool, owner)
        self.created.append(record)
        return record

    async def get(self, promise_id: bytes) -> PromiseRecord:
        self.lookups.append(("get", promise_id))
        return await self.inner.get(promise_id)

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        self.lookups.append(("wait", promise_id))
        return await self.inner.wait(promise_id, timeout)

    async def request_cancel(self, promise_id: bytes) -> bool:
        self.lookups.append(("request_cancel", promise_id))
        return await self.inner.request_cancel(promise_id)


def gated(gate: asyncio.Event) -> Tools:
    tools = Tools()

    @tools.tool(promise_after=ALWAYS)
    async def job(n: int = 0) -> str:
        await gate.wait()
        return f"done {n}"

    return tools


Spied = Callable[[int], Awaitable[tuple[Dispatcher, SpyStore, list[str]]]]


@pytest.fixture
async def spied(dispatchers: list[Dispatcher], store_factory: StoreFactory) -> AsyncIterator[Spied]:
    """``await spied(count)``: a dispatcher over a spied store holding ``count`` live
    promises, and their tokens.  The promised jobs finish when the test ends."""
    gate = asyncio.Event()

    async def make(count: int) -> tuple[Dispatcher, SpyStore, list[str]]:
        spy = SpyStore(store_factory(max_entries=count + 10))
        dispatcher = Dispatcher(gated(gate), make_config(), promises=spy)
        dispatchers.append(dispatcher)
        tokens = []
        for n in range(count):
            promised = await dispatcher.call("job", {"n": n})
            token = promised.extra_meta["promise_token"]
            assert isinstance(token, str)
            tokens.append(token)
        assert spy.lookups == []
        return dispatcher, spy, tokens

    yield make
    gate.set()


async def test_a_changed_token_never_reaches_the_store(
    spied: Spied,
) -> None:
    # Many live records, so that a change the MAC let through would find one.
    dispatcher, spy, tokens = await spied(50)
    token = next(t for t in tokens if "-" in t[5:] and "_" in t[5:])
    not_refused: list[str] = []
    count = 0
    for changed in single_changes(token):
        count += 1
        for attempt in (dispatcher.redeem, dispatcher.cancel):
            try:
                await attempt(changed)
            except InvalidToken:
                continue
            not_refused.append(changed)
    assert count > 81 * 10
    assert not_refused == [], f"{len(not_refused)} changed tokens were not refused"
    assert spy.lookups == [], f"{len(spy.lookups)} lookups by changed tokens"

    promise_id = spy.created[tokens.index(token)].promise_id
    pending = await dispatcher.redeem(token)  # the genuine token does reach the store
    assert pending.extra_meta["promise_token"] == token
    assert spy.lookups == [("get", promise_id)]
    assert await dispatcher.cancel(token) is True
    assert spy.lookups[1:] == [("request_cancel", promise_id)]


async def test_strings_that_are_not_tokens_never_reach_the_store(
    spied: Spied,
) -> None:
    dispatcher, spy, _ = await spied(3)
    junk = ["", "prom_", "prom_a7b9c2d4e6f8", "prom_" + "A" * 76, "prom_" + "_" * 76]
    junk += ["x" * 81, "PROM_" + "A" * 76]
    for value in junk:
        with pytest.raises(InvalidToken):
            await dispatcher.redeem(value)
        with pytest.raises(InvalidToken):
            await dispatcher.cancel(value)
        for tool in ("redeem", "cancel"):  # and through the system tools
            with pytest.raises(InvalidToken):
                await dispatcher.call(tool, {"promise": value})
    assert spy.lookups == []


async def test_forged_tokens_for_live_records_never_reach_the_store(
    spied: Spied,
) -> None:
    dispatcher, spy, tokens = await spied(2)
    live = [record.promise_id for record in spy.created]
    expires_at = spy.created[0].expires_at
    raw = base64.urlsafe_b64decode(tokens[0][5:] + "=")
    other_raw = base64.urlsafe_b64decode(tokens[1][5:] + "=")

    def encode(data: bytes) -> str:
        return "prom_" + base64.urlsafe_b64encode(data).decode().rstrip("=")

    later = struct.pack(">Q", int((expires_at + 86_400) * 1000))
    forged = [
        # the right id and expiry, sealed under someone else's secret
        TokenSealer(b"someone-else-0123456789").seal(live[0], expires_at),
        # the expiry pushed back a day, the MAC left as it was
        encode(raw[:17] + later + raw[25:]),
        # the other record's id under this record's MAC
        encode(raw[:1] + other_raw[1:17] + raw[17:]),
        # another format version with a MAC that is right for it
        encode(bytes([2]) + raw[1:25] + hmac.digest(SECRET, bytes([2]) + raw[1:25], "sha256")),
    ]
    for token in forged:
        with pytest.raises(InvalidToken):
            await dispatcher.redeem(token)
        with pytest.raises(InvalidToken):
            await dispatcher.cancel(token)
    assert spy.lookups == []


async def test_an_expired_token_never_reaches_the_store_even_while_its_record_lives(
    spied: Spied,
) -> None:
    dispatcher, spy, _ = await spied(1)
    promise_id = spy.created[0].promise_id
    # Genuine (sealed under the server's secret) but past its expiry.
    expired = TokenSealer(SECRET).seal(promise_id, time.time() - 1)
    with pytest.raises(ExpiredToken):
        await dispatcher.redeem(expired)
    with pytest.raises(ExpiredToken):
        await dispatcher.redeem(expired, wait=WAIT)
    with pytest.raises(ExpiredToken):
        await dispatcher.cancel(expired)
    with pytest.raises(ExpiredToken):
        await dispatcher.call("redeem", {"promise": expired})
    assert spy.lookups == []
    assert (await spy.inner.get(promise_id)).status is PromiseStatus.RUNNING


# --- leases: a record outlives no owner (two stores over one SQLite file or Redis) -----------

LEASE = 0.4  # seconds: short, so that a lost owner shows quickly
LOST_MESSAGE = "the worker running this call was lost; the call may be retried"

#: The owner of a record, in a process of its own: ``live`` keeps its loop running
#: (renewing its lease) until it is killed; ``hang`` blocks its loop (no renewal)
#: until a line comes on stdin, then says whether its store told it to stop.
OWNER_PROCESS = """
import asyncio, sys
from mcplite.stores.redis import RedisStore
from mcplite.stores.sqlite import SQLiteStore

async def main() -> None:
    mode, kind, where, prefix, lease = sys.argv[1:]
    if kind == "sqlite":
        store = SQLiteStore(where, ttl=600, max_entries=10, lease=float(lease))
    else:
        store = RedisStore(where, ttl=600, max_entries=10, prefix=prefix, lease=float(lease))
    stopped = asyncio.Event()
    store.on_cancel(lambda promise_id: stopped.set())
    record = await store.create("job", "owner-process/1/00")
    print(record.promise_id.hex(), flush=True)
    if mode == "hang":
        sys.stdin.readline()  # the event loop is stuck here: nothing renews the lease
        try:
            await asyncio.wait_for(stopped.wait(), 10)
            print("stopped", flush=True)
        except TimeoutError:
            print("still running", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@dataclass
class Shared:
    """Opens stores over one SQLite file or one Redis key space; starts owner processes."""

    kind: str
    where: str  # the file, or the Redis URL
    prefix: str
    made: list[PromiseStore]

    def open(self, lease: float = LEASE) -> PromiseStore:
        store: PromiseStore
        if self.kind == "sqlite":
            store = SQLiteStore(self.where, ttl=600, max_entries=100, lease=lease)
        else:
            store = RedisStore(
                self.where, ttl=600, max_entries=100, prefix=self.prefix, lease=lease
            )
        self.made.append(store)
        return store

    async def owner_process(self, mode: str) -> tuple[asyncio.subprocess.Process, bytes]:
        """An :data:`OWNER_PROCESS` and the id of the record it created."""
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-c", OWNER_PROCESS),
            *(mode, self.kind, self.where, self.prefix, str(LEASE)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        return process, bytes.fromhex(line.decode().strip())


@pytest.fixture(params=["sqlite", "redis"])
async def shared(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Shared]:
    if request.param == "sqlite":
        where = str(tmp_path / "shared.sqlite3")
    else:
        where = request.getfixturevalue("redis_url")
    shared = Shared(request.param, where, f"lease-{os.urandom(4).hex()}:", [])
    yield shared
    for store in shared.made:
        await store.close()


def assert_worker_lost(record: PromiseRecord) -> None:
    assert record.status is PromiseStatus.DONE
    assert record.error is None and record.result is not None
    failure = record.result.outcome
    assert isinstance(failure, Failure)
    assert (failure.message, failure.reason, failure.retryable) == (
        LOST_MESSAGE,
        "worker_lost",
        True,
    )


async def test_a_record_whose_owner_is_killed_resolves_to_worker_lost_within_the_lease(
    shared: Shared,
) -> None:
    owner, promise_id = await shared.owner_process("live")
    reader, other = shared.open(), shared.open()
    try:
        waiting = asyncio.create_task(reader.wait(promise_id, 30))
        assert (await other.get(promise_id)).status is PromiseStatus.RUNNING
        owner.kill()  # SIGKILL: no close, no last word
        await asyncio.wait_for(owner.wait(), WAIT)
        killed = time.perf_counter()
        record = await asyncio.wait_for(waiting, WAIT)
        # The lease lapses at most LEASE after the last renewal; the wait notices at
        # once (Redis: it reads the record again as the lease runs out; SQLite: its
        # poll, 250 ms at most).  Not at the end of its 30 s.
        assert time.perf_counter() - killed < LEASE + 0.6
    finally:
        if owner.returncode is None:
            owner.kill()
            await owner.wait()
    assert_worker_lost(record)
    # Resolved once, for everyone: every reader sees the same outcome.
    seen = await other.get(promise_id)
    assert_worker_lost(seen)
    assert seen.result is not None and record.result is not None
    assert seen.result.timestamp == record.result.timestamp  # the one stored outcome


async def test_a_live_owner_keeps_its_record_running_through_many_leases(
    shared: Shared,
) -> None:
    owner, reader = shared.open(), shared.open()
    record = await owner.create("job", OWNER)
    seen = await asyncio.wait_for(reader.wait(record.promise_id, 3 * LEASE), WAIT)
    assert seen.status is PromiseStatus.RUNNING  # three leases later: renewed all along
    assert (await reader.get(record.promise_id)).status is PromiseStatus.RUNNING
    await owner.complete(record.promise_id, answer("done"))
    assert (await reader.get(record.promise_id)).result == answer("done")


async def test_a_closed_stores_running_records_are_lost_for_the_others_at_once(
    shared: Shared,
) -> None:
    owner = shared.open(lease=60)  # the lease has nothing to do with it
    reader = shared.open()
    running = await owner.create("job", OWNER)
    finished = await owner.create("job", OWNER)
    await owner.complete(finished.promise_id, answer("kept"))
    waiting = asyncio.create_task(reader.wait(running.promise_id, 30))
    assert (await reader.get(running.promise_id)).status is PromiseStatus.RUNNING
    started = time.perf_counter()
    await owner.close()
    assert_worker_lost(await asyncio.wait_for(waiting, WAIT))
    assert time.perf_counter() - started < 1.0  # told at once, not after a lease
    assert (await reader.get(finished.promise_id)).result == answer("kept")  # records stay


async def test_an_owner_whose_loop_hung_past_its_lease_loses_its_record_and_stops_its_task(
    shared: Shared,
) -> None:
    owner, promise_id = await shared.owner_process("hang")
    try:
        reader = shared.open()
        record = await asyncio.wait_for(reader.wait(promise_id, 30), WAIT)
        assert_worker_lost(record)
        assert owner.stdin is not None and owner.stdout is not None
        owner.stdin.write(b"go on\n")  # the owner's loop runs again...
        await owner.stdin.drain()
        # ...and hears from its store that its record was resolved elsewhere.
        assert await asyncio.wait_for(owner.stdout.readline(), 15) == b"stopped\n"
        # A late renewal or outcome changes nothing: resolved once.
        again = (await reader.get(promise_id)).result
        assert again is not None and record.result is not None
        assert again.timestamp == record.result.timestamp
    finally:
        owner.kill()
        await owner.wait()


async def test_a_lost_record_is_a_retryable_failure_when_redeemed_through_the_dispatcher(
    shared: Shared,
) -> None:
    store = shared.open()
    dispatcher = Dispatcher(Tools(), make_config(), promises=store)
    owner, promise_id = await shared.owner_process("live")
    owner.kill()
    await asyncio.wait_for(owner.wait(), WAIT)
    token = dispatcher.sealer.seal(promise_id, time.time() + 600)
    result = await asyncio.wait_for(dispatcher.redeem(token, wait=30), WAIT)
    assert result.response_type.value == "failure"
    assert result.body["failure"] == {
        "message": LOST_MESSAGE,
        "reason": "worker_lost",
        "retryable": True,
    }
    assert await dispatcher.cancel(token) is False  # it has ended
