"""``python -m mcplite stdio``: MCP as newline-delimited JSON-RPC on stdin/stdout.

Every server is a real subprocess.  The official ``mcp`` client drives the demo
in both revisions; raw pipes check the framing rules: a bad line is answered and
skipped, stdout carries nothing but JSON lines, notifications come before their
result, ``notifications/cancelled`` stops a call, and the end of stdin ends the
process with status 0.  Every wait is bounded; every process is ended (stdin
closed, else SIGKILL) in the end.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import mcp_types as types
import pytest
from conftest import PROCESS_WAIT, ROOT, host_env, subprocess_env
from mcp import Client
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client

SECRET = "test-secret-0123456789abcdef"
WAIT = PROCESS_WAIT  # upper bound of every wait on a subprocess, in seconds
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}

TOOLS_MODULE = '''
"""Tools for the stdio tests."""

import asyncio
import os
import sys

from mcplite import NEVER, Context, Tools

print("printed at import: must not reach the protocol")

tools = Tools()


@tools.tool(promise_after=NEVER)
async def count(steps: int, ctx: Context) -> str:
    for step in range(1, steps + 1):
        ctx.report_progress(step, steps, f"step {step}")
        await asyncio.sleep(0.01)
    return f"counted to {steps}"


@tools.tool(promise_after=NEVER)
def count_in_a_thread(steps: int, ctx: Context) -> str:
    for step in range(1, steps + 1):
        ctx.report_progress(step, steps, f"step {step}")
    return f"counted to {steps}"


@tools.tool(promise_after=NEVER)
async def wait_forever(ctx: Context) -> str:
    ctx.report_progress(0, None, "started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        print("wait_forever was cancelled", file=sys.stderr, flush=True)
        raise
    return "never"


@tools.tool(promise_after=NEVER)
def not_json() -> dict:
    return {"ratio": float("nan")}


@tools.tool(promise_after=NEVER)
def noisy(text: str) -> str:
    sys.stdout.write(f"noisy says {text}\\n")  # one write: whole, among other threads' logs
    os.system("echo a child process says hello")
    return text
'''

FAST_DEMO_MODULE = '''
"""The demo, with analyze_dataset's passes made short."""

import mcplite.demo as demo

demo.STEP_SECONDS = 0.02
tools = demo.tools
'''


@pytest.fixture
def tools_path(tmp_path: Path) -> Path:
    (tmp_path / "stdio_test_tools.py").write_text(TOOLS_MODULE)
    (tmp_path / "stdio_fast_demo.py").write_text(FAST_DEMO_MODULE)
    return tmp_path


def request(method: str, params: dict[str, Any] | None = None, request_id: Any = 1) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(name: str, arguments: dict[str, Any], request_id: Any = 1, **meta: Any) -> Any:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return request("tools/call", params, request_id)


def cancelled(request_id: Any, **extra: Any) -> Any:
    params = {"requestId": request_id, **extra}
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


class StdioProcess:
    """``python -m mcplite stdio ARGS`` on pipes; stdout and stderr read by threads
    (stdout by the test itself, from ``proc.stdout``, with ``read_stdout=False``)."""

    def __init__(
        self, *args: str, extra_path: Path | None = None, read_stdout: bool = True
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcplite", "stdio", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=subprocess_env(extra_path),
        )
        self.stdout_lines: list[bytes] = []  # every stdout line read so far, raw
        self.stderr_lines: list[str] = []
        self._stdout: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: queue.Queue[str | None] = queue.Queue()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._pump_stderr, args=(self.proc.stderr,), daemon=True),
        ]
        if read_stdout:
            pump = threading.Thread(target=self._pump_stdout, args=(self.proc.stdout,), daemon=True)
            self._threads.insert(0, pump)
        for thread in self._threads:
            thread.start()

    def _pump_stdout(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.stdout_lines.append(line)
            self._stdout.put(line)
        self._stdout.put(None)

    def _pump_stderr(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stderr_lines.append(line)
            self._stderr.put(line)
        self._stderr.put(None)

    def send(self, *messages: Any) -> None:
        self.send_raw(b"".join(json.dumps(m).encode() + b"\n" for m in messages))

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def receive(self, timeout: float = WAIT) -> Any:
        """The next message on stdout (it must be one line of JSON)."""
        try:
            line = self._stdout.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no stdout line in time; stderr: {self.stderr_lines}")
        if line is None:
            pytest.fail(f"stdout ended; stderr: {self.stderr_lines}")
        assert line.endswith(b"\n")
        return json.loads(line)

    def receive_until(self, request_id: Any) -> tuple[list[Any], Any]:
        """The notifications before the reply to ``request_id``, and the reply."""
        before: list[Any] = []
        while True:
            message = self.receive()
            if "method" not in message and message.get("id") == request_id:
                return before, message
            before.append(message)

    def wait_stderr(self, pattern: str, timeout: float = WAIT) -> str:
        """The first stderr line from now on that matches ``pattern``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._stderr.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no stderr line matching {pattern!r}; seen: {self.stderr_lines}")
            if line is None:
                pytest.fail(f"stderr ended before {pattern!r}; seen: {self.stderr_lines}")
            if re.search(pattern, line):
                return line

    def wait(self, timeout: float = WAIT) -> int:
        """The exit status; fails the test if the process does not exit in time."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after {timeout}s; stderr: {self.stderr_lines}")

    def rest_of_stdout(self) -> list[bytes]:
        """Every stdout line, once the process has closed stdout."""
        self._threads[0].join(WAIT)
        return self.stdout_lines

    def rest_of_stderr(self) -> list[str]:
        """Every stderr line, once the process has closed stderr."""
        self._threads[-1].join(WAIT)
        return self.stderr_lines

    def kill(self) -> None:
        """End the process: the way a client does (stdin closed), else SIGKILL."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            if not self.proc.stdin.closed:
                self.proc.stdin.close()
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait(WAIT)
        for thread in self._threads:
            thread.join(WAIT)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def stdio_process(
    *args: str, extra_path: Path | None = None, read_stdout: bool = True
) -> Iterator[StdioProcess]:
    server = StdioProcess(*args, "--secret", SECRET, extra_path=extra_path, read_stdout=read_stdout)
    try:
        yield server
    finally:
        server.kill()


# --- the official client --------------------------------------------------------------


def client_env(extra_path: Path | None) -> dict[str, str]:
    """What the server gets beside the client's small default environment: the
    folder of a test's tools module, and :func:`~conftest.host_env`."""
    env = host_env()
    if extra_path is not None:
        env["PYTHONPATH"] = str(extra_path)
    return env


def official_client(
    tmp_path: Path,
    *args: str,
    mode: str,
    extra_path: Path | None = None,
    elicitation_callback: ElicitationFnT | None = None,
) -> tuple[Client, IO[str]]:
    """The ``mcp`` client over ``python -m mcplite stdio ARGS``; its stderr goes to a file."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcplite", "stdio", *args, "--secret", SECRET],
        cwd=ROOT,
        env=client_env(extra_path),
    )
    errlog = (tmp_path / "server-stderr.log").open("w")
    transport = stdio_client(params, errlog=errlog)
    return Client(transport, mode=mode, elicitation_callback=elicitation_callback), errlog


MODES = {"2025 (initialize)": ("legacy", LEGACY), "default (server/discover)": ("auto", MODERN)}


@pytest.mark.parametrize(("mode", "version"), MODES.values(), ids=MODES.keys())
async def test_the_official_client_drives_the_demo_tools_over_stdio(
    tmp_path: Path, mode: str, version: str
) -> None:
    client, errlog = official_client(tmp_path, "mcplite.demo", mode=mode)
    with errlog:
        async with asyncio.timeout(WAIT), client:
            assert client.protocol_version == version
            assert client.server_info is not None and client.server_info.name == "mcplite"
            listed = await client.list_tools()
            assert [t.name for t in listed.tools] == [
                "echo",
                "search_documents",
                "analyze_dataset",
                "generate_report",
            ]

            echoed = await client.call_tool("echo", {"text": "hello over stdio"})
            assert not echoed.is_error
            assert echoed.content[0].type == "text"
            assert echoed.content[0].text == "hello over stdio"

            found = await client.call_tool("search_documents", {"query": "promise", "limit": 2})
            assert not found.is_error
            hits = found.structured_content
            assert hits is not None
            assert hits  # the corpus talks about promises

            failed = await client.call_tool("analyze_dataset", {"dataset_id": "missing-1"})
            assert failed.is_error
            assert failed.content[0].type == "text"
            assert "does not exist" in failed.content[0].text

            report = await client.call_tool("generate_report", {"topic": "stdio"})
            assert not report.is_error
            assert report.content[0].type == "text"
            text = report.content[0].text
            assert text.startswith("Stdio Report")
            assert all(title in text for title in ("Revenue", "Costs", "Outlook"))
    log = (tmp_path / "server-stderr.log").read_text()
    assert "serving 6 tools on stdio" in log
    assert "stdio tools/call echo ok" in log  # the access log is on stderr


@pytest.mark.parametrize(("mode", "version"), MODES.values(), ids=MODES.keys())
async def test_a_long_call_that_becomes_a_promise_reports_progress_and_returns_its_result(
    tmp_path: Path, tools_path: Path, mode: str, version: str
) -> None:
    # The client did not opt into tasks: the call waits for the promise's outcome.
    client, errlog = official_client(
        tmp_path, "stdio_fast_demo", "--promise-after", "0.05", mode=mode, extra_path=tools_path
    )
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    with errlog:
        async with asyncio.timeout(WAIT), client:
            assert client.protocol_version == version
            result = await client.call_tool(
                "analyze_dataset",
                {"dataset_id": "sales", "analysis_type": "comprehensive"},
                progress_callback=on_progress,
            )
    assert not result.is_error
    summary = result.structured_content
    assert summary is not None
    assert summary["analysis_type"] == "comprehensive"
    assert {"stdev", "median", "quartiles"} <= summary.keys()  # the final result
    assert [u[0] for u in updates] == [0, 1, 2, 3, 4, 5]
    assert updates[-1][1:] == (6, "pass 6 of 6")


@pytest.mark.parametrize(("mode", "version"), MODES.values(), ids=MODES.keys())
async def test_an_elicitation_is_answered_by_the_official_clients_callback(
    tmp_path: Path, mode: str, version: str
) -> None:
    # 2025: the server asks on stdout and reads the answer on stdin; 2026: an
    # input_required result, which the client answers by calling again.
    asked: list[str] = []

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"query": "promise"})

    client, errlog = official_client(
        tmp_path, "mcplite.demo", mode=mode, elicitation_callback=on_elicit
    )
    with errlog:
        async with asyncio.timeout(WAIT), client:
            assert client.protocol_version == version
            found = await client.call_tool("search_documents", {"query": "?"})
    assert len(asked) == 1
    assert "What should I search for?" in asked[0]
    assert not found.is_error
    assert found.structured_content  # the search ran with the answered query


# --- raw pipes ------------------------------------------------------------------------


def test_one_process_speaks_both_revisions_message_by_message() -> None:
    with stdio_process("mcplite.demo") as server:
        server.send(
            request(
                "initialize",
                {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t"}},
            )
        )
        init = server.receive()
        assert init["result"]["protocolVersion"] == LEGACY
        assert "resultType" not in init["result"]

        server.send(request("server/discover", {"_meta": MODERN_META}, 2))
        discover = server.receive()
        assert discover["id"] == 2
        assert discover["result"]["supportedVersions"] == [MODERN]
        assert discover["result"]["resultType"] == "complete"

        modern = call("echo", {"text": "hi"}, 3)
        modern["params"]["_meta"] = MODERN_META
        server.send(modern)
        echoed = server.receive()
        assert echoed["id"] == 3
        assert echoed["result"]["resultType"] == "complete"
        assert echoed["result"]["content"] == [{"type": "text", "text": "hi"}]


def test_a_line_that_is_not_json_gets_a_parse_error_with_id_null_and_the_next_is_answered() -> None:
    with stdio_process("mcplite.demo") as server:
        server.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"\n')  # cut short
        error = server.receive()
        assert error["id"] is None
        assert error["error"]["code"] == -32700
        server.send_raw(b"\xff\xfe not utf-8\n")
        assert server.receive()["error"]["code"] == -32700
        server.send(request("ping", request_id=2))
        assert server.receive() == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_a_line_longer_than_max_body_size_gets_one_error_and_the_next_line_is_answered() -> None:
    with stdio_process("mcplite.demo", "--max-body-size", "200") as server:
        ping = json.dumps(request("ping", request_id=1)).encode()
        server.send_raw(ping.ljust(200) + b"\n")  # exactly the limit: fine
        assert server.receive()["id"] == 1
        long = b'{"jsonrpc": "2.0", "id": 2, "method": "ping", "pad": "' + b"x" * 300_000 + b'"}'
        server.send_raw(long + b"\n")
        error = server.receive()
        assert error["id"] is None
        assert error["error"]["code"] == -32600
        assert "200 bytes" in error["error"]["message"]
        server.send(request("ping", request_id=3))
        assert server.receive() == {"jsonrpc": "2.0", "id": 3, "result": {}}  # no second error


def test_stdout_carries_only_json_lines_even_when_a_tool_prints(tools_path: Path) -> None:
    with stdio_process("stdio_test_tools", extra_path=tools_path) as server:
        server.send(call("noisy", {"text": "hello"}), request("ping", request_id=2))
        _, reply = server.receive_until(1)
        assert reply["result"]["content"] == [{"type": "text", "text": "hello"}]
        server.close_stdin()
        assert server.wait() == 0
        lines = server.rest_of_stdout()
        stderr = "\n".join(server.rest_of_stderr())
    assert len(lines) == 2
    assert all(line.endswith(b"\n") and json.loads(line) for line in lines)
    for said in ("printed at import", "noisy says hello", "a child process says hello"):
        assert said in stderr, stderr


def test_a_result_json_cannot_hold_is_answered_with_an_error_and_the_next_is_answered(
    tools_path: Path,
) -> None:
    with stdio_process("stdio_test_tools", extra_path=tools_path) as server:
        server.send(call("not_json", {}, 1))
        reply = server.receive()
        assert reply["id"] == 1
        assert "error" in reply or reply["result"]["isError"]
        server.send(request("ping", request_id=2))
        assert server.receive() == {"jsonrpc": "2.0", "id": 2, "result": {}}


@pytest.mark.parametrize("tool", ["count", "count_in_a_thread"])
def test_progress_notifications_arrive_in_order_before_the_result(
    tools_path: Path, tool: str
) -> None:
    with stdio_process("stdio_test_tools", extra_path=tools_path) as server:
        server.send(call(tool, {"steps": 3}, 7, progressToken="p-7"))
        before, reply = server.receive_until(7)
    assert [m["method"] for m in before] == ["notifications/progress"] * 3
    assert [m["params"] for m in before] == [
        {"progressToken": "p-7", "progress": n, "total": 3, "message": f"step {n}"}
        for n in (1, 2, 3)
    ]
    assert reply["result"]["content"] == [{"type": "text", "text": "counted to 3"}]


def test_a_slow_call_does_not_hold_up_the_next_request_and_cancelled_stops_it(
    tools_path: Path,
) -> None:
    with stdio_process("stdio_test_tools", extra_path=tools_path) as server:
        server.send(call("wait_forever", {}, "slow", progressToken=1))
        started = server.receive()
        assert started["method"] == "notifications/progress"
        server.send(request("ping", request_id=2))
        assert server.receive() == {"jsonrpc": "2.0", "id": 2, "result": {}}

        server.send(request("ping", request_id="slow"))  # an id in use
        refused = server.receive()
        assert refused["id"] == "slow"
        assert refused["error"]["code"] == -32600

        server.send(cancelled("slow", reason="the user pressed stop"))
        server.wait_stderr("wait_forever was cancelled")
        # A cancelled request is not answered: the next line is the next reply.
        server.send(request("ping", request_id=3))
        assert server.receive() == {"jsonrpc": "2.0", "id": 3, "result": {}}
        server.close_stdin()
        assert server.wait() == 0
        assert len(server.rest_of_stdout()) == 4


def test_more_requests_than_max_concurrent_calls_are_refused_at_once(tools_path: Path) -> None:
    with stdio_process(
        "stdio_test_tools", "--max-concurrent-calls", "1", extra_path=tools_path
    ) as server:
        server.send(call("wait_forever", {}, 1, progressToken=1))
        assert server.receive()["method"] == "notifications/progress"
        server.send(call("count", {"steps": 1}, 2))
        refused = server.receive()
        assert refused["id"] == 2
        assert refused["error"]["code"] == -32000
        assert "retry_after" in refused["error"]["data"]
        server.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        )
        server.wait_stderr("wait_forever was cancelled")
        server.send(call("count", {"steps": 1}, 3))
        assert server.receive()["result"]["content"][0]["text"] == "counted to 1"


def test_closing_stdin_lets_a_quick_call_in_flight_finish_then_exits_0(tools_path: Path) -> None:
    # Quick: the calls in flight get EOF_GRACE (0.25 s) once stdin ends.
    with stdio_process("stdio_test_tools", extra_path=tools_path) as server:
        server.send(call("count", {"steps": 3}, 1))
        server.close_stdin()
        reply = server.receive()
        assert reply["result"]["content"] == [{"type": "text", "text": "counted to 3"}]
        started = time.monotonic()
        assert server.wait() == 0
        assert time.monotonic() - started < 5.0
        assert not any("Traceback" in line for line in server.stderr_lines)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_lets_the_call_in_flight_finish_then_exits_0(
    tools_path: Path, sig: signal.Signals
) -> None:
    with stdio_process("stdio_test_tools", extra_path=tools_path) as server:
        server.send(call("count", {"steps": 20}, 1, progressToken=1))
        assert server.receive()["method"] == "notifications/progress"  # it runs
        server.proc.send_signal(sig)
        _, reply = server.receive_until(1)
        assert reply["result"]["content"] == [{"type": "text", "text": "counted to 20"}]
        assert server.wait() == 0
        assert not any("Traceback" in line for line in server.rest_of_stderr())


def test_a_call_still_running_when_the_grace_period_ends_is_answered_shutting_down(
    tools_path: Path,
) -> None:
    with stdio_process("stdio_test_tools", "--grace", "0.2", extra_path=tools_path) as server:
        server.send(call("wait_forever", {}, 1, progressToken=1))
        assert server.receive()["method"] == "notifications/progress"
        server.close_stdin()
        error = server.receive()
        assert error["id"] == 1
        assert error["error"]["code"] == -32000
        assert "shutting down" in error["error"]["message"]
        assert server.wait() == 0


def test_an_idle_server_exits_0_when_stdin_closes() -> None:
    with stdio_process("mcplite.demo") as server:
        server.close_stdin()
        assert server.wait() == 0
        assert server.rest_of_stdout() == []


def test_the_server_exits_0_when_the_client_stops_reading_stdout() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "mcplite", "stdio", "mcplite.demo", "--secret", SECRET],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=subprocess_env(),
    ) as proc:  # closes the pipes and reaps the process
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(request("ping")).encode() + b"\n")
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["id"] == 1
            proc.stdout.close()  # stdin stays open
            assert proc.wait(WAIT) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_requests_from_a_file_are_answered_into_a_file(tmp_path: Path) -> None:
    # Files cannot be polled: the server reads and writes them directly.
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        json.dumps(request("ping"))
        + "\n"
        + json.dumps(call("echo", {"text": "from a file"}, 2))  # no final newline
    )
    replies = tmp_path / "replies.jsonl"
    with requests.open("rb") as stdin, replies.open("wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "mcplite", "stdio", "mcplite.demo", "--secret", SECRET],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=subprocess_env(),
            timeout=WAIT,
        )
    assert done.returncode == 0, done.stderr
    answers = {m["id"]: m for m in map(json.loads, replies.read_bytes().splitlines())}
    assert answers[1]["result"] == {}
    assert answers[2]["result"]["content"] == [{"type": "text", "text": "from a file"}]


def test_a_target_that_cannot_be_imported_is_one_error_line_and_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcplite", "stdio", "no_such_module_for_mcplite"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=WAIT,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().startswith("mcplite: error: cannot import module")
