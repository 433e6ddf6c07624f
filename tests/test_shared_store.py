"""Two independent ``mcplite serve`` processes sharing one promise store
(``--promise-store``) and one secret: a promise made through one is redeemed,
waited on and cancelled through the other, over HTTP (MCP-lite), MCP (2026-07-28
tasks) and gRPC (grpcio from our proto); the same between the two workers of
one ``--workers 2`` server on one port with its SQLite store; and a promise
whose process is killed resolves to the retryable ``worker_lost`` failure
within the store's lease (``?lease=`` in the store URL)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import PROCESS_WAIT, ServeProcess, serve_process
from grpc_support import Protos, Stub, protos, to_python
from redis_support import running_redis

SECRET = "shared-secret-for-two-servers-0123456789"
TOOLS = """
import asyncio
import os

from mcplite import ALWAYS, Context, Tools

tools = Tools()

@tools.tool(promise_after=ALWAYS)
async def slow(seconds: float, ctx: Context) -> str:
    ctx.report_progress(1, 2, "halfway")
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@tools.tool
def pid() -> str:
    return str(os.getpid())
"""


def call(port: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        conn.request(
            "POST", "/mcp-lite/v1/rpc", json.dumps(message), {"Content-Type": "application/json"}
        )
        reply: dict[str, Any] = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return reply


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'promises.db'}"
    else:
        with running_redis() as url:
            yield url


def two_servers(stack: ExitStack, tmp_path: Path, store_url: str) -> tuple[int, int]:
    (tmp_path / "shared_tools.py").write_text(TOOLS)
    ports = []
    for _ in range(2):
        server = stack.enter_context(
            serve_process(
                "shared_tools",
                "--http",
                "127.0.0.1:0",
                "--no-grpc",
                "--secret",
                SECRET,
                "--promise-store",
                store_url,
                extra_path=tmp_path,
            )
        )
        ports.append(server.http_port)
    return ports[0], ports[1]


def test_a_promise_made_through_one_server_is_redeemed_through_the_other(
    tmp_path: Path, store_url: str
) -> None:
    with ExitStack() as stack:
        a, b = two_servers(stack, tmp_path, store_url)
        made = call(a, "slow", {"seconds": 0.3})["result"]
        assert made["_meta"]["response_type"] == "promise"
        token = made["_meta"]["promise_token"]
        pending = call(b, "redeem", {"promise": token})["result"]
        assert pending["_meta"]["response_type"] == "promise"
        assert pending["_meta"]["progress"]["message"] == "halfway"
        done = call(b, "redeem", {"promise": token, "wait": 10})["result"]
        assert done["_meta"]["response_type"] == "answer"
        assert done["content"] == [{"type": "text", "text": "slept 0.3"}]


def test_a_promise_made_through_one_server_is_cancelled_through_the_other(
    tmp_path: Path, store_url: str
) -> None:
    with ExitStack() as stack:
        a, b = two_servers(stack, tmp_path, store_url)
        token = call(a, "slow", {"seconds": 60})["result"]["_meta"]["promise_token"]
        cancelled = call(b, "cancel", {"promise": token})["result"]
        assert cancelled["structuredContent"] == {"cancelled": True}
        after = call(a, "redeem", {"promise": token, "wait": 5})["result"]
        assert after["failure"]["reason"] == "cancelled"


def test_an_unknown_store_url_is_one_error_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcplite",
            "serve",
            "mcplite.demo",
            "--http",
            "127.0.0.1:0",
            "--no-grpc",
            "--promise-store",
            "ftp://nowhere",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--promise-store" in done.stderr


# --- MCP (2026-07-28, tasks) and gRPC between two processes sharing one Redis -----------------

MODERN = "2026-07-28"
WITH_TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
#: Which param the ``Mcp-Name`` header repeats, per method.
NAME_PARAMS = {"tools/call": "name", "tasks/get": "taskId", "tasks/cancel": "taskId"}
LEASE = 1.0  # seconds, given in the store URL of the tests that kill a process
MAX_TRIES = 200  # bound of the connections opened while looking for a given worker
POLLS = 200  # bound of the tasks/get calls while waiting for the owner's progress to land


def mcp(target: int | http.client.HTTPConnection, method: str, params: dict[str, Any]) -> Any:
    """One 2026-07-28 request to ``/mcp`` (the tasks extension declared), on a new
    connection to the port ``target`` or on the connection ``target``; its result."""
    params = {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": WITH_TASKS,
        },
    }
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        "Mcp-Name": str(params[NAME_PARAMS[method]]),
    }
    conn = (
        http.client.HTTPConnection("127.0.0.1", target, timeout=30)
        if isinstance(target, int)
        else target
    )
    try:
        conn.request("POST", "/mcp", json.dumps(message), headers)
        response = conn.getresponse()
        body = response.read()
    finally:
        if isinstance(target, int):
            conn.close()
    assert response.status == 200, body
    reply = json.loads(body)
    assert "result" in reply, reply
    return reply["result"]


def working_with_progress(target: int | http.client.HTTPConnection, task_id: str) -> Any:
    """tasks/get until the owner's progress report has reached the store (bounded)."""
    for _ in range(POLLS):
        task = mcp(target, "tasks/get", {"taskId": task_id})
        assert task["status"] == "working", task
        if "statusMessage" in task:
            return task
    raise AssertionError(f"no progress after {POLLS} tasks/get")


def channel_to(port: int) -> grpc.Channel:
    # A subchannel pool of its own: a new TCP connection, which the kernel may give to
    # another worker (the global pool would share one connection between channels).
    options = [("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)]
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
    grpc.channel_ready_future(channel).result(timeout=PROCESS_WAIT)
    return channel


def grpc_call(stub: Stub, name: str, arguments: dict[str, Any]) -> Any:
    return stub.CallTool(OURS.request(name, arguments), timeout=30)


OURS: Protos = protos()["ours"]
PROMISE = OURS.enum_value("ResponseType", "PROMISE")
ANSWER = OURS.enum_value("ResponseType", "ANSWER")
FAILURE = OURS.enum_value("ResponseType", "FAILURE")


def serve_shared(stack: ExitStack, tmp_path: Path, store_url: str, *args: str) -> ServeProcess:
    (tmp_path / "shared_tools.py").write_text(TOOLS)
    return stack.enter_context(
        serve_process(
            "shared_tools",
            *("--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--secret", SECRET),
            *("--promise-store", store_url, "--no-access-log", *args),
            extra_path=tmp_path,
        )
    )


@pytest.fixture
def redis_url() -> Iterator[str]:
    with running_redis() as url:
        yield url


@pytest.fixture
def over_redis(tmp_path: Path, redis_url: str) -> Iterator[tuple[ServeProcess, ServeProcess]]:
    """Two independent servers (HTTP, MCP and gRPC each) sharing one Redis."""
    with ExitStack() as stack:
        url = f"{redis_url}?lease={LEASE}"
        yield serve_shared(stack, tmp_path, url), serve_shared(stack, tmp_path, url)


def test_over_mcp_a_task_started_through_one_server_is_followed_and_redeemed_through_the_other(
    over_redis: tuple[ServeProcess, ServeProcess],
) -> None:
    a, b = over_redis
    created = mcp(a.http_port, "tools/call", {"name": "slow", "arguments": {"seconds": 0.5}})
    assert (created["resultType"], created["status"]) == ("task", "working")
    task_id = created["taskId"]
    working = working_with_progress(b.http_port, task_id)
    assert working["statusMessage"] == "halfway"
    # A long poll through B, woken when A's task ends.
    redeemed = mcp(
        b.http_port, "tools/call", {"name": "redeem", "arguments": {"promise": task_id, "wait": 10}}
    )
    assert redeemed["content"] == [{"type": "text", "text": "slept 0.5"}]
    done = mcp(b.http_port, "tasks/get", {"taskId": task_id})
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "slept 0.5"}]


def test_over_mcp_a_task_started_through_one_server_is_cancelled_through_the_other(
    over_redis: tuple[ServeProcess, ServeProcess],
) -> None:
    a, b = over_redis
    created = mcp(a.http_port, "tools/call", {"name": "slow", "arguments": {"seconds": 60}})
    task_id = created["taskId"]
    assert mcp(b.http_port, "tasks/cancel", {"taskId": task_id})["resultType"] == "complete"
    assert mcp(b.http_port, "tasks/get", {"taskId": task_id})["status"] == "cancelled"
    # A, whose task it was, sees it end (its tool was stopped by the cancel).
    redeemed = mcp(
        a.http_port, "tools/call", {"name": "redeem", "arguments": {"promise": task_id, "wait": 10}}
    )
    assert redeemed["isError"] is True
    assert "cancelled" in redeemed["content"][0]["text"]


def test_over_grpc_a_promise_of_one_server_is_followed_redeemed_and_cancelled_through_the_other(
    over_redis: tuple[ServeProcess, ServeProcess],
) -> None:
    a, b = over_redis
    with channel_to(a.grpc_port) as to_a, channel_to(b.grpc_port) as to_b:
        stub_a, stub_b = OURS.stub(to_a), OURS.stub(to_b)
        made = grpc_call(stub_a, "slow", {"seconds": 0.5})
        assert made.meta.response_type == PROMISE
        token = made.meta.promise_token
        for _ in range(POLLS):  # until A's progress report has reached Redis
            pending = grpc_call(stub_b, "redeem", {"promise": token})
            assert pending.meta.response_type == PROMISE
            if "progress" in to_python(pending.meta.extra):
                break
        assert to_python(pending.meta.extra)["progress"]["message"] == "halfway"
        done = grpc_call(stub_b, "redeem", {"promise": token, "wait": 10})
        assert done.meta.response_type == ANSWER
        assert to_python(done.result)["content"] == [{"type": "text", "text": "slept 0.5"}]

        endless = grpc_call(stub_a, "slow", {"seconds": 60}).meta.promise_token
        cancelled = grpc_call(stub_b, "cancel", {"promise": endless})
        assert to_python(cancelled.result)["structuredContent"] == {"cancelled": True}
        after = grpc_call(stub_a, "redeem", {"promise": endless, "wait": 10})
        assert after.meta.response_type == FAILURE
        assert to_python(after.result)["failure"]["reason"] == "cancelled"


def test_a_promise_of_a_killed_server_is_a_retryable_worker_lost_failure_through_the_other(
    over_redis: tuple[ServeProcess, ServeProcess],
) -> None:
    a, b = over_redis
    token = call(a.http_port, "slow", {"seconds": 60})["result"]["_meta"]["promise_token"]
    with channel_to(b.grpc_port) as to_b:
        stub_b = OURS.stub(to_b)
        assert grpc_call(stub_b, "redeem", {"promise": token}).meta.response_type == PROMISE
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(PROCESS_WAIT)
        killed = time.monotonic()
        lost = grpc_call(stub_b, "redeem", {"promise": token, "wait": 30})
        assert time.monotonic() - killed < LEASE + 1.0  # within the lease, not the wait
        assert lost.meta.response_type == FAILURE
    failure = to_python(lost.result)["failure"]
    assert failure == {
        "message": "the worker running this call was lost; the call may be retried",
        "reason": "worker_lost",
        "retryable": True,
    }
    # The same, once and for all, over HTTP and MCP.
    assert call(b.http_port, "redeem", {"promise": token})["result"]["failure"] == failure
    task = mcp(b.http_port, "tasks/get", {"taskId": token})
    assert task["status"] == "completed"  # a business failure, as MCP shows one: isError
    assert task["result"]["isError"] is True
    assert task["result"]["content"] == [{"type": "text", "text": failure["message"]}]


# --- the same between the two workers of one --workers 2 server on one port (SQLite) ----------


def connection_per_worker(server: ServeProcess) -> dict[int, http.client.HTTPConnection]:
    """A keep-alive connection to each of the two workers (they stay with the worker
    that accepted them), keyed by its pid (bounded)."""
    found: dict[int, http.client.HTTPConnection] = {}
    for _ in range(MAX_TRIES):
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=PROCESS_WAIT)
        pid = int(server.call("pid", conn=conn)["result"]["content"][0]["text"])
        if pid in found:
            conn.close()
        else:
            found[pid] = conn
        if len(found) == 2:
            return found
    for conn in found.values():
        conn.close()
    raise AssertionError(f"only {list(found)} answered in {MAX_TRIES} connections")


def channel_per_worker(server: ServeProcess) -> dict[int, grpc.Channel]:
    """A gRPC channel (one connection) to each of the two workers, keyed by pid."""
    found: dict[int, grpc.Channel] = {}
    for _ in range(MAX_TRIES):
        channel = channel_to(server.grpc_port)
        pid = int(to_python(grpc_call(OURS.stub(channel), "pid", {}).result)["content"][0]["text"])
        if pid in found:
            channel.close()
        else:
            found[pid] = channel
        if len(found) == 2:
            return found
    for channel in found.values():
        channel.close()
    raise AssertionError(f"only {list(found)} answered in {MAX_TRIES} connections")


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[ServeProcess]:
    if not hasattr(os, "fork") or sys.platform != "linux":
        pytest.skip("SO_REUSEPORT spreading: Linux")
    with ExitStack() as stack:
        url = f"sqlite:///{tmp_path / 'promises.db'}?lease={LEASE}"
        yield serve_shared(stack, tmp_path, url, "--workers", "2", "--grace", "2")


def test_two_workers_share_tasks_over_mcp_follow_redeem_and_cancel_through_the_other(
    two_workers: ServeProcess,
) -> None:
    conns = connection_per_worker(two_workers)
    try:
        (maker, to_maker), (other, to_other) = conns.items()
        task_id = mcp(to_maker, "tools/call", {"name": "slow", "arguments": {"seconds": 0.5}})[
            "taskId"
        ]
        assert working_with_progress(to_other, task_id)["statusMessage"] == "halfway"
        redeem = {"name": "redeem", "arguments": {"promise": task_id, "wait": 10}}
        assert mcp(to_other, "tools/call", redeem)["content"] == [
            {"type": "text", "text": "slept 0.5"}
        ]
        endless = mcp(to_maker, "tools/call", {"name": "slow", "arguments": {"seconds": 60}})
        ack = mcp(to_other, "tasks/cancel", {"taskId": endless["taskId"]})
        assert ack["resultType"] == "complete"
        assert mcp(to_other, "tasks/get", {"taskId": endless["taskId"]})["status"] == "cancelled"
        redeem = {"name": "redeem", "arguments": {"promise": endless["taskId"], "wait": 10}}
        assert "cancelled" in mcp(to_maker, "tools/call", redeem)["content"][0]["text"]
        assert (
            int(mcp(to_other, "tools/call", {"name": "pid", "arguments": {}})["content"][0]["text"])
            == other
        )
        assert maker != other
    finally:
        for conn in conns.values():
            conn.close()


def test_two_workers_share_promises_over_grpc_follow_redeem_and_cancel_through_the_other(
    two_workers: ServeProcess,
) -> None:
    channels = channel_per_worker(two_workers)
    try:
        (_, to_maker), (_, to_other) = channels.items()
        maker, other = OURS.stub(to_maker), OURS.stub(to_other)
        token = grpc_call(maker, "slow", {"seconds": 0.5}).meta.promise_token
        for _ in range(POLLS):
            pending = grpc_call(other, "redeem", {"promise": token})
            assert pending.meta.response_type == PROMISE
            if "progress" in to_python(pending.meta.extra):
                break
        assert to_python(pending.meta.extra)["progress"]["message"] == "halfway"
        done = grpc_call(other, "redeem", {"promise": token, "wait": 10})
        assert to_python(done.result)["content"] == [{"type": "text", "text": "slept 0.5"}]
        endless = grpc_call(maker, "slow", {"seconds": 60}).meta.promise_token
        cancelled = grpc_call(other, "cancel", {"promise": endless})
        assert to_python(cancelled.result)["structuredContent"] == {"cancelled": True}
        after = grpc_call(maker, "redeem", {"promise": endless, "wait": 10})
        assert to_python(after.result)["failure"]["reason"] == "cancelled"
    finally:
        for channel in channels.values():
            channel.close()
