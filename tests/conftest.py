"""Shared fixtures: a real mcplite server on 127.0.0.1 with an ephemeral port.

The server runs its own event loop in a thread, so blocking peers we did not
write (``http.client``, raw sockets, grpcio) can drive it from the test.
"""

from __future__ import annotations

import asyncio
import http.client as httpclient
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pytest

from mcplite import Config, Dispatcher, Tools
from mcplite.http import HttpServer

BASE = "/mcp-lite/v1"
WAIT = 10.0  # upper bound of every wait in the tests, in seconds
SECRET = b"test-secret-0123456789abcdef"


def make_config(**overrides: Any) -> Config:
    """A test Config: a fixed secret, no access log, and the given overrides."""
    return Config(secret=SECRET, access_log=False, **overrides)


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
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        status, _, body = self.post("/rpc", message)
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
    loop = asyncio.new_event_loop()
    ready: Future[RunningServer] = Future()

    async def boot() -> RunningServer:
        dispatcher = Dispatcher(tools, config)
        http = HttpServer(dispatcher, config)
        await http.start("127.0.0.1", 0)
        grpc_server = None
        grpc_port = None
        if grpc:
            from mcplite.grpc.service import GrpcServer

            grpc_server = GrpcServer(dispatcher, config)
            await grpc_server.start("127.0.0.1", 0)
            grpc_port = grpc_server.port
        return RunningServer(
            loop, http, dispatcher, thread, http.port, grpc_port=grpc_port, grpc=grpc_server
        )

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            ready.set_result(loop.run_until_complete(boot()))
        except BaseException as exc:
            ready.set_exception(exc)
            return
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    thread = threading.Thread(target=main, name="mcplite-test-server", daemon=True)
    thread.start()
    return ready.result(WAIT)


@pytest.fixture
def demo_server() -> Iterator[RunningServer]:
    """The demo tools served over HTTP on an ephemeral port."""
    from mcplite.demo import tools

    server = start_server(tools)
    try:
        yield server
    finally:
        server.stop()
