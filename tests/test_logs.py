"""``--log-format json``: a subprocess server at debug level, with tokens, sent requests
on MCP-lite, the MCP endpoint and gRPC (a tool that raises among them), stopped with
SIGTERM; its stderr parsed line by line: every line one JSON object, the access lines
with their fields, values and counts, the error lines with the error id the client
was given, and no token, promise token, argument value or secret anywhere.  The text
format (the default) keeps its one-line shape; with ``--workers`` every JSON line
names its worker.
"""

from __future__ import annotations

import collections
import http.client
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from conftest import BASE, WAIT, ServeProcess, call_message
from grpc_support import protos

from mcplite.core.wire import ERROR_DATA_KEY

SECRET = "logs-test-secret-" + secrets.token_hex(16)
ALICE = "alice-" + secrets.token_urlsafe(24)
UNKNOWN_TOKEN = "nobody-" + secrets.token_urlsafe(24)
#: The argument value every call sends: it must never reach a log line.
ARG = "argument-value-" + secrets.token_hex(12)
GRPC_OPTIONS = [("grpc.enable_http_proxy", 0)]
MCP_VERSION = "2026-07-28"
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}
RPC = f"{BASE}/rpc"
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
LEVELS = {"debug", "info", "warning", "error", "critical"}
ACCESS_FIELDS = {"binding", "method", "path", "tool", "status", "duration_ms", "peer"}


# --- peers -----------------------------------------------------------------------------


def post(
    port: int, path: str, payload: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        conn.request(
            "POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})}
        )
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}
    finally:
        conn.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def mcp_call(port: int, name: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": MCP_META},
    }
    headers = {
        **bearer(ALICE),
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MCP_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return post(port, "/mcp", message, headers)


@dataclass
class Run:
    """What a JSON-logging server was sent, and every stderr line it wrote."""

    lines: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    #: (binding, method, path, tool, status) of every HTTP request sent.
    http_sent: list[tuple[str, str, str, str | None, int]] = field(default_factory=list)
    #: (tool, status name) of every gRPC request sent.
    grpc_sent: list[tuple[str | None, str]] = field(default_factory=list)
    #: The error ids clients were given, by binding.
    error_ids: dict[str, str] = field(default_factory=dict)
    #: What must never appear in a line.
    secrets: dict[str, str] = field(default_factory=dict)

    def access(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("logger") == "mcplite.access"]


def parse_lines(lines: list[str]) -> list[dict[str, Any]]:
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(record, dict), line
        records.append(record)
    return records


def send_everything(server: ServeProcess, run: Run) -> None:
    """Requests on every endpoint, good and refused, recorded in ``run``."""
    port = server.http_port
    lite_sent = run.http_sent

    def lite(name: str, arguments: dict[str, Any], token: str | None = ALICE) -> dict[str, Any]:
        status, reply = post(
            port, RPC, call_message(name, arguments), bearer(token) if token else {}
        )
        lite_sent.append(("http", "POST", RPC, name if status != 401 else None, status))
        return reply

    for _ in range(3):
        assert lite("echo", {"text": ARG})["result"]["content"][0]["text"] == ARG
    assert lite("refuse", {"text": ARG})["result"]["isError"] is True
    crashed = lite("crash", {"text": ARG})
    run.error_ids["http"] = crashed["error"]["data"]["error_id"]
    made_up = "made-up-" + secrets.token_hex(6)
    assert lite(made_up, {"text": ARG})["error"]["code"] == -32601
    promised = lite("later", {"text": ARG})
    promise = promised["result"]["_meta"]["promise_token"]
    run.secrets["promise token"] = promise
    redeemed = lite("redeem", {"promise": promise, "wait": WAIT})
    assert redeemed["result"]["content"][0]["text"] == f"later: {len(ARG)} characters"
    assert "error" in lite("echo", {"text": ARG}, token=None)
    assert "error" in lite("echo", {"text": ARG}, token=UNKNOWN_TOKEN)
    status, _ = post(port, f"{BASE}/tools", b"", bearer(ALICE))
    lite_sent.append(("http", "POST", f"{BASE}/tools", None, status))
    status, _ = post(port, "/nope", {"text": ARG}, bearer(ALICE))
    lite_sent.append(("http", "POST", "/nope", None, status))
    assert [s[-1] for s in lite_sent] == [200] * 8 + [401, 401, 200, 404]

    for _ in range(2):
        status, reply = mcp_call(port, "echo", {"text": ARG})
        assert status == 200 and reply["result"]["content"][0]["text"] == ARG, reply
        lite_sent.append(("mcp", "POST", "/mcp", "echo", 200))
    status, reply = mcp_call(port, "crash", {"text": ARG})
    assert status == 200, reply
    # MCP: a raising tool is an isError result; its JSON-RPC error rides in _meta.
    assert reply["result"]["isError"] is True, reply
    run.error_ids["mcp"] = reply["result"]["_meta"]["mcplite/error"]["data"]["error_id"]
    lite_sent.append(("mcp", "POST", "/mcp", "crash", 200))

    proto = protos()["ours"]
    metadata = [("authorization", f"Bearer {ALICE}")]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", GRPC_OPTIONS) as channel:
        stub = proto.stub(channel)
        for _ in range(2):
            stub.CallTool(proto.request("echo", {"text": ARG}), timeout=WAIT, metadata=metadata)
            run.grpc_sent.append(("echo", "OK"))
        with pytest.raises(grpc.RpcError) as caught:
            stub.CallTool(proto.request("crash", {"text": ARG}), timeout=WAIT, metadata=metadata)
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        data = json.loads(dict(caught.value.trailing_metadata())[ERROR_DATA_KEY])
        run.error_ids["grpc"] = data["error_id"]
        run.grpc_sent.append(("crash", "INTERNAL"))
        with pytest.raises(grpc.RpcError) as caught:
            stub.CallTool(
                proto.request("echo", {"text": ARG}),
                timeout=WAIT,
                metadata=[("authorization", f"Bearer {UNKNOWN_TOKEN}")],
            )
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # Refused before its message is read: no tool to name (as an HTTP 401's line).
        run.grpc_sent.append((None, "UNAUTHENTICATED"))


@pytest.fixture(scope="module")
def json_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tokens = tmp_path_factory.mktemp("logs") / "tokens.txt"
    tokens.write_text(f"{ALICE}\n")
    run = Run(secrets={"bearer token": ALICE, "unknown token": UNKNOWN_TOKEN})
    run.secrets.update({"argument value": ARG, "promise secret": SECRET})
    server = ServeProcess(
        "tests.ops_tools",
        *("--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"),
        *("--log-format", "json", "--log-level", "debug"),
        *("--auth-tokens", str(tokens), "--secret", SECRET),
    )
    try:
        send_everything(server, run)
        run.lines = server.stop()
        assert server.proc.returncode == 0
    finally:
        server.kill()
    run.records = parse_lines(run.lines)
    yield run


# --- JSON lines ----------------------------------------------------------------------------


def test_every_stderr_line_is_one_json_object_with_ts_level_and_logger(json_run: Run) -> None:
    assert len(json_run.records) > len(json_run.http_sent)
    for record in json_run.records:
        assert ISO_UTC.match(record["ts"]), record
        assert record["level"] in LEVELS, record
        assert isinstance(record["logger"], str) and record["logger"], record
        if record["logger"] != "mcplite.access":
            assert isinstance(record["message"], str), record
    messages = [r.get("message", "") for r in json_run.records]
    assert any(m.startswith("mcplite ") and "serving" in m for m in messages)
    assert messages[-1] == "stopped"


def test_each_http_request_has_one_access_line_with_its_fields(json_run: Run) -> None:
    access = [r for r in json_run.access() if r["binding"] != "grpc"]
    for record in access:
        assert set(record) == {"ts", "level", "logger", *ACCESS_FIELDS}, record
        assert record["level"] == "info"
        assert record["peer"] == "127.0.0.1"
        assert isinstance(record["status"], int)
        assert isinstance(record["duration_ms"], int | float) and record["duration_ms"] >= 0
    seen = collections.Counter((r["method"], r["path"], r["tool"], r["status"]) for r in access)
    sent = collections.Counter((m, p, t, s) for _, m, p, t, s in json_run.http_sent)
    assert seen == sent


def test_the_access_lines_binding_names_the_endpoint_as_the_metrics_do(json_run: Run) -> None:
    """``binding`` is ``http`` for MCP-lite and ``mcp`` for the MCP endpoint, as in
    ``mcplite_requests_total`` (docs/operations.md)."""
    seen = collections.Counter((r["binding"], r["path"]) for r in json_run.access())
    sent = collections.Counter((b, p) for b, _, p, _, _ in json_run.http_sent)
    assert {k: v for k, v in seen.items() if k[0] != "grpc"} == sent


def test_each_grpc_request_has_an_access_line_too(json_run: Run) -> None:
    """The issue: "one JSON object per line for access and error logs (timestamp,
    level, binding, method, tool, status or code, duration, error id, peer)"; gRPC
    is a binding like the others."""
    grpc_lines = [r for r in json_run.access() if r.get("binding") == "grpc"]
    assert collections.Counter((r["tool"], str(r["status"])) for r in grpc_lines) == (
        collections.Counter(json_run.grpc_sent)
    )


def test_the_error_id_a_client_was_given_is_a_field_of_its_error_line(json_run: Run) -> None:
    errors = [r for r in json_run.records if r["level"] == "error"]
    assert len(errors) == len(json_run.error_ids) == 3
    for binding, error_id in json_run.error_ids.items():
        lines = [r for r in errors if error_id in json.dumps(r)]
        assert len(lines) == 1, (binding, error_id, errors)
        (line,) = lines
        assert "RuntimeError: a bug in the tool" in line["exc"]
        assert line.get("error_id") == error_id, line


def test_no_line_carries_a_token_a_promise_token_an_argument_or_the_secret(
    json_run: Run,
) -> None:
    assert set(json_run.secrets) == {
        "bearer token",
        "unknown token",
        "argument value",
        "promise secret",
        "promise token",
    }
    text = "\n".join(json_run.lines)
    for what, secret in json_run.secrets.items():
        assert secret not in text, f"the {what} appears in the log"
        assert secret[-12:] not in text, f"a piece of the {what} appears in the log"
    assert "authorization" not in text.lower()


# --- text, and workers ---------------------------------------------------------------------

TEXT_ACCESS = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO mcplite\.access: "
    r"(?P<method>[A-Z]+) (?P<path>\S+) (?P<tool>\S+) (?P<status>\d{3}) \d+\.\d\dms$"
)


def test_text_is_still_the_default_one_line_per_request() -> None:
    server = ServeProcess(
        "tests.ops_tools", "--http", "127.0.0.1:0", "--no-grpc", "--secret", SECRET
    )
    try:
        status, reply = post(server.http_port, RPC, call_message("echo", {"text": ARG}))
        assert status == 200, reply
        assert post(server.http_port, "/nope", {})[0] == 404
        lines = server.stop()
    finally:
        server.kill()
    access = [m.groupdict() for m in map(TEXT_ACCESS.match, lines) if m]
    assert access == [
        {"method": "POST", "path": RPC, "tool": "echo", "status": "200"},
        {"method": "POST", "path": "/nope", "tool": "-", "status": "404"},
    ]
    assert [line for line in lines if "mcplite.access" in line] == [
        line for line in lines if TEXT_ACCESS.match(line)
    ]
    assert any(re.match(r"^\S+ \S+ INFO mcplite: mcplite .* serving", line) for line in lines)
    assert not any(line.startswith("{") for line in lines)
    assert ARG not in "\n".join(lines)


WORKERS = re.compile(r"(\d+) workers \(pids ([\d, ]+)\)")
CALLS = 6


def test_with_workers_every_json_line_of_a_worker_names_it() -> None:
    server = ServeProcess(
        "tests.ops_tools",
        *("--http", "127.0.0.1:0", "--no-grpc", "--workers", "2", "--grace", "2"),
        *("--log-format", "json", "--secret", SECRET),
    )
    try:
        for _ in range(CALLS):
            status, reply = post(server.http_port, RPC, call_message("pid", {}))
            assert status == 200, reply
        lines = server.stop()
    finally:
        server.kill()
    records = parse_lines(lines)
    pids = None
    for record in records:
        match = WORKERS.search(record.get("message", ""))
        if match:
            pids = {p.strip() for p in match.group(2).split(",")}
    assert pids is not None and len(pids) == 2, lines
    access = [r for r in records if r["logger"] == "mcplite.access"]
    assert len(access) == CALLS
    for record in access:
        assert record["worker"] in pids, record
        assert record["tool"] == "pid"
    for record in records:
        if "worker" in record:
            assert record["worker"] in pids, record
    # The workers' own lines say so too (each says where it serves).
    assert {r["worker"] for r in records if "worker" in r and r["logger"] == "mcplite"} == pids


def test_a_json_line_gives_the_same_millisecond_as_a_results_timestamp() -> None:
    from logging import makeLogRecord

    from mcplite.core.wire import iso_timestamp
    from mcplite.ops.logs import JsonFormatter

    # 1704110400.123 is stored as 1704110400.12299990654...: truncated, it reads .122.
    record = makeLogRecord({"msg": "hello", "created": 1704110400.123})
    line = json.loads(JsonFormatter().format(record))
    assert line["ts"] == iso_timestamp(1704110400.123) == "2024-01-01T12:00:00.123Z"


def test_an_embedded_access_log_goes_through_logging_with_its_fields_as_extra(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from mcplite.core.observe import Access
    from mcplite.ops.logs import AccessLog

    access = AccessLog()  # never told to write directly: an application's own logging
    with caplog.at_level("INFO", logger="mcplite.access"):
        access.write(Access("http", "POST", "/rpc", "echo", 200, 0.414, ("127.0.0.1", 5000)))
        access.write(Access("grpc", "POST", "/Call", None, "CANCELLED", 3.0, None, "cancelled"))
    first, second = caplog.records
    assert first.getMessage() == "POST /rpc echo 200 0.41ms"
    assert {k: getattr(first, k) for k in sorted(ACCESS_FIELDS)} == {
        "binding": "http",
        "duration_ms": 0.41,
        "method": "POST",
        "path": "/rpc",
        "peer": "127.0.0.1",
        "status": 200,
        "tool": "echo",
    }
    assert second.getMessage() == "POST /Call - CANCELLED 3.00ms cancelled"
    assert (second.peer, second.outcome) == (None, "cancelled")  # type: ignore[attr-defined]
