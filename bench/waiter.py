"""A redeem that waits in a process of its own: the other side of the cross-process
wake-up that ``bench.redeem`` measures.

``python -m bench.waiter URL SECRET_HEX`` opens the promise store ``URL`` (the
SQLite file or Redis server the bench's process uses too) under a
:class:`~mcplite.Dispatcher` with the bench's secret, prints ``ready``, then for
each promise token read from stdin (one a line):

1. starts ``redeem(token, wait=10)``;
2. prints ``waiting`` once the store's wait sleeps (see :func:`until_parked`);
3. prints ``woken <time.monotonic()> <response type>`` when the redeem returns.

It ends at the end of stdin.  The bench releases its tool when it reads
``waiting`` and subtracts the moment its tool returned from the time printed:
``time.monotonic()`` reads CLOCK_MONOTONIC, one clock for every process of a
Linux host.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable
from typing import Any

from mcplite import Config, Dispatcher, PromiseStore, Result, Tools
from mcplite.core.promises import Waiters
from mcplite.stores import open_store

__all__ = ["Parking", "main", "stamped", "until_parked", "watch_parking"]


class Parking(Waiters):
    """A store's register of waits that tells when a wait goes to sleep.

    A store's ``wait`` takes the future it sleeps on from its register only once it
    has read the record RUNNING (Redis: once Redis confirmed its subscription to
    the record's channel), so a future taken means that a change of the record now
    reaches the wait through the store's own notification path."""

    def __init__(self) -> None:
        super().__init__()
        self.parked = asyncio.Event()
        self.promise_id = b""  # of the last wait that went to sleep

    def future(self, promise_id: bytes) -> asyncio.Future[None]:
        waiter = super().future(promise_id)
        self.promise_id = promise_id
        self.parked.set()
        return waiter


def watch_parking(store: PromiseStore) -> Parking:
    """Put a :class:`Parking` in the place of ``store``'s register of waits (every
    mcplite store keeps its waits in a ``Waiters``); call it before the store is used."""
    parking = Parking()
    store._side.waiters = parking  # type: ignore[attr-defined]
    return parking


async def stamped(redeem: Awaitable[Result]) -> tuple[Result, float]:
    """The redeem's result and the ``time.monotonic()`` of its return."""
    result = await redeem
    return result, time.monotonic()


async def until_parked(
    redeem: asyncio.Task[Any], store: PromiseStore, parking: Parking, timeout: float
) -> None:
    """Return once ``redeem`` sleeps in ``store``'s wait, and what the wait set off as
    it went to sleep has run: SQLite's watch reads its first ``data_version`` on the
    store's one worker thread, so one more read through the store comes after it.

    Call it as soon as ``redeem`` is created (before it runs: the sign is cleared
    first).  Raises RuntimeError when the redeem returned without sleeping,
    TimeoutError when it did not sleep within ``timeout`` seconds."""
    parking.parked.clear()
    parked = asyncio.ensure_future(parking.parked.wait())
    try:
        await asyncio.wait((redeem, parked), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        parked.cancel()
    if redeem.done():
        raise RuntimeError(f"the redeem returned before it waited: {redeem.result()!r}")
    if not parking.parked.is_set():
        raise TimeoutError(f"the redeem did not wait within {timeout} s")
    await store.get(parking.promise_id)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def serve(url: str, secret: bytes) -> None:
    store = open_store(url, ttl=600.0, max_entries=10_000)
    parking = watch_parking(store)
    dispatcher = Dispatcher(Tools(), Config(secret=secret), promises=store)
    lines = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
    try:
        say("ready")
        while token := (await lines.readline()).decode().strip():
            redeem = asyncio.create_task(stamped(dispatcher.redeem(token, wait=10)))
            await until_parked(redeem, store, parking, 10)
            say("waiting")
            result, returned = await asyncio.wait_for(redeem, 15)
            say(f"woken {returned!r} {result.response_type.value}")
    finally:
        await dispatcher.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.waiter", description=__doc__)
    parser.add_argument("url", help="the promise store, as the bench's process opened it")
    parser.add_argument("secret", type=bytes.fromhex, help="the bench's secret, in hex")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.url, args.secret))
    return 0


if __name__ == "__main__":
    sys.exit(main())
