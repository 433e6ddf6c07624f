"""``mcplite serve --workers N``: a supervisor and N worker processes on one port
each for HTTP and gRPC (SO_REUSEPORT), sharing one secret and one SQLite promise
store, restarted when they die, drained and gone when the supervisor is stopped."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PROCESS_WAIT, ROOT, ServeProcess, call_message, serve_process, subprocess_env

from mcplite.client import Client, Response
from mcplite.ops.workers import restart_delay

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or sys.platform != "linux", reason="SO_REUSEPORT spreading: Linux"
)

TOOLS = """
import asyncio
import os
import time

from mcplite import ALWAYS, Tools

tools = Tools()


@tools.tool
def pid() -> str:
    return str(os.getpid())


@tools.tool
async def hold_loop(seconds: float) -> str:
    # Blocks this worker's event loop on purpose: it cannot accept meanwhile.
    time.sleep(seconds)
    return str(os.getpid())


@tools.tool(promise_after=ALWAYS)
async def slow_pid(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return str(os.getpid())
"""

#: Upper bound of the requests a test makes while waiting to reach a given worker.
MAX_TRIES = 200
WORKERS = re.compile(r"(\d+) workers \(pids ([\d, ]+)\)")


@pytest.fixture(params=["reuse-port", "inherit"])
def workers(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServeProcess]:
    """``--workers 2`` serving a module whose tools say which process ran them: each
    worker binding the ports with SO_REUSEPORT (Linux's way), or all accepting on the
    sockets the supervisor listens on (the fallback elsewhere)."""
    (tmp_path / "pid_tools.py").write_text(TOOLS)
    if request.param == "inherit":
        monkeypatch.setenv("MCPLITE_WORKER_SOCKETS", "inherit")
    with serve_process(
        "pid_tools",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--grace",
        "2",
        "--no-access-log",
        extra_path=tmp_path,
    ) as server:
        yield server


def worker_pids(server: ServeProcess) -> list[int]:
    for line in server.lines:
        match = WORKERS.search(line)
        if match:
            return [int(p) for p in match.group(2).split(",")]
    raise AssertionError(f"no worker pids logged: {server.lines}")


def pid_over_http(server: ServeProcess, conn: http.client.HTTPConnection | None = None) -> int:
    """The pid of the worker that answered a call on a new connection (or ``conn``)."""
    reply = server.call("pid", conn=conn)
    return int(reply["result"]["content"][0]["text"])


def pids_until(server: ServeProcess, wanted: set[int]) -> set[int]:
    """Calls on new connections, every one answered, until each pid of ``wanted`` has
    answered (bounded); every pid that answered.

    A worker found is then held busy for a moment (``hold_loop`` on its connection):
    with one inherited listening socket the idle worker that accepts first would
    otherwise win every new connection, and the others would never be seen."""
    seen: set[int] = set()
    held: list[http.client.HTTPConnection] = []
    try:
        for _ in range(MAX_TRIES):
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=PROCESS_WAIT)
            pid = pid_over_http(server, conn)
            if pid in seen:
                conn.close()
                continue
            seen.add(pid)
            if wanted <= seen:
                conn.close()
                return seen
            hold = json.dumps(call_message("hold_loop", {"seconds": 1.5}))
            conn.request("POST", "/mcp-lite/v1/rpc", hold, {"Content-Type": "application/json"})
            held.append(conn)
        raise AssertionError(f"after {MAX_TRIES} calls only {seen} answered, wanted {wanted}")
    finally:
        for conn in held:
            conn.getresponse().read()  # the held call's answer
            conn.close()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def dead(pid: int) -> bool:
    """Gone, or a zombie that init has yet to reap (an orphan's exit is not ours to wait)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def test_two_workers_answer_http_on_one_port(workers: ServeProcess) -> None:
    pids = worker_pids(workers)
    assert len(pids) == 2
    assert pids_until(workers, set(pids)) == set(pids)


async def test_two_workers_answer_grpc_on_one_port(workers: ServeProcess) -> None:
    pids = set(worker_pids(workers))
    seen: set[int] = set()
    # As pids_until does over HTTP: a worker found is held busy for a moment, or with
    # one inherited listening socket the idle worker that accepts first wins every time.
    held: list[tuple[Client, asyncio.Task[Response]]] = []
    try:
        for _ in range(MAX_TRIES):
            # A new client is a new connection, which the kernel may give to either worker.
            client = Client(f"grpc://127.0.0.1:{workers.grpc_port}", timeout=PROCESS_WAIT)
            pid = int((await client.call("pid")).text)
            found = pid not in seen
            seen.add(pid)
            if seen == pids or not found:
                await client.aclose()
                if seen == pids:
                    break
                continue
            hold = asyncio.create_task(client.call("hold_loop", {"seconds": 1.5}))
            held.append((client, hold))
    finally:
        for client, hold in held:
            await asyncio.wait_for(hold, PROCESS_WAIT)  # the held call's answer
            await client.aclose()
    assert seen == pids


def test_a_promise_made_by_one_worker_is_redeemed_through_the_other(
    workers: ServeProcess,
) -> None:
    # Keep-alive connections stay with the worker that accepted them: find one per worker.
    # With one inherited listening socket the worker that accepts first wins every
    # time when idle, so the first worker's loop is held busy while the second one
    # is looked for: it cannot accept then.
    by_pid: dict[int, http.client.HTTPConnection] = {}
    try:
        first = http.client.HTTPConnection("127.0.0.1", workers.http_port, timeout=PROCESS_WAIT)
        by_pid[pid_over_http(workers, first)] = first
        hold = json.dumps(call_message("hold_loop", {"seconds": 3}))
        first.request("POST", "/mcp-lite/v1/rpc", hold, {"Content-Type": "application/json"})
        for _ in range(MAX_TRIES):
            conn = http.client.HTTPConnection("127.0.0.1", workers.http_port, timeout=PROCESS_WAIT)
            pid = pid_over_http(workers, conn)
            if pid in by_pid:
                conn.close()
            else:
                by_pid[pid] = conn
                break
        first.getresponse().read()  # the held call's answer: the connection is free again
        assert len(by_pid) == 2
        (maker, maker_conn), (redeemer, redeemer_conn) = by_pid.items()
        assert pid_over_http(workers, redeemer_conn) == redeemer  # still the same worker
        made = workers.call("slow_pid", {"seconds": 0.2}, conn=maker_conn)["result"]
        assert made["_meta"]["response_type"] == "promise"
        token = made["_meta"]["promise_token"]
        status, reply = workers.post(
            "/rpc", call_message("redeem", {"promise": token, "wait": 10}), redeemer_conn
        )
        assert status == 200, reply
        assert reply["result"]["_meta"]["response_type"] == "answer"
        assert reply["result"]["content"] == [{"type": "text", "text": str(maker)}]
    finally:
        for conn in by_pid.values():
            conn.close()


def test_a_killed_worker_is_restarted_and_serving_never_stops(workers: ServeProcess) -> None:
    victim, survivor = worker_pids(workers)
    os.kill(victim, signal.SIGKILL)
    workers.wait_for(rf"\(pid {victim}\) was killed by SIGKILL; restarting it in 0\.5s")
    # Every call is answered while the worker is down and after it is back.
    assert survivor in pids_until(workers, {survivor})
    replacement = int(workers.wait_for(r"worker \d restarted \(pid (\d+)\)").group(1))
    assert replacement not in (victim, survivor)
    assert pids_until(workers, {survivor, replacement}) == {survivor, replacement}


def test_sigterm_stops_the_supervisor_with_0_and_leaves_no_worker(
    workers: ServeProcess,
) -> None:
    pids = worker_pids(workers)
    started = time.monotonic()
    lines = workers.stop()
    assert workers.proc.returncode == 0, lines
    assert time.monotonic() - started < 2 + 5  # --grace 2 plus the kill margin
    assert all(gone(pid) for pid in pids), pids
    assert lines[-1].endswith("mcplite: stopped")
    assert len([line for line in lines if re.search(r"serving \d+ tools on", line)]) == 1


def test_workers_refuse_an_in_memory_promise_store() -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "mcplite", "serve", "mcplite.demo"),
            *("--http", "127.0.0.1:0", "--no-grpc", "--workers", "2"),
            *("--promise-store", "memory://"),
        ],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        cwd=ROOT,
        env=subprocess_env(),
    )
    assert done.returncode == 2
    assert "memory:// cannot be shared by 2 workers" in done.stderr


def test_workers_stop_when_their_supervisor_is_killed(workers: ServeProcess) -> None:
    pids = worker_pids(workers)
    workers.proc.kill()
    workers.proc.wait(PROCESS_WAIT)
    # stderr ends only when no worker holds it any more.
    lines = workers.rest_of_stderr()
    assert any("the supervisor is gone: stopping" in line for line in lines), lines
    assert all(dead(pid) for pid in pids), pids


def test_restarts_back_off_from_half_a_second_to_ten_and_reset_after_30_s_up() -> None:
    delays, backoff = [], 0.5
    for _ in range(7):
        delay, backoff = restart_delay(backoff, uptime=1.0)
        delays.append(delay)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert restart_delay(backoff, uptime=30.0) == (0.5, 1.0)


LEASE = 1.0  # seconds: the lease of the test below's store (?lease= in its URL)


def test_a_killed_workers_running_promise_is_a_retryable_worker_lost_failure_within_the_lease(
    tmp_path: Path,
) -> None:
    (tmp_path / "pid_tools.py").write_text(TOOLS)
    store = f"sqlite:///{tmp_path / 'promises.db'}?lease={LEASE}"
    with serve_process(
        *("pid_tools", "--http", "127.0.0.1:0", "--no-grpc", "--workers", "2"),
        *("--promise-store", store, "--grace", "2", "--no-access-log"),
        extra_path=tmp_path,
    ) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=PROCESS_WAIT)
        try:
            holder = pid_over_http(server, conn)  # this connection stays with this worker
            made = server.call("slow_pid", {"seconds": 60}, conn=conn)["result"]
        finally:
            conn.close()
        token = made["_meta"]["promise_token"]
        os.kill(holder, signal.SIGKILL)
        killed = time.monotonic()
        # Once the supervisor has reaped it, its listening socket is gone: a new
        # connection goes to the other worker (or to the holder's replacement).
        server.wait_for(rf"\(pid {holder}\) was killed by SIGKILL; restarting it in 0\.5s")
        status, reply = server.post("/rpc", call_message("redeem", {"promise": token, "wait": 30}))
        assert time.monotonic() - killed < LEASE + 1.0  # within the lease, not the wait
        assert status == 200, reply
        result = reply["result"]
        assert result["_meta"]["response_type"] == "failure"
        assert result["failure"] == {
            "message": "the worker running this call was lost; the call may be retried",
            "reason": "worker_lost",
            "retryable": True,
        }
        replacement = int(server.wait_for(r"worker \d restarted \(pid (\d+)\)").group(1))
        assert replacement != holder
        # Resolved once and for all: the replacement (or the other worker) says the same.
        assert server.call("redeem", {"promise": token})["result"]["failure"]["reason"] == (
            "worker_lost"
        )
