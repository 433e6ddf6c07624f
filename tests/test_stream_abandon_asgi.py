"""Streams of the ASGI app under uvicorn whose client leaves, on every error path, at every point.

``mcplite.asgi.App`` served by uvicorn (``test_asgi.served``): MCP-lite SSE and
MCP's ``POST /mcp`` SSE answers in both revisions, driven by raw sockets that
leave by FIN, RST or half-close at each point, as ``test_stream_abandon.py``
drives our own server.  After each, nothing is left behind: no task on
uvicorn's loop, call slot, connection or running promise, and no ERROR from
asyncio, mcplite or uvicorn but a raising tool's own line.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from abandon_support import (
    HELD_POINTS,
    HOWS,
    LEGACY,
    LITE_ERRORS,
    MCP_ERRORS,
    MODERN,
    Heard,
    Probe,
    assert_quiet,
    assert_released,
    each_way,
    heard,
    mcp_call,
    mcp_request,
    open_and_leave,
    sealed_unknown,
    sse,
    store_of,
    watched_dispatcher,
)
from conftest import BASE, WAIT, call_message, make_config
from test_asgi import Served, served

from mcplite import Dispatcher
from mcplite.asgi import App

__all__ = ["heard"]  # the fixture, used by name

REVISIONS = (LEGACY, MODERN)


@dataclass
class Uvicorn:
    """The app under uvicorn, as the checks of ``abandon_support`` see a server."""

    served: Served
    dispatcher: Dispatcher

    @property
    def port(self) -> int:
        return self.served.port

    def run(self, coro: Any) -> Any:
        return self.served.run(coro)

    def tasks(self) -> set[asyncio.Task[Any]]:
        return self.served.tasks()

    def settle(self, baseline: set[asyncio.Task[Any]], timeout: float) -> list[str]:
        """Wait (bounded) until no call is active and no task beyond ``baseline``
        is left on uvicorn's loop (as ``RunningServer.settle``); what is left."""
        dispatcher = self.dispatcher

        async def wait() -> list[str]:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                alive = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
                extra = alive - baseline
                if not extra and dispatcher.active == 0:
                    return []
                if loop.time() > deadline:
                    return [f"active={dispatcher.active}", *map(repr, extra)]
                await asyncio.sleep(0.01)  # a bounded poll of the loop's own state

        left: list[str] = self.run(wait())
        return left

    def http_connections(self) -> int:
        """How many connections uvicorn holds (read on its loop)."""
        connections = self.served.server.server_state.connections

        async def count() -> int:
            return len(connections)

        counted: int = self.run(count())
        return counted

    def post(self, message: dict[str, Any]) -> dict[str, Any]:
        """One JSON-RPC request to the MCP-lite endpoint, over a raw exchange."""
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            body = json.dumps(message).encode()
            conn.request(
                "POST", BASE + "/rpc", body=body, headers={"Content-Type": "application/json"}
            )
            reply: dict[str, Any] = json.loads(conn.getresponse().read())
            return reply
        finally:
            conn.close()


@contextmanager
def uvicorn_app(probe: Probe, **overrides: Any) -> Iterator[Uvicorn]:
    dispatcher = watched_dispatcher(probe, make_config(heartbeat=WAIT, **overrides))
    with served(App(dispatcher=dispatcher)) as running:
        try:
            yield Uvicorn(running, dispatcher)
        finally:
            running.call_soon(probe.gate.set)
            running.run(dispatcher.close())  # given to the app: ours to close


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[Probe, Uvicorn]]:
    """One app for the tests of this module that need nothing of their own (uvicorn
    takes a while to start and stop); every test leaves it as it found it."""
    probe = Probe()
    with uvicorn_app(probe) as running:
        yield probe, running


@pytest.fixture
def probe(shared: tuple[Probe, Uvicorn]) -> Probe:
    return shared[0]


@pytest.fixture
def app(shared: tuple[Probe, Uvicorn]) -> Uvicorn:
    return shared[1]


@pytest.mark.parametrize("case", sorted(LITE_ERRORS))
def test_an_mcplite_stream_answering_an_error_leaves_nothing_wherever_its_client_goes(
    app: Uvicorn, probe: Probe, heard: Heard, case: str
) -> None:
    name, arguments, expected = LITE_ERRORS[case]
    if arguments is None:
        arguments = {"promise": sealed_unknown(app)}
    each_way(app, probe, heard, sse(BASE + "/calltools", call_message(name, arguments)), expected)


def test_a_redeem_stream_of_an_expired_promise_leaves_nothing_wherever_its_client_goes(
    heard: Heard,
) -> None:
    probe = Probe()
    with uvicorn_app(probe, promise_ttl=0.2) as app:
        token = app.post(call_message("promised"))["result"]["_meta"]["promise_token"]
        assert probe.all_finished()  # the store stopped the tool when the promise expired
        request = sse(BASE + "/calltools", call_message("redeem", {"promise": token}))
        each_way(app, probe, heard, request, ["error -32602 expired"])


def test_an_anonymous_stream_is_refused_401_and_leaves_nothing_wherever_its_client_goes(
    heard: Heard, tmp_path: Path
) -> None:
    probe = Probe()
    tokens = tmp_path / "tokens"
    tokens.write_text("a-token-of-sixteen-chars\n")
    with uvicorn_app(probe, auth_tokens=str(tokens)) as app:
        message, headers = mcp_call(LEGACY, "held", {})
        each_way(app, probe, heard, sse("/mcp", message, headers), ["json error -32041"])
        request = sse(BASE + "/calltools", call_message("ticks"), {"Authorization": "Bearer no"})
        each_way(app, probe, heard, request, ["json error -32041"])
    assert probe.started == 0


@pytest.mark.parametrize("point", HELD_POINTS)
def test_a_held_mcplite_stream_stops_its_tool_wherever_its_client_goes(
    app: Uvicorn, probe: Probe, heard: Heard, point: str
) -> None:
    baseline = app.tasks()
    for how in HOWS:
        request = sse(BASE + "/calltools", call_message("ticks"))
        assert open_and_leave(app, probe, request, point, how) in ([], ["message"])
        assert probe.all_finished(), how
        assert_released(app, baseline, heard)
    assert_quiet(app, heard)
    assert probe.started > 0


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("case", sorted(MCP_ERRORS))
def test_an_mcp_stream_answering_an_error_leaves_nothing_wherever_its_client_goes(
    app: Uvicorn, probe: Probe, heard: Heard, case: str, revision: str
) -> None:
    name, arguments, expected = MCP_ERRORS[case]
    request, _ = mcp_request(revision, name, arguments)
    each_way(app, probe, heard, request, expected)


@pytest.mark.parametrize("point", HELD_POINTS)
@pytest.mark.parametrize("revision", REVISIONS)
def test_a_held_mcp_stream_stops_its_tool_wherever_its_client_goes(
    app: Uvicorn, probe: Probe, heard: Heard, revision: str, point: str
) -> None:
    baseline = app.tasks()
    for how in HOWS:
        request, _ = mcp_request(revision, "held", {})
        assert open_and_leave(app, probe, request, point, how) in ([], ["message"])
        assert probe.all_finished(), how
        assert_released(app, baseline, heard)
    assert_quiet(app, heard)
    assert probe.started > 0


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_promised_mcp_call_whose_client_leaves_cancels_its_promise(
    app: Uvicorn, probe: Probe, heard: Heard, revision: str
) -> None:
    baseline = app.tasks()
    store = store_of(app.dispatcher)
    made = len(store.created)
    for how in HOWS:
        request, _ = mcp_request(revision, "promised", {})
        said = open_and_leave(app, probe, request, "after-first", how, made=store.made)
        assert said == ["message"]
        assert probe.all_finished(), how
        assert_released(app, baseline, heard)  # no promise left running
    assert_quiet(app, heard)
    assert len(store.created) == made + len(HOWS)
