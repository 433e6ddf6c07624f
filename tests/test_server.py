"""mcplite.Server: the bindings inside someone else's asyncio program.

Started in the test's own loop on ephemeral ports and driven by peers we did not
write (``http.client`` and grpcio, in threads so the loop keeps serving); then a
plain asyncio program, as a user writes one, that runs a Server beside its own
TCP service and stops both on its own signal.
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import WAIT, call_message, make_config, subprocess_env
from grpc_support import protos, to_python

from mcplite import CallNext, Dispatcher, Result, Server, ToolCall, Tools
from mcplite.ops.serve import ServeError


def make_tools(release: asyncio.Event | None = None, started: asyncio.Event | None = None) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        return text

    @tools.tool(promise_after=None)
    async def slow() -> str:
        assert release is not None and started is not None
        started.set()
        await release.wait()
        return "done"

    return tools


def post(port: int, path: str, payload: Any) -> tuple[int, dict[str, Any]]:
    """One JSON POST with ``http.client`` (run it in a thread: it blocks)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        body = json.dumps(payload).encode()
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def echo_over_http(port: int, text: str) -> str:
    status, reply = post(port, "/mcp-lite/v1/rpc", call_message("echo", {"text": text}))
    assert status == 200, reply
    result: str = reply["result"]["content"][0]["text"]
    return result


def echo_over_grpc(port: int, text: str) -> str:
    spec = protos()["ours"]
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        response = spec.stub(channel).CallTool(spec.request("echo", {"text": text}), timeout=WAIT)
    result: str = to_python(response.result)["content"][0]["text"]
    return result


def refuses_connections(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(WAIT)
        return sock.connect_ex(("127.0.0.1", port)) != 0


async def test_a_server_serves_both_bindings_in_the_running_loop_and_stops_on_exit() -> None:
    server = Server(
        make_tools(), http=("127.0.0.1", 0), grpc=("127.0.0.1", 0), config=make_config()
    )
    async with server:
        assert server.http_port and server.grpc_port
        assert server.urls == [
            f"http://127.0.0.1:{server.http_port}/mcp-lite/v1",
            f"grpc://127.0.0.1:{server.grpc_port}",
        ]
        assert await asyncio.to_thread(echo_over_http, server.http_port, "hi") == "hi"
        assert await asyncio.to_thread(echo_over_grpc, server.grpc_port, "yo") == "yo"
        ports = (server.http_port, server.grpc_port)
    assert server.urls == [] and server.dispatcher is None
    assert all(refuses_connections(port) for port in ports)


async def test_it_changes_no_signal_handler_exception_handler_or_gc_setting() -> None:
    loop = asyncio.get_running_loop()
    before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    frozen = gc.get_freeze_count()
    async with Server(make_tools(), http=("127.0.0.1", 0), grpc=None, config=make_config()):
        assert loop.get_exception_handler() is None
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
        assert gc.get_freeze_count() == frozen


async def test_several_servers_share_a_loop_and_one_starts_again_once_closed() -> None:
    first = Server(make_tools(), http=("127.0.0.1", 0), grpc=None, config=make_config())
    second = Server(make_tools(), http=("127.0.0.1", 0), grpc=None, config=make_config())
    async with first, second:
        assert first.http_port != second.http_port
        assert await asyncio.to_thread(echo_over_http, first.http_port or 0, "a") == "a"
        assert await asyncio.to_thread(echo_over_http, second.http_port or 0, "b") == "b"
        with pytest.raises(RuntimeError, match="running already"):
            await first.start()
    for _ in range(2):
        async with first:
            assert await asyncio.to_thread(echo_over_http, first.http_port or 0, "c") == "c"


async def test_drain_lets_a_call_in_flight_finish_within_the_grace() -> None:
    release, started = asyncio.Event(), asyncio.Event()
    tools = make_tools(release, started)
    server = Server(tools, http=("127.0.0.1", 0), grpc=None, config=make_config())
    async with server:
        port = server.http_port or 0
        call = asyncio.create_task(
            asyncio.to_thread(post, port, "/mcp-lite/v1/rpc", call_message("slow"))
        )
        await asyncio.wait_for(started.wait(), WAIT)  # the call has reached the tool
        draining = asyncio.create_task(server.drain(WAIT))
        await asyncio.sleep(0)  # one turn: the drain task runs to its first wait
        assert server.health.draining and not draining.done()
        release.set()
        await asyncio.wait_for(draining, WAIT + 1)
        status, reply = await asyncio.wait_for(call, WAIT)
    assert status == 200 and reply["result"]["content"][0]["text"] == "done"


async def test_an_address_in_use_is_a_clear_error_and_nothing_stays_open() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = Server(
            make_tools(), http=("127.0.0.1", 0), grpc=("127.0.0.1", port), config=make_config()
        )
        with pytest.raises(ServeError, match=f"cannot listen for gRPC on 127.0.0.1:{port}"):
            await server.start()
    assert server.bindings == [] and server.dispatcher is None


async def test_a_given_dispatcher_and_middleware_are_served_and_the_dispatcher_left_open() -> None:
    seen: list[str] = []

    async def note(call: ToolCall, call_next: CallNext) -> Result:
        seen.append(call.tool.name)
        return await call_next(call)

    dispatcher = Dispatcher(make_tools(), make_config())
    try:
        server = Server(dispatcher=dispatcher, http=("127.0.0.1", 0), grpc=None, middleware=[note])
        async with server:
            assert await asyncio.to_thread(echo_over_http, server.http_port or 0, "m") == "m"
        assert seen == ["echo"]
        assert await dispatcher.call("echo", {"text": "still open"})  # not closed
    finally:
        await dispatcher.close()


def test_tools_or_a_dispatcher_must_be_given() -> None:
    with pytest.raises(TypeError, match="either tools or a dispatcher"):
        Server()


#: A program of a user's own: an echo service of its own and mcplite beside it,
#: both stopped by its own SIGTERM handler.
PROGRAM = textwrap.dedent(
    """
    import asyncio, signal, sys
    from mcplite import Server, Tools

    tools = Tools()

    @tools.tool
    def echo(text: str) -> str:
        return text

    async def echo_back(reader, writer):
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    async def main():
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        own = await asyncio.start_server(echo_back, "127.0.0.1", 0)
        async with Server(tools, http=("127.0.0.1", 0), grpc=None) as server:
            print(own.sockets[0].getsockname()[1], server.http_port, flush=True)
            await stop.wait()
            await server.drain(1.0)
        own.close()
        await own.wait_closed()
        print("stopped", flush=True)

    asyncio.run(main())
    """
)


def test_a_plain_asyncio_program_runs_a_server_beside_its_own_service(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = {**subprocess_env(), "MCPLITE_SECRET": "s" * 32}
    process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        own_port, http_port = map(int, process.stdout.readline().split())
        with socket.create_connection(("127.0.0.1", own_port), timeout=WAIT) as conn:
            conn.sendall(b"ping\n")
            assert conn.makefile("rb").readline() == b"ping\n"
        assert echo_over_http(http_port, "pong") == "pong"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=WAIT)
    assert process.returncode == 0, err
    assert out.strip() == "stopped"
    assert "ERROR" not in err and "Traceback" not in err
    assert refuses_connections(own_port) and refuses_connections(http_port)
