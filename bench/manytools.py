"""Many tools: ``python -m bench.manytools [--quick]``.

A server with a thousand tools (``bench.toolgen``: generated async functions with
three typed parameters each, distinct names and docstrings), served over MCP HTTP
(``POST /mcp``, protocol 2025-11-25, stateless: no ``initialize``, no session, one
JSON answer per POST, which the three servers all answer) by:

- ``mcplite``: ``python -m mcplite serve bench.toolgen:tools_1000 --no-grpc``; also
  its MCP-lite list, ``POST /mcp-lite/v1/tools``, on the same server;
- ``mcplite --page-size 100``: the same with MCP's lists in pages of 100: the first
  page, and a walk of every page (``nextCursor`` followed to the end);
- ``mcp_sdk`` and ``fastmcp``: the official SDK and fastmcp with the same functions
  (``bench/anchors/mcp_peers.py``, under uvicorn, ``stateless_http=True``,
  ``json_response=True``); a peer that is not installed is skipped.

For each server: ``start``, the seconds from just before ``Popen`` to the first
answer of ``tools/list`` (the request sent again every 2 ms while the connection is
refused); ``rss``, its ``VmRSS`` then; then ``tools/list`` requests one at a time
over a keep-alive connection (opened, untimed, at the start of each round), the
servers interleaved in rounds: median and p99 latency, and the answer's size in
bytes.  Every answer is checked: the first one
lists every tool (or the first page, with a cursor), the others are 200s of the
same size.

Quick mode: 200 tools, 10 requests per server (a smoke run: the peers' starts
with a thousand tools alone take several seconds).

Prints one JSON line: ``{"servers": {name: {...}}, "tools": 1000, ...}``.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/manytools.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.coldstart import compile_bytecode, first_http_answer, percentile, started
from bench.servers import anchor_argv, free_port, rss_kib
from bench.toolgen import TOOL_COUNT

__all__ = ["main", "run"]

PROTOCOL_VERSION = "2025-11-25"
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": PROTOCOL_VERSION,
}
LITE_HEADERS = {"Accept": "application/json"}
PAGE_SIZE = 100
START_TIMEOUT = 120.0
REQUEST_TIMEOUT = 30.0


def list_body(cursor: str | None = None) -> bytes:
    params = {} if cursor is None else {"cursor": cursor}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}
    return json.dumps(message, separators=(",", ":")).encode()


@dataclass(slots=True)
class Server:
    """One server under test, its keep-alive connection and what it measured."""

    name: str
    argv: list[str]
    port: int
    tools: int
    proc: Any = None
    conn: http.client.HTTPConnection | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        """One POST on the kept-alive connection; its 200 body (RuntimeError otherwise)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT)
        self.conn.request("POST", path, body, {"Content-Type": "application/json", **headers})
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status}: {data[:300]!r}")
        return data

    def timed(self, key: str, path: str, body: bytes, headers: dict[str, str], size: int) -> None:
        t0 = time.perf_counter()
        data = self.post(path, body, headers)
        self.samples.setdefault(key, []).append(time.perf_counter() - t0)
        if len(data) != size:
            raise RuntimeError(f"{path}: {len(data)} bytes, not {size} as at first")

    def walk(self) -> tuple[int, int]:
        """Every page of tools/list, cursor after cursor: (pages, tools)."""
        pages = tools = 0
        cursor = None
        while True:
            result = json.loads(self.post("/mcp", list_body(cursor), MCP_HEADERS))["result"]
            pages, tools = pages + 1, tools + len(result["tools"])
            cursor = result.get("nextCursor")
            if not cursor or pages > self.tools:
                return pages, tools


def tools_of(data: bytes) -> tuple[list[str], str | None]:
    """The names a tools/list answer lists, and its nextCursor."""
    result = json.loads(data)["result"]
    return [tool["name"] for tool in result["tools"]], result.get("nextCursor")


def servers(count: int) -> tuple[list[Server], dict[str, str]]:
    """The servers of ``count`` tools to run, and why any other is not run."""
    python = sys.executable
    serve = [python, "-m", "mcplite", "serve", f"bench.toolgen:tools_{count}", "--no-grpc"]
    out = []
    for name, extra in (("mcplite", []), (f"mcplite --page-size {PAGE_SIZE}", ["--page-size"])):
        port = free_port()
        argv = [*serve, "--http", f"127.0.0.1:{port}"]
        if extra:
            argv += [*extra, str(PAGE_SIZE)]
        out.append(Server(name, argv, port, count))
    skipped: dict[str, str] = {}
    for name, peer, module in (("mcp_sdk", "sdk", "mcp"), ("fastmcp", "fastmcp", "fastmcp")):
        if importlib.util.find_spec(module) is None:
            skipped[name] = f"{module} is not installed"
            continue
        port = free_port()
        argv = anchor_argv("mcp_peers.py", peer, "http", "--port", str(port))
        out.append(Server(name, [*argv, "--tools", str(count)], port, count))
    return out, skipped


def start(server: Server, stack: ExitStack, workdir: Path) -> None:
    """Start ``server`` and time its first tools/list answer; check what it lists."""
    log_path = workdir / f"{server.name.split()[0]}-{server.port}.log"
    t0 = time.perf_counter()
    server.proc = stack.enter_context(started(server.argv, log_path))
    deadline = time.monotonic() + START_TIMEOUT
    try:
        data = first_http_answer(
            server.port, "/mcp", list_body(), MCP_HEADERS, deadline, server.proc
        )
    except (RuntimeError, TimeoutError) as exc:
        tail = log_path.read_text(errors="replace")[-300:] if log_path.exists() else ""
        raise RuntimeError(f"{exc} | {tail}") from None
    elapsed = time.perf_counter() - t0
    rss = rss_kib(server.proc.pid)
    names, cursor = tools_of(data)
    paged = server.name.startswith("mcplite --page-size")
    wanted = min(PAGE_SIZE, server.tools) if paged else server.tools
    more = paged and server.tools > PAGE_SIZE
    if len(names) != wanted or len(set(names)) != wanted or bool(cursor) != more:
        raise RuntimeError(f"tools/list listed {len(names)} tools, cursor {cursor!r}")
    server.figures.update(
        start_s=round(elapsed, 3),
        rss_mib=None if rss is None else round(rss / 1024, 1),
        bytes=len(data),
        tools_listed=len(names),
    )
    if server.name == "mcplite":
        lite = server.post("/mcp-lite/v1/tools", b"{}", LITE_HEADERS)
        listed = [tool["name"] for tool in json.loads(lite)["tools"]]
        if not set(names) <= set(listed):
            raise RuntimeError("POST /mcp-lite/v1/tools does not list every tool")
        server.figures["lite_bytes"] = len(lite)
    if paged:
        pages, tools = server.walk()
        if tools != server.tools:
            raise RuntimeError(f"a walk of every page listed {tools} tools in {pages} pages")
        server.figures["pages"] = pages


def one_round(server: Server, requests: int) -> None:
    # A connection of its own for each round, opened untimed: between its rounds a
    # server's connection is idle longer than uvicorn's keep-alive (5 s) while the
    # other servers take their turns, and uvicorn closes it.
    if server.conn is not None:
        server.conn.close()
    server.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=REQUEST_TIMEOUT)
    server.conn.connect()
    figures = server.figures
    for _ in range(requests):
        server.timed("list", "/mcp", list_body(), MCP_HEADERS, figures["bytes"])
        if "lite_bytes" in figures:
            server.timed("lite", "/mcp-lite/v1/tools", b"{}", LITE_HEADERS, figures["lite_bytes"])
        if "pages" in figures:
            t0 = time.perf_counter()
            server.walk()
            server.samples.setdefault("walk", []).append(time.perf_counter() - t0)


def latency(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "median_ms": round(statistics.median(samples) * 1000, 3),
        "p99_ms": round(percentile(samples, 0.99) * 1000, 3),
    }


def run(quick: bool, requests: int | None = None, count: int | None = None) -> dict[str, Any]:
    """Start each server of ``count`` tools in turn (timed), then ``requests``
    tools/list of each, in five interleaved rounds after an untimed one."""
    if requests is None:
        requests = 10 if quick else 200
    if count is None:
        count = 200 if quick else TOOL_COUNT
    rounds = min(5, requests)
    bytecode = compile_bytecode()
    results: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="mcplite-bench-manytools-") as tmp,
        ExitStack() as stack,
    ):
        workdir = Path(tmp)
        todo, skipped = servers(count)
        running: list[Server] = []
        for server in todo:
            try:
                start(server, stack, workdir)
            except (OSError, RuntimeError, ValueError, KeyError) as exc:
                results[server.name] = {"status": "n/a", "note": str(exc)[:400]}
                continue
            running.append(server)
        for server in running:
            one_round(server, 1)  # untimed: the connection open, caches warm
            server.samples.clear()
        for round_ in range(rounds):
            share = requests // rounds + (round_ < requests % rounds)
            for server in list(running):
                try:
                    one_round(server, share)
                except (OSError, RuntimeError, ValueError, KeyError) as exc:
                    results[server.name] = {"status": "n/a", "note": str(exc)[:400]}
                    running.remove(server)
        for server in running:
            entry: dict[str, Any] = {"status": "ok", **server.figures}
            for key, samples in server.samples.items():
                entry[key] = latency(samples)
            results[server.name] = entry
            if server.conn is not None:
                server.conn.close()
        for name, note in skipped.items():
            results[name] = {"status": "skipped", "note": note}
    order = ["mcplite", f"mcplite --page-size {PAGE_SIZE}", "mcp_sdk", "fastmcp"]
    return {
        "quick": quick,
        "tools": count,
        "page_size": PAGE_SIZE,
        "requests": requests,
        "protocol_version": PROTOCOL_VERSION,
        "bytecode": bytecode,
        "servers": {name: results[name] for name in order if name in results},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.manytools", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200 tools, 10 requests")
    parser.add_argument("--requests", type=int, help="tools/list per server (200; quick 10)")
    parser.add_argument("--tools", type=int, help=f"tools per server ({TOOL_COUNT}; quick 200)")
    args = parser.parse_args(argv)
    if args.requests is not None and not 1 <= args.requests <= 100_000:
        parser.error("--requests must be between 1 and 100000")
    if args.tools is not None and not 1 <= args.tools <= 10_000:
        parser.error("--tools must be between 1 and 10000")
    print(json.dumps(run(args.quick, args.requests, args.tools)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
