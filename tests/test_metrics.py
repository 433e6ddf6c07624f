"""``--metrics``: /metrics scraped under load and checked against the requests sent,
the gauges while calls, promises, streams and connections are held open, refusals
with their reasons (limits, auth), /healthz and /readyz (flipping to 503 the moment
a drain starts, while a held call still finishes), and ``--workers``' merged figures.

Every server is a real ``python -m mcplite serve tests.ops_tools`` subprocess; the
peers are ``http.client`` and grpcio; the exposition is parsed by
``prometheus_client``'s own parser.  Counters are compared as the difference
between a scrape before and one after what a test sends, so tests sharing a
server do not see each other's requests.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from conftest import BASE, PROCESS_WAIT, WAIT, ServeProcess, call_message
from grpc_support import ACCEL, Protos, protos
from prometheus_client.parser import text_string_to_metric_families

SECRET = "metrics-test-secret-" + secrets.token_hex(16)
METRICS_URL = re.compile(r"http://127\.0\.0\.1:(\d+)/metrics")
MAX_BODY = 4096
GRPC_MAX_MESSAGE = 4096
GRPC_OPTIONS = [("grpc.enable_http_proxy", 0)]
MCP_VERSION = "2026-07-28"
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}
POLL_INTERVAL = 0.01  # between scrapes, where the server gives no event to wait on

Labels = tuple[tuple[str, str], ...]
#: A scrape: sample name -> labels -> value.
Samples = dict[str, dict[Labels, float]]
T = TypeVar("T")


def labels(**values: str) -> Labels:
    return tuple(sorted(values.items()))


# --- servers ---------------------------------------------------------------------------


def start(*args: str) -> ServeProcess:
    """``mcplite serve tests.ops_tools`` with HTTP, gRPC and metrics on ephemeral ports."""
    return ServeProcess(
        "tests.ops_tools",
        *("--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0"),
        *("--secret", SECRET, "--no-access-log"),
        *args,
    )


def metrics_port(server: ServeProcess) -> int:
    """The metrics listener's port, from the line saying where the server serves."""
    for line in server.lines:
        if "serving" in line:
            match = METRICS_URL.search(line)
            if match:
                return int(match.group(1))
    raise AssertionError(f"no metrics URL logged: {server.lines}")


@pytest.fixture(scope="module")
def served() -> Iterator[ServeProcess]:
    server = start(
        *("--max-body-size", str(MAX_BODY), "--grpc-max-message-size", str(GRPC_MAX_MESSAGE))
    )
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def port(served: ServeProcess) -> int:
    return metrics_port(served)


# --- peers -----------------------------------------------------------------------------


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    conn: http.client.HTTPConnection | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request (on ``conn`` if given, left open): status, headers, body."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        answer = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, answer
    finally:
        if own:
            conn.close()


def lite(
    port: int,
    name: str,
    arguments: dict[str, Any] | None = None,
    conn: http.client.HTTPConnection | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """An MCP-lite ``tools/call``: the HTTP status and the JSON-RPC reply."""
    body = json.dumps(call_message(name, arguments)).encode()
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    status, _, answer = request(port, "POST", f"{BASE}/rpc", body, all_headers, conn)
    reply: dict[str, Any] = json.loads(answer)
    return status, reply


def text_of(reply: dict[str, Any]) -> str:
    assert "result" in reply, reply
    text: str = reply["result"]["content"][0]["text"]
    return text


def mcp(port: int, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A 2026-07-28 request to the MCP endpoint: the HTTP status and the reply."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {**params, "_meta": MCP_META},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MCP_VERSION,
        "Mcp-Method": method,
    }
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    status, _, answer = request(port, "POST", "/mcp", json.dumps(message).encode(), headers)
    reply: dict[str, Any] = json.loads(answer)
    return status, reply


def ours() -> Protos:
    return protos()["ours"]


def channel(server: ServeProcess) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", GRPC_OPTIONS)


def grpc_code(call: Callable[..., Any], *args: Any, **kwargs: Any) -> grpc.StatusCode:
    """The status code ``call(*args, **kwargs)`` fails with."""
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    code: grpc.StatusCode = caught.value.code()
    return code


# --- scraping --------------------------------------------------------------------------


def scrape(port: int) -> Samples:
    """``GET /metrics``, parsed by prometheus_client."""
    status, headers, body = request(port, "GET", "/metrics")
    assert status == 200, body
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(body.decode())


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[labels(**sample.labels)] = sample.value
    return out


def delta(before: Samples, after: Samples, name: str) -> dict[Labels, float]:
    """What changed in ``name`` between two scrapes (labels with no change left out)."""
    old, new = before.get(name, {}), after.get(name, {})
    changed = {key: value - old.get(key, 0.0) for key, value in new.items()}
    return {key: value for key, value in changed.items() if value}


def value(samples: Samples, name: str, **wanted: str) -> float:
    """The value of one sample (0 when absent)."""
    return samples.get(name, {}).get(labels(**wanted), 0.0)


def poll(port: int, check: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until ``check`` holds (bounded): for a change the server announces no
    other way (a connection it has seen closing)."""
    deadline = time.monotonic() + WAIT
    while True:
        samples = scrape(port)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {WAIT}s; last scrape {samples}")
        time.sleep(POLL_INTERVAL)


def until(fn: Callable[[], T], check: Callable[[T], bool], what: str) -> T:
    """``fn()`` until ``check`` holds (bounded)."""
    deadline = time.monotonic() + WAIT
    while True:
        result = fn()
        if check(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {WAIT}s; last {result!r}")
        time.sleep(POLL_INTERVAL)


# --- counts under load -----------------------------------------------------------------

THREADS = 4
#: What each thread sends on its own keep-alive connection (all answered 200).
ECHOES, REFUSALS, CRASHES, UNKNOWN, INVALID, LISTS = 20, 2, 1, 2, 1, 1
PER_THREAD = ECHOES + REFUSALS + CRASHES + UNKNOWN + INVALID + LISTS


def made_up() -> str:
    return "made-up-" + secrets.token_hex(8)


def lite_load(port: int, unknown_names: list[str]) -> int:
    """One client's share of the load, on one keep-alive connection; its request count."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    sent = 0
    try:
        for i in range(ECHOES):
            status, reply = lite(port, "echo", {"text": f"hello {i}"}, conn)
            assert (status, text_of(reply)) == (200, f"hello {i}")
            sent += 1
        for _ in range(REFUSALS):
            status, reply = lite(port, "refuse", {}, conn)
            assert status == 200 and reply["result"]["isError"] is True, reply
            sent += 1
        for _ in range(CRASHES):
            status, reply = lite(port, "crash", {}, conn)
            assert (status, reply["error"]["code"]) == (200, -32603), reply
            sent += 1
        for _ in range(UNKNOWN):
            name = made_up()
            unknown_names.append(name)
            status, reply = lite(port, name, {}, conn)
            assert (status, reply["error"]["code"]) == (200, -32601), reply
            sent += 1
        for _ in range(INVALID):
            status, reply = lite(port, "echo", {"text": 5}, conn)
            assert (status, reply["error"]["code"]) == (200, -32602), reply
            sent += 1
        for _ in range(LISTS):
            status, _, body = request(port, "POST", f"{BASE}/tools", b"", conn=conn)
            assert status == 200 and b'"echo"' in body
            sent += 1
    finally:
        conn.close()
    return sent


def grpc_load(server: ServeProcess, unknown_names: list[str]) -> None:
    proto = ours()
    with channel(server) as chan:
        stub = proto.stub(chan)
        for i in range(3):
            stub.CallTool(proto.request("echo", {"text": f"grpc {i}"}), timeout=WAIT)
        stub.CallTool(proto.request("refuse", {}), timeout=WAIT)
        name = made_up()
        unknown_names.append(name)
        code = grpc_code(stub.CallTool, proto.request(name, {}), timeout=WAIT)
        assert code == grpc.StatusCode.NOT_FOUND
        stub.GetTools(proto.cls("Empty")(), timeout=WAIT)
        parts = list(stub.CallToolStream(proto.request("count", {"steps": 2}), timeout=WAIT))
        assert len(parts) == 3  # two parts and the result


def mcp_load(port: int, unknown_names: list[str]) -> None:
    """Calls on the MCP endpoint (each on a connection of its own)."""
    for i in range(3):
        status, reply = mcp(port, "tools/call", {"name": "echo", "arguments": {"text": f"{i}"}})
        assert (status, text_of(reply)) == (200, f"{i}")
    status, reply = mcp(port, "tools/call", {"name": "refuse", "arguments": {}})
    assert status == 200 and reply["result"]["isError"] is True, reply
    status, reply = mcp(port, "tools/call", {"name": "crash", "arguments": {}})
    assert status == 200 and reply["result"]["isError"] is True, reply  # MCP: a tool error
    assert reply["result"]["_meta"]["mcplite/error"]["code"] == -32603
    status, reply = mcp(port, "tools/list", {})
    assert status == 200 and reply["result"]["tools"], reply
    name = made_up()
    unknown_names.append(name)
    status, reply = mcp(port, "tools/call", {"name": name, "arguments": {}})
    assert (status, reply["error"]["code"]) == (400, -32602), reply  # MCP: a 400


@pytest.fixture(scope="module")
def load(served: ServeProcess, port: int) -> dict[str, Any]:
    """Send a known mix on every binding, concurrently; the scrapes before and after,
    and the tool names clients made up."""
    http_port = served.http_port
    unknown_names: list[str] = []
    before = scrape(port)
    with ThreadPoolExecutor(THREADS + 2) as pool:
        lites = [pool.submit(lite_load, http_port, unknown_names) for _ in range(THREADS)]
        grpc_done = pool.submit(grpc_load, served, unknown_names)
        mcp_done = pool.submit(mcp_load, http_port, unknown_names)
        # HTTP answers that refuse, each on a connection of its own.
        for _ in range(2):
            assert request(http_port, "POST", "/nope", b"{}")[0] == 404
            assert request(http_port, "GET", f"{BASE}/rpc")[0] == 405
        too_large = b'{"pad": "' + b"x" * MAX_BODY + b'"}'
        assert request(http_port, "POST", f"{BASE}/rpc", too_large)[0] == 413
        # A promise, made and redeemed.
        _, made = lite(http_port, "later", {"text": "abc"})
        assert made["result"]["_meta"]["response_type"] == "promise", made
        token = made["result"]["_meta"]["promise_token"]
        _, redeemed = lite(http_port, "redeem", {"promise": token, "wait": WAIT})
        assert text_of(redeemed) == "later: 3 characters"
        assert [f.result(WAIT) for f in lites] == [PER_THREAD] * THREADS
        grpc_done.result(WAIT)
        mcp_done.result(WAIT)
    after = scrape(port)
    return {"before": before, "after": after, "unknown": unknown_names}


def changes(load: dict[str, Any], name: str) -> dict[Labels, float]:
    return delta(load["before"], load["after"], name)


def test_requests_are_counted_by_binding_and_status_exactly_as_sent(
    load: dict[str, Any],
) -> None:
    assert changes(load, "mcplite_requests_total") == {
        labels(binding="http", status="200"): THREADS * PER_THREAD + 2,  # + later, redeem
        labels(binding="http", status="404"): 2,
        labels(binding="http", status="405"): 2,
        labels(binding="http", status="413"): 1,
        labels(binding="mcp", status="200"): 6,
        labels(binding="mcp", status="400"): 1,
        labels(binding="grpc", status="OK"): 6,
        labels(binding="grpc", status="NOT_FOUND"): 1,
    }


#: The calls the load makes, by binding, tool and outcome.
EXPECTED_CALLS = {
    ("http", "echo", "answer"): THREADS * ECHOES,
    ("http", "refuse", "failure"): THREADS * REFUSALS,
    ("http", "crash", "error"): THREADS * CRASHES,
    ("http", "(unknown)", "error"): THREADS * UNKNOWN,
    ("http", "echo", "error"): THREADS * INVALID,
    ("http", "later", "promise"): 1,
    ("http", "redeem", "answer"): 1,
    ("mcp", "echo", "answer"): 3,
    ("mcp", "refuse", "failure"): 1,
    ("mcp", "crash", "error"): 1,
    ("grpc", "echo", "answer"): 3,
    ("grpc", "refuse", "failure"): 1,
    ("grpc", "(unknown)", "error"): 1,
    ("grpc", "count", "answer"): 1,
}


def test_calls_are_counted_by_binding_tool_and_outcome(load: dict[str, Any]) -> None:
    assert changes(load, "mcplite_calls_total") == {
        labels(binding=b, tool=t, outcome=o): n for (b, t, o), n in EXPECTED_CALLS.items()
    }


def test_protocol_errors_are_counted_with_their_json_rpc_code(load: dict[str, Any]) -> None:
    assert changes(load, "mcplite_call_errors_total") == {
        labels(binding="http", tool="crash", code="-32603"): THREADS * CRASHES,
        labels(binding="http", tool="(unknown)", code="-32601"): THREADS * UNKNOWN,
        labels(binding="http", tool="echo", code="-32602"): THREADS * INVALID,
        labels(binding="mcp", tool="crash", code="-32603"): 1,
        labels(binding="grpc", tool="(unknown)", code="-32601"): 1,
    }


def test_requests_refused_before_a_tool_ran_are_counted_by_reason(load: dict[str, Any]) -> None:
    assert changes(load, "mcplite_refusals_total") == {
        labels(binding="http", reason="bad_request"): 4,  # two 404s, two 405s
        labels(binding="http", reason="too_large"): 1,
        labels(binding="mcp", reason="bad_request"): 1,  # the unknown tool's 400
    }


def test_the_latency_histogram_counts_every_call_of_each_tool_in_cumulative_buckets(
    load: dict[str, Any],
) -> None:
    per_tool: dict[str, int] = {}
    for (_, tool, _), n in EXPECTED_CALLS.items():
        per_tool[tool] = per_tool.get(tool, 0) + n
    counted = changes(load, "mcplite_call_duration_seconds_count")
    assert counted == {labels(tool=tool): n for tool, n in per_tool.items()}
    after: Samples = load["after"]
    buckets = after["mcplite_call_duration_seconds_bucket"]
    for (tool_label,), count in after["mcplite_call_duration_seconds_count"].items():
        tool = tool_label[1]
        mine = sorted(
            (float(dict(key)["le"]), n) for key, n in buckets.items() if dict(key)["tool"] == tool
        )
        bounds = [bound for bound, _ in mine]
        values = [n for _, n in mine]
        assert bounds[-1] == math.inf and len(bounds) > 1, mine
        assert values == sorted(values), f"{tool}: buckets are not cumulative: {mine}"
        assert values[-1] == count, f"{tool}: +Inf {values[-1]} != count {count}"
        total = after["mcplite_call_duration_seconds_sum"][labels(tool=tool)]
        assert 0 < total < count * WAIT


def test_a_tool_name_a_client_made_up_never_becomes_a_label(
    load: dict[str, Any], served: ServeProcess, port: int
) -> None:
    status, _, body = request(port, "GET", "/metrics")
    assert status == 200
    text = body.decode()
    assert len(load["unknown"]) == THREADS * UNKNOWN + 2  # HTTP, gRPC and MCP ones
    for name in load["unknown"]:
        assert name not in text
    status, _, listed = request(served.http_port, "POST", f"{BASE}/tools", b"")
    served_tools = {tool["name"] for tool in json.loads(listed)["tools"]}
    tool_labels = {
        dict(key)["tool"]
        for samples in parse(text).values()
        for key in samples
        if "tool" in dict(key)
    }
    assert "(unknown)" in tool_labels
    assert tool_labels - {"(unknown)"} <= served_tools


def test_every_family_has_its_documented_type(port: int) -> None:
    _, _, body = request(port, "GET", "/metrics")
    types = {f.name: f.type for f in text_string_to_metric_families(body.decode())}
    assert types == {
        "mcplite_requests": "counter",
        "mcplite_calls": "counter",
        "mcplite_call_errors": "counter",
        "mcplite_refusals": "counter",
        "mcplite_call_duration_seconds": "histogram",
        "mcplite_calls_in_flight": "gauge",
        "mcplite_streams_open": "gauge",
        "mcplite_promises_pending": "gauge",
        "mcplite_connections_open": "gauge",
        "mcplite_tasks_alive": "gauge",
        "process_resident_memory_bytes": "gauge",
        "process_open_fds": "gauge",
    }


def test_a_grpc_message_over_the_limit_is_refused_as_too_large(
    served: ServeProcess, port: int
) -> None:
    before = scrape(port)
    proto = ours()
    with channel(served) as chan:
        big = proto.request("echo", {"text": "x" * (GRPC_MAX_MESSAGE + 1)})
        code = grpc_code(proto.stub(chan).CallTool, big, timeout=WAIT)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    after = scrape(port)
    assert delta(before, after, "mcplite_requests_total") == {
        labels(binding="grpc", status="RESOURCE_EXHAUSTED"): 1
    }
    # The docstring's REASONS: "too_large: 413, 431, RESOURCE_EXHAUSTED for a message".
    assert delta(before, after, "mcplite_refusals_total") == {
        labels(binding="grpc", reason="too_large"): 1
    }


# --- gauges ----------------------------------------------------------------------------


def connections(binding: str) -> Callable[[Samples], float]:
    return lambda samples: value(samples, "mcplite_connections_open", binding=binding)


def test_open_connections_are_counted_per_binding_while_held_and_not_after(
    served: ServeProcess, port: int
) -> None:
    http_open, grpc_open = connections("http"), connections("grpc")
    poll(port, lambda s: http_open(s) == 0 and grpc_open(s) == 0, "no connection open")
    conn = http.client.HTTPConnection("127.0.0.1", served.http_port, timeout=WAIT)
    try:
        status, reply = lite(served.http_port, "echo", {"text": "keep"}, conn)
        assert status == 200
        held = scrape(port)
        assert (http_open(held), grpc_open(held)) == (1, 0)
        proto = ours()
        with channel(served) as chan:
            proto.stub(chan).CallTool(proto.request("echo", {"text": "x"}), timeout=WAIT)
            both = scrape(port)
            # The plain gRPC path (grpclib's own server) counts none (docs/grpc.md).
            assert (http_open(both), grpc_open(both)) == (1, 1 if ACCEL else 0)
        # The keep-alive connection still answers; the gRPC one is gone.
        status, reply = lite(served.http_port, "echo", {"text": "again"}, conn)
        assert (status, text_of(reply)) == (200, "again")
        poll(port, lambda s: grpc_open(s) == 0, "the gRPC connection closed")
    finally:
        conn.close()
    poll(port, lambda s: http_open(s) == 0, "the HTTP connection closed")


def test_a_held_call_is_in_flight_until_it_returns(
    served: ServeProcess, port: int, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    assert value(scrape(port), "mcplite_calls_in_flight") == 0
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(lite, served.http_port, "hold", {"path": str(release)})
        try:
            poll(port, lambda s: value(s, "mcplite_calls_in_flight") == 1, "the call in flight")
            assert not held.done()
            assert value(scrape(port), "mcplite_streams_open") == 0
        finally:
            release.touch()
        status, reply = held.result(WAIT)
    assert (status, text_of(reply)) == (200, "released")
    assert value(scrape(port), "mcplite_calls_in_flight") == 0


def test_the_process_gauges_read_the_served_process_itself(
    served: ServeProcess, port: int, tmp_path: Path
) -> None:
    # What /proc says of the server's own pid: memory within a MiB (it moves between
    # the two reads); open files as now plus the two the scrape itself held open (its
    # connection and the /proc directory being listed).
    samples = scrape(port)
    with open(f"/proc/{served.proc.pid}/status") as status:
        rss = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    assert abs(value(samples, "process_resident_memory_bytes") - rss) < 2**20
    files = len(os.listdir(f"/proc/{served.proc.pid}/fd"))
    assert files <= value(samples, "process_open_fds") <= files + 2

    # A held call is a task on the loop while it runs, and is gone once it returns.
    poll(port, lambda s: value(s, "mcplite_calls_in_flight") == 0, "no call in flight")
    idle = value(scrape(port), "mcplite_tasks_alive")
    release = tmp_path / "release"
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(lite, served.http_port, "hold", {"path": str(release)})
        try:
            poll(port, lambda s: value(s, "mcplite_calls_in_flight") == 1, "the call in flight")
            assert value(scrape(port), "mcplite_tasks_alive") > idle
        finally:
            release.touch()
        assert held.result(WAIT)[0] == 200
    poll(port, lambda s: value(s, "mcplite_tasks_alive") == idle, "the tasks back to idle")


def test_a_running_promise_is_pending_until_its_tool_returns(
    served: ServeProcess, port: int, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    assert value(scrape(port), "mcplite_promises_pending") == 0
    try:
        _, made = lite(served.http_port, "held_promise", {"path": str(release)})
        assert made["result"]["_meta"]["response_type"] == "promise", made
        # The promise is registered before its token is answered: no wait needed.
        assert value(scrape(port), "mcplite_promises_pending") == 1
    finally:
        release.touch()
    token = made["result"]["_meta"]["promise_token"]
    _, redeemed = lite(served.http_port, "redeem", {"promise": token, "wait": WAIT})
    assert text_of(redeemed) == "released"
    poll(port, lambda s: value(s, "mcplite_promises_pending") == 0, "no promise pending")


def test_an_open_stream_is_counted_until_its_last_part(
    served: ServeProcess, port: int, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    proto = ours()
    with channel(served) as chan:
        stream = proto.stub(chan).CallToolStream(
            proto.request("trickle", {"path": str(release)}), timeout=WAIT
        )
        try:
            first = next(stream)
            assert first.result["partial"] == "started "
            during = scrape(port)
            assert value(during, "mcplite_streams_open") == 1
            assert value(during, "mcplite_calls_in_flight") == 1
        finally:
            release.touch()
        rest = list(stream)
    assert rest[0].result["partial"] == "released"
    after = scrape(port)
    assert value(after, "mcplite_streams_open") == 0
    assert value(after, "mcplite_calls_in_flight") == 0


# --- the listener itself ----------------------------------------------------------------


def test_healthz_and_readyz_answer_200_while_serving(port: int) -> None:
    status, headers, body = request(port, "GET", "/healthz")
    assert (status, body) == (200, b"ok\n")
    status, headers, body = request(port, "GET", "/readyz")
    assert (status, body) == (200, b"ready\n")
    assert headers["connection"] == "close"


@pytest.mark.parametrize("path", ["/metrics", "/readyz", "/healthz"])
def test_the_metrics_listener_answers_get_only(port: int, path: str) -> None:
    status, headers, _ = request(port, "POST", path, b"{}")
    assert status == 405
    assert "GET" in headers["allow"]


def test_the_metrics_listener_answers_404_elsewhere_and_is_not_the_public_port(
    served: ServeProcess, port: int
) -> None:
    assert request(port, "GET", "/nope")[0] == 404
    assert request(port, "GET", BASE + "/tools")[0] == 404
    assert port != served.http_port
    assert request(served.http_port, "GET", "/metrics")[0] == 404


# --- refusals by auth --------------------------------------------------------------------

ALICE = "alice-" + secrets.token_urlsafe(24)  # no scope
ADMIN = "admin-" + secrets.token_urlsafe(24)  # the admin scope
CAROL = "carol-" + secrets.token_urlsafe(24)  # HTTP's rate-limit test
ERIN = "erin-" + secrets.token_urlsafe(24)  # gRPC's rate-limit test
DAVE = "dave-" + secrets.token_urlsafe(24)  # gRPC's forbidden call
UNKNOWN_TOKEN = "nobody-" + secrets.token_urlsafe(24)
#: Each caller's burst: the third request in a row is over the rate.
BURST = 2


@pytest.fixture(scope="module")
def auth_refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[Labels, float]]:
    """A server with tokens and a rate limit, sent refused requests on both bindings;
    the changes of the request and refusal counters."""
    tokens = tmp_path_factory.mktemp("metrics-auth") / "tokens.txt"
    tokens.write_text(f"{ALICE}\n{ADMIN} admin\n{CAROL}\n{ERIN}\n{DAVE}\n")
    # One token per BURST seconds: a third request in a row is over the rate.
    server = start(
        *("--auth-tokens", str(tokens), "--rate-limit", "0.05", "--rate-burst", str(BURST))
    )
    try:
        port, http_port = metrics_port(server), server.http_port
        before = scrape(port)

        def bearer(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}"}

        assert lite(http_port, "echo", {"text": "x"})[0] == 401
        assert lite(http_port, "echo", {"text": "x"}, headers=bearer(UNKNOWN_TOKEN))[0] == 401
        assert lite(http_port, "admin_report", {}, headers=bearer(ALICE))[0] == 403
        statuses = [
            lite(http_port, "echo", {"text": "x"}, headers=bearer(CAROL))[0]
            for _ in range(BURST + 1)
        ]
        assert statuses == [200] * BURST + [429]
        proto = ours()
        request_ = proto.request("echo", {"text": "x"})
        with channel(server) as chan:
            stub = proto.stub(chan)
            codes = [
                grpc_code(stub.CallTool, request_, timeout=WAIT),
                grpc_code(
                    stub.CallTool,
                    request_,
                    timeout=WAIT,
                    metadata=[("authorization", f"Bearer {UNKNOWN_TOKEN}")],
                ),
                grpc_code(
                    stub.CallTool,
                    proto.request("admin_report", {}),
                    timeout=WAIT,
                    metadata=[("authorization", f"Bearer {DAVE}")],
                ),
            ]
            assert codes == [
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.PERMISSION_DENIED,
            ]
            erin = [("authorization", f"Bearer {ERIN}")]
            for _ in range(BURST):
                stub.CallTool(request_, timeout=WAIT, metadata=erin)
            code = grpc_code(stub.CallTool, request_, timeout=WAIT, metadata=erin)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        after = scrape(port)
    finally:
        server.kill()
    return {
        name: delta(before, after, name)
        for name in ("mcplite_requests_total", "mcplite_refusals_total")
    }


def of_binding(counts: dict[Labels, float], binding: str) -> dict[Labels, float]:
    return {key: n for key, n in counts.items() if dict(key)["binding"] == binding}


def test_http_refusals_by_auth_are_counted_with_their_reasons(
    auth_refusals: dict[str, dict[Labels, float]],
) -> None:
    assert of_binding(auth_refusals["mcplite_requests_total"], "http") == {
        labels(binding="http", status="401"): 2,
        labels(binding="http", status="403"): 1,
        labels(binding="http", status="429"): 1,
        labels(binding="http", status="200"): BURST,
    }
    assert of_binding(auth_refusals["mcplite_refusals_total"], "http") == {
        labels(binding="http", reason="unauthenticated"): 2,
        labels(binding="http", reason="forbidden"): 1,
        labels(binding="http", reason="rate_limited"): 1,
    }


def test_grpc_refusals_by_auth_are_counted_with_their_reasons(
    auth_refusals: dict[str, dict[Labels, float]],
) -> None:
    assert of_binding(auth_refusals["mcplite_requests_total"], "grpc") == {
        labels(binding="grpc", status="UNAUTHENTICATED"): 2,
        labels(binding="grpc", status="PERMISSION_DENIED"): 1,
        labels(binding="grpc", status="RESOURCE_EXHAUSTED"): 1,
        labels(binding="grpc", status="OK"): BURST,
    }
    # A caller over its rate gets RESOURCE_EXHAUSTED: that is rate_limited, not overloaded.
    assert of_binding(auth_refusals["mcplite_refusals_total"], "grpc") == {
        labels(binding="grpc", reason="unauthenticated"): 2,
        labels(binding="grpc", reason="forbidden"): 1,
        labels(binding="grpc", reason="rate_limited"): 1,
    }


# --- readiness during a drain --------------------------------------------------------------


@dataclass
class Drained:
    """What a drain looked like from outside, seen by :func:`drained`."""

    ready_before: tuple[int, bytes] = (0, b"")
    ready_during: tuple[int, bytes] = (0, b"")  # the first /readyz that was not 200
    ready_later: int = 0  # a /readyz after the gRPC refusal, still draining
    call_done_while_not_ready: bool = True
    alive_while_not_ready: bool = False
    healthz_during: int = 0
    in_flight_during: float = 0.0
    grpc_code_during: grpc.StatusCode | None = None
    held_reply: tuple[int, dict[str, Any]] = (0, {})
    exit_status: int | None = None
    stopped_logged: bool = False
    draining: Samples = field(default_factory=dict)  # scraped before the gRPC refusal
    refused: Samples = field(default_factory=dict)  # and after it


@pytest.fixture(scope="module")
def drained(tmp_path_factory: pytest.TempPathFactory) -> Drained:
    """A server holding a call when SIGTERM comes: /readyz polled until it turns,
    then (still draining) /healthz, /metrics and a gRPC call; the held call released."""
    seen = Drained()
    release = tmp_path_factory.mktemp("drain") / "release"
    server = start("--grace", "10")
    try:
        port = metrics_port(server)
        seen.ready_before = request(port, "GET", "/readyz")[::2]
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(lite, server.http_port, "hold", {"path": str(release)})
            try:
                poll(port, lambda s: value(s, "mcplite_calls_in_flight") == 1, "the held call")
                server.proc.send_signal(signal.SIGTERM)
                status, _, body = until(
                    lambda: request(port, "GET", "/readyz"),
                    lambda answer: answer[0] != 200,
                    "/readyz after SIGTERM",
                )
                seen.ready_during = (status, body)
                seen.call_done_while_not_ready = held.done()
                seen.alive_while_not_ready = server.proc.poll() is None
                seen.healthz_during = request(port, "GET", "/healthz")[0]
                seen.draining = scrape(port)
                seen.in_flight_during = value(seen.draining, "mcplite_calls_in_flight")
                proto = ours()
                with channel(server) as chan:
                    echo = proto.request("echo", {"text": "late"})
                    seen.grpc_code_during = grpc_code(proto.stub(chan).CallTool, echo, timeout=WAIT)
                seen.refused = scrape(port)
                seen.ready_later = request(port, "GET", "/readyz")[0]
            finally:
                release.touch()
            seen.held_reply = held.result(WAIT)
        seen.exit_status = server.proc.wait(PROCESS_WAIT)
        seen.stopped_logged = any("stopped" in line for line in server.rest_of_stderr())
    finally:
        server.kill()
    return seen


def test_readiness_turns_503_when_a_drain_starts_while_a_held_call_still_finishes(
    drained: Drained,
) -> None:
    assert drained.ready_before == (200, b"ready\n")
    status, body = drained.ready_during
    assert status == 503 and b"draining" in body, drained.ready_during
    # Not ready while the held call still runs, the process lives, liveness holds and
    # the figures are still served (the metrics listener outlives the bindings' drain).
    assert not drained.call_done_while_not_ready
    assert drained.alive_while_not_ready
    assert drained.healthz_during == 200
    assert drained.in_flight_during == 1
    assert drained.ready_later == 503
    # A new gRPC call is turned away; the held one finishes; the process exits cleanly.
    assert drained.grpc_code_during == grpc.StatusCode.UNAVAILABLE
    status, reply = drained.held_reply
    assert (status, text_of(reply)) == (200, "released")
    assert drained.exit_status == 0
    assert drained.stopped_logged


def test_a_grpc_call_refused_while_draining_is_counted_as_shutting_down(
    drained: Drained,
) -> None:
    """REASONS: "shutting_down: 503 / UNAVAILABLE while draining"."""
    assert drained.grpc_code_during == grpc.StatusCode.UNAVAILABLE
    assert delta(drained.draining, drained.refused, "mcplite_requests_total") == {
        labels(binding="grpc", status="UNAVAILABLE"): 1
    }
    assert delta(drained.draining, drained.refused, "mcplite_refusals_total") == {
        labels(binding="grpc", reason="shutting_down"): 1
    }


# --- workers ---------------------------------------------------------------------------------

MAX_TRIES = 200  # calls on new connections, at most, until both workers have answered


@pytest.mark.skipif(sys.platform != "linux", reason="SO_REUSEPORT spreading: Linux")
def test_with_workers_every_request_is_counted_once_labelled_by_its_worker() -> None:
    server = ServeProcess(
        "tests.ops_tools",
        *("--http", "127.0.0.1:0", "--no-grpc", "--metrics", "127.0.0.1:0"),
        *("--workers", "2", "--secret", SECRET, "--no-access-log", "--grace", "2"),
    )
    try:
        port = metrics_port(server)
        pids: dict[str, int] = {}
        sent = 0
        while len(set(pids.values())) < 2 or sent < 10:
            assert sent < MAX_TRIES, f"after {sent} calls only {pids} answered"
            status, reply = lite(server.http_port, "pid", {})
            assert status == 200
            pid = text_of(reply)
            pids[pid] = pids.get(pid, 0) + 1
            sent += 1
        samples = scrape(port)
        assert request(port, "GET", "/readyz")[::2] == (200, b"ready\n")
        assert request(port, "GET", "/healthz")[0] == 200
    finally:
        server.stop()
        server.kill()
    for name, by_labels in samples.items():
        for key in by_labels:
            assert dict(key).get("worker") in ("1", "2"), (name, key)
    requests = {
        dict(key)["worker"]: n
        for key, n in samples["mcplite_requests_total"].items()
        if dict(key)["binding"] == "http" and dict(key)["status"] == "200"
    }
    assert sum(requests.values()) == sent
    assert sorted(requests.values()) == sorted(pids.values())  # each worker its own share
    calls = samples["mcplite_calls_total"]
    assert sum(calls.values()) == sent
    assert {dict(key)["tool"] for key in calls} == {"pid"}
    gauges = samples["mcplite_calls_in_flight"]
    assert {dict(key)["worker"] for key in gauges} == {"1", "2"}
