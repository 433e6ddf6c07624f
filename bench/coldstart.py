"""Cold start: ``python -m bench.coldstart [--quick]``.

How long a server takes from the moment its process is started to its first
answer, and how much memory it holds then:

- ``mcplite stdio``: ``python -m mcplite stdio bench.toolgen:echo_tools``, driven as
  an MCP host drives it: ``initialize`` (protocol 2025-11-25) written at once, then,
  after its answer, ``notifications/initialized`` and a ``tools/call`` of ``echo``.
  Timed from just before ``Popen`` to the ``initialize`` answer and to the
  ``tools/call`` answer.
- ``mcplite serve``: ``python -m mcplite serve bench.toolgen:echo_tools`` with HTTP and
  gRPC (the default), and with ``--no-grpc``: timed to the first 200 answer of a
  ``tools/call`` of ``echo`` on ``POST /mcp-lite/v1/calltools``, the request sent
  again every 2 ms while the connection is refused (that loop is the measurement).
- the official SDK (``MCPServer``, or ``FastMCP`` in ``mcp`` 1.x) and fastmcp
  (``fastmcp.FastMCP``) with the same ``echo`` on stdio, as ``mcplite stdio``
  (``bench/anchors/mcp_peers.py``); a peer that is not installed is skipped.

Each start is repeated (interleaved: A B C ..., then again; 10 times, after one
untimed start of each so that every server's files are in the page cache; quick
mode: 3 times, a peer once, no untimed start), and each gives the times and the
server's ``VmRSS`` (``/proc/PID/status``) read just after the first answer.
mcplite's bytecode is written first (``compileall``), as ``pip install`` writes a
package's: the peers' is in site-packages already.

Then ``python -X importtime -m mcplite stdio ...`` is run once (stdin closed at
once, so the server starts, reads the end of its input and stops): how many
modules it imports, the ten with the largest cumulative import time, and which of
a list of heavy or optional modules are among them.

Prints one JSON line: ``{"rows": {name: {...}}, "imports": {...}, ...}``.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import http.client
import importlib.util
import json
import math
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/coldstart.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.servers import ROOT, anchor_argv, die_with_parent, free_port, rss_kib

__all__ = ["compile_bytecode", "first_http_answer", "main", "percentile", "started"]

ECHO_APP = "bench.toolgen:echo_tools"
ECHO_ARGUMENTS = {"text": "hello world"}
PROTOCOL_VERSION = "2025-11-25"
#: Seconds one start may take, to its last answer.
START_TIMEOUT = 60.0
#: Modules whose presence in a stdio start says something: mcplite's other
#: bindings and their stacks, and the standard library's heavier parts.
WATCHED_MODULES = (
    "grpclib",
    "h2",
    "hpack",
    "betterproto",
    "h11",
    "grpc",
    "google.protobuf",
    "sqlite3",
    "ssl",
    "json",
    "asyncio",
    "importlib.metadata",
    "email",
    "http.client",
    "subprocess",
    "zipfile",
    "uuid",
)


def call_message(request_id: int) -> dict[str, Any]:
    params = {"name": "echo", "arguments": ECHO_ARGUMENTS}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "mcplite-bench", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.9 is p90) of non-empty ``samples``."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def compile_bytecode() -> str:
    """Write the bytecode of ``mcplite`` and ``bench`` next to their sources, as ``pip
    install`` does for a package (the peers' is in site-packages already): without it,
    a start where ``PYTHONDONTWRITEBYTECODE`` is set compiles every module again."""
    for package in ("mcplite", "bench"):
        compileall.compile_dir(str(ROOT / package), quiet=1)
    return "compiled before timing (compileall of mcplite and bench)"


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MCPLITE_SECRET"] = os.urandom(32).hex()  # no warning about a random secret
    return env


@contextlib.contextmanager
def started(
    argv: list[str], log_path: Path, stdio: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    """A server process (stdin and stdout as pipes when ``stdio``, else closed and
    its log file), in its own session; killed with its group on the way out."""
    with open(log_path, "ab") as log:  # the child keeps its own copy
        proc = subprocess.Popen(
            die_with_parent(argv),
            stdin=subprocess.PIPE if stdio else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdio else log,
            stderr=log,
            cwd=ROOT,
            env=server_env(),
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


class LineReader:
    """JSON-RPC messages from a server's stdout, one per line, each read bounded."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None and proc.stdin is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self, request_id: int, deadline: float) -> dict[str, Any]:
        """The response to ``request_id`` (other messages are passed over); raises
        TimeoutError, or EOFError when the server closes its stdout."""
        while True:
            line, newline, rest = self.buffer.partition(b"\n")
            if newline:
                self.buffer = rest
                message = json.loads(line)
                if isinstance(message, dict) and message.get("id") == request_id:
                    return message
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError(f"no answer to request {request_id}")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("the server closed its stdout")
            self.buffer += chunk


def _checked(message: dict[str, Any], what: str) -> dict[str, Any]:
    result = message.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        raise RuntimeError(f"{what} failed: {json.dumps(message)[:300]}")
    return result


def stdio_start(argv: list[str], log_path: Path) -> dict[str, Any]:
    """One cold start on stdio: seconds to the initialize and tools/call answers, RSS."""
    t0 = time.perf_counter()
    with started(argv, log_path, stdio=True) as proc:
        deadline = time.monotonic() + START_TIMEOUT
        reader = LineReader(proc)
        reader.send(INITIALIZE)
        _checked(reader.answer(1, deadline), "initialize")
        initialized = time.perf_counter() - t0
        reader.send(INITIALIZED)
        reader.send(call_message(2))
        result = _checked(reader.answer(2, deadline), "tools/call")
        answered = time.perf_counter() - t0
        rss = rss_kib(proc.pid)
    if ECHO_ARGUMENTS["text"] not in json.dumps(result):
        raise RuntimeError(f"unexpected echo result: {json.dumps(result)[:300]}")
    return {"init_s": initialized, "answer_s": answered, "rss_kib": rss}


def first_http_answer(
    port: int,
    path: str,
    body: bytes,
    headers: dict[str, str],
    deadline: float,
    proc: subprocess.Popen[bytes],
) -> bytes:
    """POST ``body`` until a 200 answer (its body); while the connection is refused
    the request is sent again every 2 ms, until ``deadline`` (monotonic).  Raises
    TimeoutError, or RuntimeError when the server exits or answers another status."""
    headers = {"Content-Type": "application/json", **headers}
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=START_TIMEOUT)
        try:
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            data = response.read()
        except ConnectionRefusedError:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with status {proc.returncode}") from None
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing listening on port {port}") from None
            time.sleep(0.002)  # the retry interval of the measurement, not a wait
            continue
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
        return data


def serve_start(argv: list[str], port: int, log_path: Path) -> dict[str, Any]:
    """One cold start of ``mcplite serve``: seconds to the first tools/call answer, RSS."""
    body = json.dumps(call_message(1), separators=(",", ":")).encode()
    t0 = time.perf_counter()
    with started(argv, log_path) as proc:
        deadline = time.monotonic() + START_TIMEOUT
        data = first_http_answer(
            port, "/mcp-lite/v1/calltools", body, {"Accept": "application/json"}, deadline, proc
        )
        answered = time.perf_counter() - t0
        rss = rss_kib(proc.pid)
    _checked(json.loads(data), "tools/call")
    return {"answer_s": answered, "rss_kib": rss}


@dataclass(frozen=True, slots=True)
class Row:
    """A server started again and again: how to start it, and the start it gets."""

    name: str
    kind: str  # "stdio" or "http"
    argv: tuple[str, ...]
    peer: bool = False  # the official SDK or fastmcp: slower, fewer runs in quick mode

    def start(self, log_path: Path) -> dict[str, Any]:
        if self.kind == "stdio":
            return stdio_start(list(self.argv), log_path)
        port, grpc_port = free_port(), free_port()
        ports = {"{http}": f"127.0.0.1:{port}", "{grpc}": f"127.0.0.1:{grpc_port}"}
        return serve_start([ports.get(a, a) for a in self.argv], port, log_path)


def rows() -> tuple[list[Row], dict[str, str]]:
    """The rows to run, and why any other is not run."""
    python = sys.executable
    serve = (python, "-m", "mcplite", "serve", ECHO_APP, "--http", "{http}")
    out = [
        Row("mcplite stdio", "stdio", (python, "-m", "mcplite", "stdio", ECHO_APP)),
        Row("mcplite serve (HTTP+gRPC)", "http", (*serve, "--grpc", "{grpc}")),
        Row("mcplite serve --no-grpc", "http", (*serve, "--no-grpc")),
    ]
    skipped: dict[str, str] = {}
    for name, peer, module in (
        ("mcp_sdk stdio", "sdk", "mcp"),
        ("fastmcp stdio", "fastmcp", "fastmcp"),
    ):
        if importlib.util.find_spec(module) is None:
            skipped[name] = f"{module} is not installed"
            continue
        out.append(Row(name, "stdio", tuple(anchor_argv("mcp_peers.py", peer, "stdio")), peer=True))
    return out, skipped


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"status": "ok", "n": len(samples)}
    for key in ("init_s", "answer_s"):
        values = [s[key] for s in samples if key in s]
        if values:
            stem = key[:-2]
            out[f"{stem}_median_s"] = round(statistics.median(values), 4)
            out[f"{stem}_p90_s"] = round(percentile(values, 0.9), 4)
    rss = [s["rss_kib"] for s in samples if s.get("rss_kib")]
    out["rss_median_mib"] = round(statistics.median(rss) / 1024, 1) if rss else None
    out["samples"] = [
        {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()} for s in samples
    ]
    return out


_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)\s*$")


def import_profile() -> dict[str, Any]:
    """What ``python -X importtime -m mcplite stdio ECHO_APP`` imports (stdin at its end)."""
    argv = [sys.executable, "-X", "importtime", "-m", "mcplite", "stdio", ECHO_APP]
    done = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(),
        timeout=START_TIMEOUT,
        check=False,
    )
    modules: list[tuple[str, int, int, int]] = []  # name, self us, cumulative us, depth
    for line in done.stderr.splitlines():
        found = _IMPORT_LINE.match(line)
        if found:
            own, total, indent, name = found.groups()
            modules.append((name, int(own), int(total), len(indent) // 2))
    if done.returncode != 0 or not modules:
        return {"status": "n/a", "note": f"exit {done.returncode}: {done.stderr[-300:]}"}
    names = {m[0] for m in modules}
    top = sorted(modules, key=lambda m: m[2], reverse=True)[:10]
    mcplite_modules = [m for m in modules if m[0] == "mcplite" or m[0].startswith("mcplite.")]
    return {
        "status": "ok",
        "argv": " ".join(["python", *argv[1:]]),
        "modules": len(modules),
        "mcplite_modules": len(mcplite_modules),
        "total_self_ms": round(sum(m[1] for m in modules) / 1000, 1),
        "top_cumulative": [
            {
                "module": name,
                "cumulative_ms": round(total / 1000, 1),
                "self_ms": round(own / 1000, 1),
            }
            for name, own, total, _ in top
        ],
        "watched": {name: name in names for name in WATCHED_MODULES},
    }


def run(quick: bool, runs: int | None = None) -> dict[str, Any]:
    """Every row started ``runs`` times (peers once in quick mode), interleaved; in full
    mode after one untimed start of each, so that every server's files are in the page
    cache (a host's second start, not a first after boot)."""
    if runs is None:
        runs = 3 if quick else 10
    peer_runs = 1 if quick else runs
    bytecode = compile_bytecode()
    todo, skipped = rows()
    samples: dict[str, list[dict[str, Any]]] = {row.name: [] for row in todo}
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="mcplite-bench-coldstart-") as workdir:
        for round_ in range(0 if quick else -1, runs):  # -1: the untimed start
            for row in todo:
                if row.name in failures or (row.peer and round_ >= peer_runs):
                    continue
                log_path = Path(workdir) / (re.sub(r"\W+", "-", row.name) + ".log")
                try:
                    sample = row.start(log_path)
                except (OSError, RuntimeError, TimeoutError, EOFError, ValueError) as exc:
                    tail = log_path.read_text(errors="replace")[-300:] if log_path.exists() else ""
                    failures[row.name] = f"{exc} | {tail}".strip()
                    continue
                if round_ >= 0:
                    samples[row.name].append(sample)
        imports = import_profile()
    results: dict[str, Any] = {}
    for row in todo:
        if row.name in failures:
            results[row.name] = {"status": "n/a", "note": failures[row.name]}
        else:
            results[row.name] = {"kind": row.kind, **summarize(samples[row.name])}
    for name, note in skipped.items():
        results[name] = {"status": "skipped", "note": note}
    return {
        "quick": quick,
        "runs": runs,
        "peer_runs": peer_runs,
        "warmup": not quick,
        "bytecode": bytecode,
        "protocol_version": PROTOCOL_VERSION,
        "rows": results,
        "imports": imports,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coldstart", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 starts of mcplite, 1 of a peer")
    parser.add_argument("--runs", type=int, help="starts of each server (10; quick 3)")
    args = parser.parse_args(argv)
    if args.runs is not None and not 1 <= args.runs <= 100:
        parser.error("--runs must be between 1 and 100")
    print(json.dumps(run(args.quick, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
