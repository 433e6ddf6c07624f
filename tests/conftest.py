"""Shared fixtures and helpers: real mcplite servers on 127.0.0.1 with ephemeral ports,
and what the promise tests share.

- :func:`start_server` runs a server in-process on its own event loop in a thread,
  so blocking peers we did not write (``http.client``, raw sockets, grpcio) can
  drive it from the test; :func:`server_factory` starts several and stops them all.
- :class:`ServeProcess` runs ``python -m mcplite serve`` as a subprocess and reads
  its stderr line by line.
- :class:`FakeClock`, :func:`single_changes` and :class:`DelegatingStore` serve the
  token and promise-store tests.

The whole suite runs on one kind of event loop: asyncio's, or uvloop's with
``MCPLITE_TEST_LOOP=uvloop`` in the environment (see :func:`pytest_configure`).
"""

from __future__ import annotations

import asyncio
import http.client as httpclient
import json
import os
import queue
import re
import signal
import string
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mcplite import Config, Dispatcher, PromiseRecord, PromiseStore, Result, Tools
from mcplite.bindings.http import HttpServer
from mcplite.core.errors import MCPLiteError
from mcplite.core.promises import CancelListener

ROOT = Path(__file__).resolve().parent.parent
BASE = "/mcp-lite/v1"
WAIT = 10.0  # upper bound of every wait in the tests, in seconds
PROCESS_WAIT = 15.0  # upper bound of every wait on a subprocess, in seconds
SECRET = b"test-secret-0123456789abcdef"


#: The event loop every test runs on: ``$MCPLITE_TEST_LOOP``, "asyncio" or "uvloop".
TEST_LOOP = os.environ.get("MCPLITE_TEST_LOOP", "").strip().lower() or "asyncio"


def pytest_configure(config: pytest.Config) -> None:
    """Make every event loop of the suite one of :data:`TEST_LOOP`'s kind: the loops
    the tests make themselves (``asyncio.run``, ``new_event_loop``, the servers of
    :func:`run_in_thread`) and pytest-asyncio's all come from the event loop policy;
    the servers started as ``python -m mcplite`` read ``MCPLITE_LOOP``, which their
    environment inherits from this process's."""
    if TEST_LOOP not in ("asyncio", "uvloop"):
        raise pytest.UsageError(f"MCPLITE_TEST_LOOP={TEST_LOOP}: expected asyncio or uvloop")
    os.environ["MCPLITE_LOOP"] = TEST_LOOP
    if TEST_LOOP == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def make_config(**overrides: Any) -> Config:
    """A test Config: a fixed secret, no access log, and the given overrides (which may
    replace those two too)."""
    return Config(**{"secret": SECRET, "access_log": False, **overrides})


def rpc_message(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    """A JSON-RPC 2.0 request (``params`` left out when None)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call_message(name: str, arguments: Any = None, request_id: Any = 1) -> dict[str, Any]:
    """A ``tools/call`` request (``arguments`` default to ``{}``)."""
    return rpc_message("tools/call", {"name": name, "arguments": arguments or {}}, request_id)


def notification(name: str, arguments: Any = None) -> dict[str, Any]:
    """A ``tools/call`` notification: no ``id``, so no answer."""
    message = call_message(name, arguments)
    del message["id"]
    return message


@pytest.fixture
async def dispatchers() -> AsyncIterator[list[Dispatcher]]:
    """Dispatchers made by a test, closed (promised tasks, thread pool) when it ends."""
    made: list[Dispatcher] = []
    yield made
    for dispatcher in made:
        await dispatcher.close()


def serve(made: list[Dispatcher], tools: Tools, **overrides: Any) -> Dispatcher:
    """An in-memory Dispatcher for ``tools``, closed with the ``dispatchers`` fixture."""
    dispatcher = Dispatcher(tools, make_config(**overrides))
    made.append(dispatcher)
    return dispatcher


@dataclass
class RunningServer:
    """A server started by :func:`start_server`; stop it with :meth:`stop`."""

    loop: asyncio.AbstractEventLoop
    http: HttpServer
    dispatcher: Dispatcher
    thread: threading.Thread
    port: int
    grpc_port: int | None = None
    grpc: Any = None
    _stopped: bool = field(default=False)

    def run(self, coro: Any, timeout: float = WAIT) -> Any:
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def tasks(self) -> set[asyncio.Task[Any]]:
        """The tasks alive on the server loop (besides the one asking)."""

        async def alive() -> set[asyncio.Task[Any]]:
            return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

        tasks: set[asyncio.Task[Any]] = self.run(alive())
        return tasks

    def settle(self, baseline: set[asyncio.Task[Any]], timeout: float) -> list[str]:
        """Wait (bounded) until no call is active and no task beyond ``baseline`` is
        left on the server loop; return what is left over (empty when settled)."""

        async def wait() -> list[str]:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                alive = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
                extra = alive - baseline
                if not extra and self.dispatcher.active == 0:
                    return []
                if loop.time() > deadline:
                    return [f"active={self.dispatcher.active}", *map(repr, extra)]
                await asyncio.sleep(0.01)  # a bounded poll of the loop's own state

        leftover: list[str] = self.run(wait(), timeout=timeout + WAIT)
        return leftover

    def call_soon(self, fn: Callable[[], Any]) -> Any:
        async def wrapper() -> Any:
            return fn()

        return self.run(wrapper())

    def http_connections(self) -> int:
        """How many HTTP connections the server holds (read on its loop)."""
        count: int = self.call_soon(lambda: len(self.http.connections))
        return count

    def connection(self, timeout: float = WAIT) -> httpclient.HTTPConnection:
        return httpclient.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def post(
        self,
        path: str,
        payload: Any,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """POST JSON (or raw bytes) with the stdlib client; return status, headers, body."""
        conn = self.connection()
        try:
            body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            all_headers = {"Content-Type": "application/json", **(headers or {})}
            conn.request("POST", BASE + path, body=body, headers=all_headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def rpc(self, method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
        """One JSON-RPC request to /rpc; returns the decoded reply."""
        status, _, body = self.post("/rpc", rpc_message(method, params, request_id))
        assert status == 200, (status, body)
        reply: dict[str, Any] = json.loads(body)
        return reply

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.rpc("tools/call", {"name": name, "arguments": arguments or {}})

    def stop(self, grace: float = 0.0) -> None:
        if self._stopped:
            return
        self._stopped = True

        async def shutdown() -> None:
            if self.grpc is not None:
                await self.grpc.shutdown(grace)
                from grpc_support import close_connections_left_open

                close_connections_left_open()  # the plain path's (grpclib issue #107)
            await self.http.shutdown(grace)
            await self.dispatcher.close()

        try:
            self.run(shutdown(), timeout=WAIT + grace)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT)


def start_server(
    tools: Tools, config: Config | None = None, *, grpc: bool = False
) -> RunningServer:
    """Start HTTP (and optionally gRPC) for ``tools`` on ephemeral ports."""
    config = config or make_config()

    async def boot() -> tuple[Dispatcher, HttpServer, Any]:
        from mcplite.auth import auth_from_config  # on when config names tokens (or OAuth)
        from mcplite.ops.logs import ACCESS
        from mcplite.ops.metrics import METRICS

        # As `mcplite serve` assembles it: the metrics and the access log attached.
        auth = auth_from_config(config, {})
        dispatcher = Dispatcher(tools, config, auth=auth, metrics=METRICS, access_log=ACCESS)
        http = HttpServer(dispatcher, config)
        await http.start("127.0.0.1", 0)
        grpc_server = None
        if grpc:
            from mcplite.bindings.grpc.service import GrpcServer

            grpc_server = GrpcServer(dispatcher, config)
            await grpc_server.start("127.0.0.1", 0)
        return dispatcher, http, grpc_server

    return run_in_thread(boot)


def run_in_thread(
    boot: Callable[[], Awaitable[tuple[Dispatcher, HttpServer, Any]]],
    name: str = "mcplite-test-server",
    kind: type[RunningServer] = RunningServer,
) -> RunningServer:
    """Run ``boot`` (which starts an HTTP server and maybe a gRPC one) on a new event
    loop in a daemon thread that goes on serving; the running server, a ``kind``."""
    loop = asyncio.new_event_loop()
    ready: Future[RunningServer] = Future()

    async def started() -> RunningServer:
        dispatcher, http, grpc_server = await boot()
        grpc_port = grpc_server.port if grpc_server is not None else None
        return kind(
            loop, http, dispatcher, thread, http.port, grpc_port=grpc_port, grpc=grpc_server
        )

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            ready.set_result(loop.run_until_complete(started()))
        except BaseException as exc:
            ready.set_exception(exc)
            return
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    thread = threading.Thread(target=main, name=name, daemon=True)
    thread.start()
    return ready.result(WAIT)


#: ``start(**config_overrides)``, as :func:`server_factory` yields it.
StartServer = Callable[..., RunningServer]


@contextmanager
def server_factory(
    make_tools: Callable[[], Tools],
    release: Callable[[RunningServer], object] | None = None,
) -> Iterator[StartServer]:
    """``start(**config)`` starts a server of ``make_tools()`` with those Config fields
    (over :func:`make_config`); each one started is stopped when the block ends,
    after ``release(server)`` opens whatever gate a test left shut."""
    started: list[RunningServer] = []

    def start(**overrides: Any) -> RunningServer:
        server = start_server(make_tools(), make_config(**overrides))
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            if release is not None:
                release(server)
            server.stop()


@pytest.fixture
def demo_server() -> Iterator[RunningServer]:
    """The demo tools served over HTTP on an ephemeral port."""
    from mcplite.demo import tools

    server = start_server(tools)
    try:
        yield server
    finally:
        server.stop()


# --- servers as subprocesses ------------------------------------------------------------

READY = re.compile(r"serving (\d+) tools on (.*)$")


def subprocess_env(extra_path: Path | None = None) -> dict[str, str]:
    """This process's environment without ``MCPLITE_SECRET``, and ``extra_path`` (a
    folder with a tools module a test wrote) first on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k != "MCPLITE_SECRET"}
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(extra_path), env.get("PYTHONPATH", "")) if p
        )
    return env


#: A prelude (:func:`mcplite_command`) after which uvloop cannot be imported, as
#: where it is not installed.
WITHOUT_UVLOOP = """\
import importlib.abc, sys
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "uvloop":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
"""


def mcplite_command(prelude: str = "") -> list[str]:
    """The command line of ``python -m mcplite``, with ``prelude`` (Python statements)
    run first when given: then ``python -c`` and the same as ``-m mcplite``."""
    if not prelude:
        return [sys.executable, "-m", "mcplite"]
    run = "sys.argv[0] = 'mcplite'; runpy.run_module('mcplite', run_name='__main__')"
    return [sys.executable, "-c", f"{prelude}import runpy, sys; {run}"]


def host_env() -> dict[str, str]:
    """What a test adds to the small environment an MCP host's own client gives the
    server it starts: coverage's settings (it measures subprocesses), and the event
    loop the suite runs on (``MCPLITE_LOOP``)."""
    return {k: v for k, v in os.environ.items() if k.startswith("COVERAGE") or k == "MCPLITE_LOOP"}


class ServeProcess:
    """``python -m mcplite serve ARGS`` (cwd: the repository), started and read until it
    says where it serves; its stderr lines are collected as they are read.

    ``extra_path`` goes first on ``PYTHONPATH`` (see :func:`subprocess_env`);
    ``fd_limit`` sets the open-file limit (soft, hard) before ``mcplite`` runs;
    ``prelude`` is Python run before it (:data:`WITHOUT_UVLOOP`);
    ``command_name`` runs another serving command (``dev``), ``cwd`` another directory.
    Every wait is bounded; a wait that runs out fails the test.
    """

    def __init__(
        self,
        *args: str,
        extra_path: Path | None = None,
        fd_limit: tuple[int, int] | None = None,
        prelude: str = "",
        command_name: str = "serve",
        cwd: Path = ROOT,
    ) -> None:
        if fd_limit is not None:
            # resource.setrlimit in a prelude rather than preexec_fn, which is unsafe
            # in a process with threads (grpcio's).
            limit = f"resource.setrlimit(resource.RLIMIT_NOFILE, {fd_limit!r})"
            prelude += f"import resource; {limit}\n"
        command = mcplite_command(prelude)
        self.proc = subprocess.Popen(
            [*command, command_name, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=subprocess_env(extra_path),
        )
        self.lines: list[str] = []  # every stderr line read so far
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.ended = False  # stderr is at its end
        self.reader = threading.Thread(target=self.pump, name="mcplite-serve-stderr", daemon=True)
        self.reader.start()
        try:
            ready = self.wait_for(READY)
        except BaseException:
            self.kill()
            raise
        self.tool_count = int(ready.group(1))
        http_port = re.search(r"http://127\.0\.0\.1:(\d+)", ready.group(2))
        grpc_port = re.search(r"grpc://127\.0\.0\.1:(\d+)", ready.group(2))
        self.http_port = int(http_port.group(1)) if http_port else 0
        self.grpc_port = int(grpc_port.group(1)) if grpc_port else 0

    def pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def next_line(self, deadline: float) -> str | None:
        """The next stderr line, or None at its end; fails the test at ``deadline``."""
        if self.ended:
            return None
        try:
            line = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no stderr line in time; seen so far: {self.lines}")
        if line is None:
            self.ended = True
        else:
            self.lines.append(line)
        return line

    def wait_for(
        self, pattern: re.Pattern[str] | str, timeout: float = PROCESS_WAIT
    ) -> re.Match[str]:
        """The first stderr line (from now on) matching ``pattern``."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.next_line(deadline)
            if line is None:
                pytest.fail(f"stderr ended before {pattern!r}; seen: {self.lines}")
            match = re.search(pattern, line)
            if match:
                return match

    def rest_of_stderr(self, timeout: float = PROCESS_WAIT) -> list[str]:
        """Every stderr line, once the process has closed it."""
        deadline = time.monotonic() + timeout
        while self.next_line(deadline) is not None:
            pass
        return self.lines

    def stop(self) -> list[str]:
        """SIGTERM, wait for the exit; every stderr line."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(PROCESS_WAIT)
            return self.rest_of_stderr()
        finally:
            self.kill()

    def kill(self) -> None:
        """Kill the process if it still runs; release its pipe and reader thread."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(PROCESS_WAIT)
        self.reader.join(PROCESS_WAIT)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def post(
        self,
        path: str,
        payload: Any,
        conn: httpclient.HTTPConnection | None = None,
        timeout: float = PROCESS_WAIT,
    ) -> tuple[int, Any]:
        """POST JSON to ``path`` under the base path (on ``conn`` if given, left open);
        the status and the decoded reply."""
        own = conn is None
        conn = conn or httpclient.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
        try:
            conn.request(
                "POST",
                BASE + path,
                body=json.dumps(payload).encode(),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            if own:
                conn.close()

    def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        conn: httpclient.HTTPConnection | None = None,
    ) -> dict[str, Any]:
        """One ``tools/call`` over HTTP; the JSON-RPC reply (its status must be 200)."""
        status, reply = self.post("/rpc", call_message(name, arguments), conn)
        assert status == 200, reply
        assert isinstance(reply, dict)
        return reply


@contextmanager
def serve_process(*args: str, **kwargs: Any) -> Iterator[ServeProcess]:
    """A :class:`ServeProcess`, killed when the block ends."""
    server = ServeProcess(*args, **kwargs)
    try:
        yield server
    finally:
        server.kill()


# --- promises: a clock moved by hand, changed tokens, a store over another -------------

T0 = 1_704_110_400.0  # 2024-01-01T12:00:00Z
TOKEN_ALPHABET = string.ascii_letters + string.digits + "-_"  # base64url


@dataclass
class FakeClock:
    """A clock the test moves by hand."""

    now: float = T0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def single_changes(token: str) -> Iterator[str]:
    """Every single-character change of ``token``: substitutions, deletions, insertions,
    truncations and extensions (each distinct from the token)."""
    alphabet = TOKEN_ALPHABET
    out: dict[str, None] = {}
    for i, ch in enumerate(token):
        nxt = alphabet[(alphabet.index(ch) + 1) % 64] if ch in alphabet else "A"
        subs = {nxt, ch.swapcase(), "A", "0", "-", "_", "+", "/", "=", "!", " ", "\u00e9", "\x00"}
        for sub in subs:
            out[token[:i] + sub + token[i + 1 :]] = None
        out[token[:i] + token[i + 1 :]] = None
        out[token[:i] + "A" + token[i:]] = None
    for n in (0, 1, 4, 5, 6, 40, len(token) - 2, len(token) - 1):
        out[token[:n]] = None
    for extension in ("A", "-", "=", "==", "\n", " ", token):
        out[token + extension] = None
    out[" " + token] = None
    out.pop(token, None)
    return iter(out)


class DelegatingStore:
    """A :class:`~mcplite.PromiseStore` that hands every call to ``inner``; a test store
    overrides only the methods it watches or changes."""

    def __init__(self, inner: PromiseStore) -> None:
        self.inner = inner

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        return await self.inner.create(tool, owner)

    async def has_room(self) -> bool:
        return await self.inner.has_room()

    async def complete(
        self, promise_id: bytes, result: Result | None, error: MCPLiteError | None = None
    ) -> None:
        await self.inner.complete(promise_id, result, error)

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
