"""The standard health service, ``grpc.health.v1.Health``, over a real socket.

The peer is grpcio with the stubs of ``grpcio-health-checking`` (the official
``health_pb2``), against a server started as the CLI starts it (``GrpcServer``).
A drain is started while a call is held in flight, so that the window between
"drain started" and "closed" is open for as long as the test needs it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import WAIT, RunningServer, make_config, start_server
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_support import protos

from mcplite import Config, Tools
from mcplite.bindings.grpc.health import HealthService

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
OPTIONS = [("grpc.enable_http_proxy", 0)]


class Gate:
    """A tool call held in flight until the test lets it go."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()


def gated_tools(gate: Gate) -> Tools:
    tools = Tools()

    @tools.tool
    def held() -> str:
        """Waits for the test (in the runner's thread pool)."""
        gate.reached.set()
        gate.release.wait(WAIT)
        return "released"

    @tools.tool
    def echo(text: str) -> str:
        """Says it back."""
        return text

    return tools


class Served:
    """A gRPC server of :func:`gated_tools`, a channel to it and the health stub."""

    def __init__(self, config: Config | None = None) -> None:
        self.gate = Gate()
        self.server = start_server(gated_tools(self.gate), config or make_config(), grpc=True)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}", options=OPTIONS)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.drained: Future[None] | None = None

    def check(self, service: str = "") -> Any:
        return self.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT)

    def watch(self, service: str = "") -> Any:
        return self.health.Watch(health_pb2.HealthCheckRequest(service=service), timeout=WAIT)

    def get_tools(self) -> Any:
        ours = protos()["ours"]
        return ours.stub(self.channel).GetTools(ours.cls("Empty")(), timeout=WAIT)

    def hold_a_call(self) -> Any:
        """A call to ``held``, once the tool is running."""
        ours = protos()["ours"]
        call = ours.stub(self.channel).CallTool.future(ours.request("held"), timeout=WAIT)
        assert self.gate.reached.wait(WAIT)
        return call

    def start_drain(self) -> None:
        """Start the binding's drain (as SIGTERM does) without waiting for it; it has
        begun (health says NOT_SERVING) when this returns: the drain's first step runs
        before the no-op queued after it on the server's loop."""
        self.drained = asyncio.run_coroutine_threadsafe(
            self.server.grpc.drain(WAIT), self.server.loop
        )
        self.server.call_soon(lambda: None)

    def health_service(self) -> HealthService:
        health = self.server.grpc.health
        assert isinstance(health, HealthService)
        return health

    def stop(self) -> None:
        self.gate.release.set()
        if self.drained is not None:
            self.drained.result(WAIT)
        self.channel.close()
        self.server.stop()


@pytest.fixture
def served() -> Iterator[Served]:
    served = Served()
    try:
        yield served
    finally:
        served.stop()


def stop_in_background(server: RunningServer) -> threading.Thread:
    stopper = threading.Thread(target=server.stop, kwargs={"grace": WAIT})
    stopper.start()
    return stopper


def test_check_says_serving_for_the_server_and_for_the_mcplite_service(served: Served) -> None:
    assert served.check("").status == SERVING
    assert served.check("mcplite.MCPLite").status == SERVING


def test_check_of_an_unknown_service_is_not_found(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        served.check("no.such.Service")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no.such.Service" in caught.value.details()


def test_list_gives_every_known_service_with_its_status(served: Served) -> None:
    listed = served.health.List(health_pb2.HealthListRequest(), timeout=WAIT)
    assert {name: entry.status for name, entry in listed.statuses.items()} == {
        "": SERVING,
        "mcplite.MCPLite": SERVING,
    }


def test_once_a_drain_starts_check_says_not_serving_while_calls_in_flight_finish(
    served: Served,
) -> None:
    in_flight = served.hold_a_call()
    served.start_drain()
    assert served.check("").status == NOT_SERVING
    assert served.check("mcplite.MCPLite").status == NOT_SERVING
    listed = served.health.List(health_pb2.HealthListRequest(), timeout=WAIT)
    assert {entry.status for entry in listed.statuses.values()} == {NOT_SERVING}
    with pytest.raises(grpc.RpcError) as caught:  # new calls are refused meanwhile
        served.get_tools()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not in_flight.done()
    served.gate.release.set()
    assert in_flight.result(WAIT).result.fields["content"].list_value.values
    assert served.drained is not None
    served.drained.result(WAIT)


def test_watch_sends_the_status_then_each_change_and_ends_when_the_server_closes(
    served: Served,
) -> None:
    in_flight = served.hold_a_call()
    watch = served.watch("mcplite.MCPLite")
    assert next(watch).status == SERVING
    stopper = stop_in_background(served.server)  # drain (the held call), then close
    try:
        assert next(watch).status == NOT_SERVING
        served.gate.release.set()
        with pytest.raises(grpc.RpcError) as caught:
            next(watch)
    finally:
        stopper.join(WAIT)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == "Server is shutting down"
    assert in_flight.result(WAIT).result.fields["content"].list_value.values


def test_watch_of_an_unknown_service_says_service_unknown_and_stays_open(
    served: Served,
) -> None:
    watch = served.watch("no.such.Service")
    assert next(watch).status == SERVICE_UNKNOWN
    assert served.check("").status == SERVING  # the server goes on; the watch stays open
    assert not watch.done()
    stopper = stop_in_background(served.server)
    try:
        with pytest.raises(grpc.RpcError) as caught:  # no NOT_SERVING: it is still unknown
            next(watch)
    finally:
        stopper.join(WAIT)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("goes_away", ["cancels the call", "closes the connection"])
def test_a_watch_whose_client_goes_away_leaves_no_task_behind(
    served: Served, goes_away: str
) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{served.server.grpc_port}", options=OPTIONS)
    health = health_pb2_grpc.HealthStub(channel)
    health.Check(health_pb2.HealthCheckRequest(), timeout=WAIT)  # connected
    baseline = served.server.tasks()
    try:
        watch = health.Watch(health_pb2.HealthCheckRequest(), timeout=WAIT)
        assert next(watch).status == SERVING
        assert served.server.call_soon(lambda: served.health_service().watches) == 1
        if goes_away == "cancels the call":
            watch.cancel()
        else:
            channel.close()
        assert served.server.settle(baseline, WAIT) == []
        assert served.server.call_soon(lambda: served.health_service().watches) == 0
    finally:
        channel.close()


def test_probes_need_no_token_when_calls_do(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("probe-less-secret-token-0123456789\n")
    served = Served(make_config(auth_tokens=str(tokens)))
    try:
        assert served.check("").status == SERVING
        with pytest.raises(grpc.RpcError) as caught:
            served.get_tools()
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        served.stop()


async def test_the_service_alone_reports_drain_and_close_to_a_watcher() -> None:
    health = HealthService(["mcplite.MCPLite"])
    assert health.services == {"", "mcplite.MCPLite"}
    assert health.status.name == "SERVING"
    health.drain()
    health.drain()  # once is enough; again changes nothing
    assert health.status.name == "NOT_SERVING"
    await asyncio.wait_for(health.close(), WAIT)  # no watch open: returns at once
