"""The gate of the HTTP binding's speed paths (``mcplite.bindings.http.accel``).

With ``MCPLITE_ACCEL=0`` a real server (``python -m mcplite serve``, a subprocess on
an ephemeral 127.0.0.1 port) answers every kind of request on h11's public API
alone and never imports a speed-path module; an h11 version the gate does not
list turns them off and says so once; by default (a listed h11) they are on.
"""

from __future__ import annotations

import http.client
import importlib.metadata
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import PROCESS_WAIT, ROOT, ServeProcess, call_message, serve_process, subprocess_env
from sse_client import parse_events

from mcplite.bindings.http import accel
from mcplite.core.accel import enabled

QUIET = ["--http", "127.0.0.1:0", "--no-grpc", "--no-access-log"]
ACCEL_PACKAGE = "mcplite.bindings.http.accel"
SPEED_PATHS = [f"{ACCEL_PACKAGE}.cycle", f"{ACCEL_PACKAGE}.heads", f"{ACCEL_PACKAGE}.responses"]
#: Whether the installed h11 is one the gate lists (else the default is off too).
H11_LISTED = importlib.metadata.version("h11") in accel.TESTED["h11"]

#: The demo's tools, and one that says which modules the serving process has loaded.
PROBE_MODULE = '''
import sys

from mcplite.demo import prompts, resources, tools


@tools.tool
def loaded_modules(prefix: str) -> str:
    """The loaded modules named prefix or under it, comma-separated."""
    return ",".join(sorted(m for m in sys.modules if m == prefix or m.startswith(prefix + ".")))
'''


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    (tmp_path / "accel_probe.py").write_text(PROBE_MODULE)
    return tmp_path


def loaded_speed_paths(server: ServeProcess) -> list[str]:
    reply = server.call("loaded_modules", {"prefix": ACCEL_PACKAGE})
    text: str = reply["result"]["content"][0]["text"]
    return text.split(",")


def post(
    server: ServeProcess, path: str, payload: Any, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    """POST JSON to ``path`` on a fresh connection: the status, content type and body."""
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=PROCESS_WAIT)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", **headers},
        )
        response = conn.getresponse()
        return response.status, response.getheader("content-type") or "", response.read()
    finally:
        conn.close()


def test_with_accel_off_the_demo_answers_every_kind_of_request_on_h11s_public_api(
    monkeypatch: pytest.MonkeyPatch, probe: Path
) -> None:
    monkeypatch.setenv("MCPLITE_ACCEL", "0")
    with serve_process("accel_probe", *QUIET, extra_path=probe) as server:
        # MCP-lite: a call, on a kept-alive connection twice.
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=PROCESS_WAIT)
        try:
            for text in ("hi", "again"):
                reply = server.call("echo", {"text": text}, conn)
                assert reply["result"]["content"] == [{"type": "text", "text": text}]
        finally:
            conn.close()

        # MCP: initialize, then tools/call.
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "accel-test", "version": "1.0.0"},
            },
        }
        accept = {"Accept": "application/json, text/event-stream"}
        status, ctype, body = post(server, "/mcp", initialize, accept)
        assert (status, ctype) == (200, "application/json"), body
        assert json.loads(body)["result"]["protocolVersion"] == "2025-11-25"
        version = {**accept, "MCP-Protocol-Version": "2025-11-25"}
        status, _, body = post(server, "/mcp", call_message("echo", {"text": "mcp"}, 1), version)
        assert status == 200, body
        assert json.loads(body)["result"]["content"] == [{"type": "text", "text": "mcp"}]

        # An SSE stream: parts, then one done event.
        stream = call_message("generate_report", {"topic": "q4"}, "s1")
        status, ctype, body = post(
            server, "/mcp-lite/v1/rpc", stream, {"Accept": "text/event-stream"}
        )
        assert status == 200 and ctype.startswith("text/event-stream"), body
        events = parse_events(body)
        assert [e.event for e in events][-1] == "done"
        assert {e.event for e in events[:-1]} == {"message"}
        assert len(events) >= 3

        assert loaded_speed_paths(server) == [ACCEL_PACKAGE]  # the gate alone


@pytest.mark.skipif(not H11_LISTED, reason="the installed h11 is not one the gate lists")
def test_by_default_the_speed_paths_are_on(monkeypatch: pytest.MonkeyPatch, probe: Path) -> None:
    monkeypatch.delenv("MCPLITE_ACCEL", raising=False)
    with serve_process("accel_probe", *QUIET, extra_path=probe) as server:
        assert server.call("echo", {"text": "hi"})["result"]["content"][0]["text"] == "hi"
        assert loaded_speed_paths(server) == [ACCEL_PACKAGE, *SPEED_PATHS]
        assert not any("speed paths off" in line for line in server.lines)


#: Imports the binding as if the installed h11 were 0.15.0, and says what it took.
UNLISTED_H11 = """
import importlib.metadata, json, logging, sys
real = importlib.metadata.version
importlib.metadata.version = lambda name: "0.15.0" if name == "h11" else real(name)
logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
from mcplite.bindings.http import framing
from mcplite.bindings.http.server import HttpServer
print(json.dumps({
    "connection": framing.Connection.__module__ + "." + framing.Connection.__qualname__,
    "loaded": sorted(m for m in sys.modules if m.startswith("mcplite.bindings.http.accel")),
}))
"""


def test_an_h11_version_outside_the_table_turns_the_speed_paths_off_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MCPLITE_ACCEL", raising=False)
    done = subprocess.run(
        [sys.executable, "-c", UNLISTED_H11],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        cwd=ROOT,
        env=subprocess_env(),
        check=True,
    )
    took = json.loads(done.stdout)
    assert took == {"connection": "h11._connection.Connection", "loaded": [ACCEL_PACKAGE]}
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING mcplite")]
    assert len(warnings) == 1, done.stderr
    assert "h11" in warnings[0] and "0.15.0" in warnings[0] and "plain path" in warnings[0]


def test_the_gate_says_off_for_an_unlisted_version_once_per_binding(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("MCPLITE_ACCEL", raising=False)
    installed = importlib.metadata.version("h11")
    with caplog.at_level(logging.WARNING, logger="mcplite"):
        assert enabled("http-unlisted-test", {"h11": ("0.0.1",)}) is False
        assert enabled("http-unlisted-test", {"h11": ("0.0.1",)}) is False  # decided once
    [record] = caplog.records
    assert record.name.startswith("mcplite") and record.levelno == logging.WARNING
    assert "h11" in record.getMessage() and installed in record.getMessage()
    assert "plain path" in record.getMessage()


@pytest.mark.parametrize("value", ["0", "false", "No", "OFF"])
def test_mcplite_accel_turns_the_gate_off_in_any_case(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    monkeypatch.setenv("MCPLITE_ACCEL", value)
    installed = importlib.metadata.version("h11")
    assert enabled(f"http-env-test-{value}", {"h11": (installed,)}) is False
    assert caplog.records == []  # asked for: nothing to warn about


def test_a_listed_version_and_no_environment_variable_leave_the_gate_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MCPLITE_ACCEL", raising=False)
    installed = importlib.metadata.version("h11")
    assert enabled("http-listed-test", {"h11": (installed,)}) is True
