"""Shared promise stores: opening them by URL, records as JSON, and two servers
sharing one store.

Two :class:`~mcplite.Dispatcher` instances, each with its own store object on
the same SQLite file (or the same Redis keys), are two processes to the store:
nothing is shared between them but the file or the server.  A promise made
through A is seen in progress, redeemed with a wait and cancelled through B.
The SQLite case is also run across a real second process.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio
from conftest import SECRET, DelegatingStore, make_config
from redis_support import running_redis

from mcplite import (
    ALWAYS,
    Answer,
    Context,
    Dispatcher,
    InternalError,
    PromiseRecord,
    PromiseStatus,
    PromiseStore,
    ResponseType,
    Result,
    Tools,
)
from mcplite.core import errors as E
from mcplite.core.outcomes import Elicitation, Failure, InputRequired, MoreResources
from mcplite.core.promises import DEFAULT_LEASE, MemoryStore
from mcplite.stores import open_store
from mcplite.stores.records import dump_error, dump_result, load_error, load_result
from mcplite.stores.redis import RedisStore
from mcplite.stores.sqlite import SQLiteStore

WAIT = 5.0


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with running_redis() as url:
        yield url


# --- open_store ----------------------------------------------------------------------------


def opened(url: str) -> PromiseStore:
    return open_store(url, ttl=60.0, max_entries=10, retry_after=1.0)


async def test_memory_url_opens_the_in_process_store() -> None:
    store = opened("memory://")
    assert isinstance(store, MemoryStore)
    await store.close()


async def test_sqlite_url_with_a_path_opens_that_file_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "promises.db"
    store = opened(f"sqlite:///{path}")
    assert isinstance(store, SQLiteStore)
    assert store.path == path
    record = await store.create("tool", "owner")
    assert path.exists()
    import sqlite3

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT count(*) FROM promises").fetchone() == (1,)
    await store.complete(record.promise_id, None, InternalError("x"))
    await store.close()


async def test_sqlite_url_without_a_path_uses_a_private_temporary_file_removed_on_close() -> None:
    store = opened("sqlite://")
    assert isinstance(store, SQLiteStore)
    await store.create("tool", "owner")
    folder = store.path.parent
    assert folder.exists()
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    await store.close()
    assert not folder.exists()


async def test_redis_urls_open_the_redis_store(redis_url: str) -> None:
    store = opened(redis_url)
    assert isinstance(store, RedisStore)
    record = await store.create("tool", "owner")
    assert (await store.get(record.promise_id)).status is PromiseStatus.RUNNING
    await store.close()
    tls = opened("rediss://127.0.0.1:1/0")  # made, never connected
    assert isinstance(tls, RedisStore)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "memory",
        "postgres://db/x",
        "sqlite://host/file.db",
        "redis:///0",
        "memory://x",
        "file:///x",
    ],
)
def test_an_unknown_or_malformed_store_url_is_a_clear_value_error(url: str) -> None:
    with pytest.raises(ValueError, match=r"promise store URL|memory://"):
        opened(url)


async def test_a_lease_in_the_store_url_is_the_stores_lease(tmp_path: Path, redis_url: str) -> None:
    sqlite_store = opened(f"sqlite:///{tmp_path / 'promises.db'}?lease=2.5")
    assert isinstance(sqlite_store, SQLiteStore)
    assert sqlite_store.lease == 2.5
    assert sqlite_store.path == tmp_path / "promises.db"  # the query is not the path
    await sqlite_store.close()
    # The Redis client gets the other parameters; the store takes the lease.
    redis_store = opened(f"{redis_url}?lease=0.5&socket_timeout=5")
    assert isinstance(redis_store, RedisStore)
    assert redis_store.lease == 0.5
    record = await redis_store.create("tool", "owner")
    assert (await redis_store.get(record.promise_id)).status is PromiseStatus.RUNNING
    await redis_store.close()
    default = opened(f"sqlite:///{tmp_path / 'other.db'}")
    assert isinstance(default, SQLiteStore)
    assert default.lease == DEFAULT_LEASE == 10.0
    await default.close()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///x.db?lease=0",
        "sqlite:///x.db?lease=-1",
        "sqlite:///x.db?lease=soon",
        "sqlite:///x.db?lease=nan",
        "redis://127.0.0.1:1/0?lease=inf",
        "sqlite:///x.db?cache=shared",
    ],
)
def test_a_lease_that_is_not_a_positive_number_or_an_unknown_sqlite_parameter_is_refused(
    url: str,
) -> None:
    with pytest.raises(ValueError, match=r"lease must be a positive|unknown parameter cache"):
        opened(url)


# --- records as JSON -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome",
    [
        Answer([{"type": "text", "text": "hi"}]),
        Answer([{"rows": 2}], {"rows": 2}, {"rows": 2}),
        Elicitation("which?", {"type": "object", "properties": {"a": {"type": "string"}}}),
        InputRequired({"k": {"method": "roots/list", "params": {}}}, "sealed", "need roots"),
        MoreResources("more", time_seconds=30.0, quota=5, budget=1.5),
    ],
    ids=lambda o: type(o).__name__,
)
def test_a_result_round_trips_through_json(outcome: object) -> None:
    result = Result(outcome, 1_704_110_400.123, 12.5)  # type: ignore[arg-type]
    assert load_result(dump_result(result)) == result


def test_a_failure_round_trips_with_its_reason_and_retryable_flag() -> None:
    back = load_result(dump_result(Result(Failure("no", reason="busy", retryable=True), 1.0, 2.0)))
    assert isinstance(back.outcome, Failure)
    assert (back.outcome.message, back.outcome.reason, back.outcome.retryable) == (
        "no",
        "busy",
        True,
    )
    assert back.body == Result(Failure("no", reason="busy", retryable=True), 1.0, 2.0).body


@pytest.mark.parametrize(
    "error",
    [
        InternalError("Internal error in tool 't' (error id ab12)", {"error_id": "ab12"}),
        E.InvalidParams.from_fields([("n", "must be an integer")]),
        E.ToolNotFound("lookup", ["look_up"], "look_up"),
        E.Overloaded("busy", retry_after=3.5),
        E.PromiseTableFull(retry_after=2.0),
        E.StoreUnavailable(retry_after=0.5),
        E.DeadlineExceeded(),
        E.ShuttingDown(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_protocol_error_comes_back_as_its_own_class(error: E.MCPLiteError) -> None:
    back = load_error(dump_error(error))
    assert type(back) is type(error)
    assert (back.message, back.data, back.to_jsonrpc()) == (
        error.message,
        error.data,
        error.to_jsonrpc(),
    )
    if isinstance(error, E.Overloaded):
        assert isinstance(back, E.Overloaded)
        assert back.retry_after == error.retry_after


def test_an_error_class_of_its_own_comes_back_as_its_nearest_known_class_with_its_codes() -> None:
    class Teapot(E.InvalidParams):
        jsonrpc_code = -32099

    back = load_error(dump_error(Teapot("short and stout", {"spout": True})))
    assert isinstance(back, E.InvalidParams)
    assert (back.jsonrpc_code, back.grpc_status) == (-32099, E.InvalidParams.grpc_status)
    assert (back.message, back.data) == ("short and stout", {"spout": True})


# --- two servers, one store ----------------------------------------------------------------


Opener = Callable[[], PromiseStore]


@pytest.fixture(params=["sqlite", "redis"])
async def shared(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens store objects that all share one SQLite file, or one Redis key space."""
    made: list[PromiseStore] = []
    prefix = f"shared-{os.urandom(4).hex()}:"

    def open_one() -> PromiseStore:
        store: PromiseStore
        if request.param == "sqlite":
            store = SQLiteStore(tmp_path / "shared.db", ttl=600, max_entries=100)
        else:
            url: str = request.getfixturevalue("redis_url")
            store = RedisStore(url, ttl=600, max_entries=100, prefix=prefix)
        made.append(store)
        return store

    yield open_one
    for store in made:
        await store.close()


class WaitSpy(DelegatingStore):
    """Sets ``waiting`` when a long poll reaches the store."""

    def __init__(self, inner: PromiseStore) -> None:
        super().__init__(inner)
        self.waiting = asyncio.Event()

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        self.waiting.set()
        return await self.inner.wait(promise_id, timeout)


class Job:
    """A promised tool that reports progress, then waits for ``finish``; it
    records whether it was cancelled."""

    def __init__(self) -> None:
        self.reported = asyncio.Event()
        self.finish = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.tools = Tools()

        @self.tools.tool(promise_after=ALWAYS)
        async def job(ctx: Context) -> str:
            ctx.report_progress(3, 10, "indexing")
            self.reported.set()
            try:
                await self.finish.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return "done"


async def test_a_promise_made_through_one_server_is_redeemed_with_a_wait_through_another(
    shared: Opener, dispatchers: list[Dispatcher]
) -> None:
    job = Job()
    a = Dispatcher(job.tools, make_config(), promises=shared())
    b_store = WaitSpy(shared())
    b = Dispatcher(Tools(), make_config(), promises=b_store)
    dispatchers += [a, b]
    token = (await a.call("job", {})).extra_meta["promise_token"]
    await asyncio.wait_for(job.reported.wait(), WAIT)
    await a.promises.get((a.sealer.open(token))[0])  # A's progress write has landed

    pending = await b.redeem(token)
    assert pending.response_type is ResponseType.PROMISE
    assert pending.extra_meta["promise_token"] == token
    assert pending.extra_meta["progress"] == {"progress": 3, "total": 10, "message": "indexing"}

    waiting = asyncio.create_task(b.redeem(token, wait=30))
    await asyncio.wait_for(b_store.waiting.wait(), WAIT)  # B is in its long poll
    assert not waiting.done()
    started = time.perf_counter()
    job.finish.set()
    done = await asyncio.wait_for(waiting, WAIT)
    # Woken by the store (Redis pub/sub; SQLite's poll, 250 ms at most), not after 30 s
    # nor by Redis's 1 s safety recheck.
    assert time.perf_counter() - started < 0.9
    assert done.response_type is ResponseType.ANSWER
    assert done.body == {"content": [{"type": "text", "text": "done"}]}


async def test_a_promise_made_through_one_server_is_cancelled_through_another(
    shared: Opener, dispatchers: list[Dispatcher]
) -> None:
    job = Job()
    a = Dispatcher(job.tools, make_config(), promises=shared())
    b = Dispatcher(Tools(), make_config(), promises=shared())
    dispatchers += [a, b]
    token = (await a.call("job", {})).extra_meta["promise_token"]
    await asyncio.wait_for(job.reported.wait(), WAIT)
    waiting = asyncio.create_task(a.redeem(token, wait=30))  # A's own client waits on

    assert await b.cancel(token) is True
    await asyncio.wait_for(job.cancelled.wait(), WAIT)  # A's task was stopped
    for server in (a, b):
        seen = await server.redeem(token)
        assert seen.response_type is ResponseType.FAILURE
        assert seen.body["failure"]["reason"] == "cancelled"
    assert (await asyncio.wait_for(waiting, WAIT)).body["failure"]["reason"] == "cancelled"
    assert await b.cancel(token) is False
    assert await a.cancel(token) is False


# --- a real second process on the same SQLite file -------------------------------------------

OWNER_PROCESS = textwrap.dedent(
    """
    import asyncio, sys
    from mcplite import ALWAYS, Dispatcher, Config, Tools
    from mcplite.stores.sqlite import SQLiteStore

    async def main():
        tools = Tools()
        stopped = asyncio.Event()

        @tools.tool(promise_after=ALWAYS)
        async def job() -> str:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                stopped.set()
                raise
            return "late"

        store = SQLiteStore(sys.argv[1], ttl=600, max_entries=10)
        server = Dispatcher(tools, Config(secret=bytes.fromhex(sys.argv[2])), promises=store)
        promised = await server.call("job", {})
        print(promised.extra_meta["promise_token"], flush=True)
        await asyncio.wait_for(stopped.wait(), 10)
        print("stopped", flush=True)
        await server.close()

    asyncio.run(main())
    """
)


async def test_a_promise_of_another_process_on_the_same_sqlite_file_is_cancelled_here(
    tmp_path: Path, dispatchers: list[Dispatcher]
) -> None:
    path = tmp_path / "shared.db"
    owner = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        OWNER_PROCESS,
        str(path),
        SECRET.hex(),
        stdout=subprocess.PIPE,
    )
    try:
        assert owner.stdout is not None
        token = (await asyncio.wait_for(owner.stdout.readline(), 20)).decode().strip()
        here = Dispatcher(
            Tools(), make_config(), promises=SQLiteStore(path, ttl=600, max_entries=10)
        )
        dispatchers.append(here)
        assert (await here.redeem(token, wait=0.1)).response_type is ResponseType.PROMISE
        assert await here.cancel(token) is True
        line = await asyncio.wait_for(owner.stdout.readline(), WAIT)
        assert line == b"stopped\n"  # the owner's task was stopped by its cancel poll
        assert (await here.redeem(token)).body["failure"]["reason"] == "cancelled"
        assert await asyncio.wait_for(owner.wait(), WAIT) == 0
    finally:
        if owner.returncode is None:
            owner.kill()
            await owner.wait()


def test_without_the_redis_package_a_redis_url_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m == "redis" or m.startswith("redis.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "mcplite.stores.redis")
    monkeypatch.setitem(sys.modules, "redis", None)  # an import of it fails
    with pytest.raises(ImportError, match=r"pip install 'mcplite\[redis\]'"):
        open_store("redis://127.0.0.1:6379/0", ttl=60.0, max_entries=10)


# --- Redis: close while a lease renewal waits on its reply -----------------------------------


class HoldingProxy:
    """A TCP relay to Redis that holds back the replies on the connection that
    sent a lease renewal (the pipeline of ``SET ... PX`` and ``EXISTS``) until
    ``release`` is set; every other connection is relayed as is.  ``renewing``
    is set once such a renewal has reached Redis, ``deleting`` once a ``DEL``
    has (``close`` releasing the leases)."""

    def __init__(self, url: str) -> None:
        host_port = url.removeprefix("redis://").split("/")[0]
        self.upstream = (host_port.split(":")[0], int(host_port.split(":")[1]))
        self.renewing = asyncio.Event()
        self.deleting = asyncio.Event()
        self.release = asyncio.Event()
        self.relays: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._relay_connection, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for relay in self.relays:
            relay.cancel()
        await asyncio.gather(*self.relays, return_exceptions=True)
        await self.server.wait_closed()

    async def _relay_connection(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        redis_reader, redis_writer = await asyncio.open_connection(*self.upstream)
        held = asyncio.Event()  # this connection carries a renewal: its replies wait

        async def upstream() -> None:
            while data := await client_reader.read(65536):
                if b"\r\nEXISTS\r\n" in data:
                    held.set()
                    self.renewing.set()
                if b"\r\nDEL\r\n" in data:
                    self.deleting.set()
                redis_writer.write(data)
                await redis_writer.drain()

        async def downstream() -> None:
            while data := await redis_reader.read(65536):
                if held.is_set():
                    await self.release.wait()
                client_writer.write(data)
                await client_writer.drain()

        relays = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        self.relays.update(relays)
        try:
            await asyncio.wait(relays, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for relay in relays:
                relay.cancel()
            await asyncio.gather(*relays, return_exceptions=True)
            self.relays.difference_update(relays)
            for writer in (client_writer, redis_writer):
                writer.close()


async def test_closing_a_redis_store_while_a_lease_renewal_awaits_its_reply_loses_nothing(
    redis_url: str,
) -> None:
    """``close`` stops the lease renewal while Redis's reply to it is still on its
    way: that connection is not handed to close's own commands before the reply
    is read, so close still stores the running record as lost, releases the
    lease, and waits for the renewal instead of leaving it pending."""
    proxy = HoldingProxy(redis_url)
    prefix = f"renewing-{os.urandom(4).hex()}:"
    store = RedisStore(await proxy.start(), ttl=600, max_entries=10, prefix=prefix, lease=0.3)
    reader = RedisStore(redis_url, ttl=600, max_entries=10, prefix=prefix)
    try:
        record = await store.create("job", "owner-a")
        await asyncio.wait_for(proxy.renewing.wait(), WAIT)  # its reply is held

        closing = asyncio.create_task(store.close())
        await asyncio.wait_for(proxy.deleting.wait(), WAIT)  # close's commands were answered
        assert not closing.done()  # it waits for the renewal's reply
        proxy.release.set()
        await asyncio.wait_for(closing, WAIT)

        stored = await reader.get(record.promise_id)
        assert stored.status is PromiseStatus.DONE
        assert stored.result is not None
        lost = stored.result.outcome
        assert isinstance(lost, Failure) and lost.reason == "worker_lost"
        keys = redis.asyncio.from_url(redis_url)
        try:
            assert await keys.exists(f"{prefix}owner:owner-a") == 0  # the lease, released
        finally:
            await keys.aclose()
    finally:
        proxy.release.set()
        await store.close()
        await reader.close()
        await proxy.close()
