"""Tests for ``python -m mcplite serve``: arguments, errors, readiness and signals.

Each server is a real subprocess on 127.0.0.1 with an ephemeral port; every wait
is bounded and every process is killed in ``finally``.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import PROCESS_WAIT, ROOT, call_message, serve_process, subprocess_env

from mcplite.core.config import Config, flags
from mcplite.ops.cli import build_parser, config_from_args

SECRET = "test-secret-0123456789abcdef"
WAIT = PROCESS_WAIT  # upper bound of every wait on a subprocess, in seconds
QUIET = ["--http", "127.0.0.1:0", "--no-grpc", "--no-access-log"]


def run_cli(*args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion (it is expected to exit by itself)."""
    return subprocess.run(
        [sys.executable, "-m", "mcplite", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=ROOT,
        env=subprocess_env(extra_path),
    )


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


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    found = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(found.choices)


def _options(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    return {s: a.help for a in parser._actions for s in a.option_strings if s.startswith("--")}


def test_serve_and_stdio_give_each_option_they_share_the_same_meaning() -> None:
    commands = _subcommands()
    serve, stdio = _options(commands["serve"]), _options(commands["stdio"])
    assert set(stdio) - {"--help"} < set(serve)
    assert {name: serve[name] for name in stdio} == stdio
    for network in ("--http", "--grpc", "--mcp-path", "--auth-tokens", "--workers"):
        assert network in serve and network not in stdio


def test_every_config_field_with_a_flag_is_an_option_of_the_commands_it_names() -> None:
    commands = _subcommands()
    for f, flag in flags():
        for command in ("serve", "stdio"):
            listed = flag.flag(f.name) in _options(commands[command])
            assert listed == (command in flag.commands), (command, f.name)
    unflagged = {f.name for f in dataclasses.fields(Config)} - {f.name for f, _ in flags()}
    assert unflagged == {"retry_after", "max_redeem_wait", "previous_secrets", "sync_workers"}


@pytest.mark.parametrize("command", ["serve", "stdio"])
def test_options_left_out_keep_the_config_defaults(command: str) -> None:
    config = config_from_args(build_parser().parse_args([command, "mcplite.demo"]))
    if command == "serve":
        assert config == Config()
    else:
        assert config == Config(http=None, grpc=None, mcp_path=None)


def test_each_kind_of_option_reaches_its_config_field() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "mcplite.demo",
            "--http",
            "[::1]:9000",
            "--no-grpc",
            "--no-mcp",
            "--allowed-host",
            "a.example",
            "--allowed-host",
            "b.example:80",
            "--max-body-size",
            "2048",
            "--promise-after",
            "0",
            "--secret",
            SECRET,
            "--no-access-log",
            "--open-discovery",
            "--log-format",
            "json",
            "--metrics",
            "127.0.0.1:0",
        ]
    )
    config = config_from_args(args)
    assert (config.http, config.grpc, config.mcp_path) == (("::1", 9000), None, None)
    assert config.mcp_allowed_hosts == ("a.example", "b.example:80")
    assert (config.max_body_size, config.promise_after) == (2048, 0.0)
    assert config.secret == SECRET.encode()
    assert (config.access_log, config.open_discovery) == (False, True)
    assert (config.log_format, config.metrics) == ("json", ("127.0.0.1", 0))


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--max-body-size", "0", "expected a positive number"),
        ("--max-promises", "1.5", "expected a number"),
        ("--promise-after", "-1", "expected a number >= 0"),
        ("--grace", "soon", "expected a number"),
        ("--workers", "0", "expected a positive number"),
        ("--log-format", "xml", "invalid choice"),
    ],
)
def test_a_bad_option_value_is_a_usage_error_that_says_what_was_expected(
    option: str, value: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "mcplite.demo", option, value])
    assert exited.value.code == 2
    assert expected in capsys.readouterr().err


def test_serve_accepts_grpc_beside_no_grpc_and_serves_http() -> None:
    with serve_process(
        "mcplite.demo", "--grpc", "127.0.0.1:0", *QUIET, "--secret", SECRET
    ) as server:
        assert server.tool_count == 6
        assert not any("grpc://" in line for line in server.lines)


# --- errors ----------------------------------------------------------------------------------


BAD_COMMANDS = {
    "a module that does not exist": (
        ["no_such_module_for_mcplite", *QUIET],
        ["no_such_module_for_mcplite"],
    ),
    "a missing attribute": (["mcplite.demo:no_such_tools", *QUIET], ["no_such_tools"]),
    "a module without a tools attribute": (["json", *QUIET], ["'tools'"]),
    "an attribute that is not a tools registry": (
        ["mcplite.demo:STEP_SECONDS", *QUIET],
        ["float", "Tools"],
    ),
    "a secret too short": (["mcplite.demo", *QUIET, "--secret", "short"], ["16 bytes"]),
    "both bindings off": (
        ["mcplite.demo", "--no-http", "--no-grpc", "--secret", SECRET],
        ["nothing to serve"],
    ),
    "an infinite promise ttl": (
        ["mcplite.demo", *QUIET, "--secret", SECRET, "--promise-ttl", "inf"],
        ["promise[_-]ttl"],
    ),
}


@pytest.mark.parametrize(("args", "patterns"), BAD_COMMANDS.values(), ids=BAD_COMMANDS.keys())
def test_a_bad_target_or_option_is_one_error_line_and_exit_2(
    args: list[str], patterns: list[str]
) -> None:
    done = run_cli("serve", *args)
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    for pattern in patterns:
        assert re.search(pattern, line), (pattern, line)


UNIMPORTABLE_MODULES = {
    "a module that fails on import": (
        "raise RuntimeError('half-written config')\n",
        "half-written config",
    ),
    "a module with a syntax error": ("def broken(:\n", ""),
}


@pytest.mark.parametrize(
    ("source", "expected"), UNIMPORTABLE_MODULES.values(), ids=UNIMPORTABLE_MODULES.keys()
)
def test_a_module_that_cannot_be_imported_is_one_error_line_and_exit_2(
    tmp_path: Path, source: str, expected: str
) -> None:
    (tmp_path / "cli_unimportable_tools.py").write_text(source)
    done = run_cli("serve", "cli_unimportable_tools", *QUIET, extra_path=tmp_path)
    assert done.returncode == 2
    line = only_error_line(done.stderr)
    assert expected in line


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
    with serve_process("mcplite.demo", *QUIET, "--secret", SECRET) as server:
        assert server.tool_count == 6  # four demo tools, redeem and cancel
        assert server.http_port > 0
        status, listing = server.post("/listtools", {})
        assert status == 200
        assert len(listing["tools"]) == 6
        reply = server.call("echo", {"text": "hi"})
        assert reply["result"]["content"] == [{"type": "text", "text": "hi"}]


def test_serve_without_a_secret_warns_that_promises_will_not_survive_a_restart() -> None:
    with serve_process("mcplite.demo", *QUIET) as server:
        assert any("MCPLITE_SECRET" in line for line in server.lines)


def test_serve_takes_module_colon_attribute(slow_module: Path) -> None:
    with serve_process(
        "cli_slow_tools:tools", *QUIET, "--secret", SECRET, extra_path=slow_module
    ) as s:
        assert s.tool_count == 4


# --- signals --------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_lets_the_call_in_flight_finish_then_exits_0(
    slow_module: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    marker = tmp_path / "started.marker"
    with (
        serve_process(
            "cli_slow_tools", *QUIET, "--secret", SECRET, "--grace", "10", extra_path=slow_module
        ) as server,
        ThreadPoolExecutor(1) as pool,
    ):
        answer: Future[dict[str, Any]] = pool.submit(server.call, "slow", {"marker": str(marker)})
        server.wait_for("slow tool started")
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
    with serve_process("mcplite.demo", *QUIET, "--secret", SECRET) as server:
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
        serve_process(
            "cli_slow_tools", *QUIET, "--secret", SECRET, "--grace", "0.5", extra_path=slow_module
        ) as server,
        ThreadPoolExecutor(1) as pool,
    ):

        def call_forever() -> str:
            try:
                message = call_message("forever", {"marker": str(marker)})
                return json.dumps(server.post("/rpc", message))  # 503: shutting down
            except (OSError, http.client.HTTPException) as exc:
                return f"connection ended: {type(exc).__name__}"

        answer = pool.submit(call_forever)
        server.wait_for("forever tool started")
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
    with serve_process("mcplite.demo", *QUIET, "--secret", SECRET, "--grace", "0") as server:
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(WAIT) == 0
