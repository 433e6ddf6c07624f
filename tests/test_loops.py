"""``--loop auto|asyncio|uvloop``: the event loop a serving process runs.

Every binding answers on uvloop as on asyncio (HTTP, MCP with the official
client, gRPC with grpcio, stdio), and so do the workers of ``--workers``; the
start-up line names the loop; ``auto`` takes uvloop when it can be imported;
``uvloop`` where it cannot (a process whose imports of it fail, as where it is
not installed) is one error line and exit status 2.  The whole suite runs on
uvloop with ``MCPLITE_TEST_LOOP=uvloop`` (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
import subprocess
from pathlib import Path

import grpc
import pytest
from conftest import (
    PROCESS_WAIT,
    WITHOUT_UVLOOP,
    ServeProcess,
    mcplite_command,
    serve_process,
    subprocess_env,
)
from grpc_support import protos, to_python
from mcp import Client
from mcp_types import TextContent
from test_stdio import call, request, stdio_process

from mcplite import __version__
from mcplite.ops.loops import choose_loop, run_on

WAIT = PROCESS_WAIT

TOOLS = '''
"""A tool that says which event loop runs it, in which process."""

import asyncio
import os

from mcplite import Tools

tools = Tools()


@tools.tool
async def which_loop() -> str:
    """The package of the running event loop, and this process's id."""
    package = type(asyncio.get_running_loop()).__module__.partition(".")[0]
    return f"{package} {os.getpid()}"
'''

BOTH = ("--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
#: The tools served: which_loop, and the redeem and cancel of every server.
SERVED = 3
UVLOOP = f"uvloop {importlib.metadata.version('uvloop')}"


@pytest.fixture
def tools_path(tmp_path: Path) -> Path:
    (tmp_path / "loop_tools.py").write_text(TOOLS)
    return tmp_path


@pytest.fixture
def no_loop_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started without ``MCPLITE_LOOP`` (the suite sets it for every other)."""
    monkeypatch.delenv("MCPLITE_LOOP", raising=False)


def started(server: ServeProcess) -> str:
    """The line that says the server listens."""
    return next(line for line in server.lines if re.search(r"serving \d+ tools on", line))


def over_http(server: ServeProcess) -> str:
    """``which_loop`` over MCP-lite on a new connection."""
    text: str = server.call("which_loop")["result"]["content"][0]["text"]
    return text


def over_grpc(server: ServeProcess) -> str:
    spec = protos()["spec"]
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
        response = spec.stub(channel).CallTool(spec.request("which_loop", {}), timeout=WAIT)
    text: str = to_python(response.result)["content"][0]["text"]
    return text


async def over_mcp(server: ServeProcess) -> str:
    url = f"http://127.0.0.1:{server.http_port}/mcp"
    async with asyncio.timeout(WAIT), Client(url, read_timeout_seconds=WAIT) as client:
        result = await client.call_tool("which_loop", {})
    assert result.is_error is False
    [block] = result.content
    assert isinstance(block, TextContent)
    return block.text


# --- serving on uvloop ----------------------------------------------------------------


async def test_serve_on_uvloop_answers_http_mcp_and_grpc_and_says_so_when_it_starts(
    tools_path: Path,
) -> None:
    with serve_process("loop_tools", *BOTH, "--loop", "uvloop", extra_path=tools_path) as server:
        assert f"mcplite {__version__} ({UVLOOP}) serving {SERVED} tools on http://" in started(
            server
        )
        runs_on = f"uvloop {server.proc.pid}"
        assert over_http(server) == runs_on
        assert await over_mcp(server) == runs_on
        assert over_grpc(server) == runs_on
        lines = server.stop()
    assert server.proc.returncode == 0, lines
    assert not [line for line in lines if "Traceback" in line], lines


def test_every_worker_runs_uvloop_as_its_supervisor_says(tools_path: Path) -> None:
    args = ("--workers", "2", "--grace", "2", "--loop", "uvloop")
    with serve_process("loop_tools", *BOTH, *args, extra_path=tools_path) as server:
        assert f"({UVLOOP}) serving {SERVED} tools" in started(server)
        answers: set[str] = set()
        for _ in range(64):  # new connections, which the kernel spreads over the workers
            answers.add(over_http(server))
            if len(answers) == 2:
                break
        assert len(answers) == 2, answers
        assert {answer.split()[0] for answer in answers} == {"uvloop"}
        assert str(server.proc.pid) not in {answer.split()[1] for answer in answers}
        assert over_grpc(server).startswith("uvloop ")


def test_dev_on_uvloop_says_so_in_its_banner_and_answers(tools_path: Path) -> None:
    with serve_process(
        "loop_tools", *BOTH, "--loop", "uvloop", command_name="dev", extra_path=tools_path
    ) as server:
        assert f"mcplite {__version__} ({UVLOOP}) dev: serving {SERVED} tools" in started(server)
        assert over_http(server) == f"uvloop {server.proc.pid}"


def test_stdio_on_uvloop_answers_and_exits_0_when_stdin_closes(tools_path: Path) -> None:
    with stdio_process("loop_tools", "--loop", "uvloop", extra_path=tools_path) as server:
        server.send(request("ping", request_id=1), call("which_loop", {}, 2))
        assert server.receive() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        _, reply = server.receive_until(2)
        assert reply["result"]["content"] == [{"type": "text", "text": f"uvloop {server.proc.pid}"}]
        server.close_stdin()
        assert server.wait() == 0
        lines = server.rest_of_stderr()
    assert any(
        f"mcplite {__version__} ({UVLOOP}) serving {SERVED} tools on stdio" in x for x in lines
    )
    assert not [line for line in lines if "Traceback" in line], lines


# --- which loop -----------------------------------------------------------------------


@pytest.mark.usefixtures("no_loop_variable")
@pytest.mark.parametrize(
    ("prelude", "loop"), [("", "uvloop"), (WITHOUT_UVLOOP, "asyncio")], ids=["installed", "not"]
)
def test_auto_is_the_default_and_takes_uvloop_when_it_can_be_imported(
    tools_path: Path, prelude: str, loop: str
) -> None:
    args = ("--no-grpc", "--no-access-log")
    with serve_process("loop_tools", *args, prelude=prelude, extra_path=tools_path) as server:
        assert f"({UVLOOP if loop == 'uvloop' else 'asyncio'}) serving" in started(server)
        assert over_http(server) == f"{loop} {server.proc.pid}"


@pytest.mark.parametrize(
    ("given", "variable", "loop"),
    [
        (["--loop", "asyncio"], "uvloop", "asyncio"),
        (["--loop", "auto"], "asyncio", "uvloop"),
        ([], "asyncio", "asyncio"),
        ([], " UVLOOP ", "uvloop"),
        ([], "", "uvloop"),
    ],
    ids=[
        "--loop asyncio over MCPLITE_LOOP=uvloop",
        "--loop auto over MCPLITE_LOOP=asyncio",
        "MCPLITE_LOOP=asyncio",
        "MCPLITE_LOOP in any case and spacing",
        "an empty MCPLITE_LOOP is auto",
    ],
)
def test_the_option_wins_over_mcplite_loop_which_wins_over_auto(
    tools_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    given: list[str],
    variable: str,
    loop: str,
) -> None:
    monkeypatch.setenv("MCPLITE_LOOP", variable)
    args = ("--no-grpc", "--no-access-log", *given)
    with serve_process("loop_tools", *args, extra_path=tools_path) as server:
        assert over_http(server) == f"{loop} {server.proc.pid}"


NOT_INSTALLED = "uvloop is not installed; install it with pip install 'mcplite[uvloop]', or use "


@pytest.mark.parametrize(
    ("command", "args", "variable", "prelude", "error"),
    [
        (
            command,
            ["--loop", "uvloop"],
            None,
            WITHOUT_UVLOOP,
            f"--loop uvloop: {NOT_INSTALLED}--loop asyncio",
        )
        for command in ("serve", "stdio", "dev")
    ]
    + [
        (
            "serve",
            ["--workers", "2"],
            "uvloop",
            WITHOUT_UVLOOP,
            f"MCPLITE_LOOP=uvloop: {NOT_INSTALLED}--loop asyncio",
        ),
        ("serve", [], "fast", "", "MCPLITE_LOOP=fast: expected one of auto, asyncio, uvloop"),
    ],
    ids=[
        "serve --loop uvloop",
        "stdio --loop uvloop",
        "dev --loop uvloop",
        "MCPLITE_LOOP=uvloop with workers",
        "an unknown MCPLITE_LOOP",
    ],
)
def test_a_loop_that_cannot_run_is_one_error_line_and_exit_2(
    command: str, args: list[str], variable: str | None, prelude: str, error: str
) -> None:
    env = subprocess_env()
    env.pop("MCPLITE_LOOP", None)
    if variable is not None:
        env["MCPLITE_LOOP"] = variable
    ran = subprocess.run(
        [*mcplite_command(prelude), command, "mcplite.demo", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=env,
    )
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr.splitlines() == [f"mcplite: error: {error}"]


def test_an_unknown_loop_option_is_a_usage_error() -> None:
    ran = subprocess.run(
        [*mcplite_command(), "serve", "mcplite.demo", "--loop", "trio"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=subprocess_env(),
    )
    assert ran.returncode == 2
    assert "argument --loop: invalid choice: 'trio'" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_serve_help_names_the_loops_and_the_variable() -> None:
    ran = subprocess.run(
        [*mcplite_command(), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=subprocess_env(),
    )
    assert ran.returncode == 0
    assert "--loop {auto,asyncio,uvloop}" in ran.stdout
    assert "$MCPLITE_LOOP" in ran.stdout


# --- in-process -----------------------------------------------------------------------


async def package_of_the_running_loop() -> str:
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_run_on_runs_the_loop_named_whatever_the_policy(loop: str) -> None:
    # The suite's own policy may be uvloop's (MCPLITE_TEST_LOOP=uvloop): "asyncio"
    # is asyncio's own loop all the same.
    assert run_on(loop, package_of_the_running_loop()) == loop


def test_choose_loop_reads_the_variable_only_without_the_option() -> None:
    assert choose_loop("asyncio", {"MCPLITE_LOOP": "uvloop"}) == "asyncio"
    assert choose_loop(None, {"MCPLITE_LOOP": "Asyncio"}) == "asyncio"
    assert choose_loop(None, {}) == "uvloop"  # auto, and uvloop is installed here
    with pytest.raises(ValueError, match=r"^MCPLITE_LOOP=x: expected one of auto, asyncio"):
        choose_loop(None, {"MCPLITE_LOOP": "x"})
