"""mcplite's gRPC services inside a grpclib server of the user's own.

The server holds a service of its own (``demo.Echo``, protobuf ``StringValue`` in
and out) and ``mcplite.bindings.grpc.services(dispatcher)``; grpcio calls both,
checks health, and grpcurl lists what reflection says is served.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import PROCESS_WAIT, WAIT, make_config
from google.protobuf.wrappers_pb2 import StringValue
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_support import close_connections_left_open, protos, to_python
from grpclib.const import Cardinality, Handler
from grpclib.server import Server, Stream

from mcplite import Dispatcher, Tools
from mcplite.bindings.base import listen_socket
from mcplite.bindings.grpc import ErrorDetailsCodec, services

GRPCURL = Path(sys.executable).parent / "grpcurl"
OPTIONS = [("grpc.enable_http_proxy", 0)]


class EchoService:
    """A service of the application's own, as grpclib serves one."""

    async def say(self, stream: Stream[StringValue, StringValue]) -> None:
        request = await stream.recv_message()
        assert request is not None
        await stream.send_message(StringValue(value=f"you said {request.value}"))

    def __mapping__(self) -> dict[str, Handler]:
        return {
            "/demo.Echo/Say": Handler(self.say, Cardinality.UNARY_UNARY, StringValue, StringValue)
        }


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool
    def echo(text: str) -> str:
        return text

    return tools


@pytest.fixture
async def port() -> AsyncIterator[int]:
    dispatcher = Dispatcher(make_tools(), make_config())
    server = Server(
        [EchoService(), *services(dispatcher, error_details=True)],
        status_details_codec=ErrorDetailsCodec(),
    )
    sock = listen_socket("127.0.0.1", 0)
    await server.start(sock=sock)
    try:
        yield sock.getsockname()[1]
    finally:
        server.close()
        close_connections_left_open()  # grpclib's own server leaves them (docs/grpc.md)
        await asyncio.wait_for(server.wait_closed(), WAIT)
        await dispatcher.close()


def call_both(port: int) -> tuple[str, Any, int]:
    spec = protos()["ours"]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
        say = channel.unary_unary(
            "/demo.Echo/Say",
            request_serializer=StringValue.SerializeToString,
            response_deserializer=StringValue.FromString,
        )
        own = say(StringValue(value="hi"), timeout=WAIT).value
        response = spec.stub(channel).CallTool(spec.request("echo", {"text": "ok"}), timeout=WAIT)
        health = health_pb2_grpc.HealthStub(channel)
        check = health_pb2.HealthCheckRequest(service="mcplite.MCPLite")
        status = health.Check(check, timeout=WAIT).status
    return own, to_python(response.result), status


async def test_the_services_join_a_grpclib_server_beside_its_own(port: int) -> None:
    own, result, status = await asyncio.to_thread(call_both, port)
    assert own == "you said hi"
    assert result["content"] == [{"type": "text", "text": "ok"}]
    assert status == health_pb2.HealthCheckResponse.SERVING


def unknown_tool(port: int) -> grpc.RpcError:
    spec = protos()["ours"]
    with (
        grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel,
        pytest.raises(grpc.RpcError) as failed,
    ):
        spec.stub(channel).CallTool(spec.request("nope", {}), timeout=WAIT)
    return failed.value


async def test_errors_carry_their_details_with_the_codec_given(port: int) -> None:
    error = await asyncio.to_thread(unknown_tool, port)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    trailers = dict(error.trailing_metadata() or ())
    assert "grpc-status-details-bin" in trailers


def grpcurl_list(port: int) -> list[str]:
    done = subprocess.run(
        [str(GRPCURL), "-plaintext", f"127.0.0.1:{port}", "list"],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        check=True,
    )
    return done.stdout.split()


async def test_reflection_lists_mcplites_services(port: int) -> None:
    listed = await asyncio.to_thread(grpcurl_list, port)
    assert {"mcplite.MCPLite", "grpc.health.v1.Health"} <= set(listed)
