"""The servers the client interop tests share, and how a driver is run.

Two HTTP servers for the whole run, as subprocesses on ephemeral loopback ports
(``python -m mcplite serve``): the demo and ``tools_only``.  Over stdio, each
driver's client starts its own ``python -m mcplite stdio`` as an MCP host does.
Every test module here is marked ``clients``: the default run leaves them out
(they install clients, see install.py); ``python -m pytest -m clients
tests/clients`` runs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, ServeProcess, serve_process, subprocess_env

from . import install

CLIENTS = Path(__file__).resolve().parent
TESTS = CLIENTS.parent
#: Upper bound of one driver run, in seconds (a demo run takes about 8, its long call 6).
DRIVER_WAIT = 150.0
#: Upper bound of one test: it may install its client first, then run its driver.
TEST_WAIT = install.INSTALL_WAIT + DRIVER_WAIT


def serve(module: str) -> Iterator[ServeProcess]:
    with serve_process(
        module, "--http", "127.0.0.1:0", "--no-grpc", "--grace", "1", extra_path=CLIENTS
    ) as process:
        yield process
        process.stop()


@pytest.fixture(scope="session")
def demo_server() -> Iterator[ServeProcess]:
    """``mcplite serve mcplite.demo`` (HTTP only, ephemeral port)."""
    yield from serve("mcplite.demo")


@pytest.fixture(scope="session")
def tools_only_server() -> Iterator[ServeProcess]:
    """``mcplite serve tools_only``: tools, no prompts, no resources."""
    yield from serve("tools_only")


def mcp_url(server: ServeProcess) -> str:
    return f"http://127.0.0.1:{server.http_port}/mcp"


def stdio_target(module: str) -> dict[str, Any]:
    """A plan's ``stdio``: ``mcplite stdio MODULE`` as a host starts it."""
    return {
        "command": sys.executable,
        "args": ["-m", "mcplite", "stdio", module, "--grace", "1"],
        "env": subprocess_env(CLIENTS),
        "cwd": str(ROOT),
    }


@pytest.fixture(scope="session")
def node_modules() -> Path:
    return install.node_modules()


@dataclass
class Outcomes:
    """A driver run's outcome lines, by step id, and its stderr (for failures)."""

    lines: dict[str, dict[str, Any]]
    stderr: str = field(repr=False)

    def ok(self, step: str) -> dict[str, Any]:
        """The step's result; fails the test when the step ended in an error."""
        line = self.lines[step]
        assert "ok" in line, f"{step}: {line['error']}\n--- driver stderr ---\n{self.stderr}"
        result: dict[str, Any] = line["ok"]
        return result

    def error(self, step: str) -> dict[str, Any]:
        """The step's error; fails the test when the step succeeded."""
        line = self.lines[step]
        assert "error" in line, f"{step}: expected an error, got {line['ok']}"
        error: dict[str, Any] = line["error"]
        return error


def run_driver(command: list[str], cwd: Path, plan: dict[str, Any]) -> Outcomes:
    """Run a driver on ``plan``; its outcomes, one per step (else the test fails)."""
    done = subprocess.run(
        command,
        cwd=cwd,
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        timeout=DRIVER_WAIT,
    )
    lines = {}
    for raw in done.stdout.splitlines():
        if raw.startswith("{"):
            line = json.loads(raw)
            lines[line["id"]] = line
    missing = [step["id"] for step in plan["steps"] if step["id"] not in lines]
    assert done.returncode == 0 and not missing, (
        f"driver exited {done.returncode}, no outcome for {missing}\n"
        f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
    )
    return Outcomes(lines, done.stderr)
