"""The benchmark's quick mode runs end to end and writes the results it promises.

Each test runs ``python -m bench --quick`` as a subprocess with a bounded timeout
(servers on 127.0.0.1, ephemeral ports, killed by the harness) and reads the JSON
file it writes.  mcplite, every anchor, the in-process section, the cold starts,
the many-tools lists, the big payloads and the many streams must all produce figures.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.pyload import vary_body
from bench.run import jsonrpc_call, varied

#: Run by default; CI's later runs (speed paths off, uvloop, Python 3.12) leave it out.
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120.0  # seconds for one whole quick run


def run_bench(out: Path, *extra: str) -> dict[str, Any]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the harness stops its servers on the way out
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    assert proc.returncode == 0, stderr[-3000:]
    files = sorted(out.glob("*.json"))
    assert len(files) == 1, (files, stdout[-2000:])
    results: dict[str, Any] = json.loads(files[0].read_text())
    return results


def rps(section: dict[str, Any], server: str) -> float:
    entry = section["servers"][server]
    assert entry["status"] == "ok", entry
    return float(entry["results"]["50"]["rps"])


def test_quick_mode_writes_figures_for_every_anchor_and_the_in_process_baseline(
    tmp_path: Path,
) -> None:
    results = run_bench(tmp_path)

    for key in ("meta", "inprocess", "http", "grpc", "memory", "targets", "notes", "servers"):
        assert key in results, key
    meta = results["meta"]
    assert meta["quick"] is True
    assert meta["http_generator"] in ("wrk", "python")
    assert meta["grpc_generator"] in ("h2load", "grpcio")

    baseline = results["inprocess"]["json_baseline"]
    assert baseline["status"] == "ok"
    assert baseline["calls_per_s"] > 0
    assert baseline["p99_us"] >= baseline["p50_us"] > 0
    for name in ("echo", "search_documents", "promise_token"):
        assert results["inprocess"][name]["status"] == "ok", results["inprocess"][name]

    for anchor in ("bare_asyncio", "bare_h11", "mcp_sdk"):
        assert rps(results["http"], anchor) > 0, anchor
    for anchor in ("grpcio", "naive_grpclib"):
        assert rps(results["grpc"]["unary"], anchor) > 0, anchor
    assert rps(results["http"], "mcplite") > 0
    # The MCP endpoint called as the SDK's own row is (2025), and the ratio read from it.
    assert rps(results["http"], "mcplite:mcp2025") > 0
    like = [c for c in results["targets"] if c["name"].startswith("MCP endpoint (2025)")]
    assert len(like) == 1 and like[0]["value"], like
    assert rps(results["grpc"]["unary"], "mcplite") > 0
    # The rows whose body changes per request, and the targets read from them.
    for row in ("bare_h11:varied", "mcplite:varied", "mcplite:mcp2026:varied"):
        assert rps(results["http"], row) > 0, row
    varied = [c for c in results["targets"] if "a new body per request" in c["name"]]
    assert len(varied) == 2 and all(c["value"] for c in varied), varied
    # uvloop is installed with the test extra: its row runs by default.
    assert rps(results["http"], "mcplite_uvloop") > 0
    assert rps(results["grpc"]["unary"], "mcplite_uvloop") > 0
    assert results["meta"]["versions"]["uvloop"]

    fig = results["http"]["servers"]["bare_h11"]["results"]["50"]
    for key in ("p50_us", "p90_us", "p99_us", "p999_us", "errors", "non2xx", "runs"):
        assert key in fig, key

    for check in results["targets"]:
        assert set(check) >= {"name", "value", "unit", "target", "met"}
    assert len(results["targets"]) >= 9
    assert "bare_h11" in results["memory"]

    stores = results["redeem"]["stores"]
    shared = ["sqlite"] + (["redis"] if stores["redis"].get("status") != "skipped" else [])
    for store in ["memory", *shared]:
        rows = stores[store]
        for row in ("create", "complete", "redeem", "round_trip", "wake"):
            assert rows[row]["status"] == "ok", (store, row, rows[row])
        trip = rows["round_trip"]  # each round trip holds its create, so its median is more
        assert trip["p99_us"] >= trip["median_us"] >= rows["create"]["median_us"] > 0, rows
    for store in shared:
        wake = stores[store]["cross_process_wake"]
        assert wake["status"] == "ok" and wake["p99_us"] >= wake["median_us"] > 0, wake

    cold = results["coldstart"]["rows"]
    stdio = cold["mcplite stdio"]
    assert stdio["status"] == "ok", stdio
    assert 0 < stdio["init_median_s"] <= stdio["answer_median_s"] < 30
    assert stdio["rss_median_mib"] > 0
    assert cold["mcplite serve (HTTP+gRPC)"]["answer_median_s"] > 0
    assert cold["mcp_sdk stdio"]["status"] == "ok", cold["mcp_sdk stdio"]
    assert cold["fastmcp stdio"]["status"] in ("ok", "skipped")  # the clients extra has it
    watched = results["coldstart"]["imports"]["watched"]
    assert not any(watched[m] for m in ("grpclib", "h2", "betterproto", "h11"))

    many = results["manytools"]
    for server in ("mcplite", f"mcplite --page-size {many['page_size']}", "mcp_sdk"):
        entry = many["servers"][server]
        assert entry["status"] == "ok", entry
        assert entry["start_s"] > 0 and entry["bytes"] > 0
        assert entry["list"]["p99_ms"] >= entry["list"]["median_ms"] > 0
    assert many["servers"]["mcplite"]["tools_listed"] == many["tools"]
    assert many["servers"]["mcplite"]["lite"]["median_ms"] > 0

    for shape in ("text", "records"):  # 1 MiB each way, answered whole by each server
        for name, row in results["payload"]["shapes"][shape]["rows"].items():
            assert row["status"] == "ok", (shape, name, row)
            figures = next(iter(row["results"].values()))
            assert figures["rps"] > 0 and figures["errors"] + figures["non2xx"] == 0, figures
            assert row["peak_rss_kib"] >= row["rss_start_kib"] > 0
    for wire in ("sse", "grpc"):  # every stream opened, then an echo beside them
        held = results["streams"][wire]
        assert held["status"] == "ok", held
        assert held["opened"] == held["streams_requested"] == 500, held
        assert held["per_stream_kib"] > 0
        assert held["echo_beside"]["status"] == "ok", held
    assert results["streams"]["sse"]["heartbeats_per_s"] > 0


def test_quick_mode_runs_with_the_python_generators_when_wrk_and_h2load_are_absent(
    tmp_path: Path,
) -> None:
    results = run_bench(
        tmp_path,
        "--http-generator",
        "python",
        "--grpc-generator",
        "grpcio",
        "--servers",
        "bare_h11,grpcio",
        "--no-inprocess",
        "--no-memory",
        "--no-coldstart",
        "--no-manytools",
        "--no-payload",
        "--no-streams",
        "--no-plot",
    )

    assert results["meta"]["http_generator"] == "python"
    assert results["meta"]["grpc_generator"] == "grpcio"
    assert rps(results["http"], "bare_h11") > 0
    assert rps(results["http"], "bare_h11:varied") > 0
    assert rps(results["grpc"]["unary"], "grpcio") > 0
    assert any("Python generator" in note for note in results["notes"])


def test_a_varied_body_changes_its_id_and_its_length_from_one_request_to_the_next() -> None:
    body = jsonrpc_call("echo", {"text": "hello world"})
    template = varied(body, "hello world")
    bodies = [vary_body(template, n) for n in range(1, 40)]
    assert len(set(bodies)) == len(bodies)
    assert all(len(a) != len(b) for a, b in itertools.pairwise(bodies))
    for n, sent in enumerate(bodies, start=1):
        message = json.loads(sent)
        assert message["id"] == n
        assert message["params"] == {
            "name": "echo",
            "arguments": {"text": "hello world" + "abcdefghijklmnopq"[: n % 17]},
        }
    assert vary_body(template, 17) == body.replace(b'"id":1,', b'"id":17,')


def test_instructions_per_request_are_counted_in_the_server_for_each_row() -> None:
    if shutil.which("valgrind") is None:  # CI installs it (.ci/run); bench/setup.sh too
        pytest.skip("valgrind is not installed: python -m bench.instructions needs it")
    argv = [sys.executable, "-m", "bench.instructions", "--requests", "5,25", "--json"]
    argv += ["--only", "bare_h11:varied,mcplite,mcplite:mcp2026:varied"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    assert figures["requests"] == [5, 25]
    counted = figures["per_request"]
    assert set(counted) == {"bare_h11:varied", "mcplite", "mcplite:mcp2026:varied"}
    # A request is tens of thousands of instructions at least, and not tens of millions.
    assert all(10_000 < n < 10_000_000 for n in counted.values()), counted
