"""The benchmark's quick mode runs end to end and writes the results it promises.

Each test runs ``python -m bench --quick`` as a subprocess with a bounded timeout
(servers on 127.0.0.1, ephemeral ports, killed by the harness) and reads the JSON
file it writes.  mcplite, every anchor and the in-process section must all
produce figures, and the big-payload and many-streams phases theirs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    assert rps(results["grpc"]["unary"], "mcplite") > 0

    fig = results["http"]["servers"]["bare_h11"]["results"]["50"]
    for key in ("p50_us", "p90_us", "p99_us", "p999_us", "errors", "non2xx", "runs"):
        assert key in fig, key

    for check in results["targets"]:
        assert set(check) >= {"name", "value", "unit", "target", "met"}
    assert len(results["targets"]) >= 9
    assert "bare_h11" in results["memory"]

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
        "--no-payload",
        "--no-streams",
        "--no-plot",
    )

    assert results["meta"]["http_generator"] == "python"
    assert results["meta"]["grpc_generator"] == "grpcio"
    assert rps(results["http"], "bare_h11") > 0
    assert rps(results["grpc"]["unary"], "grpcio") > 0
    assert any("Python generator" in note for note in results["notes"])
