"""``mcplite.asgi.App`` served by peers we did not write.

uvicorn (on a socket bound here, 127.0.0.1, ephemeral port, its own loop in a
thread) serves a FastAPI app with a route of its own and mcplite mounted under
``/tools``.  The official MCP client drives it in both revisions (``mode="auto"``:
2026-07-28, ``mode="legacy"``: 2025-11-25), mcplite's own client drives the
MCP-lite endpoints under the mount, httpx and raw sockets the rest: tasks,
HTTP-level errors, clients that leave mid-stream.  Starlette's ``Mount`` (whose
lifespan does not reach its mounts), uvicorn's lifespan and FastAPI's are
checked to start and close the app.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
import mcp_types as types
import pytest
import uvicorn
from conftest import WAIT, call_message, make_config
from fastapi import FastAPI
from mcp import Client as McpClient
from starlette.applications import Starlette
from starlette.routing import Mount

import mcplite.demo
from mcplite import Context, Dispatcher, MemoryStore, PromiseRecord, Tools
from mcplite.asgi import App
from mcplite.bindings.asgi.exchange import route_path
from mcplite.client import Client, Partial, Response

T = TypeVar("T")
ERAS = {"2026": ("auto", "2026-07-28"), "2025": ("legacy", "2025-11-25")}
TASKS = "io.modelcontextprotocol/tasks"
LITE = "/tools/mcp-lite/v1"


# --- the tools, and what they report through ---------------------------------------------


@dataclass
class Gates:
    """What the tools wait on (asyncio events, set on the server's loop) and report
    through (threading events, waited on by the test)."""

    promised: asyncio.Event = field(default_factory=asyncio.Event)  # a call became a promise
    release: asyncio.Event = field(default_factory=asyncio.Event)
    stream_stopped: threading.Event = field(default_factory=threading.Event)
    call_entered: threading.Event = field(default_factory=threading.Event)
    call_stopped: threading.Event = field(default_factory=threading.Event)
    held_stopped: threading.Event = field(default_factory=threading.Event)
    promises: int = 0


class WatchedStore(MemoryStore):
    """The memory store, telling the gates when a call becomes a promise."""

    def __init__(self, gates: Gates) -> None:
        super().__init__(ttl=60, max_entries=100)
        self.gates = gates

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        record = await super().create(tool, owner)
        self.gates.promises += 1
        self.gates.promised.set()
        return record


def make_tools(gates: Gates) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        """Say it back."""
        return text

    @tools.tool
    async def report(topic: str) -> AsyncIterator[str]:
        """A streamed answer in three parts."""
        for part in ("Summary", "Detail", "Outlook"):
            yield f"{topic}: {part}. "

    @tools.tool
    async def count(steps: int, ctx: Context | None = None) -> str:
        """Report progress once per step."""
        assert ctx is not None
        for step in range(1, steps + 1):
            ctx.report_progress(step, steps, f"step {step} of {steps}")
            await asyncio.sleep(0)
        return f"counted {steps}"

    @tools.tool(promise_after=0.05)
    async def slow(ctx: Context | None = None) -> str:
        """Outlive the promise deadline (end once the call is a promise), with progress."""
        assert ctx is not None
        gates.promised = asyncio.Event()
        ctx.report_progress(1, 2, "started")
        await gates.promised.wait()
        ctx.report_progress(2, 2, "promised")
        return "finished late"

    @tools.tool(promise_after=0.05)
    async def job() -> str:
        """Run until released."""
        await gates.release.wait()
        return "job finished"

    @tools.tool
    async def endless() -> AsyncIterator[str]:
        """One part, then silence until stopped."""
        try:
            yield "first"
            await asyncio.Event().wait()
        finally:
            gates.stream_stopped.set()

    @tools.tool
    async def hold(ctx: Context | None = None) -> str:
        """Report progress, then wait until stopped."""
        assert ctx is not None
        gates.call_entered.set()
        try:
            ctx.report_progress(1, None, "holding")
            await asyncio.Event().wait()
        finally:
            gates.call_stopped.set()
        return "never"

    @tools.tool(promise_after=0.05)
    async def held() -> str:
        """Become a promise, then wait until the server closes."""
        try:
            await asyncio.Event().wait()
        finally:
            gates.held_stopped.set()
        return "never"

    return tools


# --- uvicorn on a socket of our own -------------------------------------------------------


@dataclass
class Served:
    """An ASGI app served by uvicorn in a thread: its loop, port and lifecycle."""

    server: uvicorn.Server
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    port: int

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def run(self, coro: Awaitable[T]) -> T:
        """Run ``coro`` on the server's loop (bounded)."""

        async def wrapped() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result(WAIT)

    def call_soon(self, fn: Any) -> None:
        self.loop.call_soon_threadsafe(fn)

    def tasks(self) -> set[asyncio.Task[Any]]:
        """The tasks alive on the server's loop (besides the one asking)."""

        async def alive() -> set[asyncio.Task[Any]]:
            return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

        return self.run(alive())

    def leftover(self, baseline: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
        """The tasks beyond ``baseline`` still alive once each has had ``WAIT`` seconds
        to end (waited on, not polled)."""

        async def settle() -> set[asyncio.Task[Any]]:
            extra = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
            extra -= baseline
            if not extra:
                return set()
            _, pending = await asyncio.wait(extra, timeout=WAIT)
            return pending

        return self.run(settle())

    def stop(self) -> None:
        """Shut uvicorn down (lifespan shutdown included) and wait for its thread."""
        self.server.should_exit = True
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "uvicorn did not stop"


@contextmanager
def served(app: Any, lifespan: Literal["auto", "on", "off"] = "auto") -> Iterator[Served]:
    """``app`` served by uvicorn (one worker, no access log, logging left as it is)
    on a socket listening before uvicorn starts: clients may connect at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(
        app, lifespan=lifespan, log_config=None, access_log=False, timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.serve(sockets=[sock]))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="uvicorn-test", daemon=True)
    thread.start()
    running = Served(server, loop, thread, sock.getsockname()[1])
    try:
        yield running
    finally:
        if thread.is_alive():
            running.stop()
        sock.close()


@dataclass
class Site:
    """FastAPI with a route of its own and the tools mounted under /tools."""

    served: Served
    gates: Gates
    dispatcher: Dispatcher
    app: App


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    gates = Gates()
    dispatcher = Dispatcher(make_tools(gates), make_config(), promises=WatchedStore(gates))
    tools_app = App(dispatcher=dispatcher)
    api = FastAPI(lifespan=tools_app.lifespan)

    @api.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    api.mount("/tools", tools_app)
    with served(api) as running:
        yield Site(running, gates, dispatcher, tools_app)
        running.run(dispatcher.close())  # given to the app: ours to close


# --- the official MCP client ----------------------------------------------------------------


@pytest.fixture(params=sorted(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@asynccontextmanager
async def official(port: int, era: str) -> AsyncIterator[McpClient]:
    mode, version = ERAS[era]
    url = f"http://127.0.0.1:{port}/tools/mcp"
    async with asyncio.timeout(WAIT):
        async with McpClient(url, mode=mode, read_timeout_seconds=WAIT) as client:
            assert client.protocol_version == version
            yield client


def texts(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def test_the_official_client_lists_calls_streams_and_hears_progress_under_the_mount(
    site: Site, era: str
) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with official(site.served.port, era) as client:
        listed = await client.list_tools()
        echoed = await client.call_tool("echo", {"text": "mounted ✓"})
        streamed = await client.call_tool("report", {"topic": "sales"})
        counted = await client.call_tool("count", {"steps": 3}, progress_callback=on_progress)
    names = [tool.name for tool in listed.tools]
    assert {"echo", "report", "count", "slow", "job"} <= set(names)
    assert texts(echoed) == "mounted ✓"
    assert texts(streamed) == "sales: Summary. sales: Detail. sales: Outlook. "
    assert texts(counted) == "counted 3"
    assert reports == [(step, 3, f"step {step} of 3") for step in (1, 2, 3)]


async def test_a_long_call_becomes_a_promise_and_completes_on_the_same_request(
    site: Site, era: str
) -> None:
    reports: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append(message)

    before = site.gates.promises
    async with official(site.served.port, era) as client:
        result = await client.call_tool("slow", {}, progress_callback=on_progress)
    assert result.is_error is False
    assert texts(result) == "finished late"
    assert site.gates.promises == before + 1  # it was a promise on the server
    assert reports == ["started", "promised"]


# --- MCP 2026 by hand: tasks ------------------------------------------------------------------


def modern(method: str, params: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    """A 2026-07-28 request that opts in to tasks."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    }
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**params, "_meta": meta},
    }


def modern_headers(method: str, name: str) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        "Mcp-Name": name,
    }


async def test_a_promise_is_a_task_for_a_client_that_takes_them(site: Site) -> None:
    served = site.served
    async with httpx.AsyncClient(timeout=WAIT) as http:
        created = await http.post(
            served.url("/tools/mcp"),
            json=modern("tools/call", {"name": "job", "arguments": {}}),
            headers=modern_headers("tools/call", "job"),
        )
        assert created.status_code == 200, created.text
        task = created.json()["result"]
        assert task["resultType"] == "task"
        assert task["status"] == "working"
        task_id = task["taskId"]

        served.call_soon(site.gates.release.set)
        ended = served.run(site.dispatcher.redeem(task_id, WAIT))  # the core's own long poll
        assert ended.outcome is not None
        got = await http.post(
            served.url("/tools/mcp"),
            json=modern("tasks/get", {"taskId": task_id}, 2),
            headers=modern_headers("tasks/get", task_id),
        )
    assert got.status_code == 200, got.text
    done = got.json()["result"]
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "job finished"}]


# --- the MCP-lite client, and the host's own route ---------------------------------------------


async def test_the_mcplite_client_calls_and_streams_under_the_mount(site: Site) -> None:
    async with Client(site.served.url(LITE), timeout=WAIT) as client:
        names = [tool.name for tool in await client.list_tools()]
        answer = await client.call("echo", {"text": "lite"})
        items = [item async for item in client.stream("report", {"topic": "q3"})]
    assert "echo" in names and "redeem" in names
    assert answer.content == [{"type": "text", "text": "lite"}]
    parts = [item.value for item in items if isinstance(item, Partial)]
    assert parts == ["q3: Summary. ", "q3: Detail. ", "q3: Outlook. "]
    assert isinstance(items[-1], Response)
    assert items[-1].response_type == "answer"


async def test_the_host_app_s_own_route_still_answers(site: Site) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        hello = await http.get(site.served.url("/hello"))
        elsewhere = await http.get(site.served.url("/nowhere"))
    assert hello.status_code == 200
    assert hello.json() == {"hello": "world"}
    assert elsewhere.status_code == 404  # FastAPI's own, not ours
    assert "jsonrpc" not in elsewhere.text


async def test_http_errors_under_the_mount_are_the_own_server_s(site: Site) -> None:
    url = site.served.url
    async with httpx.AsyncClient(timeout=WAIT) as http:
        not_found = await http.post(url("/tools/nope"), content=b"")
        wrong_method = await http.get(url(f"{LITE}/calltools"))
        not_json = await http.post(url(f"{LITE}/calltools"), content=b"{}")
        too_big = await http.post(
            url(f"{LITE}/calltools"),
            content=b" " * (make_config().max_body_size + 1),
            headers={"Content-Type": "application/json"},
        )
        rebinding = await http.post(
            url("/tools/mcp"),
            json=modern("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
            headers={**modern_headers("tools/call", "echo"), "Host": "evil.example"},
        )
    assert not_found.status_code == 404
    assert not_found.json()["error"]["message"] == "Not found: /nope"
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    assert not_json.status_code == 415
    assert too_big.status_code == 413
    assert too_big.headers["connection"] == "close"
    assert too_big.json()["error"]["data"] == {"http_status": 413}
    assert rebinding.status_code == 403


async def test_authentication_and_cors_are_the_own_server_s(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("a-token-of-sixteen-chars\n")
    origin = "https://app.example"
    config = make_config(auth_tokens=str(tokens), cors_allow_origins=(origin,))
    tools_app = App(make_tools(Gates()), config=config)
    call = call_message("echo", {"text": "let in"})
    with served(Starlette(routes=[Mount("/tools", app=tools_app)])) as running:
        url = running.url(f"{LITE}/calltools")
        async with httpx.AsyncClient(timeout=WAIT) as http:
            anonymous = await http.post(url, json=call)
            wrong = await http.post(url, json=call, headers={"Authorization": "Bearer nope"})
            known = await http.post(
                url, json=call, headers={"Authorization": "Bearer a-token-of-sixteen-chars"}
            )
            preflight = await http.options(
                url, headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
            )
            from_page = await http.post(
                url,
                json=call,
                headers={"Origin": origin, "Authorization": "Bearer a-token-of-sixteen-chars"},
            )
        running.run(tools_app.close())
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert wrong.status_code == 401
    assert known.status_code == 200
    assert known.json()["result"]["content"] == [{"type": "text", "text": "let in"}]
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == origin
    assert preflight.headers["access-control-allow-methods"] == "POST"
    assert from_page.headers["access-control-allow-origin"] == origin


# --- clients that leave -----------------------------------------------------------------------


async def post_and_leave(
    port: int, path: str, body: bytes, headers: str, until: bytes | threading.Event
) -> bytes:
    """POST over a raw socket, read until ``until`` arrives (or is set), then close
    the socket; what was read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
        )
        writer.write(head.encode() + body)
        if isinstance(until, threading.Event):
            assert await asyncio.to_thread(until.wait, WAIT)
            return b""
        async with asyncio.timeout(WAIT):
            return await reader.readuntil(until)
    finally:
        writer.close()
        await writer.wait_closed()


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_client_that_leaves_a_stream_stops_its_tool(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    served = site.served
    baseline = served.tasks()
    seen = await post_and_leave(
        served.port,
        f"{LITE}/calltools",
        json.dumps(call_message("endless")).encode(),
        "Accept: text/event-stream\r\n",
        b'{"partial":"first"}',
    )
    assert seen.startswith(b"HTTP/1.1 200 ")
    assert await asyncio.to_thread(site.gates.stream_stopped.wait, WAIT)
    assert served.leftover(baseline) == set()
    assert site.dispatcher.active == 0
    assert errors_logged(caplog) == []


async def test_a_client_that_leaves_before_a_plain_answer_cancels_the_call(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    served, gates = site.served, site.gates
    gates.call_entered.clear()
    gates.call_stopped.clear()
    baseline = served.tasks()
    body = json.dumps(call_message("hold")).encode()
    await post_and_leave(served.port, f"{LITE}/calltools", body, "", gates.call_entered)
    assert await asyncio.to_thread(gates.call_stopped.wait, WAIT)
    assert served.leftover(baseline) == set()
    assert site.dispatcher.active == 0
    assert errors_logged(caplog) == []


async def test_a_client_that_leaves_an_mcp_progress_stream_cancels_the_call(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    served = site.served
    site.gates.call_stopped.clear()
    baseline = served.tasks()
    message = modern("tools/call", {"name": "hold", "arguments": {}})
    message["params"]["_meta"]["progressToken"] = "p1"
    headers = "".join(f"{k}: {v}\r\n" for k, v in modern_headers("tools/call", "hold").items())
    seen = await post_and_leave(
        served.port, "/tools/mcp", json.dumps(message).encode(), headers, b'"holding"'
    )
    assert b"text/event-stream" in seen
    assert b"notifications/progress" in seen
    assert await asyncio.to_thread(site.gates.call_stopped.wait, WAIT)
    assert served.leftover(baseline) == set()
    assert site.dispatcher.active == 0
    assert errors_logged(caplog) == []


# --- mounting and lifecycles ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ({"path": "/tools/mcp", "root_path": "/tools"}, "/mcp"),  # ASGI, recent Starlette
        ({"path": "/mcp", "root_path": "/tools"}, "/mcp"),  # older Starlette: path stripped
        ({"path": "/mcp", "root_path": ""}, "/mcp"),
        ({"path": "/toolsmith/mcp", "root_path": "/tools"}, "/toolsmith/mcp"),
        ({"path": "/tools", "root_path": "/tools"}, ""),
    ],
)
def test_the_routes_see_the_path_under_the_mount_point(
    scope: dict[str, Any], expected: str
) -> None:
    assert route_path(scope) == expected


async def test_a_starlette_mount_starts_on_the_first_request_and_close_ends_it() -> None:
    tools_app = App(make_tools(Gates()), config=make_config())
    host = Starlette(routes=[Mount("/tools", app=tools_app)])  # no lifespan reaches the mount
    with served(host) as running:
        async with Client(running.url(LITE), timeout=WAIT) as client:
            answer = await client.call("echo", {"text": "lazily started"})
            running.run(tools_app.close())
            async with httpx.AsyncClient(timeout=WAIT) as http:
                closed = await http.post(
                    running.url(f"{LITE}/calltools"), json=call_message("echo", {"text": "x"})
                )
    assert answer.text == "lazily started"
    assert closed.status_code == 503
    assert closed.json()["error"]["message"] == "Server is shutting down"
    assert "retry-after" in closed.headers


async def test_an_app_of_a_module_serves_its_tools_prompts_and_resources() -> None:
    with served(App(mcplite.demo, config=make_config())) as running:
        async with Client(running.url("/mcp-lite/v1"), timeout=WAIT) as client:
            names = [tool.name for tool in await client.list_tools()]
            prompts = await client.list_prompts()
            resources = await client.list_resources()
    assert "search_documents" in names
    assert prompts and resources


async def test_an_app_needs_tools_or_a_dispatcher_but_not_both() -> None:
    with pytest.raises(TypeError, match="needs tools"):
        App()
    dispatcher = Dispatcher(mcplite.demo.tools, make_config())
    with pytest.raises(TypeError, match="not both"):
        App(mcplite.demo.tools, dispatcher=dispatcher)
    await dispatcher.close()
    with pytest.raises(TypeError, match=r"no mcplite\.Tools"):
        App(json)


async def promise_then_stop(running: Served, url: str, gates: Gates) -> None:
    async with Client(url, timeout=WAIT) as client:
        promise = await client.call("held", {}, wait=False)
    assert promise.response_type == "promise"
    assert not gates.held_stopped.is_set()
    await asyncio.to_thread(running.stop)


async def test_uvicorn_s_lifespan_starts_the_app_and_its_shutdown_closes_the_dispatcher() -> None:
    gates = Gates()
    tools_app = App(make_tools(gates), config=make_config())
    with served(tools_app, lifespan="on") as running:
        await promise_then_stop(running, running.url("/mcp-lite/v1"), gates)
        assert running.server.started
    # The promised call was cancelled when the app closed its dispatcher.
    assert gates.held_stopped.is_set()


async def test_fastapi_s_lifespan_reaches_the_mounted_app_and_closes_its_dispatcher() -> None:
    gates = Gates()
    tools_app = App(make_tools(gates), config=make_config())
    host = FastAPI(lifespan=tools_app.lifespan)
    host.mount("/tools", tools_app)
    with served(host, lifespan="on") as running:
        await promise_then_stop(running, running.url(LITE), gates)
    assert gates.held_stopped.is_set()
