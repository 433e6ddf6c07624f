"""Tests for ``python -m mcplite serve``: arguments, errors, readiness and signals.

Each server is a real subprocess on 127.0.0.1 with an ephemeral port; every wait
is bounded and every process is killed in ``finally``.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mcplite.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
SECRET = "test-secret-0123456789abcdef"
WAIT = 15.0  # upper bound of every wait on a subprocess, in seconds
READY = re.compile(r"serving (\d+) tools on http://127\.0\.0\.1:(\d+)/mcp-lite/v1")
QUIET = ["--http", "127.0.0.1:0", "--no-grpc", "--no-access-log"]


def mcplite_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "mcplite", *args]


def environment(extra_path: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MCPLITE_SECRET"}
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(extra_path), env.get("PYTHONPATH", "")) if p
        )
    return env


def run_cli(*args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion (it is expected to exit by itself)."""
    return subprocess.run(
        mcplite_argv(*args),
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=ROOT,
        env=environment(extra_path),
    )


@dataclass
class Server:
    """A running ``mcplite serve`` subprocess and the lines of its stderr."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)
    port: int = 0
    tool_count: int = 0

    def next_line(self, deadline: float) -> str | None:
        """The next stderr line, or None at EOF; fails the test at ``deadline``."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"no stderr line in time; seen so far: {self.seen}")
        try:
            line = self.lines.get(timeout=remaining)
        except queue.Empty:
            pytest.fail(f"no stderr line in time; seen so far: {self.seen}")
        if line is not None:
            self.seen.append(line)
        return line

    def wait_for_line(self, pattern: re.Pattern[str] | str, timeout: float = WAIT) -> re.Match[str]:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            line = self.next_line(deadline)
            if line is None:
                pytest.fail(f"stderr ended before {compiled.pattern!r}; seen: {self.seen}")
            match = compiled.search(line)
            if match:
                return match

    def rest_of_stderr(self, timeout: float = WAIT) -> list[str]:
        deadline = time.monotonic() + timeout
        while self.next_line(deadline) is not None:
            pass
        return self.seen

    def post(self, path: str, payload: Any, timeout: float = WAIT) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(
                "POST",
                "/mcp-lite/v1" + path,
                body=json.dumps(payload).encode(),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        status, reply = self.post(
            "/rpc",
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            },
        )
        assert status == 200, reply
        return reply


@contextmanager
def running(*args: str, extra_path: Path | None = None) -> Iterator[Server]:
    """Start ``mcplite serve ARGS``, wait until it is ready, kill it at the end."""
    proc = subprocess.Popen(
        mcplite_argv("serve", *args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=environment(extra_path),
    )
    server = Server(proc)
    assert proc.stderr is not None
    stderr = proc.stderr

    def pump() -> None:
        for line in stderr:
            server.lines.put(line.rstrip("\n"))
        server.lines.put(None)

    reader = threading.Thread(target=pump, name="mcplite-cli-stderr", daemon=True)
    reader.start()
    try:
        match = server.wait_for_line(READY)
        server.tool_count, server.port = int(match.group(1)), int(match.group(2))
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(WAIT)
        reader.join(WAIT)
        stderr.close()


SLOW_MODULE = '''
"""Tools for the CLI tests: one that takes a while, one that takes forever."""

import asyncio
import sys
from pathlib import Path

from mcplite import NEVER, Tools

tools = Tools()


@tools.tool(promise_after=NEVER)
async def slow(marker: str) -> str:
    Path(marker).write_text("started")
    print("slow tool started", file=sys.stderr, flush=True)
    await asyncio.sleep(1.0)
    return "done"


@tools.tool(promise_after=NEVER)
async def forever(marker: str) -> str:
    Path(marker).write_text("started")
    print("forever tool started", file=sys.stderr, flush=True)
    await asyncio.sleep(3600)
    return "never"
'''


@pytest.fixture
def slow_module(tmp_path: Path) -> Path:
    (tmp_path / "cli_slow_tools.py").write_text(SLOW_MODULE)
    return tmp_path


def only_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in stderr
    assert lines[0].startswith("mcplite: error:"), lines[0]
    return lines[0]


# --- arguments ---------------------------------------------------------------------------------


def test_help_names_the_serve_command() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    assert "serve" in done.stdout


def test_serve_help_lists_its_bindings_and_options() -> None:
    done = run_cli("serve", "--help")
    assert done.returncode == 0
    for option in (
        "MODULE[:ATTR]",
        "--http",
        "--no-http",
        "--grpc",
        "--no-grpc",
        "--base-path",
        "--promise-after",
        "--secret",
        "--grace",
        "--no-access-log",
        "--max-concurrent-calls",
    ):
        assert option in done.stdout, option


def test_version_prints_the_package_version() -> None:
    import mcplite

    done = run_cli("--version")
    assert done.returncode == 0
    assert mcplite.__version__ in done.stdout


def test_grpc_takes_an_address_and_no_grpc_turns_it_off() -> None:
    parser = build_parser()
    args = parser.parse_args(["serve", "mcplite.demo", "--grpc", "127.0.0.1:50077"])
    assert args.grpc == ("127.0.0.1", 50077)
    assert args.no_grpc is False
    args = parser.parse_args(["serve", "mcplite.demo", "--grpc", "[::1]:0", "--no-grpc"])
    assert args.grpc == ("::1", 0)
    assert args.no_grpc is True


def test_a_malformed_address_is_a_usage_error() -> None:
    done = run_cli("serve", "mcplite.demo", "--http", "localhost", "--no-grpc")
    assert done.returncode == 2
    assert "expected HOST:PORT" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_accepts_grpc_beside_no_grpc_and_serves_http() -> None:
    with running("mcplite.demo", "--grpc", "127.0.0.1:0", *QUIET, "--secret", SECRET) as server:
        assert server.tool_count == 6
        assert not any("grpc://" in line for line in server.seen)


# --- errors ----------------------------------------------------------------------------------


def test_a_module_that_does_not_exist_is_one_error_line_and_exit_2() -> None:
    done = run_cli("serve", "no_such_module_for_mcplite", *QUIET)
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert "no_such_module_for_mcplite" in line


def test_a_missing_attribute_is_one_error_line_and_exit_2() -> None:
    done = run_cli("serve", "mcplite.demo:no_such_tools", *QUIET)
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert "no_such_tools" in line


def test_a_module_without_a_tools_attribute_is_one_error_line_and_exit_2() -> None:
    done = run_cli("serve", "json", *QUIET)
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert "'tools'" in line


def test_an_attribute_that_is_not_a_tools_registry_is_one_error_line_and_exit_2() -> None:
    done = run_cli("serve", "mcplite.demo:STEP_SECONDS", *QUIET)
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert "float" in line and "Tools" in line


def test_a_module_that_fails_on_import_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "cli_broken_tools.py").write_text("raise RuntimeError('half-written config')\n")
    done = run_cli("serve", "cli_broken_tools", *QUIET, extra_path=tmp_path)
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert "half-written config" in line


def test_a_module_with_a_syntax_error_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "cli_syntax_tools.py").write_text("def broken(:\n")
    done = run_cli("serve", "cli_syntax_tools", *QUIET, extra_path=tmp_path)
    assert done.returncode == 2
    only_error_line(done.stderr)


def test_a_secret_too_short_is_one_error_line_and_exit_2() -> None:
    done = run_cli("serve", "mcplite.demo", *QUIET, "--secret", "short")
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert "16 bytes" in line


def test_both_bindings_off_is_one_error_line_and_exit_2() -> None:
    done = run_cli("serve", "mcplite.demo", "--no-http", "--no-grpc", "--secret", SECRET)
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert "nothing to serve" in line


def test_an_infinite_promise_ttl_is_one_error_line_and_exit_2() -> None:
    done = run_cli("serve", "mcplite.demo", *QUIET, "--secret", SECRET, "--promise-ttl", "inf")
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert "promise_ttl" in line or "promise-ttl" in line


def test_a_port_in_use_is_one_clear_line_and_exit_1() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(
            "serve",
            "mcplite.demo",
            "--http",
            f"127.0.0.1:{port}",
            "--no-grpc",
            "--no-access-log",
            "--secret",
            SECRET,
        )
    assert done.returncode == 1
    line = only_error_line(done.stderr)
    assert f"127.0.0.1:{port}" in line
    assert "in use" in line


# --- readiness and serving --------------------------------------------------------------------


def test_serve_logs_where_it_listens_and_answers_there() -> None:
    with running("mcplite.demo", *QUIET, "--secret", SECRET) as server:
        assert server.tool_count == 6  # four demo tools, redeem and cancel
        assert server.port > 0
        status, listing = server.post("/listtools", {})
        assert status == 200
        assert len(listing["tools"]) == 6
        reply = server.call("echo", {"text": "hi"})
        assert reply["result"]["content"] == [{"type": "text", "text": "hi"}]


def test_serve_without_a_secret_warns_that_promises_will_not_survive_a_restart() -> None:
    with running("mcplite.demo", *QUIET) as server:
        assert any("MCPLITE_SECRET" in line for line in server.seen)


def test_serve_takes_module_colon_attribute(slow_module: Path) -> None:
    with running("cli_slow_tools:tools", *QUIET, "--secret", SECRET, extra_path=slow_module) as s:
        assert s.tool_count == 4


# --- signals --------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_lets_the_call_in_flight_finish_then_exits_0(
    slow_module: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    marker = tmp_path / "started.marker"
    with (
        running(
            "cli_slow_tools", *QUIET, "--secret", SECRET, "--grace", "10", extra_path=slow_module
        ) as server,
        ThreadPoolExecutor(1) as pool,
    ):
        answer: Future[dict[str, Any]] = pool.submit(server.call, "slow", {"marker": str(marker)})
        server.wait_for_line("slow tool started")
        assert marker.read_text() == "started"
        signalled = time.monotonic()
        server.proc.send_signal(sig)
        reply = answer.result(WAIT)
        assert reply["result"]["content"] == [{"type": "text", "text": "done"}]
        assert server.proc.wait(WAIT) == 0
        assert time.monotonic() - signalled < 10  # within the grace period
        lines = server.rest_of_stderr()
    assert any("shutting down" in line for line in lines)
    assert any(line.endswith("stopped") for line in lines)
    assert not any("Traceback" in line for line in lines)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_idle_server_exits_0_on_a_signal(sig: signal.Signals) -> None:
    with running("mcplite.demo", *QUIET, "--secret", SECRET) as server:
        server.proc.send_signal(sig)
        assert server.proc.wait(WAIT) == 0
        lines = server.rest_of_stderr()
    assert any(line.endswith("stopped") for line in lines)
    assert not any("Traceback" in line for line in lines)


def test_a_call_still_running_when_the_grace_period_ends_is_cancelled_and_the_exit_is_0(
    slow_module: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "forever.marker"
    with (
        running(
            "cli_slow_tools", *QUIET, "--secret", SECRET, "--grace", "0.5", extra_path=slow_module
        ) as server,
        ThreadPoolExecutor(1) as pool,
    ):

        def call_forever() -> str:
            try:
                params = {"name": "forever", "arguments": {"marker": str(marker)}}
                message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
                return json.dumps(server.post("/rpc", message))  # 503: shutting down
            except (OSError, http.client.HTTPException) as exc:
                return f"connection ended: {type(exc).__name__}"

        answer = pool.submit(call_forever)
        server.wait_for_line("forever tool started")
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(WAIT) == 0
        assert time.monotonic() - signalled < 0.5 + 5
        outcome = answer.result(WAIT)  # the client is not left hanging
        assert "never" not in outcome
        lines = server.rest_of_stderr()
    assert not any("Traceback" in line for line in lines)


def test_a_grace_of_zero_is_accepted_and_the_server_stops_at_once() -> None:
    # The parser takes --grace as "a number >= 0"; 0 means: cancel in-flight calls at once.
    with running("mcplite.demo", *QUIET, "--secret", SECRET, "--grace", "0") as server:
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(WAIT) == 0
