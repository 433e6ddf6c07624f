"""The SQLite promise store: one file shared by the processes of one host.

Every process opens the same file (WAL mode, so readers never wait for the
writer) through its own :class:`SQLiteStore`.  The records are rows; the asyncio
tasks stay with the process that started them (the record's *owner*).

How things reach other processes, with no server to push them:

- **wait**: a waiter in this process is woken at once by a ``complete`` or a
  cancel made through this store; a change made by another process within
  5 ms, by a watch of SQLite's ``data_version`` (one pragma per store, only
  while anything waits), with each row's own poll (20 ms doubling to 250 ms)
  behind it.
- **cancel**: ``request_cancel`` marks the row CANCELLED and tells this
  process's ``on_cancel`` listeners at once.  While this store has running
  records of its own, a background task reads their status every
  :data:`CANCEL_POLL` seconds (one indexed query), and tells the listeners about
  each one that another process cancelled, or that expired and was dropped.  The
  task starts with the first record created here and ends when none is running.
- **expiry**: every store drops expired rows (all processes' rows) on ``sweep``,
  and when it is full; a timer sweeps when the oldest record created here
  expires, so results do not outlive their tokens while a process is up.
- **leases**: the ``owners`` table holds one row per owner, ``lease_until``
  (epoch seconds).  ``create`` writes it with the record, in one transaction;
  the cancel poll above renews it every third of the lease (``lease``, default
  :data:`~mcplite.core.promises.DEFAULT_LEASE`) while records created here run.  A
  read (``get``, each look of a ``wait``) that finds a RUNNING row whose owner's
  lease has lapsed (or whose owner has no row) marks it DONE with
  :func:`~mcplite.core.promises.worker_lost`, in one ``UPDATE`` guarded by the same
  condition, so exactly one reader resolves it; the owner's cancel poll, if the
  owner lives after all, sees its row DONE and stops its task.  A wait thus
  ends within the lease plus one poll of a process's death.  ``close`` resolves
  this store's running rows the same way at once and deletes its owner rows;
  ``sweep`` deletes the rows of lapsed owners (no row reads as lapsed).

**Faults.**  Every call runs on the file the path names now: a file deleted or
replaced is noticed at the next call and the path opened again (a new file; the
old one's promises are gone, and the cancel poll stops this process's calls
whose records went).  A call that fails because the file is locked for longer
than :data:`LOCK_TIMEOUT`, read-only, full or cannot be opened raises
:class:`~mcplite.core.errors.StoreUnavailable` (logged once each way, see
:class:`~mcplite.core.promises.Outage`), and drops the connection unless it
was a lock, so the next call opens the file again: the store recovers by itself.

All SQLite calls run in one worker thread per store, in the order they were
made; the event loop only waits for their results.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import tempfile
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ..core.envelope import Result
from ..core.errors import MCPLiteError, PromiseTableFull, StoreUnavailable, UnknownPromise
from ..core.promises import (
    DEFAULT_LEASE,
    CancelListener,
    Outage,
    ProcessSide,
    PromiseRecord,
    PromiseStatus,
    SweepTimer,
    worker_lost,
)
from .records import dump_error, dump_progress, dump_result, load_error, load_progress, load_result

__all__ = ["CANCEL_POLL", "LOCK_TIMEOUT", "SQLiteStore"]

log = logging.getLogger("mcplite.stores.sqlite")

#: Seconds between two looks at the cancel flags of this process's running records.
CANCEL_POLL = 0.05
#: The first and the longest pause of a wait's poll of a record another process holds.
WAIT_POLL_FIRST, WAIT_POLL_MAX = 0.02, 0.25
#: While anything waits, how often the store asks SQLite whether another process
#: committed (``PRAGMA data_version``: one call, no table read), to wake the waiters.
WATCH_EVERY = 0.005
#: Seconds a write waits for another connection's lock before the store counts as
#: unavailable (a write of another mcplite process holds it for milliseconds).
LOCK_TIMEOUT = 10.0
#: SQLite's result codes for a lock held elsewhere: the connection itself is fine.
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS promises (
    id BLOB PRIMARY KEY,
    tool TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL,
    status TEXT NOT NULL,
    progress TEXT,
    result TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS promises_by_expiry ON promises (expires_at);
CREATE TABLE IF NOT EXISTS owners (
    owner TEXT PRIMARY KEY,
    lease_until REAL NOT NULL
);
"""
_COLUMNS = "id, tool, owner, expires_at, status, progress, result, error"
_RUNNING = PromiseStatus.RUNNING.value
_CANCELLED = PromiseStatus.CANCELLED.value
_DONE = PromiseStatus.DONE.value
_RENEW = (
    "INSERT INTO owners (owner, lease_until) VALUES (?, ?) "
    "ON CONFLICT (owner) DO UPDATE SET lease_until = excluded.lease_until"
)
# Resolve one RUNNING row to worker_lost only while its owner still has no live lease.
_LOSE = (
    "UPDATE promises SET status = ?, result = ? WHERE id = ? AND status = ? AND NOT EXISTS "
    "(SELECT 1 FROM owners WHERE owners.owner = promises.owner AND lease_until > ?)"
)
_CHUNK = 500  # ids per IN (...) query, far below SQLite's variable limit


def _is_fault(exc: BaseException) -> bool:
    """Whether ``exc`` says the file cannot be used now (locked, read-only, full,
    gone, not a database) rather than a bug of ours."""
    return isinstance(exc, sqlite3.OperationalError | OSError) or type(exc) is sqlite3.DatabaseError


def _record(row: tuple[Any, ...]) -> PromiseRecord:
    promise_id, tool, owner, expires_at, status, progress, result, error = row
    return PromiseRecord(
        bytes(promise_id),
        tool,
        owner,
        expires_at,
        PromiseStatus(status),
        load_progress(progress),
        None if result is None else load_result(result),
        None if error is None else load_error(error),
    )


class SQLiteStore:
    """A :class:`~mcplite.core.promises.PromiseStore` in an SQLite file (see the module doc).

    ``path`` None makes a file in a private temporary directory, removed on close.
    ``lease``: seconds the lease of this store's owners lasts (renewed every third
    of it while their records run); ValueError unless positive.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        ttl: float,
        max_entries: int,
        retry_after: float = 1.0,
        clock: Callable[[], float] = time.time,
        lease: float = DEFAULT_LEASE,
    ) -> None:
        if not lease > 0:
            raise ValueError(f"a lease must be positive, not {lease!r}")
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="mcplite-promises-")
            path = Path(self._tmp.name) / "promises.sqlite3"
        self.path = Path(path)
        self._ttl = ttl
        self._max = max_entries
        self._retry_after = retry_after
        self._clock = clock
        self.lease = lease
        self._owners: set[str] = set()  # the owners of records created here: alive
        self._renewed = 0.0  # loop time of the last renewal of their leases
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="mcplite-sqlite")
        self._db: sqlite3.Connection | None = None
        self._identity = (0, 0)  # (device, inode) of the file self._db has open
        self._outage = Outage(log, f"promise store {self.path}", retry_after)
        self._closed = False
        self._side = ProcessSide()
        self._expiries: deque[float] = deque()  # of the records created here, in order
        self._poller: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        # One timer, at the expiry of the oldest record created here.
        self._sweeper = SweepTimer(clock, self._tick)

    # -- the worker thread ------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable enough, far faster
                db.executescript(_SCHEMA)
                found = os.stat(self.path)
            except BaseException:
                db.close()
                raise
            self._identity = (found.st_dev, found.st_ino)
            self._db = db
        return self._db

    def _reset(self) -> None:
        """Drop the connection; the next call opens the file again.  (A connection
        that met a read-only or missing file stays read-only, even once the file
        is writable again.)"""
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def _check_file(self) -> None:
        """Open the path again when it names another file than the one open: it
        was deleted or replaced.  (Writing on to a deleted file would lose every
        write, and its leftover WAL would stop the other processes' new file.)"""
        if self._db is None:
            return
        try:
            found = os.stat(self.path)
            same = (found.st_dev, found.st_ino) == self._identity
        except OSError:
            same = False
        if not same:
            log.warning(
                "promise store file %s was deleted or replaced; opening it again "
                "(the promises it held are gone)",
                self.path,
            )
            self._reset()

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the file the path names now; a connection that failed
        for anything but another's lock is dropped, so the next call opens the
        file again (the store recovers by itself)."""
        self._check_file()
        try:
            return fn(*args)
        except Exception as exc:
            if _is_fault(exc) and getattr(exc, "sqlite_errorcode", None) not in _BUSY:
                self._reset()
            raise

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the worker thread; raises :class:`StoreUnavailable`
        while the file cannot be used, :class:`UnknownPromise` once closed."""
        if self._closed:
            raise UnknownPromise()
        loop = asyncio.get_running_loop()
        write = fn == self._in_write
        try:
            out = await loop.run_in_executor(self._executor, self._guarded, fn, *args)
        except Exception as exc:
            if _is_fault(exc):
                raise self._outage.failed(exc, write=write) from exc
            raise
        self._outage.ok(write=write)
        return out

    def _in_write(self, fn: Callable[..., T], *args: Any) -> T:
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")  # one writer at a time across processes
        try:
            out = fn(db, *args)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # a failed COMMIT may have rolled back already
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        return out

    def _sweep_sql(self, db: sqlite3.Connection, now: float) -> tuple[int, list[bytes]]:
        db.execute("DELETE FROM owners WHERE lease_until <= ?", (now,))
        running = [
            bytes(row[0])
            for row in db.execute(
                "SELECT id FROM promises WHERE expires_at <= ? AND status = ?", (now, _RUNNING)
            )
        ]
        dropped = db.execute("DELETE FROM promises WHERE expires_at <= ?", (now,)).rowcount
        return dropped, running

    def _count(self, db: sqlite3.Connection) -> int:
        row = db.execute("SELECT count(*) FROM promises").fetchone()
        return int(row[0])

    def _create_sql(
        self, db: sqlite3.Connection, record: PromiseRecord, now: float
    ) -> tuple[bool, list[bytes]]:
        stopped: list[bytes] = []
        if self._count(db) >= self._max:
            _, stopped = self._sweep_sql(db, now)
            if self._count(db) >= self._max:
                return False, stopped
        db.execute(
            f"INSERT INTO promises ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL, NULL, NULL)",
            (record.promise_id, record.tool, record.owner, record.expires_at, _RUNNING),
        )
        db.execute(_RENEW, (record.owner, now + self.lease))
        return True, stopped

    def _room_sql(self) -> bool:
        return self._count(self._connect()) < self._max

    def _has_room_sql(self, db: sqlite3.Connection, now: float) -> tuple[bool, list[bytes]]:
        if self._count(db) < self._max:
            return True, []
        _, stopped = self._sweep_sql(db, now)
        return self._count(db) < self._max, stopped

    def _get_sql(self, promise_id: bytes) -> PromiseRecord | None:
        db = self._connect()
        query = (
            f"SELECT {_COLUMNS}, (SELECT lease_until FROM owners WHERE owners.owner = "
            "promises.owner) FROM promises WHERE id = ?"
        )
        row = db.execute(query, (promise_id,)).fetchone()
        if row is None:
            return None
        *columns, lease_until = row
        now = self._clock()
        lapsed = lease_until is None or lease_until <= now
        if columns[4] == _RUNNING and lapsed and columns[2] not in self._owners:
            lost = dump_result(worker_lost(now))
            self._in_write(lambda db: db.execute(_LOSE, (_DONE, lost, promise_id, _RUNNING, now)))
            row = db.execute(f"SELECT {_COLUMNS} FROM promises WHERE id = ?", (promise_id,))
            columns = row.fetchone()
            if columns is None:
                return None
        return _record(tuple(columns))

    def _set_status(
        self,
        db: sqlite3.Connection,
        promise_id: bytes,
        status: str,
        result: str | None = None,
        error: str | None = None,
    ) -> bool | None:
        """Set a RUNNING row's status; None when there is no row, False when it had ended."""
        changed = db.execute(
            "UPDATE promises SET status = ?, result = ?, error = ? WHERE id = ? AND status = ?",
            (status, result, error, promise_id, _RUNNING),
        ).rowcount
        if changed:
            return True
        found = db.execute("SELECT 1 FROM promises WHERE id = ?", (promise_id,)).fetchone()
        return None if found is None else False

    def _progress_sql(self, promise_id: bytes, progress: str) -> None:
        self._connect().execute(
            "UPDATE promises SET progress = ? WHERE id = ?", (progress, promise_id)
        )

    def _ended_sql(self, ids: list[bytes]) -> list[bytes]:
        """Of ``ids`` (running here, as far as this store knows): those that another
        process cancelled, resolved (its owner seemed lost) or dropped: to stop."""
        db = self._connect()
        stop = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT id, status FROM promises WHERE id IN ({marks})"
            statuses = {bytes(i): status for i, status in db.execute(query, chunk)}
            stop += [i for i in chunk if statuses.get(i) != _RUNNING]
        return stop

    def _renew_sql(self, db: sqlite3.Connection, owners: list[str]) -> None:
        until = self._clock() + self.lease
        db.executemany(_RENEW, [(owner, until) for owner in owners])

    def _close_sql(self, ids: list[bytes], owners: list[str]) -> None:
        if self._db is None:
            return
        lost = dump_result(worker_lost(self._clock()))

        def resolve(db: sqlite3.Connection) -> None:
            for promise_id in ids:
                self._set_status(db, promise_id, _DONE, lost)
            db.executemany("DELETE FROM owners WHERE owner = ?", [(o,) for o in owners])

        try:
            self._in_write(resolve)
        finally:
            self._reset()

    # -- the Protocol -----------------------------------------------------------------

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        now = self._clock()
        record = PromiseRecord(os.urandom(16), tool, owner, now + self._ttl)
        created, stopped = await self._run(self._in_write, self._create_sql, record, now)
        self._side.stopped(stopped)
        if not created:
            raise PromiseTableFull(retry_after=self._retry_after)
        if record.owner not in self._owners:
            self._owners.add(record.owner)
        if not self._side.mine:
            self._renewed = asyncio.get_running_loop().time()  # create wrote the lease
        self._side.mine.add(record.promise_id)
        self._expiries.append(record.expires_at)
        self._schedule_sweep()
        self._start_poller()
        return record

    async def has_room(self) -> bool:
        if await self._run(self._room_sql):  # a read: no lock, and says nothing of writes
            return True
        room, stopped = await self._run(self._in_write, self._has_room_sql, self._clock())
        self._side.stopped(stopped)
        return bool(room)

    async def complete(
        self, promise_id: bytes, result: Result | None, error: MCPLiteError | None = None
    ) -> None:
        if self._closed:
            return
        try:
            result_text = None if result is None else dump_result(result)
            error_text = None if error is None else dump_error(error)
            await self._run(
                self._in_write, self._set_status, promise_id, _DONE, result_text, error_text
            )
        except StoreUnavailable:
            raise  # still ours: its lease is renewed until it is stored
        except BaseException:
            self._side.mine.discard(promise_id)
            raise
        self._side.mine.discard(promise_id)
        self._side.waiters.wake(promise_id)

    def set_progress(self, promise_id: bytes, progress: dict[str, Any]) -> None:
        # Queued on the worker thread: it runs before any later call of this store.
        if not self._closed:
            self._executor.submit(
                self._guarded, self._progress_sql, promise_id, dump_progress(progress)
            )

    async def get(self, promise_id: bytes) -> PromiseRecord:
        record = await self._run(self._get_sql, promise_id)
        if record is None:
            raise UnknownPromise()
        return record

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        """The record once it is no longer RUNNING, or as it is after ``timeout`` s.

        Woken at once by a change made through this store; a change made by
        another process is seen within :data:`WATCH_EVERY` (the store watches
        SQLite's ``data_version`` while anything waits), else by the row's own poll
        (20 ms, doubling to 250 ms).
        """
        record = await self.get(promise_id)
        if record.status is not PromiseStatus.RUNNING or timeout <= 0:
            return record
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pause = WAIT_POLL_FIRST
        while record.status is PromiseStatus.RUNNING:
            left = deadline - loop.time()
            if left <= 0:
                break
            waiter = self._side.waiters.future(promise_id)
            self._start_watcher()
            await asyncio.wait((waiter,), timeout=min(pause, left))
            pause = min(pause * 2, WAIT_POLL_MAX)
            record = await self.get(promise_id)
        return record

    async def request_cancel(self, promise_id: bytes) -> bool:
        changed = await self._run(self._in_write, self._set_status, promise_id, _CANCELLED)
        return self._side.cancelled(promise_id, changed)

    def on_cancel(self, listener: CancelListener) -> None:
        self._side.listeners.append(listener)

    async def sweep(self) -> int:
        dropped, stopped = await self._run(self._in_write, self._sweep_sql, self._clock())
        self._side.stopped(stopped)
        return int(dropped)

    async def close(self) -> None:
        """Stop this process's running records (resolved to
        :func:`~mcplite.core.promises.worker_lost` for the others), release this
        store's leases and end every wait; every record stays in the file for the
        other processes."""
        if self._closed:
            return
        mine = list(self._side.mine)
        self._side.stopped(mine)
        self._closed = True
        self._sweeper.cancel()
        await self._side.close(self._poller, self._watcher)
        self._poller = None
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._close_sql, mine, list(self._owners))
        except Exception as exc:
            if not _is_fault(exc):
                raise
            # The other processes resolve them when their lease lapses.
            log.warning(
                "promise store %s unavailable on close (%s): its running promises end as lost",
                self.path,
                exc,
            )
        finally:
            self._executor.shutdown(wait=True)
            if self._tmp is not None:
                self._tmp.cleanup()

    # -- telling and waking -----------------------------------------------------------

    def _start_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """Wake every waiter when another process commits, while anything waits: SQLite
        has no notification across processes, and one cheap question per store
        every few milliseconds is cheaper than each waiter reading its row."""
        try:
            last = await self._run(self._data_version)
            while self._side.waiters and not self._closed:
                await asyncio.sleep(WATCH_EVERY)
                version = await self._run(self._data_version)
                if version == last:
                    continue
                last = version
                self._side.waiters.wake_all()
        except UnknownPromise:  # closed meanwhile
            return
        except StoreUnavailable:  # said once; each wait reads its record: its caller hears
            self._side.waiters.wake_all()

    def _data_version(self) -> int:
        row = self._connect().execute("PRAGMA data_version").fetchone()
        return int(row[0])

    def _start_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_cancels())

    async def _poll_cancels(self) -> None:
        """While records of ours run: renew our leases, and stop the records another
        process cancelled, resolved or dropped."""
        loop = asyncio.get_running_loop()
        while self._side.mine and not self._closed:
            await asyncio.sleep(CANCEL_POLL)
            watched = list(self._side.mine)
            if not watched:
                break
            try:
                if loop.time() - self._renewed >= self.lease / 3:
                    self._renewed = loop.time()
                    await self._run(self._in_write, self._renew_sql, sorted(self._owners))
                stop = await self._run(self._ended_sql, watched)
            except UnknownPromise:  # closed meanwhile
                return
            except StoreUnavailable:  # said once; renewed and read again once it is back
                continue
            except sqlite3.Error:
                log.exception("could not renew leases or read cancel flags in %s", self.path)
                continue
            self._side.stopped([i for i in stop if i in self._side.mine])

    def _schedule_sweep(self) -> None:
        if self._expiries and not self._closed:
            self._sweeper.at(self._expiries[0])

    def _tick(self) -> None:
        now = self._clock()
        while self._expiries and self._expiries[0] <= now:
            self._expiries.popleft()
        self._side.spawn(self._timed_sweep())

    async def _timed_sweep(self) -> None:
        try:
            await self.sweep()
        except UnknownPromise:  # closed
            return
        except StoreUnavailable:  # said once; the next expiry, or a full table, sweeps
            pass
        except sqlite3.Error:
            log.exception("could not sweep %s", self.path)
        self._schedule_sweep()
