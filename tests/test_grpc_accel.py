"""The gate of the gRPC speed paths (``mcplite.bindings.grpc.accel``): off with
``MCPLITE_ACCEL=0`` or on a version of grpclib, h2 or hpack it was not tested
with (saying so once in the log), on by default on the tested versions; and off,
the server answers a real grpcio client without importing any speed path.

Each case runs in a subprocess of its own, as the gate decides once a process:
``python -m mcplite serve mcplite.demo`` (with a ``sitecustomize`` that reports,
at exit, which speed-path modules were ever imported, and may give the version
lookup another answer), or a ``python -c`` asking the gate.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from conftest import PROCESS_WAIT, ServeProcess, subprocess_env
from grpc_support import accel_only, protos, to_python

from mcplite.bindings.grpc.accel import TESTED
from mcplite.core.accel import ENVIRONMENT_VARIABLE

WAIT = 10.0  # seconds: the bound of every wait in this file
GATE = "mcplite.bindings.grpc.accel"
#: The speed-path modules a server imports when the gate is on.
SPEED_PATHS = {f"{GATE}.{name}" for name in ("connections", "framing", "headercache")}

SITECUSTOMIZE = '''
"""Reports the speed-path modules this process imported, at its exit."""

import atexit
import importlib.metadata
import sys

VERSIONS = {versions!r}  # the version lookup's answers for these packages


def _report() -> None:
    loaded = sorted(m for m in sys.modules if m.startswith("{gate}"))
    print("LOADED " + " ".join(loaded), file=sys.stderr, flush=True)


atexit.register(_report)
if VERSIONS:
    _version = importlib.metadata.version
    importlib.metadata.version = lambda name: VERSIONS.get(name) or _version(name)
'''


@contextmanager
def demo_server(tmp_path: Path, versions: dict[str, str] | None = None) -> Iterator[ServeProcess]:
    """``python -m mcplite serve mcplite.demo`` on gRPC only, with the reporting
    ``sitecustomize`` (and ``versions`` as the installed ones)."""
    text = SITECUSTOMIZE.format(versions=versions or {}, gate=GATE)
    (tmp_path / "sitecustomize.py").write_text(text)
    args = ["mcplite.demo", "--no-http", "--grpc", "127.0.0.1:0", "--no-access-log"]
    server = ServeProcess(*args, extra_path=tmp_path)
    try:
        yield server
    finally:
        server.kill()


def echo_over_grpcio(port: int) -> str:
    ours = protos()["ours"]
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        response = ours.stub(channel).CallTool(ours.request("echo", {"text": "hi"}), timeout=WAIT)
    return str(to_python(response.result)["content"][0]["text"])


def stop_and_read(server: ServeProcess) -> tuple[set[str], list[str]]:
    """Stop ``server``; the speed-path modules it imported, and its other stderr lines."""
    lines = server.stop()
    assert server.proc.returncode == 0, lines
    (report,) = [line for line in lines if line.startswith("LOADED")]
    return set(report.split()[1:]), [line for line in lines if line != report]


def test_off_with_mcplite_accel_0_a_served_grpcio_call_imports_no_speed_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "0")
    with demo_server(tmp_path) as server:
        assert echo_over_grpcio(server.grpc_port) == "hi"
        loaded, lines = stop_and_read(server)
    assert loaded == {GATE}  # the gate alone
    assert not [line for line in lines if "speed paths" in line]  # asked for: nothing to say


def test_an_untested_version_turns_the_speed_paths_off_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)
    with demo_server(tmp_path, {"grpclib": "0.4.99"}) as server:
        assert echo_over_grpcio(server.grpc_port) == "hi"
        assert echo_over_grpcio(server.grpc_port) == "hi"
        loaded, lines = stop_and_read(server)
    assert loaded == {GATE}
    (said,) = [line for line in lines if "speed paths" in line]
    assert "grpclib" in said and "0.4.99" in said and "plain path" in said
    assert "WARNING" in said


@accel_only
def test_on_by_default_a_served_grpcio_call_takes_the_speed_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)
    with demo_server(tmp_path) as server:
        assert echo_over_grpcio(server.grpc_port) == "hi"
        loaded, lines = stop_and_read(server)
    assert loaded >= SPEED_PATHS
    assert not [line for line in lines if "speed paths" in line]


ASK_THE_GATE = """
import importlib.metadata, json, logging, sys
logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
versions = json.loads(sys.argv[1])
installed = importlib.metadata.version
importlib.metadata.version = lambda name: versions.get(name) or installed(name)
from mcplite.bindings.grpc import accel, paths
print(json.dumps([accel.on(), paths.chosen().accel]))
"""


def ask_the_gate(versions: dict[str, str], setting: str | None) -> tuple[bool, list[str]]:
    """Whether the gate is on in a new process whose packages are at ``versions``,
    with ``MCPLITE_ACCEL`` set to ``setting`` (None: unset); and what it logged."""
    env = subprocess_env()
    env.pop(ENVIRONMENT_VARIABLE, None)
    if setting is not None:
        env[ENVIRONMENT_VARIABLE] = setting
    done = subprocess.run(
        [sys.executable, "-c", ASK_THE_GATE, json.dumps(versions)],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        env=env,
        check=True,
    )
    on, chosen = json.loads(done.stdout)
    assert on == chosen  # the path follows the gate
    return on, done.stderr.splitlines()


def versions_tested() -> dict[str, str]:
    return {package: versions[0] for package, versions in TESTED.items()}


@pytest.mark.parametrize("setting", [None, "", "1", "yes", "on"])
def test_on_for_the_tested_versions_unless_turned_off(setting: str | None) -> None:
    assert ask_the_gate(versions_tested(), setting) == (True, [])


@pytest.mark.parametrize("setting", ["0", "false", "no", "off", "OFF", " 0 "])
def test_mcplite_accel_turns_the_speed_paths_off_quietly(setting: str) -> None:
    assert ask_the_gate(versions_tested(), setting) == (False, [])


@pytest.mark.parametrize("package", sorted(TESTED))
def test_one_untested_version_turns_them_off_with_one_line_naming_it(package: str) -> None:
    versions = {**versions_tested(), package: "99.0.0"}
    on, lines = ask_the_gate(versions, None)
    assert on is False
    (line,) = lines
    assert line.startswith("WARNING mcplite.bindings.grpc ")
    assert f"{package} " in line and "not 99.0.0" in line and "plain path" in line
