"""The gate of the client's speed path (``mcplite.client.accel``): on for the
grpclib versions it lists unless ``MCPLITE_ACCEL=0``, off (saying so once) on any
other; and the in-memory gRPC channels of ``mcplite.testing`` connect whatever
it says.  Each case runs in a new process, as the gate decides once a process.
What the gate changes over a socket: tests/test_client_auth.py (closing over TLS).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import PROCESS_WAIT, subprocess_env

from mcplite.client.accel import TESTED
from mcplite.core.accel import ENVIRONMENT_VARIABLE

ASK_THE_GATE = """
import importlib.metadata, json, logging, sys
logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
versions = json.loads(sys.argv[1])
installed = importlib.metadata.version
importlib.metadata.version = lambda name: versions.get(name) or installed(name)
from mcplite.client import accel
print(json.dumps(accel.on()))
"""

CALL_IN_MEMORY_OVER_GRPC = """
import asyncio, sys
from mcplite import Tools
from mcplite.testing import connect

tools = Tools()

@tools.tool()
def echo(text: str) -> str:
    "Echo."
    return text

async def main() -> str:
    async with connect(tools, binding="grpc") as client:
        return (await client.call("echo", {"text": "hi"})).text

print(asyncio.run(main()), "mcplite.client.accel.channels" in sys.modules)
"""


def run(code: str, setting: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` with ``MCPLITE_ACCEL`` at ``setting`` (None: unset)."""
    env = subprocess_env()
    env.pop(ENVIRONMENT_VARIABLE, None)
    if setting is not None:
        env[ENVIRONMENT_VARIABLE] = setting
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        env=env,
        check=True,
    )


def ask_the_gate(versions: dict[str, str], setting: str | None) -> tuple[bool, list[str]]:
    done = run(ASK_THE_GATE, setting, json.dumps(versions))
    on: bool = json.loads(done.stdout)
    return on, done.stderr.splitlines()


TESTED_VERSIONS = {package: versions[0] for package, versions in TESTED.items()}


@pytest.mark.parametrize("setting", [None, "1"])
def test_on_for_the_tested_grpclib_unless_turned_off(setting: str | None) -> None:
    assert ask_the_gate(TESTED_VERSIONS, setting) == (True, [])


@pytest.mark.parametrize("setting", ["0", "off"])
def test_mcplite_accel_turns_it_off_quietly(setting: str) -> None:
    assert ask_the_gate(TESTED_VERSIONS, setting) == (False, [])


def test_an_untested_grpclib_turns_it_off_with_one_line_naming_it() -> None:
    on, lines = ask_the_gate({"grpclib": "0.4.99"}, None)
    assert on is False
    (line,) = lines
    assert line.startswith("WARNING ") and "grpclib" in line and "not 0.4.99" in line


@pytest.mark.parametrize("setting", [None, "0"])
def test_in_memory_grpc_channels_connect_whatever_the_gate_says(setting: str | None) -> None:
    done = run(CALL_IN_MEMORY_OVER_GRPC, setting)
    assert done.stdout.split() == ["hi", "True"]
