"""gRPC server streams whose client leaves, on every error path, at every point.

``CallToolStream`` driven by grpcio (the official client): the call is
cancelled (``RST_STREAM``), or its channel closed (the connection goes),
before the response's headers, after them, after the first message, while the
tool is held mid-stream, or after the error status.  After each, nothing is
left behind: no task, call slot or running promise, and no ERROR from asyncio,
grpclib or mcplite but a raising tool's own line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from abandon_support import (
    HELD_POINTS,
    LITE_ERRORS,
    Heard,
    Probe,
    assert_quiet,
    assert_released,
    heard,
    sealed_unknown,
    start,
)
from conftest import WAIT, RunningServer, call_message
from grpc_support import Stub, protos

__all__ = ["heard"]  # the fixture, used by name

#: How a gRPC client leaves: it cancels the call, or closes its channel.
GRPC_HOWS = ("cancel", "close")
#: Where it leaves a call answered at once: before the response's headers, after
#: them, after the whole answer (its status).
GRPC_POINTS = ("before-head", "after-head", "after-end")
#: The status of each MCP-lite error case (``abandon_support.LITE_ERRORS``) on gRPC.
STATUSES = {
    "forged-token": ["INVALID_ARGUMENT"],
    "unknown-promise": ["NOT_FOUND"],
    "unknown-tool": ["NOT_FOUND"],
    "invalid-arguments": ["INVALID_ARGUMENT"],
    "raises-before-its-first-part": ["INTERNAL"],
    "raises-mid-stream": ["message", "INTERNAL"],
}
OPTIONS = [("grpc.enable_http_proxy", 0)]


def channel_to(server: RunningServer) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=OPTIONS)


Metadata = tuple[tuple[str, str], ...]


def stub_of(channel: grpc.Channel, metadata: Metadata = ()) -> Stub:
    stub = protos()["ours"].stub(channel)
    listed(stub, metadata)  # the connection is up
    return stub


def listed(stub: Stub, metadata: Metadata) -> None:
    stub.GetTools(protos()["ours"].cls("Empty")(), timeout=WAIT, metadata=metadata)


def request(name: str, arguments: dict[str, Any] | None = None) -> Any:
    return protos()["ours"].request(name, arguments)


def read_out(call: Any) -> list[str]:
    """Every message of a stream (``message``), then its status's name."""
    said = []
    try:
        for _ in call:
            said.append("message")
    except grpc.RpcError as exc:
        said.append(exc.code().name)
    else:
        said.append("OK")
    return said


class Leaver:
    """Calls ``CallToolStream`` and leaves: on one channel that stays (``cancel``)
    or on a channel of its own, closed (``close``).  ``own`` is the metadata of
    its own calls (``GetTools``), ``metadata`` that of the streams."""

    def __init__(self, server: RunningServer, own: Metadata = ()) -> None:
        self.server = server
        self.own = own
        self.metadata: Metadata = own
        self.channel = channel_to(server)
        self.stub = stub_of(self.channel, own)

    def close(self) -> None:
        self.channel.close()

    def call_and_leave(
        self, message: Any, point: str, how: str, probe: Probe | None = None
    ) -> list[str] | None:
        """Start the call, leave at ``point`` (a :data:`GRPC_POINTS` or, with
        ``probe``, a ``HELD_POINTS`` one) by ``how``; what the whole answer said
        (``after-end``)."""
        channel = self.channel if how == "cancel" else channel_to(self.server)
        stub = self.stub if how == "cancel" else stub_of(channel, self.own)
        said = None
        started = probe.started if probe is not None else 0
        try:
            call = stub.CallToolStream(message, timeout=WAIT, metadata=self.metadata)
            if point != "before-head":
                call.initial_metadata()
            elif probe is not None:
                # grpcio may cancel a call it has not sent yet: leave once the tool runs.
                assert probe.started_beyond(started)
            if point == "after-end":
                said = read_out(call)
            elif point in ("after-first", "held"):
                next(call)
                if point == "held":
                    assert probe is not None
                    probe.held()
            call.cancel()
        finally:
            if how == "close":
                channel.close()
        # One more call on the channel that stays: what came before it on that
        # connection (a cancel, a request) has been taken in by the server by now.
        listed(self.stub, self.own)
        return said


def each_way(
    server: RunningServer, heard: Heard, leaver: Leaver, message: Any, expected: list[str]
) -> None:
    baseline = server.tasks()
    for point in GRPC_POINTS:
        for how in GRPC_HOWS:
            said = leaver.call_and_leave(message, point, how)
            assert said is None or said == expected, (point, how, said)
            try:
                assert_released(server, baseline, heard)
            except AssertionError as exc:
                raise AssertionError(f"left at {point} by {how}: {exc}") from None
    assert_quiet(server, heard)


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[Probe, RunningServer]]:
    probe = Probe()
    server = start(probe, grpc=True)
    try:
        yield probe, server
    finally:
        server.call_soon(probe.gate.set)
        server.stop()


@pytest.fixture
def probe(shared: tuple[Probe, RunningServer]) -> Probe:
    return shared[0]


@pytest.fixture
def server(shared: tuple[Probe, RunningServer]) -> RunningServer:
    return shared[1]


@pytest.fixture
def leaver(server: RunningServer) -> Iterator[Leaver]:
    made = Leaver(server)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("case", sorted(STATUSES))
def test_a_grpc_stream_answering_an_error_leaves_nothing_wherever_its_client_goes(
    server: RunningServer, probe: Probe, heard: Heard, leaver: Leaver, case: str
) -> None:
    name, arguments, _ = LITE_ERRORS[case]
    if arguments is None:
        arguments = {"promise": sealed_unknown(server)}
    each_way(server, heard, leaver, request(name, arguments), STATUSES[case])
    assert probe.all_finished()


def test_a_grpc_redeem_stream_of_an_expired_promise_leaves_nothing_wherever_its_client_goes(
    heard: Heard,
) -> None:
    probe = Probe()
    server = start(probe, grpc=True, promise_ttl=0.2)
    try:
        status, _, body = server.post("/rpc", call_message("promised"))
        assert status == 200
        token = json.loads(body)["result"]["_meta"]["promise_token"]
        assert probe.all_finished()  # the store stopped the tool when the promise expired
        leaver = Leaver(server)
        try:
            each_way(
                server, heard, leaver, request("redeem", {"promise": token}), ["INVALID_ARGUMENT"]
            )
        finally:
            leaver.close()
    finally:
        server.stop()


def test_an_unauthenticated_grpc_stream_leaves_nothing_wherever_its_client_goes(
    heard: Heard, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("a-token-of-sixteen-chars\n")
    probe = Probe()
    server = start(probe, grpc=True, auth_tokens=str(tokens))
    try:
        known = (("authorization", "Bearer a-token-of-sixteen-chars"),)
        leaver = Leaver(server, known)  # its own calls pass; the streams below do not
        try:
            for refused in ((), (("authorization", "Bearer not-a-known-token"),)):
                leaver.metadata = refused
                each_way(server, heard, leaver, request("ticks"), ["UNAUTHENTICATED"])
        finally:
            leaver.close()
        assert probe.started == 0
    finally:
        server.stop()


@pytest.mark.parametrize("point", HELD_POINTS)
def test_a_held_grpc_stream_stops_its_tool_wherever_its_client_goes(
    server: RunningServer, probe: Probe, heard: Heard, leaver: Leaver, point: str
) -> None:
    baseline = server.tasks()
    started = probe.started
    for how in GRPC_HOWS:
        probe.forget()
        leaver.call_and_leave(request("ticks"), point, how, probe)
        assert probe.all_finished(), how
        assert_released(server, baseline, heard)
    assert_quiet(server, heard)
    assert probe.started > started
