"""Big payloads: ``python -m bench.payload [--quick] [--cpus S,L | --no-pin]``.

A tool that takes and answers about 1 MiB of JSON, in two shapes:

- ``text``: ``big_text``, one string of 1 MiB;
- ``records``: ``big_records``, a list of about 5,000 small objects (seven fields
  each, 1 MiB of compact JSON), checked against their schema on the way in and
  answered as ``{"records": [...]}``;

served by, each row a server of its own started fresh for each shape:

- ``mcplite``: ``mcplite serve bench.payloadtools``, MCP-lite JSON-RPC, ``POST
  /mcp-lite/v1/rpc``;
- ``mcplite_mcp``: the same server, MCP, ``POST /mcp`` (``MCP-Protocol-Version:
  2025-06-18``, stateless, answered as JSON);
- ``mcp_sdk``: the official SDK with the same tools (``bench/anchors/mcp_sdk.py
  --payload``), the same request bytes as ``mcplite_mcp``;
- ``mcplite_grpc``: mcplite's gRPC binding, ``CallTool``;
- ``grpcio``: a ``grpc.aio`` server with the same tools (``bench/anchors/grpcio_server.py``).

The limits are raised for this phase: mcplite's ``--max-body-size`` to 8 MiB (its
default, 1 MiB, refuses these requests), ``--grpc-max-message-size`` and grpcio's
to 16 MiB (the default 4 MiB would do, but this phase measures payloads, not limits).

Each row is checked once (its answer must carry the payload back, whole), then
loaded with keep-alive connections (HTTP: ``bench.pyload``, Python asyncio; gRPC:
``bench.grpcload``, grpcio, one channel per caller), ``--conns`` at a time, one
call in flight on each, for ``--duration`` seconds: calls/s and latency
percentiles.  Python generators are enough here: each call moves 2 MiB, so the
server, not the generator, is the limit.  Memory: ``VmRSS`` once the server
listens, and ``VmHWM`` (its peak RSS) after the run.

Prints one JSON line last: ``{"shapes": {shape: {"rows": {row: ...}}}, ...}``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.loadgen import GrpcTarget, HttpTarget, post_once, run_grpc, run_http
from bench.payloadtools import record_list, text_of
from bench.protogen import GeneratedStubs, generate_stubs
from bench.report import aggregate
from bench.servers import Pinning, ServerProcess, anchor_argv, free_port, rss_kib

__all__ = ["add_pinning_arguments", "main", "pinning_of", "run"]

ROWS = ("mcplite", "mcplite_mcp", "mcp_sdk", "mcplite_grpc", "grpcio")
SHAPES = ("text", "records")
#: The tool of each shape, and the name of its one argument.
TOOLS = {"text": ("big_text", "text"), "records": ("big_records", "records")}
MAX_BODY_SIZE = 8 << 20
GRPC_MAX_MESSAGE_SIZE = 16 << 20
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}
CALL_TOOL = "/mcplite.MCPLite/CallTool"


@dataclass(slots=True)
class Settings:
    quick: bool
    duration: float
    rounds: int
    warmup: float
    conns: list[int]
    rows: list[str]
    shapes: list[str]
    pinning: Pinning
    startup_timeout: float
    workdir: Path


def jsonrpc_body(tool: str, arguments: dict[str, Any]) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return json.dumps(message, separators=(",", ":")).encode()


def grpc_request(stubs: GeneratedStubs, tool: str, arguments: dict[str, Any]) -> bytes:
    pb2 = _pb2(stubs)
    request = pb2.ToolRequest(name=tool)
    request.arguments.update(arguments)
    return bytes(request.SerializeToString())


def _pb2(stubs: GeneratedStubs) -> Any:
    if str(stubs.directory) not in sys.path:
        sys.path.insert(0, str(stubs.directory))
    return importlib.import_module("mcplite_pb2")  # generated at bench time


def carries(shape: str, result: Any, payload: Any) -> bool:
    """Whether a tools/call result (MCP-lite, MCP or the gRPC result as JSON) holds
    the payload whole: the text in a text item, or the records (in
    ``structuredContent`` on MCP, in the first content item elsewhere)."""
    if not isinstance(result, dict) or result.get("isError"):
        return False
    content = result.get("content") or []
    if shape == "text":
        return any(isinstance(c, dict) and c.get("text") == payload for c in content)
    structured = result.get("structuredContent")
    if isinstance(structured, dict) and "records" in structured:
        return bool(structured["records"] == payload)
    first = content[0] if content else None
    return isinstance(first, dict) and first.get("records") == payload


def verify_http(target: HttpTarget, shape: str, payload: Any) -> str | None:
    """None when one call answers 200 with the payload whole; else what went wrong."""
    answered = post_once(target, 30)
    if isinstance(answered, str):
        return answered
    result, data = answered
    if not carries(shape, result, payload):
        return f"the answer does not carry the payload back: {data[:300]!r}"
    return None


def verify_grpc(stubs: GeneratedStubs, target: GrpcTarget, shape: str, payload: Any) -> str | None:
    import grpc
    from google.protobuf import json_format

    pb2 = _pb2(stubs)
    options = [("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_SIZE)]
    channel = grpc.insecure_channel(f"127.0.0.1:{target.port}", options=options)
    try:
        call = channel.unary_unary(target.method, response_deserializer=pb2.ToolResponse.FromString)
        response = call(target.message, timeout=30)
    except grpc.RpcError as exc:
        return f"gRPC error {exc.code()}: {exc.details()}"
    finally:
        channel.close()
    result = json_format.MessageToDict(response.result)
    if not carries(shape, result, payload):
        return f"the answer does not carry the payload back: {str(result)[:300]}"
    return None


class Rows:
    """The servers of the phase and the workload of each."""

    def __init__(self, settings: Settings, stubs: GeneratedStubs | None) -> None:
        self.settings = settings
        self.stubs = stubs
        self.started = 0

    def server(self, row: str) -> ServerProcess | None:
        """A new (not yet started) server for ``row``; None when it cannot run here."""
        port = free_port()
        if row in ("mcplite", "mcplite_mcp"):
            binding = ["--http", f"127.0.0.1:{port}", "--no-grpc"]
            argv = [*self._mcplite(), *binding, "--max-body-size", str(MAX_BODY_SIZE)]
        elif row == "mcplite_grpc":
            binding = ["--no-http", "--grpc", f"127.0.0.1:{port}"]
            argv = [*self._mcplite(), *binding, "--grpc-max-message-size"]
            argv.append(str(GRPC_MAX_MESSAGE_SIZE))
        elif row == "mcp_sdk":
            argv = anchor_argv("mcp_sdk.py", "--port", str(port), "--payload")
        elif row == "grpcio":
            if self.stubs is None:
                return None
            stubs = ["--stubs", str(self.stubs.directory)]
            limit = ["--max-message-size", str(GRPC_MAX_MESSAGE_SIZE)]
            argv = anchor_argv("grpcio_server.py", "--port", str(port), *stubs, *limit)
        else:
            raise ValueError(row)
        self.started += 1
        return ServerProcess(
            name=row,
            argv=argv,
            ports=[port],
            log_path=self.settings.workdir / f"{row}-{self.started}.log",
            startup_timeout=self.settings.startup_timeout,
            extra_env={"MCPLITE_SECRET": os.urandom(32).hex()},
        )

    @staticmethod
    def _mcplite() -> list[str]:
        return [sys.executable, "-m", "mcplite", "serve", "bench.payloadtools"]


def one_round(
    rows: Rows,
    row: str,
    shape: str,
    payload: Any,
    bodies: dict[str, bytes],
) -> dict[str, Any]:
    """A fresh server for ``row``: checked, loaded at each connection count; its memory."""
    settings = rows.settings
    server = rows.server(row)
    if server is None:
        return {"status": "skipped", "note": "no gRPC stubs"}
    try:
        if not server.start(settings.pinning):
            return {"status": "skipped", "note": server.note, "log_tail": server.log_tail()}
        assert server.pid is not None
        rss_start = rss_kib(server.pid, "VmRSS")
        port = server.ports[0]
        drive: Callable[[int, float], Any]
        if row in ("mcplite_grpc", "grpcio"):
            assert rows.stubs is not None
            grpc_target = GrpcTarget(port, CALL_TOOL, bodies["grpc"])
            problem = verify_grpc(rows.stubs, grpc_target, shape, payload)

            def drive(conns: int, seconds: float) -> Any:
                return run_grpc(
                    grpc_target, conns, seconds, "grpcio", settings.pinning, settings.workdir
                )

        else:
            if row == "mcplite":
                target = HttpTarget(port, "/mcp-lite/v1/rpc", bodies["http"], {})
            else:
                target = HttpTarget(port, "/mcp", bodies["http"], dict(MCP_HEADERS))
            problem = verify_http(target, shape, payload)

            def drive(conns: int, seconds: float) -> Any:
                return run_http(
                    target, conns, seconds, "python", settings.pinning, settings.workdir
                )

        if problem:
            return {"status": "skipped", "note": f"check failed: {problem}"}
        if settings.warmup > 0:
            drive(1, settings.warmup)
        results: dict[str, Any] = {}
        for conns in settings.conns:
            results[str(conns)] = drive(conns, settings.duration).as_dict()
            if not server.alive():
                return {"status": "skipped", "note": f"died: {server.log_tail()}"}
        return {
            "status": "ok",
            "results": results,
            "rss_start_kib": rss_start,
            "peak_rss_kib": rss_kib(server.pid, "VmHWM"),
            "rss_end_kib": rss_kib(server.pid, "VmRSS"),
        }
    finally:
        server.stop()


def _median(values: list[int]) -> int | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One row over its rounds: medians of the load figures and of the memory figures."""
    good = [r for r in rounds if r.get("status") == "ok"]
    if not good:
        failed = rounds[-1] if rounds else {"note": "not run"}
        return {"status": "skipped", "note": failed.get("note", ""), **_tail(failed)}
    results: dict[str, Any] = {}
    for conns in good[0]["results"]:
        results[conns] = aggregate([r["results"][conns] for r in good])
    start = _median([r["rss_start_kib"] for r in good if r.get("rss_start_kib")])
    peak = _median([r["peak_rss_kib"] for r in good if r.get("peak_rss_kib")])
    return {
        "status": "ok",
        "results": results,
        "rss_start_kib": start,
        "peak_rss_kib": peak,
        "peak_growth_kib": None if start is None or peak is None else peak - start,
        "rounds": [{k: v for k, v in r.items() if k != "results"} for r in rounds],
    }


def _tail(entry: dict[str, Any]) -> dict[str, Any]:
    return {"log_tail": entry["log_tail"]} if entry.get("log_tail") else {}


def run(settings: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {
        "quick": settings.quick,
        "duration_s": settings.duration,
        "rounds": settings.rounds,
        "conns": settings.conns,
        "pinning": settings.pinning.describe(),
        "generators": {"http": "python (bench.pyload)", "grpc": "grpcio (bench.grpcload)"},
        "limits": {
            "mcplite --max-body-size": MAX_BODY_SIZE,
            "mcplite --grpc-max-message-size": GRPC_MAX_MESSAGE_SIZE,
            "grpcio max message length": GRPC_MAX_MESSAGE_SIZE,
        },
        "mcp_protocol_version": MCP_HEADERS["MCP-Protocol-Version"],
        "shapes": {},
        "notes": [],
    }
    stubs: GeneratedStubs | None = None
    try:
        stubs = generate_stubs(settings.workdir / "stubs")
    except Exception as exc:  # the gRPC rows are skipped, the rest goes on
        out["notes"].append(f"gRPC rows skipped: no stubs ({exc})")
    rows = Rows(settings, stubs)
    for shape in settings.shapes:
        tool, argument = TOOLS[shape]
        payload: Any = text_of() if shape == "text" else record_list()
        arguments = {argument: payload}
        bodies = {"http": jsonrpc_body(tool, arguments)}
        if stubs is not None:
            bodies["grpc"] = grpc_request(stubs, tool, arguments)
        rounds: dict[str, list[dict[str, Any]]] = {row: [] for row in settings.rows}
        for _ in range(settings.rounds):  # interleaved: each round runs every row once
            for row in settings.rows:
                if row in ("mcplite_grpc", "grpcio") and stubs is None:
                    continue
                print(f"payload: {shape} {row} ...", file=sys.stderr, flush=True)
                rounds[row].append(one_round(rows, row, shape, payload, bodies))
        out["shapes"][shape] = {
            "tool": tool,
            "request_bytes": {wire: len(body) for wire, body in bodies.items()},
            "rows": {row: summarize(entries) for row, entries in rounds.items() if entries},
        }
    return out


def add_pinning_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpus",
        help="SERVER,LOAD: the cores for servers and for load (python -m bench passes its "
        "own, as this process runs pinned to one core)",
    )
    parser.add_argument("--no-pin", action="store_true", help="do not use taskset")


def pinning_of(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Pinning:
    """The pinning ``--cpus`` or ``--no-pin`` asks for, else the one of this machine."""
    if args.no_pin:
        return Pinning(None, None)
    if args.cpus:
        try:
            server_cpu, load_cpu = (int(c) for c in args.cpus.split(","))
        except ValueError:
            parser.error("--cpus takes two core numbers: SERVER,LOAD")
        return Pinning(server_cpu, load_cpu)
    return Pinning.detect()


def parse_args(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m bench.payload", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few-second smoke run")
    parser.add_argument("--duration", type=float, help="seconds per timed pass (4; quick 0.3)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds, fresh servers (2; quick 1)")
    parser.add_argument("--warmup", type=float, help="untimed seconds per server (1; quick 0)")
    parser.add_argument(
        "--conns", type=lambda s: [int(x) for x in s.split(",")], help="(1,8; quick 1)"
    )
    parser.add_argument(
        "--rows", type=lambda s: s.split(","), default=list(ROWS), help=",".join(ROWS)
    )
    parser.add_argument(
        "--shapes", type=lambda s: s.split(","), default=list(SHAPES), help=",".join(SHAPES)
    )
    add_pinning_arguments(parser)
    parser.add_argument("--startup-timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    unknown = {*args.rows} - {*ROWS} | {*args.shapes} - {*SHAPES}
    if unknown:
        parser.error(f"unknown row(s) or shape(s): {', '.join(sorted(unknown))}")
    pinning = pinning_of(args, parser)
    quick = args.quick
    return Settings(
        quick=quick,
        duration=min(max(args.duration or (0.3 if quick else 4.0), 0.2), 60.0),
        rounds=min(max(args.rounds or (1 if quick else 2), 1), 10),
        warmup=args.warmup if args.warmup is not None else (0.0 if quick else 1.0),
        conns=[min(max(c, 1), 64) for c in (args.conns or ([1] if quick else [1, 8]))],
        rows=args.rows,
        shapes=args.shapes,
        pinning=pinning,
        startup_timeout=args.startup_timeout,
        workdir=Path(tempfile.mkdtemp(prefix="mcplite-bench-payload-")),
    )


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)  # unwinds through the finally blocks that stop the servers


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    started = time.monotonic()
    try:
        results = run(settings)
    finally:
        shutil.rmtree(settings.workdir, ignore_errors=True)
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
