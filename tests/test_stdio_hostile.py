"""``python -m mcplite stdio`` against a hostile or careless client, over real pipes.

Garbage lines, lines too long, a last line cut by the end of stdin, thousands of
requests written before any answer is read, stdin closed with calls in flight,
stdout closed with answers pending.  Each gets a clear answer (or a clear line on
stderr), never a traceback or an ERROR line, never memory without bound (the
child's peak RSS is read from ``/proc/PID/status``), and the process goes on
serving, or ends promptly with status 0.  Every wait is bounded.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import re
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from test_stdio import (
    MODERN,
    WAIT,
    call,
    request,
    stdio_process,
)

from mcplite import Config

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the child's peak RSS from /proc"
)

MiB = 1024 * 1024
LIMIT = Config().max_body_size  # the default line limit: --max-body-size
TASKS_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}

TOOLS_MODULE = '''
"""Tools that hold their calls open, for the stdio tests."""

import asyncio
import sys
import threading
from collections.abc import AsyncIterator

from mcplite import ALWAYS, NEVER, Tools

tools = Tools()
NEVER_SET = threading.Event()


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@tools.tool(promise_after=NEVER)
async def wait_forever() -> str:
    say("wait_forever started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        say("wait_forever was cancelled")
        raise
    return "never"


@tools.tool(promise_after=NEVER)
def block_a_thread() -> str:
    say("block_a_thread started")
    NEVER_SET.wait(60)  # a sync tool cannot be cancelled
    return "never"


@tools.tool(promise_after=NEVER)
async def stream_forever() -> AsyncIterator[str]:
    say("stream_forever started")
    try:
        while True:
            yield "part"
            await asyncio.sleep(0.01)
    finally:
        say("stream_forever was cancelled")


@tools.tool(promise_after=ALWAYS)
async def promised() -> str:
    say("promised started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        say("promised was cancelled")
        raise
    return "never"


@tools.tool(promise_after=NEVER)
def echo(text: str) -> str:
    return text
'''


@pytest.fixture
def tools_path(tmp_path: Path) -> Path:
    (tmp_path / "stdio_hostile_tools.py").write_text(TOOLS_MODULE)
    return tmp_path


def peak_rss(pid: int) -> int:
    """The peak resident set size of process ``pid`` so far, in bytes (VmHWM)."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, status
    return int(match.group(1)) * 1024


def unread(fd: int) -> int:
    """Bytes written to the pipe ``fd`` (either end) and not yet read."""
    raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", raw)[0])


def bytes_read(pid: int) -> int:
    """How many bytes process ``pid`` has read so far, from any descriptor."""
    match = re.search(r"^rchar: (\d+)$", Path(f"/proc/{pid}/io").read_text(), re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def pipe_size(fd: int) -> int:
    return int(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))


def poll(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Check ``condition()`` every 10 ms until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not in {timeout}s: {what}")
        time.sleep(0.01)


def stops_reading(pid: int, fd: int, checks: int = 5) -> Callable[[], bool]:
    """A condition for :func:`poll`: process ``pid`` leaves what is written to the
    pipe ``fd`` unread (its read count the same, the pipe not empty) ``checks``
    times in a row."""
    last = -1
    same = 0

    def stopped() -> bool:
        nonlocal last, same
        now = bytes_read(pid)
        same = same + 1 if now == last and unread(fd) > 0 else 0
        last = now
        return same >= checks

    return stopped


def write_in_a_thread(stream: IO[bytes], chunks: list[bytes]) -> threading.Thread:
    """Write ``chunks`` to ``stream`` from a thread, so that a server which stops
    reading cannot block the test.  Straight to the descriptor: a thread blocked
    in a buffered write would hold the lock that closing the stream needs."""
    stream.flush()
    fd = stream.fileno()

    def write() -> None:
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        except OSError:  # the process has ended (a test that failed)
            pass

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def read_lines(stream: IO[bytes], count: int, timeout: float = WAIT) -> list[bytes]:
    """``count`` lines from ``stream``, read in a thread; fails after ``timeout``."""
    lines: list[bytes] = []

    def read() -> None:
        while len(lines) < count:
            line = stream.readline()
            if not line:
                return
            lines.append(line)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout)
    assert len(lines) == count, f"{len(lines)} of {count} lines in {timeout}s"
    return lines


def assert_quiet(stderr: list[str]) -> None:
    """No traceback and no ERROR record: the client's doing is no server error."""
    for line in stderr:
        assert "Traceback" not in line, stderr
        assert " ERROR " not in line, stderr
        assert "Exception ignored" not in line, stderr


def is_pong(message: Any, request_id: Any) -> bool:
    return bool(message == {"jsonrpc": "2.0", "id": request_id, "result": {}})


# --- 1. garbage ----------------------------------------------------------------------

PING = json.dumps(request("ping", request_id="after")).encode()

GARBAGE: dict[str, tuple[bytes, int, Any]] = {
    # name: (the line, without its newline; the error code; the id answered)
    "invalid UTF-8": (b'{"jsonrpc": "2.0", "id": 1, "method": "\xc3\x28"}', -32700, None),
    "NUL bytes": (b"\x00\x00\x00", -32700, None),
    "a NUL after a valid request": (PING + b"\x00", -32700, None),
    "a NUL inside a string": (b'{"jsonrpc": "2.0", "id": 1, "method": "pi\x00ng"}', -32700, None),
    "only whitespace": (b" \t \r", -32700, None),
    "empty": (b"", -32700, None),
    "cut short": (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', -32700, None),
    "NaN": (b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}', -32700, None),
    "nested too deeply": (b"[" * 100_000, -32700, None),
    "a number": (b"42", -32600, None),
    "a string": (b'"ping"', -32600, None),
    "null": (b"null", -32600, None),
    "true": (b"true", -32600, None),
    "an empty array": (b"[]", -32600, None),
    "a batch": (b"[" + PING + b"]", -32600, None),
    "an object id": (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', -32600, None),
    "no method": (b'{"jsonrpc": "2.0", "id": 5}', -32600, 5),
    "JSON-RPC 1.0": (b'{"jsonrpc": "1.0", "id": 6, "method": "ping"}', -32600, 6),
}


def test_each_garbage_line_gets_one_clear_error_and_the_next_request_is_answered() -> None:
    with stdio_process("mcplite.demo") as server:
        for name, (line, code, request_id) in GARBAGE.items():
            server.send_raw(line + b"\n")
            reply = server.receive()
            assert reply["id"] == request_id, name
            assert reply["error"]["code"] == code, (name, reply)
            assert reply["error"]["message"], name
            server.send_raw(PING + b"\n")
            assert is_pong(server.receive(), "after"), name
        server.close_stdin()
        assert server.wait() == 0
        assert len(server.rest_of_stdout()) == 2 * len(GARBAGE)  # nothing else was said
        assert_quiet(server.rest_of_stderr())


def test_random_bytes_get_one_error_per_line_and_the_next_request_is_answered() -> None:
    garbage = random.Random(20260728).randbytes(256 * 1024)
    lines = garbage.count(b"\n") + 1  # the last one ends with the ping's newline below
    with stdio_process("mcplite.demo") as server:
        server.send_raw(garbage + b"\n" + PING + b"\n")
        for _ in range(lines):
            reply = server.receive()
            assert reply["id"] is None, reply
            assert reply["error"]["code"] in (-32700, -32600), reply
        assert is_pong(server.receive(), "after")
        server.close_stdin()
        assert server.wait() == 0
        assert_quiet(server.rest_of_stderr())


# --- 2. lines too long ----------------------------------------------------------------


def test_a_line_of_the_limit_is_served_and_one_byte_more_is_refused() -> None:
    with stdio_process("mcplite.demo") as server:
        server.send_raw(PING.ljust(LIMIT) + b"\n")  # JSON may end in whitespace
        assert is_pong(server.receive(), "after")
        server.send_raw(PING.ljust(LIMIT + 1) + b"\n")
        refused = server.receive()
        assert refused["id"] is None
        assert refused["error"]["code"] == -32600
        assert refused["error"]["data"] == {"max_body_size": LIMIT}
        assert f"longer than {LIMIT} bytes" in refused["error"]["message"]
        server.send(request("ping", request_id=2))
        assert is_pong(server.receive(), 2)  # one error for the long line, no more


#: What the server may add to its peak RSS while it skips a 50 MiB line: it holds
#: at most 2 x --max-body-size of it (asyncio's reader stops reading the pipe there),
#: plus what it reads at a time and a copy of what it drops.
LONG_LINE_RSS = 8 * MiB


def test_a_50_mib_line_is_refused_in_bounded_memory_and_the_next_request_is_answered() -> None:
    with stdio_process("mcplite.demo") as server:
        # Warm up the paths a long line takes (the error, its log line).
        server.send_raw(b"x" * (LIMIT + 1) + b"\n")
        assert server.receive()["error"]["code"] == -32600
        server.send(request("ping", request_id=1))
        assert is_pong(server.receive(), 1)
        before = peak_rss(server.proc.pid)
        assert server.proc.stdin is not None
        chunk = b"y" * MiB
        writer = write_in_a_thread(server.proc.stdin, [chunk] * 50 + [b"\n", PING + b"\n"])
        refused = server.receive()
        assert refused["id"] is None
        assert refused["error"]["code"] == -32600
        assert is_pong(server.receive(), "after")
        writer.join(WAIT)
        grown = peak_rss(server.proc.pid) - before
        assert grown < LONG_LINE_RSS, f"peak RSS grew by {grown / MiB:.1f} MiB"
        server.close_stdin()
        assert server.wait() == 0
        assert_quiet(server.rest_of_stderr())


# --- 3. the last line cut by the end of stdin -----------------------------------------

CUT_LINES: dict[str, tuple[bytes, Any]] = {
    # name: (the last bytes written, the reply they get)
    "a whole request": (PING, {"jsonrpc": "2.0", "id": "after", "result": {}}),
    "a cut request": (PING[:-5], -32700),
    "a line over the limit": (b"z" * (LIMIT + 10), -32600),
}


@pytest.mark.parametrize(("last", "answer"), CUT_LINES.values(), ids=CUT_LINES.keys())
def test_a_last_line_without_a_newline_is_answered_then_the_process_exits_0(
    last: bytes, answer: Any
) -> None:
    with stdio_process("mcplite.demo") as server:
        server.send_raw(last)
        server.close_stdin()
        assert server.wait() == 0
        lines = server.rest_of_stdout()
        assert len(lines) == 1, lines
        reply = json.loads(lines[0])
        if isinstance(answer, int):
            assert reply["id"] is None
            assert reply["error"]["code"] == answer
        else:
            assert reply == answer
        assert_quiet(server.rest_of_stderr())


# --- 4. requests written faster than answers are read ---------------------------------

PIPELINED = 5000
TEXT = "t" * 4096
#: The peak RSS the server may add while 5,000 answers of 4 KiB (20 MiB of them, after
#: 20 MiB of requests) wait for a client that reads none: stdin is not read while
#: stdout is full, so it holds about 2 x --max-body-size of requests and the answers
#: of the calls in flight.
PIPELINED_RSS = 12 * MiB


def test_thousands_of_requests_written_before_any_answer_is_read_are_all_answered_in_bounded_memory(
    tools_path: Path,
) -> None:
    with stdio_process(
        "stdio_hostile_tools", "--no-access-log", extra_path=tools_path, read_stdout=False
    ) as server:
        stdin, stdout = server.proc.stdin, server.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(call("echo", {"text": TEXT}, 0)).encode() + b"\n")
        stdin.flush()
        assert json.loads(read_lines(stdout, 1)[0])["id"] == 0
        before = peak_rss(server.proc.pid)
        requests = [  # echo calls, and pings, which are answered the quickest
            json.dumps(
                call("echo", {"text": TEXT}, n) if n % 2 else request("ping", None, n)
            ).encode()
            + b"\n"
            for n in range(1, PIPELINED + 1)
        ]
        writer = write_in_a_thread(stdin, requests)
        # The client reads nothing until it has written everything, or until the
        # server has stopped reading what it writes.
        stopped = stops_reading(server.proc.pid, stdin.fileno())
        poll(lambda: not writer.is_alive() or stopped(), "the server reads it all, or stops")
        replies = [json.loads(line) for line in read_lines(stdout, PIPELINED)]
        writer.join(WAIT)
        assert not writer.is_alive()
        grown = peak_rss(server.proc.pid) - before
        assert sorted(r["id"] for r in replies) == list(range(1, PIPELINED + 1))
        for reply in replies:
            if reply["id"] % 2:
                assert reply["result"]["content"] == [{"type": "text", "text": TEXT}], reply
            else:
                assert is_pong(reply, reply["id"]), reply
        assert grown < PIPELINED_RSS, f"peak RSS grew by {grown / MiB:.1f} MiB"
        server.close_stdin()
        assert server.wait() == 0
        assert_quiet(server.rest_of_stderr())


# --- 5. stdin closed with calls in flight ---------------------------------------------

IN_FLIGHT: dict[str, tuple[dict[str, Any], str]] = {
    # name: (the call, what stderr says once the call has ended)
    "a slow async tool": (call("wait_forever", {}), "wait_forever was cancelled"),
    "a sync tool blocking its thread": (
        call("block_a_thread", {}),
        "still run a sync tool after the shutdown",
    ),
    "a stream": (call("stream_forever", {}), "stream_forever was cancelled"),
    "a 2025 call past its promise deadline": (call("promised", {}), "promised was cancelled"),
}


@pytest.mark.parametrize(("message", "ended"), IN_FLIGHT.values(), ids=IN_FLIGHT.keys())
def test_closing_stdin_with_a_call_in_flight_cancels_it_and_exits_0_within_a_second(
    tools_path: Path, message: dict[str, Any], ended: str
) -> None:
    with stdio_process("stdio_hostile_tools", extra_path=tools_path) as server:
        server.send(message)
        server.wait_stderr(f"{message['params']['name']} started")
        started = time.monotonic()
        server.close_stdin()
        assert server.wait() == 0
        took = time.monotonic() - started
        assert took < 1.0, f"exited {took:.2f}s after stdin closed"
        stderr = server.rest_of_stderr()
        assert any(ended in line for line in stderr), stderr
        assert_quiet(stderr)
        (reply,) = map(json.loads, server.rest_of_stdout())
    assert reply["id"] == 1
    assert reply["error"]["code"] == -32000
    assert reply["error"]["message"] == "Server is shutting down"


def test_closing_stdin_with_a_task_pending_cancels_it_and_exits_0_within_a_second(
    tools_path: Path,
) -> None:
    with stdio_process("stdio_hostile_tools", extra_path=tools_path) as server:
        server.send(call("promised", {}, **TASKS_META))
        assert server.receive()["result"]["resultType"] == "task"
        server.wait_stderr("promised started")
        started = time.monotonic()
        server.close_stdin()
        assert server.wait() == 0
        took = time.monotonic() - started
        assert took < 1.0, f"exited {took:.2f}s after stdin closed"
        stderr = server.rest_of_stderr()
        assert any("promised was cancelled" in line for line in stderr), stderr
        assert_quiet(stderr)
        assert len(server.rest_of_stdout()) == 1  # the task, and nothing after it


# --- 6. stdout closed with answers pending --------------------------------------------


def test_closing_stdout_with_answers_pending_ends_the_process_at_once_and_quietly(
    tools_path: Path,
) -> None:
    with stdio_process("stdio_hostile_tools", extra_path=tools_path, read_stdout=False) as server:
        stdin, stdout = server.proc.stdin, server.proc.stdout
        assert stdin is not None and stdout is not None
        server.send(call("wait_forever", {}, "slow"))
        server.wait_stderr("wait_forever started")
        big = "b" * 32 * 1024
        server.send(*(call("echo", {"text": big}, n) for n in range(8)))
        # More answers than the pipe holds: the server holds the rest.
        for _ in range(pipe_size(stdout.fileno()) // len(big) + 1):
            server.wait_stderr(r"stdio tools/call echo ok")
        started = time.monotonic()
        stdout.close()
        assert server.wait() == 0
        took = time.monotonic() - started
        assert took < 1.0, f"exited {took:.2f}s after stdout closed"
        stderr = server.rest_of_stderr()
        assert any("wait_forever was cancelled" in line for line in stderr), stderr
        assert_quiet(stderr)
