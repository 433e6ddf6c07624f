"""The Redis promise store: records shared by every process on every host.

Needs the ``redis`` package (``pip install 'mcplite[redis]'``), through its
asyncio client.  Layout, under a key prefix (``mcplite:`` unless told)::

    {prefix}r:{id-hex}      a hash: tool, owner, inbox, expires_at, status,
                            progress, result, error (JSON text, see records.py);
                            its Redis TTL is the record's expiry plus a margin
    {prefix}expiry          a sorted set of record ids scored by expiry: the
                            capacity count, and what sweep walks
    {prefix}done:{id-hex}   a channel: the record left RUNNING (or was dropped)
    {prefix}inbox:{store}   a channel per store: ids of its running records
                            that another process cancelled, dropped or found lost
    {prefix}owner:{owner}   an owner's lease: a key that expires (PX) unless renewed

Each change of state is one Lua script, so two processes never both win a
race (complete against cancel, the last free place).  ``wait`` subscribes to
the record's ``done`` channel and sleeps until a message comes (re-reading the
record every :data:`WAIT_RECHECK` seconds in case a message was lost during a
reconnect: a safety net, not a poll).  ``request_cancel`` publishes the id to
the owner store's inbox, whose reader tells that process's ``on_cancel``
listeners.  The scripts build keys from the prefix, so the store needs a single
Redis (or a cluster with every key in one slot through a ``{tag}`` prefix).

**Leases.**  ``create`` sets the owner's lease key (``PX`` of ``lease`` seconds,
default :data:`~mcplite.core.promises.DEFAULT_LEASE`) in the same script as the
record; a heartbeat task renews the keys of this store's owners every third of
the lease while records created here run.  Redis expires the key of an owner
that stops renewing, so leases need no agreement between the hosts' clocks.
Every read of a record is one script that also returns the remaining time of
its owner's lease; a RUNNING record whose owner has no lease key is resolved by
a second script, guarded by the same two conditions, to DONE with
:func:`~mcplite.core.promises.worker_lost`, which publishes on the record's ``done``
channel (its waiters wake) and the owner's inbox (a live owner stops its task).
A ``wait`` re-reads the record no later than when its owner's lease runs out,
so a dead process's promise ends every wait within about one lease.  ``close``
resolves this store's running records the same way at once and deletes its
lease keys.

**Outages.**  A command that fails because Redis is down, unreachable, silent
for :data:`COMMAND_TIMEOUT`, or refusing writes (a replica, out of memory,
MISCONF) raises :class:`~mcplite.core.errors.StoreUnavailable` (logged once
each way, see :class:`~mcplite.core.promises.Outage`).  The client reconnects
by itself; the reader subscribes again, and wakes every wait so that it reads
its record (and hears the outage); the heartbeat stops the running records
that are gone from Redis (flushed, or lost in a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit

try:
    import redis.asyncio as aioredis
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import OutOfMemoryError, ReadOnlyError, RedisError, ResponseError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the Redis promise store needs the redis package: pip install 'mcplite[redis]'"
    ) from exc

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
from . import redis_scripts as scripts
from .records import dump_error, dump_progress, dump_result, load_error, load_progress, load_result

__all__ = ["RedisStore"]

log = logging.getLogger("mcplite.stores.redis")

T = TypeVar("T")

#: Seconds between two reads of a record a wait is subscribed to (lost messages only).
WAIT_RECHECK = 1.0
#: Seconds after a lease would lapse that a wait reads its record again.
LEASE_MARGIN = 0.01
#: Seconds a record's key outlives its expiry in Redis, so that a sweep (which
#: stops a running record's task) comes first; the key goes anyway if none does.
KEY_MARGIN = 60.0
#: Seconds to connect, and for Redis to answer a command, before the store counts
#: as unavailable (unless the URL says otherwise: ``?socket_timeout=``,
#: ``?socket_connect_timeout=``).
COMMAND_TIMEOUT = 5.0
#: Seconds between two attempts of the subscription reader while Redis is down.
READ_RETRY = 0.5

#: What Redis answers while it cannot serve: it is down, unreachable, slow,
#: still loading, a replica, out of memory.
_DOWN = (RedisConnectionError, RedisTimeoutError, ReadOnlyError, OutOfMemoryError, OSError)


def _is_down(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis cannot serve now (rather than a bug of ours)."""
    if isinstance(exc, _DOWN):
        return True
    # MISCONF: Redis refuses writes because it cannot save (its disk is full).
    return isinstance(exc, ResponseError) and str(exc).startswith("MISCONF")


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # read: an abandoned command's error is not worth a warning


class RedisStore:
    """A :class:`~mcplite.core.promises.PromiseStore` in Redis (see the module doc)."""

    def __init__(
        self,
        url: str,
        *,
        ttl: float,
        max_entries: int,
        retry_after: float = 1.0,
        clock: Callable[[], float] = time.time,
        prefix: str = "mcplite:",
        lease: float = DEFAULT_LEASE,
    ) -> None:
        if not lease > 0:
            raise ValueError(f"a lease must be positive, not {lease!r}")
        self.lease = lease
        self._owners: set[str] = set()  # the owners of records created here: alive
        self._heartbeat: asyncio.Task[None] | None = None
        self._redis: aioredis.Redis = aioredis.Redis.from_url(
            url,
            socket_timeout=COMMAND_TIMEOUT,
            socket_connect_timeout=COMMAND_TIMEOUT,
            # Once more on a new connection: after a restart of Redis, each pooled
            # connection fails its next command (every command here is idempotent).
            retry_on_error=[RedisConnectionError],
            # RESP2, what every redis-py release this store runs on speaks alike
            # (redis-py 8 speaks RESP3 unless told, and 8.1 then also asks Redis
            # for maintenance notifications on every new connection).
            protocol=2,
        )
        self._outage = Outage(log, f"promise store {_where(url)}", retry_after)
        self._ttl = ttl
        self._max = max_entries
        self._retry_after = retry_after
        self._clock = clock
        self._prefix = prefix
        self._expiry_key = f"{prefix}expiry"
        self._inbox = os.urandom(8).hex()
        self._inbox_channel = f"{prefix}inbox:{self._inbox}"
        self._create = self._redis.register_script(scripts.CREATE)
        self._set_status = self._redis.register_script(scripts.SET_STATUS)
        self._sweep = self._redis.register_script(scripts.SWEEP)
        self._progress = self._redis.register_script(scripts.PROGRESS)
        self._get = self._redis.register_script(scripts.GET)
        self._lose = self._redis.register_script(scripts.LOSE)
        self._side = ProcessSide()
        self._closed = False
        self._abandoned: set[asyncio.Future[Any]] = set()  # commands of cancelled callers
        # Progress is sent in the background, in order, before any later call's command.
        self._pending_progress: dict[bytes, str] = {}
        self._flusher: asyncio.Task[None] | None = None
        # Pub/sub: one connection, one reader task, started on first use.
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._subscribed: dict[str, int] = {}  # channel -> waiters (the inbox: always 1)
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._sent: dict[str, bool] = {}  # channels whose SUBSCRIBE went out
        # One timer, at the earliest expiry of a record created here that no sweep
        # has passed yet; each sweep moves it to the next one.
        self._sweeper = SweepTimer(clock, self._tick)
        self._listening: asyncio.Task[None] | None = None

    async def _call(self, command: Awaitable[T], *, write: bool = True) -> T:
        """Run one Redis command (a ``write``, or a read) so that cancelling the
        caller cancels it; raises :class:`StoreUnavailable` while Redis cannot serve.

        redis-py's asyncio client may swallow a cancel that arrives while a
        command is under way (it returns the reply instead), which would leave a
        cancelled redeem waiting on: the command runs as a task of its own behind a
        shield, and a cancel is raised here, whatever the client does.
        """
        task = asyncio.ensure_future(command)
        try:
            out = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_retrieve)
            self._abandoned.add(task)  # close() waits for it (it holds a connection)
            task.add_done_callback(self._abandoned.discard)
            raise
        except Exception as exc:
            if _is_down(exc):
                raise self._outage.failed(exc, write=write) from exc
            raise
        self._outage.ok(write=write)
        return out

    async def _pipeline(self, fill: Callable[[Any], Awaitable[None]]) -> list[Any]:
        """The replies of the commands ``fill`` queues on a pipeline, sent at once.

        The pipeline is made, run and given back in one coroutine, which
        :meth:`_call` runs as a task of its own: a cancelled caller leaves the
        task to finish, and the pipeline's connection goes back to the pool only
        once its reply is read (given back while it was still being read, the
        next command on that connection read alongside it: ``readuntil() called
        while another coroutine is already waiting``)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            await fill(pipe)
            return list(await pipe.execute())

    def _key(self, promise_id: bytes) -> str:
        return f"{self._prefix}r:{promise_id.hex()}"

    def _done_channel(self, promise_id: bytes) -> str:
        return f"{self._prefix}done:{promise_id.hex()}"

    def _owner_key(self, owner: str) -> str:
        return f"{self._prefix}owner:{owner}"

    async def _ready(self) -> None:
        if self._closed:
            raise UnknownPromise()
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    # -- the Protocol -----------------------------------------------------------------

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        await self._ready()
        await self._listen()  # cancels from elsewhere must find us before the record does
        now = self._clock()
        record = PromiseRecord(os.urandom(16), tool, owner, now + self._ttl)
        for attempt in range(2):
            created = await self._call(
                self._create(
                    keys=[
                        self._expiry_key,
                        self._key(record.promise_id),
                        self._owner_key(owner),
                    ],
                    args=[
                        self._max,
                        record.promise_id.hex(),
                        repr(record.expires_at),
                        tool,
                        owner,
                        self._inbox,
                        int((self._ttl + KEY_MARGIN) * 1000),
                        self._lease_ms,
                    ],
                )
            )
            if created:
                break
            if attempt == 0:
                await self._sweep_now(now)
        else:
            raise PromiseTableFull(retry_after=self._retry_after)
        self._owners.add(owner)
        self._side.mine.add(record.promise_id)
        self._sweeper.at(record.expires_at)
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat())
        return record

    async def has_room(self) -> bool:
        await self._ready()
        if await self._call(self._redis.zcard(self._expiry_key), write=False) < self._max:
            return True
        await self._sweep_now(self._clock())
        return bool(await self._call(self._redis.zcard(self._expiry_key), write=False) < self._max)

    async def complete(
        self, promise_id: bytes, result: Result | None, error: MCPLiteError | None = None
    ) -> None:
        if self._closed:
            return
        try:
            await self._ready()
            await self._set(
                promise_id,
                PromiseStatus.DONE,
                "" if result is None else dump_result(result),
                "" if error is None else dump_error(error),
            )
        except StoreUnavailable:
            raise  # still ours: its lease is renewed (once Redis is back) until it is stored
        except BaseException:
            self._side.mine.discard(promise_id)
            raise
        self._side.mine.discard(promise_id)
        self._side.waiters.wake(promise_id)

    def set_progress(self, promise_id: bytes, progress: dict[str, Any]) -> None:
        if self._closed:
            return
        self._pending_progress[promise_id] = dump_progress(progress)
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def get(self, promise_id: bytes) -> PromiseRecord:
        record, _ = await self._fetch(promise_id)
        return record

    async def _fetch(self, promise_id: bytes) -> tuple[PromiseRecord, float]:
        """The record, and the seconds left of its owner's lease while it runs
        (resolving it to worker_lost when its owner has none)."""
        await self._ready()
        key = self._key(promise_id)
        prefix = self._owner_key("")
        values = await self._call(self._get(keys=[key], args=[prefix]), write=False)
        if values is None:
            raise UnknownPromise()
        *fields, lease_ms = values
        tool, owner, expires_at, status, progress, result, error = (
            v.decode() if isinstance(v, bytes) else v for v in fields
        )
        assert tool is not None and owner is not None and expires_at and status
        left = int(lease_ms) / 1000 if int(lease_ms) >= 0 else self.lease
        if status == PromiseStatus.RUNNING.value and int(lease_ms) == -2:
            if owner in self._owners:
                # Ours, and we live: our lease key went (Redis restarted?); set it again.
                await self._call(
                    self._redis.set(self._owner_key(owner), self._inbox, px=self._lease_ms)
                )
            else:
                lost = dump_result(worker_lost(self._clock()))
                args = [
                    prefix,
                    lost,
                    self._done_channel(promise_id),
                    f"{self._prefix}inbox:",
                    promise_id.hex(),
                ]
                await self._call(self._lose(keys=[key], args=args))
                return await self._fetch(promise_id)
        return PromiseRecord(
            promise_id,
            tool,
            owner,
            float(expires_at),
            PromiseStatus(status),
            load_progress(progress),
            None if result is None else load_result(result),
            None if error is None else load_error(error),
        ), left

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        """The record once it is no longer RUNNING, or as it is after ``timeout`` s.

        Woken by a message on the record's ``done`` channel (subscribed before the
        record is read again, so no change is missed in between), and reads it
        again when its owner's lease runs out (a dead owner publishes nothing).
        """
        record = await self.get(promise_id)
        if record.status is not PromiseStatus.RUNNING or timeout <= 0:
            return record
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        channel = self._done_channel(promise_id)
        self._hold(channel)
        try:
            await self._subscribe(channel, deadline)
            record, lease_left = await self._fetch(promise_id)
            while record.status is PromiseStatus.RUNNING:
                left = deadline - loop.time()
                if left <= 0:
                    break
                waiter = self._side.waiters.future(promise_id)
                # Just after the lease would lapse: the key is gone by then unless renewed.
                recheck = min(left, WAIT_RECHECK, lease_left + LEASE_MARGIN)
                await asyncio.wait((waiter,), timeout=recheck)
                record, lease_left = await self._fetch(promise_id)
        finally:
            self._release(channel)
        return record

    async def request_cancel(self, promise_id: bytes) -> bool:
        await self._ready()
        changed = await self._set(promise_id, PromiseStatus.CANCELLED, "", "")
        return self._side.cancelled(promise_id, None if changed < 0 else changed > 0)

    def on_cancel(self, listener: CancelListener) -> None:
        self._side.listeners.append(listener)

    async def sweep(self) -> int:
        await self._ready()
        return await self._sweep_now(self._clock())

    async def close(self) -> None:
        """Stop this process's running records (resolved to
        :func:`~mcplite.core.promises.worker_lost` for the others), release this store's
        leases, end every wait and the connections; every record stays in Redis
        for the other processes."""
        if self._closed:
            return
        mine = list(self._side.mine)
        self._side.stopped(mine)
        self._closed = True  # from now on every call is refused, wakers included
        with contextlib.suppress(Exception):
            if self._flusher is not None:
                await asyncio.shield(self._flusher)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        try:
            lost = dump_result(worker_lost(self._clock()))
            for promise_id in mine:
                await self._set(promise_id, PromiseStatus.DONE, lost, "")
            if self._owners:
                await self._call(self._redis.delete(*(self._owner_key(o) for o in self._owners)))
        except StoreUnavailable:
            # Said once already; the other processes resolve them when the leases lapse.
            log.warning("promise store unavailable on close: running promises end as lost")
        self._sweeper.cancel()
        if self._abandoned:  # each ends within COMMAND_TIMEOUT (the socket's timeout)
            await asyncio.wait(self._abandoned, timeout=COMMAND_TIMEOUT * 2)
        await self._side.close(self._reader, self._listening)
        if self._pubsub is not None:
            await self._pubsub.aclose()
        await self._redis.aclose()

    # -- commands ---------------------------------------------------------------------

    async def _set(self, promise_id: bytes, status: PromiseStatus, result: str, error: str) -> int:
        changed = await self._call(
            self._set_status(
                keys=[self._key(promise_id)],
                args=[
                    status.value,
                    result,
                    error,
                    self._done_channel(promise_id),
                    f"{self._prefix}inbox:",
                    promise_id.hex(),
                    self._inbox,
                ],
            )
        )
        return int(changed)

    async def _sweep_now(self, now: float) -> int:
        dropped, running = await self._call(
            self._sweep(
                keys=[self._expiry_key],
                args=[
                    repr(now),
                    *(f"{self._prefix}{kind}:" for kind in ("r", "inbox", "done")),
                    self._inbox,
                ],
            )
        )
        self._side.stopped(bytes.fromhex(i.decode()) for i in running)
        return int(dropped)

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.lease * 1000))

    async def _beat(self) -> None:
        """Renew the leases of this store's owners every third of a lease, while
        records created here run (create sets a lease itself), and stop the
        records that are gone from Redis (flushed, or lost in a restart): no
        complete or cancel could reach them any more."""
        while self._side.mine and not self._closed:
            await asyncio.sleep(self.lease / 3)
            owners, mine = list(self._owners), list(self._side.mine)
            try:
                found = await self._call(self._pipeline(partial(self._renew, owners, mine)))
            except StoreUnavailable:
                continue  # said once; the leases are set again once Redis is back
            gone = [i for i, n in zip(mine, found[len(owners) :], strict=True) if not n]
            self._side.stopped(i for i in gone if i in self._side.mine)

    async def _renew(self, owners: list[str], mine: list[bytes], pipe: Any) -> None:
        """Queue the owners' leases and a check that each record of ``mine`` is there."""
        for owner in owners:
            pipe.set(self._owner_key(owner), self._inbox, px=self._lease_ms)
        for promise_id in mine:
            pipe.exists(self._key(promise_id))

    async def _report(self, pending: dict[bytes, str], pipe: Any) -> None:
        """Queue each record's progress (kept only while the record is there)."""
        for promise_id, progress in pending.items():
            await self._progress(keys=[self._key(promise_id)], args=[progress], client=pipe)

    async def _flush(self) -> None:
        try:
            while self._pending_progress:
                pending, self._pending_progress = self._pending_progress, {}
                await self._call(self._pipeline(partial(self._report, pending)))
        except StoreUnavailable:
            pass  # said once; progress is news, not a result: the next report is sent
        finally:
            self._flusher = None

    # -- telling and waking -----------------------------------------------------------

    async def _listen(self) -> None:
        """Subscribe to this store's inbox and start the reader (once; others wait,
        and try again if it failed: Redis may be back)."""
        listening = self._listening
        if listening is None or (listening.done() and not _succeeded(listening)):
            listening = self._listening = asyncio.get_running_loop().create_task(
                self._start_listening()
            )
        await asyncio.shield(listening)

    async def _start_listening(self) -> None:
        """Raises :class:`StoreUnavailable` when Redis does not confirm in time."""
        if self._pubsub is None:
            self._pubsub = self._redis.pubsub()
            self._hold(self._inbox_channel)
        confirmed = self._confirmed[self._inbox_channel]
        if not confirmed.done():
            self._sent[self._inbox_channel] = True
            await self._call(self._pubsub.subscribe(self._inbox_channel))
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())
        await asyncio.wait((confirmed,), timeout=COMMAND_TIMEOUT)
        if not confirmed.done():
            raise StoreUnavailable("promise store unavailable", self._retry_after)

    def _hold(self, channel: str) -> asyncio.Future[None]:
        """Count one more user of ``channel``; the future is done once Redis confirms
        the subscription (the caller sends it when it is the first user)."""
        count = self._subscribed.get(channel, 0)
        self._subscribed[channel] = count + 1
        if not count:
            self._confirmed[channel] = asyncio.get_running_loop().create_future()
        return self._confirmed[channel]

    async def _subscribe(self, channel: str, deadline: float) -> None:
        """Subscribe to ``channel`` (held with :meth:`_hold` by the caller first)."""
        await self._listen()
        confirmed = self._confirmed[channel]
        if not confirmed.done() and not self._sent.get(channel):
            self._sent[channel] = True
            try:
                await self._call(self._pubsub.subscribe(channel))  # sent even if cancelled
            except StoreUnavailable:
                self._sent[channel] = False  # the next wait sends it again
                raise
        if not confirmed.done():
            left = deadline - asyncio.get_running_loop().time()
            # Not confirmed in time: the wait still ends by its rechecks.
            await asyncio.wait((confirmed,), timeout=max(left, 0))

    def _release(self, channel: str) -> None:
        """One user less of ``channel``; the last one unsubscribes (in the background,
        so that a cancelled wait leaves nothing behind)."""
        count = self._subscribed.get(channel, 0) - 1
        if count > 0:
            self._subscribed[channel] = count
            return
        self._subscribed.pop(channel, None)
        self._confirmed.pop(channel, None)
        self._sent.pop(channel, None)
        if not self._closed and self._pubsub is not None:
            self._side.spawn(self._unsubscribe(channel))

    async def _unsubscribe(self, channel: str) -> None:
        if channel in self._subscribed:  # a new wait took it up meanwhile
            return
        try:
            await self._pubsub.unsubscribe(channel)
        except (RedisError, ConnectionError):
            log.debug("could not unsubscribe from %s", channel, exc_info=True)

    async def _read(self) -> None:
        inbox = self._inbox_channel.encode()
        done_prefix = f"{self._prefix}done:".encode()
        while not self._closed:
            try:
                # Reconnects, and subscribes again to every channel, once Redis is back.
                message = await self._pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not _is_down(exc):
                    log.exception("promise store subscription failed; retrying")
                else:
                    self._outage.failed(exc, write=False)
                    self._side.waiters.wake_all()  # each wait reads its record: its caller hears
                await asyncio.sleep(READ_RETRY)
                continue
            if message is None:
                continue
            kind, channel = message["type"], message["channel"]
            if isinstance(kind, bytes):
                kind = kind.decode()
            if kind == "subscribe":
                confirmed = self._confirmed.get(channel.decode())
                if confirmed is not None and not confirmed.done():
                    confirmed.set_result(None)
            elif kind == "message":
                if channel == inbox:
                    promise_id = bytes.fromhex(message["data"].decode())
                    if promise_id in self._side.mine:
                        self._side.stopped([promise_id])
                elif channel.startswith(done_prefix):
                    self._side.waiters.wake(bytes.fromhex(channel[len(done_prefix) :].decode()))

    def _tick(self) -> None:
        self._side.spawn(self._timed_sweep())

    async def _timed_sweep(self) -> None:
        try:
            await self.sweep()
            earliest = self._redis.zrange(self._expiry_key, 0, 0, withscores=True)
            scores = await self._call(earliest, write=False)
        except UnknownPromise:  # closed
            return
        except StoreUnavailable:  # said once; try again a little later
            self._sweeper.at(self._clock() + self._retry_after)
            return
        if scores and not self._closed:
            self._sweeper.at(float(scores[0][1]))


def _succeeded(task: asyncio.Task[None]) -> bool:
    """Whether a done task ended without an exception (reading it, if it had one)."""
    return not task.cancelled() and task.exception() is None


def _where(url: str) -> str:
    """Where ``url`` points, without its credentials: what the log may say."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path}"
