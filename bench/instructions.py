"""Instructions per request, counted by callgrind in the server process.

``python -m bench.instructions`` starts each server under ``valgrind
--tool=callgrind``, sends it requests one at a time over one keep-alive
connection (``http.client``), stops it with SIGTERM and reads the instructions
callgrind counted.  It does so twice, with ``A`` and ``B`` requests
(``--requests A,B``, 200 and 1,200 by default): ``(count(B) - count(A)) / (B - A)``
is the cost of one request, start and shutdown cancelled out.

A count is the same on a busy machine as on a quiet one (callgrind runs the
process on its own simulated CPU), so these ratios hold where the timed runs of
``python -m bench`` are too noisy to read.  They leave out what a count does not
see (the kernel's side of each socket call, cache misses, waiting) and what only
happens under concurrency (requests taken together in one loop turn): they are
the work of a request, not its time.

Rows: mcplite (and, with ``--plain``, mcplite with its speed paths off) on the
MCP-lite endpoint and on the MCP endpoint (2026-07-28, and 2025-06-18 as most
clients still speak it: the SDK's 2025 row's request), and the bare h11 loop;
each with one body repeated and with a new body per request (a new id and a text
of another length, ``bench.pyload.vary_body``).  ``--json`` prints the figures
as JSON instead of a table.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.pyload import vary_body
from bench.run import (
    ECHO_TEXT,
    MCP_2026_META,
    MCP_SDK_HEADERS,
    MCPLITE_BASE,
    jsonrpc_call,
    mcp_2026_headers,
    varied,
)
from bench.servers import ANCHORS, ROOT, free_port, wait_for_port

__all__ = ["Row", "count", "main", "rows"]

STARTUP_S = 180.0  # a Python start under callgrind takes 10-30 s


@dataclass(frozen=True, slots=True)
class Row:
    server: str  # mcplite, mcplite_plain or bare_h11
    endpoint: str  # lite, mcp2026 or mcp2025
    vary: bool

    @property
    def label(self) -> str:
        name = self.server if self.endpoint == "lite" else f"{self.server}:{self.endpoint}"
        return name + (":varied" if self.vary else "")


def rows(plain: bool) -> list[Row]:
    servers = ["mcplite", "mcplite_plain"] if plain else ["mcplite"]
    endpoints = ("lite", "mcp2026", "mcp2025")
    out = [Row(s, e, v) for s in servers for e in endpoints for v in (False, True)]
    return [*out, Row("bare_h11", "lite", False), Row("bare_h11", "lite", True)]


def _argv(row: Row, port: int) -> list[str]:
    if row.server == "bare_h11":
        return [sys.executable, str(ANCHORS / "bare_h11.py"), "--port", str(port)]
    return [
        *(sys.executable, "-m", "mcplite", "serve", "mcplite.demo:tools"),
        *("--http", f"127.0.0.1:{port}", "--no-grpc", "--loop", "asyncio"),
    ]


def _request(row: Row) -> tuple[str, bytes, dict[str, str]]:
    if row.endpoint == "mcp2026":
        body = jsonrpc_call("echo", {"text": ECHO_TEXT}, MCP_2026_META)
        return "/mcp", body, mcp_2026_headers("echo")
    if row.endpoint == "mcp2025":
        return "/mcp", jsonrpc_call("echo", {"text": ECHO_TEXT}), dict(MCP_SDK_HEADERS)
    body = jsonrpc_call("echo", {"text": ECHO_TEXT})
    return f"{MCPLITE_BASE}/calltools", body, {"Accept": "application/json"}


def count(row: Row, requests: int, workdir: Path) -> int:
    """The instructions callgrind counted in the server that answered ``requests``."""
    port = free_port()
    out = workdir / f"callgrind.{row.label}.{requests}".replace(":", "-")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env["MCPLITE_ACCEL"] = "0" if row.server == "mcplite_plain" else "1"
    with open(f"{out}.log", "wb") as log:
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *_argv(row, port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )
    try:
        if not wait_for_port(port, time.monotonic() + STARTUP_S, proc):
            raise RuntimeError(f"{row.label} did not listen: see {out}.log")
        path, body, headers = _request(row)
        headers = {"Content-Type": "application/json", **headers}
        template = varied(body, ECHO_TEXT)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for n in range(1, requests + 1):
                conn.request("POST", path, vary_body(template, n) if row.vary else body, headers)
                response = conn.getresponse()
                answer = response.read()
                if response.status != 200 or ECHO_TEXT.encode() not in answer:
                    raise RuntimeError(f"{row.label}: {response.status} {answer[:200]!r}")
        finally:
            conn.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(STARTUP_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    found = re.search(rb"^(?:summary|totals): (\d+)", out.read_bytes(), re.M)
    if found is None:
        raise RuntimeError(f"{row.label}: no count in {out}")
    return int(found.group(1))


def per_request(row: Row, low: int, high: int, workdir: Path) -> float:
    return (count(row, high, workdir) - count(row, low, workdir)) / (high - low)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", default="200,1200", help="A,B: the two request counts")
    parser.add_argument("--plain", action="store_true", help="also mcplite with MCPLITE_ACCEL=0")
    parser.add_argument("--only", default="", help="comma-separated row labels")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    low, high = (int(n) for n in args.requests.split(","))
    if not 0 < low < high:
        raise SystemExit("--requests A,B needs 0 < A < B")
    wanted = rows(args.plain)
    if args.only:
        names = set(args.only.split(","))
        wanted = [row for row in wanted if row.label in names]
    with (
        tempfile.TemporaryDirectory(prefix="mcplite-instructions-") as tmp,
        ThreadPoolExecutor(max(1, args.jobs)) as pool,
    ):
        counts = list(pool.map(lambda r: per_request(r, low, high, Path(tmp)), wanted))
    figures = {row.label: round(n) for row, n in zip(wanted, counts, strict=True)}
    if args.json:
        print(json.dumps({"requests": [low, high], "per_request": figures}))
        return
    h11 = {False: figures.get("bare_h11"), True: figures.get("bare_h11:varied")}
    print(f"instructions per request, server side ({low} and {high} requests, one connection)")
    for row in wanted:
        n, anchor = figures[row.label], h11[row.vary]
        ratio = f"  bare h11 / this: {anchor / n:.2f}x" if anchor else ""
        print(f"{row.label:28s} {n:>10,}{ratio}")


if __name__ == "__main__":
    main()
