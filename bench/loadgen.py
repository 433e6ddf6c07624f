"""Drive a server with a load generator and parse its figures into one shape.

HTTP: wrk (a Lua POST script whose ``done()`` hook prints the latency
percentiles as JSON), or ``bench.pyload`` when wrk is missing.  A target with a
``template`` sends another body each time (``bench.pyload.vary_body``; in wrk, a
Lua ``request()`` that builds the same bodies).
gRPC: h2load with a prebuilt length-prefixed body (unary and server-streaming
calls are both one POST with one request message; h2load reads the response
stream to its trailers), percentiles from its ``--log-file``; or
``bench.grpcload`` (grpcio) when h2load is missing.

Every generator runs as a child process pinned to the load core, bounded by a
timeout of its duration plus a margin.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.pyload import ID_MARK, PAD, PAD_MARK, percentile
from bench.servers import ROOT, Pinning

__all__ = [
    "GrpcTarget",
    "HttpTarget",
    "LoadResult",
    "grpc_frame",
    "grpc_generator",
    "http_generator",
    "post_once",
    "run_grpc",
    "run_http",
]


@dataclass(slots=True)
class HttpTarget:
    port: int
    path: str
    body: bytes  # the body when constant, else one the template gives (for the check)
    headers: dict[str, str] = field(default_factory=dict)
    template: bytes | None = None  # a new body per request: bench.pyload.vary_body


def post_once(target: HttpTarget, timeout: float) -> tuple[Any, bytes] | str:
    """One POST of ``target``'s body: the JSON-RPC response's ``result`` and the
    response's bytes, or what went wrong (a check before a target is loaded)."""
    conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json", **target.headers}
        conn.request("POST", target.path, target.body, headers)
        response = conn.getresponse()
        data = response.read()
    except OSError as exc:
        return f"request failed: {exc}"
    finally:
        conn.close()
    if response.status != 200:
        return f"HTTP {response.status}: {data[:300]!r}"
    try:
        return json.loads(data)["result"], data
    except (ValueError, KeyError, TypeError):
        return f"no JSON-RPC result: {data[:300]!r}"


@dataclass(slots=True)
class GrpcTarget:
    port: int
    method: str  # "/mcplite.MCPLite/CallTool"
    message: bytes  # serialized request message, no frame
    stream: bool = False
    expect_bytes: int = 0  # framed response bytes of one good call (from the check)


@dataclass(slots=True)
class LoadResult:
    generator: str
    conns: int
    requests: int = 0
    duration_s: float = 0.0
    rps: float = 0.0
    p50_us: float = 0.0
    p90_us: float = 0.0
    p99_us: float = 0.0
    p999_us: float = 0.0
    errors: int = 0
    non2xx: int = 0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def http_generator(prefer: str = "auto") -> str:
    """``"wrk"`` when installed (and not overridden), else ``"python"``."""
    if prefer in ("auto", "wrk") and shutil.which("wrk"):
        return "wrk"
    return "python"


def grpc_generator(prefer: str = "auto") -> str:
    """``"h2load"`` when installed (and not overridden), else ``"grpcio"``."""
    if prefer in ("auto", "h2load") and shutil.which("h2load"):
        return "h2load"
    return "grpcio"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=_env(), check=False
    )


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_WRK_DONE = r"""
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH_JSON {\"requests\":%d,\"duration_us\":%d,\"connect\":%d,\"read\":%d," ..
    "\"write\":%d,\"status\":%d,\"timeout\":%d,\"p50\":%d,\"p90\":%d,\"p99\":%d,\"p999\":%d}\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9)))
end
"""


def _wrk_request(template: bytes) -> list[str]:
    """A Lua ``request()`` giving request n the body ``bench.pyload.vary_body`` gives."""
    head, rest = template.split(ID_MARK)
    middle, tail = rest.split(PAD_MARK)
    pieces = (head, middle, tail, PAD)
    a, b, c, pad = (_lua_string(piece.decode()) for piece in pieces)
    return [
        f"local head, middle, tail, pad = {a}, {b}, {c}, {pad}",
        "local n = 0",
        "request = function()",
        "  n = n + 1",
        "  local body = head .. n .. middle .. pad:sub(1, n % #pad) .. tail",
        "  return wrk.format(nil, nil, nil, body)",
        "end",
    ]


def write_wrk_script(target: HttpTarget, workdir: Path) -> Path:
    body = target.template or target.body
    body_path = workdir / f"body-{target.port}-{abs(hash(body))}.json"
    body_path.write_bytes(target.body)
    lines = [
        'wrk.method = "POST"',
        f'local f = assert(io.open({_lua_string(str(body_path))}, "rb"))',
        'wrk.body = f:read("*a")',
        "f:close()",
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    lines += [
        f"wrk.headers[{_lua_string(k)}] = {_lua_string(v)}" for k, v in target.headers.items()
    ]
    if target.template is not None:
        lines += _wrk_request(target.template)
    script = workdir / f"post-{target.port}-{abs(hash((target.path, body)))}.lua"
    script.write_text("\n".join(lines) + "\n" + _WRK_DONE)
    return script


def run_http(
    target: HttpTarget,
    conns: int,
    duration: float,
    generator: str,
    pinning: Pinning,
    workdir: Path,
) -> LoadResult:
    """One timed pass of ``conns`` keep-alive connections against ``target``."""
    url = f"http://127.0.0.1:{target.port}{target.path}"
    result = LoadResult(generator=generator, conns=conns)
    if generator == "wrk":
        seconds = max(1, round(duration))
        script = write_wrk_script(target, workdir)
        argv = [
            "wrk",
            "-t1",
            f"-c{conns}",
            f"-d{seconds}s",
            "--timeout",
            "5s",
            "-s",
            str(script),
            url,
        ]
        try:
            done = _run(pinning.load(argv), timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            result.note = "wrk timed out"
            return result
        match = re.search(r"BENCH_JSON (\{.*\})", done.stdout)
        if not match:
            result.note = f"wrk gave no figures: {(done.stdout + done.stderr)[-300:]}"
            return result
        fig = json.loads(match.group(1))
        result.requests = fig["requests"]
        result.duration_s = fig["duration_us"] / 1e6
        result.rps = round(fig["requests"] / result.duration_s, 1) if result.duration_s else 0.0
        result.p50_us, result.p90_us = float(fig["p50"]), float(fig["p90"])
        result.p99_us, result.p999_us = float(fig["p99"]), float(fig["p999"])
        result.errors = fig["connect"] + fig["read"] + fig["write"] + fig["timeout"]
        result.non2xx = fig["status"]
        return result
    body = target.template or target.body
    body_path = workdir / f"body-{target.port}-{abs(hash(body))}.json"
    body_path.write_bytes(body)
    argv = [
        sys.executable,
        "-m",
        "bench.pyload",
        "--port",
        str(target.port),
        "--path",
        target.path,
        "--body-file",
        str(body_path),
        "--conns",
        str(conns),
        "--duration",
        str(duration),
    ]
    for name, value in target.headers.items():
        argv += ["--header", f"{name}: {value}"]
    if target.template is not None:
        argv.append("--template")
    return _run_python_generator(pinning.load(argv), duration, result)


def _run_python_generator(argv: list[str], duration: float, result: LoadResult) -> LoadResult:
    try:
        done = _run(argv, timeout=duration + 60)
    except subprocess.TimeoutExpired:
        result.note = f"{result.generator} generator timed out"
        return result
    try:
        fig = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result.note = f"{result.generator} generator failed: {done.stderr[-300:]}"
        return result
    for key in ("requests", "duration_s", "rps", "p50_us", "p90_us", "p99_us", "p999_us"):
        setattr(result, key, fig[key])
    result.errors, result.non2xx = fig["errors"], fig["non2xx"]
    return result


def grpc_frame(message: bytes) -> bytes:
    """gRPC length-prefixed message: flag 0 (uncompressed), 4-byte big-endian length."""
    return b"\x00" + struct.pack(">I", len(message)) + message


_H2_REQUESTS = re.compile(
    r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout"
)
_H2_TRAFFIC = re.compile(r"traffic: .*\((\d+)\) data")
_H2_FINISHED = re.compile(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s")
_H2_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")


def run_grpc(
    target: GrpcTarget,
    conns: int,
    duration: float,
    generator: str,
    pinning: Pinning,
    workdir: Path,
) -> LoadResult:
    """One timed pass of ``conns`` HTTP/2 connections, one call in flight on each."""
    result = LoadResult(generator=generator, conns=conns)
    tag = f"{target.port}-{target.method.rsplit('/', 1)[-1]}-{conns}"
    if generator == "h2load":
        body = workdir / f"grpc-{tag}.bin"
        body.write_bytes(grpc_frame(target.message))
        log = workdir / f"h2load-{tag}.log"
        log.unlink(missing_ok=True)
        seconds = max(1, round(duration))
        argv = [
            "h2load",
            "-c",
            str(conns),
            "-m",
            "1",
            "-t",
            "1",
            "-D",
            str(seconds),
            "-d",
            str(body),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            f"--log-file={log}",
            f"http://127.0.0.1:{target.port}{target.method}",
        ]
        try:
            done = _run(pinning.load(argv), timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            result.note = "h2load timed out"
            return result
        requests = _H2_REQUESTS.search(done.stdout)
        if requests is None:
            result.note = f"h2load gave no figures: {(done.stdout + done.stderr)[-300:]}"
            return result
        succeeded, failed, errored, timed_out = (int(requests.group(i)) for i in (4, 5, 6, 7))
        status = _H2_STATUS.search(done.stdout)
        ok_2xx = int(status.group(1)) if status else succeeded
        latencies: list[int] = []
        if log.exists():
            for line in log.read_text().splitlines():
                parts = line.split("\t")
                if len(parts) >= 3 and parts[1].startswith("2"):
                    latencies.append(int(parts[2]))
        latencies.sort()
        finished = _H2_FINISHED.search(done.stdout)
        elapsed = float(seconds)
        if finished is not None:
            elapsed = float(finished.group(1)) / (1000 if finished.group(2) == "ms" else 1)
        result.requests = succeeded
        result.duration_s = round(elapsed, 3)
        result.rps = round(succeeded / elapsed, 1) if elapsed > 0 else 0.0
        result.p50_us = percentile(latencies, 50)
        result.p90_us = percentile(latencies, 90)
        result.p99_us = percentile(latencies, 99)
        result.p999_us = percentile(latencies, 99.9)
        result.errors = failed + errored + timed_out
        result.non2xx = max(0, succeeded - ok_2xx)
        traffic = _H2_TRAFFIC.search(done.stdout)
        if traffic is not None and succeeded and target.expect_bytes:
            # h2load cannot see grpc-status; a failed call has a (near) empty body.
            per_call = int(traffic.group(1)) / succeeded
            if per_call < 0.8 * target.expect_bytes:
                result.note = (
                    f"responses average {per_call:.0f} data bytes, a good one has "
                    f"{target.expect_bytes}: some calls probably failed with a grpc-status"
                )
        return result
    body = workdir / f"grpcmsg-{tag}.bin"
    body.write_bytes(target.message)
    argv = [
        sys.executable,
        "-m",
        "bench.grpcload",
        "--port",
        str(target.port),
        "--method",
        target.method,
        "--body-file",
        str(body),
        "--conns",
        str(conns),
        "--duration",
        str(duration),
    ]
    if target.stream:
        argv.append("--stream")
    return _run_python_generator(pinning.load(argv), duration, result)
