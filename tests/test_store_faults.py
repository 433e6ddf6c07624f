"""The shared promise stores under faults, over real sockets with real peers.

A Redis server (a real ``redis-server``) is stopped while a redeem waits on it
and while a call stores its result, hung (SIGSTOP), restarted on the same port
and flushed; an SQLite file is deleted, its directory removed, made read-only
(immutable: the tests run as root, whom ``chmod`` does not stop), locked by
another process and put on a full disk (a 1 MiB tmpfs).  Each time:

- while the store is gone, a call that needs it is refused as retryable: HTTP
  503 with ``Retry-After`` and -32000 ``reason: store_unavailable``; gRPC
  ``UNAVAILABLE`` with the same data; never a 500;
- the log hears one WARNING when the store goes and one when it is back, no
  ERROR, whatever the number of requests;
- the server recovers by itself, with no restart, and loses no result the
  store had taken (see "What each store guarantees" in docs/operations.md);
- no task is left behind.
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import (
    WAIT,
    DelegatingStore,
    RunningServer,
    call_message,
    make_config,
    rpc_message,
    run_in_thread,
    serve_process,
)
from grpc_support import protos
from redis_support import RedisProcess, redis_process

from mcplite import (
    ALWAYS,
    Dispatcher,
    MemoryStore,
    PromiseRecord,
    PromiseStatus,
    PromiseStore,
    StoreUnavailable,
    Tools,
)
from mcplite.bindings.grpc.service import GrpcServer
from mcplite.bindings.http import HttpServer
from mcplite.client import Client, OverloadedError
from mcplite.core.wire import ERROR_DATA_KEY
from mcplite.protocols.mcp.protocol import CAPABILITIES_KEY, VERSION_KEY
from mcplite.stores import open_store
from mcplite.stores import sqlite as sqlite_store
from mcplite.stores.sqlite import SQLiteStore

RETRY_AFTER = 0.25  # the servers' retry_after: Retry-After says 1 (whole seconds, at least 1)
UNAVAILABLE = {"retry_after": RETRY_AFTER, "reason": "store_unavailable"}
LOCK_TIMEOUT = 0.3  # how long a write waits for another process's lock, in these tests
OURS = protos()["ours"]
METRICS_URL = re.compile(r"http://127\.0\.0\.1:(\d+)/metrics")
#: The stores' own loops, alive as long as the store has work (not leaks).
STORE_LOOPS = {
    "RedisStore._read",
    "RedisStore._beat",
    "SQLiteStore._poll_cancels",
    "SQLiteStore._watch",
}


# --- the tools, the servers, the peers ----------------------------------------------------


class Jobs:
    """``quick`` is promised and done at once; ``job`` is promised and runs until
    :meth:`release` (it sets ``cancelled`` if it is stopped instead)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()  # bound to the server's loop when first awaited
        self.cancelled = threading.Event()
        self.tools = Tools()

        @self.tools.tool(promise_after=ALWAYS)
        async def quick() -> str:
            return "quick"

        @self.tools.tool(promise_after=ALWAYS)
        async def job() -> str:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return "finished"

    def release(self, server: RunningServer) -> None:
        server.call_soon(self.gate.set)


class WaitSpy(DelegatingStore):
    """Sets ``waiting`` when a redeem's long wait reaches the store."""

    def __init__(self, inner: PromiseStore) -> None:
        super().__init__(inner)
        self.waiting = threading.Event()

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        self.waiting.set()
        return await self.inner.wait(promise_id, timeout)


def serve(tools: Tools, store: Callable[[], PromiseStore]) -> RunningServer:
    """HTTP (MCP-lite and MCP) and gRPC for ``tools`` over the store ``store()`` makes."""
    config = make_config(retry_after=RETRY_AFTER)

    async def boot() -> tuple[Dispatcher, HttpServer, Any]:
        dispatcher = Dispatcher(tools, config, promises=store())
        http = HttpServer(dispatcher, config)
        await http.start("127.0.0.1", 0)
        grpc_server = GrpcServer(dispatcher, config)
        await grpc_server.start("127.0.0.1", 0)
        return dispatcher, http, grpc_server

    return run_in_thread(boot)


@contextmanager
def serving(tools: Tools, store: Callable[[], PromiseStore]) -> Iterator[RunningServer]:
    server = serve(tools, store)
    try:
        yield server
    finally:
        server.stop()


def call(server: RunningServer, name: str, arguments: Any = None) -> tuple[int, str, Any]:
    """A ``tools/call`` over HTTP: the status, ``Retry-After`` and the JSON-RPC reply."""
    status, headers, body = server.post("/rpc", call_message(name, arguments))
    return status, headers.get("retry-after", ""), json.loads(body)


def promise(server: RunningServer, name: str) -> str:
    status, _, reply = call(server, name)
    assert status == 200, reply
    assert reply["result"]["_meta"]["response_type"] == "promise", reply
    token: str = reply["result"]["_meta"]["promise_token"]
    return token


def redeem(server: RunningServer, token: str, wait: float = 0) -> tuple[int, str, Any]:
    return call(server, "redeem", {"promise": token, "wait": wait})


def assert_answer(answered: tuple[int, str, Any], text: str) -> None:
    status, _, reply = answered
    assert status == 200, reply
    assert reply["result"]["content"] == [{"type": "text", "text": text}], reply


def assert_unavailable(answered: tuple[int, str, Any]) -> None:
    status, retry_after, reply = answered
    assert (status, retry_after) == (503, "1"), reply
    assert reply["error"]["code"] == -32000, reply
    assert reply["error"]["data"] == UNAVAILABLE, reply


def assert_unknown(answered: tuple[int, str, Any]) -> None:
    status, _, reply = answered
    assert status == 200, reply
    assert reply["error"]["code"] == -32602, reply
    assert reply["error"]["data"] == {"reason": "unknown"}, reply


def grpc_refusal(server: RunningServer, name: str, arguments: Any = None) -> grpc.RpcError:
    """The error a ``CallTool`` over gRPC (grpcio) ends with."""
    with (
        grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        OURS.stub(channel).CallTool(OURS.request(name, arguments), timeout=WAIT)
    return caught.value


def assert_grpc_unavailable(error: grpc.RpcError) -> None:
    assert error.code() is grpc.StatusCode.UNAVAILABLE, error
    trailers = dict(error.trailing_metadata() or ())
    assert json.loads(trailers[ERROR_DATA_KEY]) == UNAVAILABLE


def stored(server: RunningServer, token: str) -> PromiseRecord:
    """The record of ``token`` once the store holds its outcome (bounded)."""
    promise_id, _ = server.dispatcher.sealer.open(token)
    record: PromiseRecord = server.run(server.dispatcher.promises.wait(promise_id, WAIT), WAIT * 2)
    assert record.status is PromiseStatus.DONE, record
    return record


def mcp(server: RunningServer, method: str, params: dict[str, Any]) -> tuple[int, Any]:
    """One MCP 2026-07-28 request (the tasks extension declared): status and reply."""
    meta = {VERSION_KEY: "2026-07-28", CAPABILITIES_KEY: {"extensions": {TASKS: {}}}}
    name = params.get("name", params.get("taskId"))
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        "Mcp-Name": str(name),
    }
    conn = server.connection()
    try:
        body = json.dumps(rpc_message(method, {**params, "_meta": meta})).encode()
        conn.request("POST", "/mcp", body, {"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


TASKS = "io.modelcontextprotocol/tasks"


def baseline(server: RunningServer) -> set[asyncio.Task[Any]]:
    return server.tasks()


def assert_nothing_left(server: RunningServer, before: set[asyncio.Task[Any]]) -> None:
    """Wait (bounded) until the server runs no call, keeps no promised task and no
    task beyond ``before`` but the store's own loops."""

    async def leftover() -> list[str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        dispatcher = server.dispatcher
        while True:
            extra = [
                task
                for task in asyncio.all_tasks()
                if task not in before
                and task is not asyncio.current_task()
                and task.get_coro().__qualname__ not in STORE_LOOPS  # type: ignore[union-attr]
            ]
            if not extra and dispatcher.active == 0 and dispatcher.pending_promises == 0:
                return []
            if loop.time() > deadline:
                return [f"pending={dispatcher.pending_promises}", *map(repr, extra)]
            await asyncio.sleep(0.01)  # a bounded poll of the loop's own state

    assert server.run(leftover(), WAIT * 2) == []


class Heard(logging.Handler):
    """Every record at WARNING or above from mcplite and asyncio."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def errors(self) -> list[str]:
        gc.collect()  # a task that failed unread is reported when it is collected
        return [r.getMessage() for r in self.records if r.levelno >= logging.ERROR]

    def said(self, text: str) -> int:
        """How many store warnings contain ``text``."""
        return sum(
            1
            for r in self.records
            if r.name.startswith("mcplite.stores") and text in r.getMessage()
        )


@pytest.fixture
def heard() -> Iterator[Heard]:
    handler = Heard()
    loggers = [logging.getLogger("mcplite"), logging.getLogger("asyncio")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


WENT, BACK = "unavailable (", "is available again"


# --- any store -------------------------------------------------------------------------------


class NeverTakes(DelegatingStore):
    """A store that is down for every outcome (it still makes promises)."""

    async def complete(self, promise_id: bytes, result: Any, error: Any = None) -> None:
        raise StoreUnavailable(retry_after=RETRY_AFTER)


def test_an_outcome_the_store_never_takes_is_given_up_when_its_promise_expires(
    heard: Heard,
) -> None:
    """The outcome is tried again with backoff, but no longer than its token
    lives: then one WARNING, and nothing left behind."""
    jobs = Jobs()
    config = make_config(retry_after=RETRY_AFTER, promise_ttl=0.5)

    async def boot() -> tuple[Dispatcher, HttpServer, Any]:
        store = NeverTakes(MemoryStore(ttl=config.promise_ttl, max_entries=10))
        dispatcher = Dispatcher(jobs.tools, config, promises=store)
        http = HttpServer(dispatcher, config)
        await http.start("127.0.0.1", 0)
        return dispatcher, http, None

    server = run_in_thread(boot)
    try:
        before = baseline(server)
        promise(server, "quick")
        assert_nothing_left(server, before)
    finally:
        server.stop()
    assert heard.errors() == []
    expired = [r for r in heard.records if "expired before the store took" in r.getMessage()]
    assert len(expired) == 1


# --- our client under an outage -----------------------------------------------------------


class DownForReads(DelegatingStore):
    """Unavailable for the first ``times`` reads of a promise (a redeem's ``get`` or
    ``wait``), then the store it wraps; ``back`` is set with the last refusal."""

    def __init__(self, inner: PromiseStore, times: int) -> None:
        super().__init__(inner)
        self.left = times
        self.refused = 0
        self.back = threading.Event()

    def _refuse(self) -> None:
        if self.left > 0:
            self.left -= 1
            self.refused += 1
            if self.left == 0:
                self.back.set()
            raise StoreUnavailable(retry_after=RETRY_AFTER)

    async def get(self, promise_id: bytes) -> PromiseRecord:
        self._refuse()
        return await self.inner.get(promise_id)

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        self._refuse()
        return await self.inner.wait(promise_id, timeout)


@pytest.mark.parametrize("transport", ["http", "grpc"])
async def test_our_client_waits_out_a_store_outage_under_the_promise_it_redeems(
    transport: str, heard: Heard
) -> None:
    """Its redeems are refused as retryable twice (503 / UNAVAILABLE with
    ``retry_after``); the client asks again after each, and gets the outcome."""
    jobs = Jobs()
    stores: list[DownForReads] = []

    def make() -> PromiseStore:
        stores.append(DownForReads(MemoryStore(ttl=60, max_entries=10), times=2))
        return stores[-1]

    with serving(jobs.tools, make) as server:
        url = (
            f"grpc://127.0.0.1:{server.grpc_port}"
            if transport == "grpc"
            else f"http://127.0.0.1:{server.port}"
        )
        async with Client(url, timeout=WAIT) as client:
            waiting = asyncio.create_task(client.call("job"))
            assert await asyncio.to_thread(stores[0].back.wait, WAIT)
            jobs.release(server)
            response = await asyncio.wait_for(waiting, WAIT)
            assert response.response_type == "answer" and response.text == "finished"
            # Asked directly, a redeem during an outage says so, with when to retry.
            stores[0].left = 1
            token = (await client.call("quick", wait=False)).promise_token
            assert token is not None
            with pytest.raises(OverloadedError) as refused:
                await client.redeem(token)
    assert stores[0].refused == 3
    assert refused.value.retry_after == RETRY_AFTER
    assert refused.value.data == UNAVAILABLE
    assert heard.errors() == []


# --- Redis ------------------------------------------------------------------------------------


def redis_store(redis: RedisProcess, query: str = "") -> Callable[[], PromiseStore]:
    """Opens the store as ``--promise-store URL`` does (``query``: the URL's own)."""
    return lambda: open_store(redis.url + query, ttl=600, max_entries=100, retry_after=RETRY_AFTER)


def test_redis_stopped_under_a_waiting_redeem_and_a_storing_call_then_back_loses_nothing(
    heard: Heard,
) -> None:
    """Redis (with its append-only file) stops while server B's redeem waits on a
    promise of server A and while A's call ends: both are answered 503 / UNAVAILABLE
    meanwhile; once Redis is back, A stores the outcome it kept, and B redeems it."""
    jobs = Jobs()
    spy: list[WaitSpy] = []

    def spied(redis: RedisProcess) -> Callable[[], PromiseStore]:
        def make() -> PromiseStore:
            spy.append(WaitSpy(redis_store(redis)()))
            return spy[0]

        return make

    with (
        redis_process(persistent=True) as redis,
        serving(jobs.tools, redis_store(redis)) as a,
        serving(Tools(), spied(redis)) as b,
    ):
        before = baseline(a)
        quick = promise(a, "quick")
        assert_answer(redeem(b, quick, WAIT), "quick")  # stored: B reads it from Redis
        token = promise(a, "job")
        status, task = mcp(a, "tools/call", {"name": "job", "arguments": {}})
        assert status == 200 and task["result"]["resultType"] == "task", task
        task_id = task["result"]["taskId"]

        waiting: list[tuple[int, str, Any]] = []
        redeemer = threading.Thread(target=lambda: waiting.append(redeem(b, token, WAIT)))
        redeemer.start()
        assert spy[0].waiting.wait(WAIT)
        redis.stop()
        redeemer.join(WAIT)
        assert not redeemer.is_alive()
        assert_unavailable(waiting[0])  # the long wait ends: Redis is gone

        jobs.release(a)  # both jobs end while Redis is down: A keeps their outcomes
        assert_unavailable(call(a, "job"))
        assert_unavailable(redeem(b, quick))
        assert_grpc_unavailable(grpc_refusal(b, "redeem", {"promise": quick}))
        assert_grpc_unavailable(grpc_refusal(a, "job"))
        status, reply = mcp(a, "tasks/get", {"taskId": task_id})
        assert status == 200 and reply["error"]["code"] == -32000, reply
        assert reply["error"]["data"] == UNAVAILABLE
        said = heard.said(WENT)
        for _ in range(5):
            assert_unavailable(redeem(a, quick))
        assert heard.said(WENT) == said  # not once per request

        redis.start()  # the same port, the same data
        assert_answer(redeem(b, token, WAIT), "finished")  # A stored what it kept
        assert_answer(redeem(b, quick), "quick")
        status, reply = mcp(a, "tasks/get", {"taskId": task_id})
        assert status == 200 and reply["result"]["status"] == "completed", reply
        assert_answer(call(b, "redeem", {"promise": promise(a, "job"), "wait": WAIT}), "finished")
        assert_nothing_left(a, before)

    assert heard.errors() == []
    assert heard.said(WENT) == heard.said(BACK) == 2  # once each way, by each server's store


@pytest.mark.parametrize("loss", ["flushall", "restart"])
def test_promises_redis_lost_answer_unknown_promise_and_stop_their_tasks(
    loss: str, heard: Heard
) -> None:
    """A Redis without persistence that restarts, or a FLUSHALL, takes every
    promise with it: a stored result and a running call alike then answer
    -32602 ``unknown`` (gRPC NOT_FOUND), the running call is stopped, and new
    calls are served as before."""
    jobs = Jobs()
    with redis_process() as redis, serving(jobs.tools, redis_store(redis, "?lease=0.3")) as a:
        before = baseline(a)
        quick = promise(a, "quick")
        stored(a, quick)
        token = promise(a, "job")
        if loss == "flushall":
            assert redis.command("FLUSHALL") == b"+OK\r\n"
        else:
            redis.stop()
            redis.start()
        assert_unknown(redeem(a, quick))
        assert_unknown(redeem(a, token))
        assert grpc_refusal(a, "redeem", {"promise": quick}).code() is grpc.StatusCode.NOT_FOUND
        assert jobs.cancelled.wait(WAIT)  # its record is gone: nothing could reach it

        fresh = promise(a, "job")
        jobs.release(a)
        assert_answer(redeem(a, fresh, WAIT), "finished")
        assert_nothing_left(a, before)
    assert heard.errors() == []


def test_a_redis_that_stops_answering_is_unavailable_after_its_timeout_not_forever(
    heard: Heard,
) -> None:
    """A Redis that hangs (SIGSTOP) is answered 503 once a command outlives the
    client's timeout (``?socket_timeout=`` in the URL; 5 s unless given), and
    served again once it answers."""
    jobs = Jobs()
    with (
        redis_process() as redis,
        serving(jobs.tools, redis_store(redis, "?socket_timeout=0.3")) as a,
    ):
        quick = promise(a, "quick")
        stored(a, quick)
        assert redis.process is not None
        os.kill(redis.process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert_unavailable(redeem(a, quick))
            assert time.monotonic() - started < WAIT
        finally:
            os.kill(redis.process.pid, signal.SIGCONT)
        assert_answer(redeem(a, quick), "quick")
    assert heard.errors() == []
    assert heard.said(WENT) == heard.said(BACK) == 1


def readyz(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request("GET", "/readyz")
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_mcplite_serve_says_not_ready_while_redis_is_gone_and_warns_once_each_way() -> None:
    """``mcplite serve --promise-store redis://...``: /readyz answers 503 while
    Redis is stopped and 200 once it is back; stderr has one WARNING each way
    and no traceback, however often it is asked."""
    with (
        redis_process() as redis,
        serve_process(
            "mcplite.demo",
            *("--http", "127.0.0.1:0", "--no-grpc", "--metrics", "127.0.0.1:0"),
            *("--promise-store", redis.url, "--no-access-log"),
        ) as server,
    ):
        found = next(filter(None, map(METRICS_URL.search, server.lines)))
        port = int(found.group(1))
        assert readyz(port) == (200, b"ready\n")
        redis.stop()
        for _ in range(3):
            status, body = readyz(port)
            assert status == 503
            assert body.startswith(b"not ready: promise store unreachable"), body
        redis.start()
        assert readyz(port) == (200, b"ready\n")
        lines = server.stop()
    warnings = [line for line in lines if "WARNING" in line and "promise store" in line]
    assert len(warnings) == 2, lines
    assert "unavailable (ConnectionError" in warnings[0]
    assert "is available again" in warnings[1]
    assert not [line for line in lines if "Traceback" in line or " ERROR " in line], lines


# --- SQLite -------------------------------------------------------------------------------


def sqlite_at(path: Path) -> Callable[[], PromiseStore]:
    return lambda: SQLiteStore(path, ttl=600, max_entries=100, retry_after=RETRY_AFTER)


@pytest.mark.parametrize("deleted", ["the file", "the file, its WAL and its shared memory"])
def test_a_deleted_sqlite_file_is_opened_again_its_promises_answer_unknown(
    deleted: str, tmp_path: Path, heard: Heard
) -> None:
    """The file deleted while open (a running call's record in it): the store
    notices at its next step, opens the path again (a new, empty file) and goes
    on; the deleted promises answer -32602 ``unknown``, the running call stops."""
    path = tmp_path / "promises.db"
    jobs = Jobs()
    with serving(jobs.tools, sqlite_at(path)) as a:
        before = baseline(a)
        quick = promise(a, "quick")
        stored(a, quick)
        token = promise(a, "job")
        suffixes = [""] if deleted == "the file" else ["", "-wal", "-shm"]
        for suffix in suffixes:
            Path(f"{path}{suffix}").unlink()

        assert_unknown(redeem(a, quick))
        assert jobs.cancelled.wait(WAIT)  # its record went with the file
        assert_unknown(redeem(a, token))
        fresh = promise(a, "job")
        assert path.exists()
        jobs.release(a)
        assert_answer(redeem(a, fresh, WAIT), "finished")
        assert_nothing_left(a, before)
    assert heard.errors() == []
    assert heard.said("was deleted or replaced") == 1


def test_a_removed_sqlite_directory_is_unavailable_until_it_is_back(
    tmp_path: Path, heard: Heard
) -> None:
    """The directory removed between calls: every call that needs the store is
    refused as retryable (the file cannot be made); once the directory is back,
    the store makes a new file by itself."""
    folder = tmp_path / "store"
    folder.mkdir()
    jobs = Jobs()
    with serving(jobs.tools, sqlite_at(folder / "promises.db")) as a:
        before = baseline(a)
        quick = promise(a, "quick")
        stored(a, quick)
        shutil.rmtree(folder)

        assert_unavailable(redeem(a, quick))
        assert_unavailable(call(a, "job"))
        assert_grpc_unavailable(grpc_refusal(a, "job"))
        folder.mkdir()
        assert_unknown(redeem(a, quick))  # it went with the file
        fresh = promise(a, "job")
        jobs.release(a)
        assert_answer(redeem(a, fresh, WAIT), "finished")
        assert_nothing_left(a, before)
    assert heard.errors() == []
    assert heard.said(WENT) == heard.said(BACK) == 1


def chattr(flag: str, *paths: Path) -> None:
    """Set or clear the immutable flag (which stops root, unlike ``chmod``)."""
    done = subprocess.run(
        ["chattr", flag, *map(str, paths)], capture_output=True, text=True, timeout=WAIT
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Callable[[str, Path], None]]:
    """``immutable("+i" or "-i", path)``; every flag set is cleared at the end.
    Skips where the immutable flag cannot be set (not root, no chattr, or a file
    system without it)."""
    probe = tmp_path / "probe"
    probe.touch()
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("making a file read-only for root needs root and chattr (+i)")
    tried = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, text=True)
    if tried.returncode != 0:
        pytest.skip(f"this file system has no immutable flag: {tried.stderr.strip()}")
    chattr("-i", probe)
    flagged: list[Path] = []

    def flag(how: str, path: Path) -> None:
        chattr(how, path)
        if how == "+i":
            flagged.append(path)

    try:
        yield flag
    finally:
        for path in flagged:
            if path.exists():
                chattr("-i", path)


@pytest.mark.parametrize("made_read_only", ["file", "directory"])
def test_a_read_only_sqlite_store_refuses_writes_as_retryable_and_recovers(
    made_read_only: str,
    tmp_path: Path,
    immutable: Callable[[str, Path], None],
    heard: Heard,
) -> None:
    """A server started on a read-only file reads its stored results and refuses
    new promises as retryable; on a read-only directory (no WAL can be made) it
    refuses both.  Writable again, it serves by itself.  A file made read-only
    while the store has it open is written on: the system checks at open."""
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "promises.db"
    jobs = Jobs()
    with serving(jobs.tools, sqlite_at(path)) as earlier:
        quick = promise(earlier, "quick")
        stored(earlier, quick)
    target = path if made_read_only == "file" else folder
    immutable("+i", target)

    with serving(jobs.tools, sqlite_at(path)) as a:
        before = baseline(a)
        if made_read_only == "file":
            assert_answer(redeem(a, quick), "quick")
        else:
            assert_unavailable(redeem(a, quick))
        assert_unavailable(call(a, "job"))
        assert_grpc_unavailable(grpc_refusal(a, "job"))

        immutable("-i", target)
        token = promise(a, "job")
        assert_answer(redeem(a, quick), "quick")
        immutable("+i", target)  # now open: the store writes on
        jobs.release(a)
        assert_answer(redeem(a, token, WAIT), "finished")
        assert stored(a, token).result is not None
        assert_nothing_left(a, before)
        immutable("-i", target)
    assert heard.errors() == []
    assert heard.said(WENT) == heard.said(BACK) == 1


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


def read_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], WAIT)
    assert ready, "the locking process said nothing in time"
    return process.stdout.readline().strip()


def test_a_locked_sqlite_store_refuses_writes_as_retryable_and_stores_what_it_kept(
    tmp_path: Path, heard: Heard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the file with BEGIN EXCLUSIVE: reads go on (WAL), a
    new promise is refused as retryable after the lock timeout, and the outcome
    of a call that ends meanwhile is kept (its owner redeems it) and stored once
    the lock is released."""
    monkeypatch.setattr(sqlite_store, "LOCK_TIMEOUT", LOCK_TIMEOUT)
    path = tmp_path / "promises.db"
    jobs = Jobs()
    with serving(jobs.tools, sqlite_at(path)) as a:
        before = baseline(a)
        quick = promise(a, "quick")
        stored(a, quick)
        token = promise(a, "job")
        locker = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert read_line(locker) == "locked"
            assert_unavailable(call(a, "job"))
            assert_grpc_unavailable(grpc_refusal(a, "job"))
            assert_answer(redeem(a, quick), "quick")  # readers do not wait in WAL mode
            jobs.release(a)
            assert_answer(redeem(a, token, WAIT), "finished")  # kept by its owner
        finally:
            assert locker.stdin is not None
            locker.stdin.close()  # its readline ends: it commits and exits
            assert locker.wait(WAIT) == 0
            assert locker.stdout is not None
            locker.stdout.close()
        assert stored(a, token).result is not None  # stored once the lock was gone
        assert_nothing_left(a, before)
    assert heard.errors() == []
    assert heard.said(WENT) == heard.said(BACK) == 1


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (room for the WAL of a few dozen writes), unmounted at the end;
    skips unless mounting is allowed."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True, timeout=WAIT)


def fill(folder: Path) -> Path:
    """A file that takes every free byte of ``folder``'s file system."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:  # unbuffered: nothing left to flush
        try:
            while out.write(b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: full
            pass
    return filler


def test_a_full_disk_refuses_writes_as_retryable_and_the_store_recovers_once_there_is_room(
    small_disk: Path, heard: Heard
) -> None:
    """The SQLite file's disk fills up: new promises are refused as retryable,
    stored results are still read, the outcome of a call that ends meanwhile is
    kept, and stored once there is room again."""
    jobs = Jobs()
    with serving(jobs.tools, sqlite_at(small_disk / "promises.db")) as a:
        before = baseline(a)
        quick = promise(a, "quick")
        stored(a, quick)
        token = promise(a, "job")
        filler = fill(small_disk)

        assert_unavailable(call(a, "job"))
        assert_grpc_unavailable(grpc_refusal(a, "job"))
        assert_answer(redeem(a, quick), "quick")
        jobs.release(a)
        assert_answer(redeem(a, token, WAIT), "finished")  # kept by its owner

        filler.unlink()
        assert stored(a, token).result is not None
        fresh = promise(a, "job")
        assert_answer(redeem(a, fresh, WAIT), "finished")
        assert_nothing_left(a, before)
    assert heard.errors() == []
    assert heard.said(WENT) == heard.said(BACK) == 1
