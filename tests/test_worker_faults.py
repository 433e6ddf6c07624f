"""``mcplite serve --workers 2`` under faults: a worker killed with clients in every
phase of a call, the supervisor killed or stopped with calls running, a port another
process holds, a tools module that fails in the workers.

Peers we did not write drive real subprocesses (:class:`conftest.ServeProcess`):
``http.client``, raw sockets reading SSE, grpcio.  A tool says which worker runs it
(its pid, in a file the test polls, or as a stream's first part), so that the test
kills that very worker once the call is in it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, closing, contextmanager, suppress
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import (
    BASE,
    PROCESS_WAIT,
    ROOT,
    ServeProcess,
    call_message,
    serve_process,
    subprocess_env,
)
from grpc_support import Protos, Stub, protos, to_python
from sse_client import Event, Head, RawHttp, connect, request_bytes

from mcplite.ops.workers import KILL_MARGIN

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="/proc, and SO_REUSEPORT spreading connections: Linux"
)

TOOLS = """
import asyncio
import os
import threading
from collections.abc import AsyncIterator

from mcplite import ALWAYS, Tools

tools = Tools()


def say_pid(marker: str) -> None:
    # Whole or not at all: the test polls this file.
    with open(marker + ".tmp", "w") as file:
        file.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)


@tools.tool
def pid() -> str:
    return str(os.getpid())


@tools.tool
async def hang(marker: str) -> str:
    say_pid(marker)
    await asyncio.Event().wait()
    return "never"


@tools.tool
def hang_in_thread(marker: str) -> str:
    say_pid(marker)
    threading.Event().wait()  # a sync tool that never returns, in the thread pool
    return "never"


@tools.tool
async def hang_the_loop(marker: str) -> str:
    say_pid(marker)
    threading.Event().wait()  # blocks this worker's event loop for good
    return "never"


@tools.tool
async def pid_then_hang() -> AsyncIterator[str]:
    yield str(os.getpid())
    await asyncio.Event().wait()


@tools.tool(promise_after=ALWAYS)
async def promise_forever() -> str:
    await asyncio.Event().wait()
    return "never"
"""

GRACE = 0.5  # --grace of every server here
LEASE = 1.0  # the SQLite store's lease: a lost worker's promise resolves within it
#: Upper bound of the connections a test opens to reach a given worker.
MAX_TRIES = 100
WORKERS = re.compile(r"2 workers \(pids (\d+), (\d+)\)")
CHANNEL_OPTIONS = [
    ("grpc.enable_http_proxy", 0),
    # A channel of its own connection: grpcio otherwise shares one per address.
    ("grpc.use_local_subchannel_pool", 1),
]


@pytest.fixture
def tools_path(tmp_path: Path) -> Path:
    (tmp_path / "fault_tools.py").write_text(TOOLS)
    return tmp_path


@contextmanager
def two_workers(tools_path: Path, *extra: str) -> Iterator[ServeProcess]:
    """``--workers 2`` on ephemeral HTTP and gRPC ports, serving :data:`TOOLS`."""
    with serve_process(
        *("fault_tools", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"),
        *("--workers", "2", "--grace", str(GRACE), "--no-access-log", *extra),
        extra_path=tools_path,
    ) as server:
        yield server


def worker_pids(server: ServeProcess) -> tuple[int, int]:
    for line in server.lines:
        match = WORKERS.search(line)
        if match:
            return int(match.group(1)), int(match.group(2))
    raise AssertionError(f"no worker pids logged: {server.lines}")


def proc_stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter (Z: a zombie) and parent pid; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, ppid = stat.rpartition(")")[2].split()[:2]
    return state, int(ppid)


def children(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid``, with their state letters."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[1] == pid:
                found[int(entry.name)] = stat[0]
    return found


def dead(pid: int) -> bool:
    """Gone, or an orphan's zombie that init has yet to reap."""
    stat = proc_stat(pid)
    return stat is None or stat[0] in ("Z", "X")


def poll(condition: Any, what: str, timeout: float = PROCESS_WAIT) -> None:
    """Wait until ``condition()`` holds, checking every 20 ms; fail at ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout}s: {what}")
        time.sleep(0.02)


def marker_pid(marker: Path) -> int:
    """The pid a tool wrote in ``marker`` once it runs (polled, bounded)."""
    poll(marker.exists, f"a tool writes {marker}")
    return int(marker.read_text())


def http_conn(server: ServeProcess) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=PROCESS_WAIT)


def pid_on(server: ServeProcess, conn: http.client.HTTPConnection) -> int:
    return int(server.call("pid", conn=conn)["result"]["content"][0]["text"])


def conns_to(server: ServeProcess, pids: tuple[int, ...]) -> list[http.client.HTTPConnection]:
    """A keep-alive connection to each worker of ``pids``, in that order (a connection
    stays with the worker that accepted it; the kernel picks, so this tries)."""
    found: dict[int, http.client.HTTPConnection] = {}
    for _ in range(MAX_TRIES):
        conn = http_conn(server)
        pid = pid_on(server, conn)
        if pid in pids and pid not in found:
            found[pid] = conn
            if len(found) == len(pids):
                return [found[p] for p in pids]
        else:
            conn.close()
    for conn in found.values():
        conn.close()
    raise AssertionError(f"after {MAX_TRIES} connections only {set(found)} of {pids} answered")


def send_call(conn: http.client.HTTPConnection, name: str, arguments: dict[str, Any]) -> None:
    body = json.dumps(call_message(name, arguments))
    conn.request("POST", BASE + "/rpc", body, {"Content-Type": "application/json"})


def read_reply(conn: http.client.HTTPConnection) -> tuple[int, Any]:
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def call_in(server: ServeProcess, victim: int, marker: Path) -> http.client.HTTPConnection:
    """A connection on which ``hang`` runs in ``victim`` (the others' calls are left
    to hang in the other worker: harmless)."""
    for _ in range(MAX_TRIES):
        conn = http_conn(server)
        send_call(conn, "hang", {"marker": str(marker)})
        if marker_pid(marker) == victim:
            return conn
        conn.close()
        marker.unlink()
    raise AssertionError(f"no call reached worker {victim} in {MAX_TRIES} tries")


def sse_on_worker(server: ServeProcess, victim: int) -> tuple[socket.socket, RawHttp, Head]:
    """A raw connection to ``victim`` (asked its pid first, kept alive) streaming
    ``pid_then_hang`` as SSE, its head read."""
    for _ in range(MAX_TRIES):
        sock = connect(server.http_port, PROCESS_WAIT)
        reader = RawHttp(sock)
        sock.sendall(request_bytes(BASE + "/rpc", call_message("pid")))
        reply = reader.read_response().json()
        if int(reply["result"]["content"][0]["text"]) != victim:
            sock.close()
            continue
        stream = call_message("pid_then_hang")
        sock.sendall(request_bytes(BASE + "/rpc", stream, headers={"Accept": "text/event-stream"}))
        return sock, reader, reader.read_head()
    raise AssertionError(f"no connection reached worker {victim} in {MAX_TRIES} tries")


def grpc_on_worker(server: ServeProcess, victim: int) -> tuple[grpc.Channel, Stub]:
    """A grpcio channel whose one connection is to ``victim``, and its stub."""
    proto = ours()
    for _ in range(MAX_TRIES):
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", CHANNEL_OPTIONS)
        stub = proto.stub(channel)
        reply = stub.CallTool(proto.request("pid", {}), timeout=PROCESS_WAIT)
        if int(to_python(reply.result)["content"][0]["text"]) == victim:
            return channel, stub
        channel.close()
    raise AssertionError(f"no gRPC connection reached worker {victim} in {MAX_TRIES} tries")


def ours() -> Protos:
    return protos()["ours"]


def grpc_pid(server: ServeProcess) -> int:
    proto = ours()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", CHANNEL_OPTIONS) as channel:
        reply = proto.stub(channel).CallTool(proto.request("pid", {}), timeout=PROCESS_WAIT)
    return int(to_python(reply.result)["content"][0]["text"])


def assert_replaced(server: ServeProcess, victim: int, survivor: int) -> int:
    """The supervisor reaps ``victim`` and says so, the port answers on both bindings
    meanwhile (never through the victim), and a replacement comes up; its pid."""
    slot = server.wait_for(rf"worker (\d) \(pid {victim}\) was killed by SIGKILL; restarting")
    assert proc_stat(victim) is None  # reaped: no zombie
    for _ in range(5):  # new connections: the kernel gives them to live workers only
        with closing(http_conn(server)) as conn:
            assert pid_on(server, conn) != victim
    assert grpc_pid(server) != victim
    replacement = server.wait_for(rf"worker {slot.group(1)} restarted \(pid (\d+)\)")
    new = int(replacement.group(1))
    assert new not in (victim, survivor)
    family = children(server.proc.pid)
    assert {survivor, new} <= set(family), family
    assert "Z" not in family.values(), family
    return new


# --- a worker killed --------------------------------------------------------------------


def test_every_client_of_a_killed_worker_gets_a_connection_error_and_the_port_serves_on(
    tools_path: Path,
) -> None:
    """One worker runs a plain call, an SSE stream, a gRPC stream and a unary gRPC call,
    and holds a promise whose redeem waits on it; it is killed.  Each of its clients
    sees its connection end at once (no reply, a cut stream, UNAVAILABLE), the
    promise ends as a retryable ``worker_lost`` for a client waiting through the
    other worker, and new connections are served throughout."""
    store = f"sqlite:///{tools_path / 'promises.db'}?lease={LEASE}"
    with (
        two_workers(tools_path, "--promise-store", store) as server,
        ThreadPoolExecutor(4) as pool,
        ExitStack() as opened,
    ):
        victim, survivor = worker_pids(server)
        plain, other = conns_to(server, (victim, survivor))
        opened.callback(plain.close)
        opened.callback(other.close)
        sock, reader, head = sse_on_worker(server, victim)
        opened.callback(sock.close)
        channel, stub = grpc_on_worker(server, victim)
        opened.callback(channel.close)

        # A promise held by the victim, waited on through both workers.
        made = server.call("promise_forever", conn=plain)["result"]
        assert made["_meta"]["response_type"] == "promise"
        redeem = {"promise": made["_meta"]["promise_token"], "wait": 30}
        send_call(other, "redeem", redeem)
        waiting_elsewhere = pool.submit(read_reply, other)
        send_call(plain, "redeem", redeem)
        waiting_on_victim = pool.submit(read_reply, plain)
        # A plain call running in the victim.
        running = opened.enter_context(closing(call_in(server, victim, tools_path / "plain")))
        plain_call = pool.submit(read_reply, running)
        # Streams: a first part each, then silence.
        assert head.status == 200
        events = reader.events(head)
        first = next(events)
        assert (first.event, first.json()) == ("message", {"partial": str(victim)})
        grpc_stream = stub.CallToolStream(ours().request("pid_then_hang", {}))
        assert to_python(next(grpc_stream).result) == {"partial": str(victim)}
        grpc_call: Future[Any] = stub.CallTool.future(
            ours().request("hang", {"marker": str(tools_path / "grpc")}), timeout=PROCESS_WAIT
        )
        assert marker_pid(tools_path / "grpc") == victim

        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)

        for client in (waiting_on_victim, plain_call):
            with pytest.raises(ConnectionError):
                client.result(PROCESS_WAIT)
        rest: list[Event] = []
        with pytest.raises(EOFError):  # the chunked body ends without its last chunk
            rest.extend(events)
        assert all(e.event == "heartbeat" for e in rest), rest  # no done, no error
        with pytest.raises(grpc.RpcError) as stream_error:
            next(grpc_stream)
        assert stream_error.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as call_error:
            grpc_call.result(PROCESS_WAIT)
        assert call_error.value.code() == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - killed < GRACE + 2  # at once, not at a timeout

        status, reply = waiting_elsewhere.result(PROCESS_WAIT)
        assert time.monotonic() - killed < LEASE + 1.0  # within the lease, not the wait
        assert status == 200, reply
        assert reply["result"]["_meta"]["response_type"] == "failure"
        assert reply["result"]["failure"]["reason"] == "worker_lost"
        assert reply["result"]["failure"]["retryable"] is True

        assert_replaced(server, victim, survivor)


# --- the supervisor killed or stopped ---------------------------------------------------


def test_workers_of_a_killed_supervisor_exit_within_grace_and_the_margin_whatever_they_run(
    tools_path: Path,
) -> None:
    """SIGKILL of the supervisor while one worker runs a sync tool that never returns
    and the other's event loop is blocked by a tool: the first drains and leaves
    without its stuck thread, the second is ended by its own watchdog; no process of
    the service is left, the port is free, and the supervisor's private promise
    directory is gone (the last worker out removes it)."""
    with (
        two_workers(tools_path) as server,
        ThreadPoolExecutor(2) as pool,
        ExitStack() as cleanup,
    ):
        first, second = worker_pids(server)
        family = children(server.proc.pid)  # the workers and multiprocessing's tracker
        assert {first, second} <= set(family)
        cleanup.callback(kill_left, family)  # should this test fail: no orphan outlives it
        private = private_store(server)
        cleanup.callback(shutil.rmtree, private, True)  # should this test fail
        in_thread, in_loop = conns_to(server, (first, second))
        cleanup.callback(in_thread.close)
        cleanup.callback(in_loop.close)
        send_call(in_thread, "hang_in_thread", {"marker": str(tools_path / "thread")})
        send_call(in_loop, "hang_the_loop", {"marker": str(tools_path / "loop")})
        assert marker_pid(tools_path / "thread") == first
        assert marker_pid(tools_path / "loop") == second
        thread_reply = pool.submit(read_reply, in_thread)
        loop_reply = pool.submit(read_reply, in_loop)

        killed = time.monotonic()
        server.proc.kill()
        server.proc.wait(PROCESS_WAIT)
        # stderr ends when no process of the service holds it any more.
        lines = server.rest_of_stderr(GRACE + KILL_MARGIN + 3)
        poll(lambda: all(dead(pid) for pid in family), f"{family} end", timeout=1.0)
        assert time.monotonic() - killed < GRACE + KILL_MARGIN + 3

        text = "\n".join(lines)
        assert text.count("the supervisor is gone: stopping") == 2, lines
        assert f"mcplite[{first}]: 1 thread(s) still run a sync tool" in text, lines
        exit_line = f"mcplite[{second}]: still running {GRACE + KILL_MARGIN:g}s after"
        assert exit_line in text, lines
        # The drained worker answered its call; the other one could not.
        status, reply = thread_reply.result(PROCESS_WAIT)
        assert (status, reply["error"]["message"]) == (503, "Server is shutting down")
        with pytest.raises(ConnectionError):
            loop_reply.result(PROCESS_WAIT)
        for port in (server.http_port, server.grpc_port):
            with socket.socket() as sock:  # nothing listens there any more
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen()
        assert not private.exists(), sorted(private.iterdir())


def private_store(server: ServeProcess) -> Path:
    """The supervisor's private promise directory, as its log names it."""
    found = re.search(r"promises in sqlite:///(.*)/promises\.db", "\n".join(server.lines))
    assert found, server.lines
    directory = Path(found.group(1))
    assert directory.parent == Path(tempfile.gettempdir()), directory
    assert directory.name.startswith("mcplite-workers-"), directory
    assert directory.is_dir()
    return directory


def kill_left(pids: dict[int, str]) -> None:
    """SIGKILL whichever of ``pids`` (processes a test started) still runs."""
    for pid in pids:
        if not dead(pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_drains_every_worker_and_the_supervisor_exits_0_leaving_no_process(
    tools_path: Path,
) -> None:
    """SIGTERM of the supervisor with a call running in each worker, one async and one
    a sync tool that never returns: each client gets the documented 503 at the end
    of the grace period, each worker exits by itself (none is killed), the
    supervisor exits 0."""
    with two_workers(tools_path) as server, ThreadPoolExecutor(2) as pool:
        first, second = worker_pids(server)
        in_loop, in_thread = conns_to(server, (first, second))
        try:
            send_call(in_loop, "hang", {"marker": str(tools_path / "async")})
            send_call(in_thread, "hang_in_thread", {"marker": str(tools_path / "thread")})
            assert marker_pid(tools_path / "async") == first
            assert marker_pid(tools_path / "thread") == second
            replies = [pool.submit(read_reply, conn) for conn in (in_loop, in_thread)]
            started = time.monotonic()
            lines = server.stop()
            assert server.proc.returncode == 0, lines
            assert time.monotonic() - started < GRACE + KILL_MARGIN, lines
            for reply in replies:
                status, body = reply.result(PROCESS_WAIT)
                assert status == 503, body
                assert body["error"] == {"code": -32000, "message": "Server is shutting down"}
        finally:
            in_loop.close()
            in_thread.close()
        assert not any("killing it" in line for line in lines), lines
        assert lines[-1].endswith("mcplite: stopped"), lines
        assert proc_stat(first) is None and proc_stat(second) is None  # reaped


# --- a port taken -----------------------------------------------------------------------


def run_serve(
    tools_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``mcplite serve fault_tools --workers 2 ARGS`` to its end; its stderr closing
    (which ``run`` waits for) means no process of it is left."""
    return subprocess.run(
        [sys.executable, "-m", "mcplite", "serve", "fault_tools", "--workers", "2", *args],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        cwd=ROOT,
        env={**subprocess_env(tools_path), **(env or {})},
    )


@pytest.mark.parametrize(
    ("binding", "listening", "sockets"),
    [
        ("HTTP", False, "reuse-port"),
        ("HTTP", True, "reuse-port"),
        ("gRPC", False, "reuse-port"),
        ("gRPC", True, "reuse-port"),
        ("HTTP", True, "inherit"),  # the supervisor listens itself and hands it over
    ],
    ids=["HTTP-bound", "HTTP-listening", "gRPC-bound", "gRPC-listening", "inherit"],
)
def test_a_port_another_socket_holds_fails_fast_with_one_line_and_no_worker(
    tools_path: Path, binding: str, listening: bool, sockets: str
) -> None:
    with socket.socket() as holder:  # no SO_REUSEPORT, no SO_REUSEADDR
        holder.bind(("127.0.0.1", 0))
        if listening:
            holder.listen()
        port = holder.getsockname()[1]
        taken, free = f"127.0.0.1:{port}", "127.0.0.1:0"
        http, grpc_address = (taken, free) if binding == "HTTP" else (free, taken)
        env = {"MCPLITE_WORKER_SOCKETS": "inherit"} if sockets == "inherit" else {}
        started = time.monotonic()
        done = run_serve(
            tools_path, "--http", http, "--grpc", grpc_address, "--secret", "s" * 32, env=env
        )
    assert time.monotonic() - started < PROCESS_WAIT / 2
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"mcplite: error: cannot listen for {binding} on {taken}: Address already in use"
    ]


# --- a tools module that fails in the workers -------------------------------------------

FAILING_IN_WORKERS = """
import multiprocessing
import os

from mcplite import Tools

tools = Tools()


@tools.tool
def pid() -> str:
    return str(os.getpid())


FLAG = os.path.join(os.path.dirname(__file__), "fail")
if multiprocessing.parent_process() is not None and os.path.exists(FLAG):
    raise RuntimeError("no database from the workers")
"""


def test_a_module_failing_in_the_workers_at_the_first_start_stops_the_supervisor(
    tools_path: Path,
) -> None:
    (tools_path / "fault_tools.py").write_text(FAILING_IN_WORKERS)
    (tools_path / "fail").touch()
    started = time.monotonic()
    done = run_serve(tools_path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
    assert time.monotonic() - started < PROCESS_WAIT / 2
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    error = "mcplite: error: importing 'fault_tools' failed: RuntimeError: no database from"
    assert any(line.startswith(error) for line in lines), lines
    given_up = re.compile(r"worker \d \(pid \d+\) exited with status 2 before it served$")
    assert any(given_up.search(line) for line in lines), lines
    assert not any("serving" in line for line in lines), lines


def test_a_replacement_that_fails_to_start_is_retried_with_a_doubling_delay(
    tools_path: Path,
) -> None:
    (tools_path / "fault_tools.py").write_text(FAILING_IN_WORKERS)
    flag = tools_path / "fail"
    with two_workers(tools_path) as server:
        victim, survivor = worker_pids(server)
        flag.touch()  # from now on a new worker fails as it imports the module
        os.kill(victim, signal.SIGKILL)
        slot = server.wait_for(
            rf"worker (\d) \(pid {victim}\) was killed by SIGKILL; restarting it in 0\.5s"
        )
        index = slot.group(1)
        failed = server.wait_for(
            rf"worker {index} \(pid (\d+)\) exited with status 2 before it served; "
            r"restarting it in 1\.0s"
        )
        flag.unlink()  # the cause is gone: the next try (a second later) serves
        with closing(http_conn(server)) as conn:  # meanwhile the survivor answers
            assert pid_on(server, conn) == survivor
        replacement = int(server.wait_for(rf"worker {index} restarted \(pid (\d+)\)").group(1))
        assert replacement not in (victim, survivor, int(failed.group(1)))
        assert proc_stat(int(failed.group(1))) is None  # reaped
        assert "Z" not in children(server.proc.pid).values()
