"""mcplite benchmark: mcplite and the servers a user would otherwise pick, in one run.

``python -m bench`` (or ``python bench/run.py``) measures, in this order:

1. the in-process hot path (no sockets), in its own pinned process;
2. HTTP ``tools/call`` of ``echo`` over loopback against bare asyncio, bare h11,
   the official MCP SDK and mcplite, with wrk (or a Python generator), at 1 and
   50 keep-alive connections;
3. gRPC ``CallTool`` and ``CallToolStream`` of ``echo`` against grpcio, naive
   grpclib + betterproto and mcplite, with h2load (or a grpcio generator);
4. memory of fresh servers: RSS per idle keep-alive connection, and RSS of
   10,000 pending promises on mcplite;
5. scale-out: HTTP ``echo`` on mcplite with ``--workers 1`` and ``--workers 2``
   (unpinned: both cores for the server, shared with the generator), and the
   promise round trip and wake-up of each promise store (``bench.redeem``, with
   a waiter in a second process);
6. cold starts (``bench.coldstart``: process start to first answer, and RSS, of
   mcplite stdio and serve, the SDK and fastmcp) and a thousand tools
   (``bench.manytools``: start and ``tools/list``);
7. big payloads (``bench.payload``: 1 MiB each way, per server, with peak RSS) and
   many open streams (``bench.streams``: RSS per stream, echo latency beside them).

Servers run pinned to one core, generators to another; the passes of 2 and 3
are interleaved (A B C ..., repeated ``--rounds`` times) and medians reported.
It prints tables with ratios and targets and writes ``bench/results/<timestamp>.json``
and a PNG next to it.  ``--quick`` makes it a few-second smoke run.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import importlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from bench import memory, report
from bench.loadgen import (
    GrpcTarget,
    HttpTarget,
    LoadResult,
    grpc_generator,
    http_generator,
    post_once,
    run_grpc,
    run_http,
)
from bench.protogen import GeneratedStubs, generate_stubs
from bench.pyload import ID_MARK, PAD_MARK, vary_body
from bench.servers import (
    MCPLITE_LOOPS,
    ROOT,
    Pinning,
    ServerProcess,
    anchor_argv,
    free_port,
    uvloop_missing,
)

#: Why ``--workers 2`` is not twice ``--workers 1`` here: printed with the ratio.
WORKERS_WHY = (
    "the load generator runs on the same {cpus} cores as the workers (unpinned), so the "
    "second worker gets only what wrk leaves of the second core, and the kernel's "
    "SO_REUSEPORT hash spreads the connections over the workers unevenly; on a host "
    "with a core per worker plus the generator elsewhere the ratio approaches N"
)

__all__ = ["main"]

ECHO_TEXT = "hello world"
CHECK_ID = 7919  # the id of a varied row's check (bench.pyload.vary_body)
MCPLITE_APP = "mcplite.demo:tools"
MCPLITE_BASE = "/mcp-lite/v1"
MCP_SDK_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}
#: What an MCP 2026-07-28 client sends: the headers and the _meta envelope.
MCP_2026_VERSION = "2026-07-28"
MCP_2026_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_2026_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}
# mcplite_plain: mcplite with every speed path off (MCPLITE_ACCEL=0), the public-API
# path of h11, h2 and grpclib, so a row shows what the speed paths buy.
# mcplite_uvloop: mcplite on uvloop (--loop uvloop), run by default where uvloop imports.
HTTP_SERVERS = (
    "bare_asyncio",
    "bare_h11",
    "mcp_sdk",
    "mcplite",
    "mcplite_plain",
    "mcplite_uvloop",
    "mcplite_asgi",
)
GRPC_SERVERS = ("grpcio", "naive_grpclib", "mcplite", "mcplite_plain", "mcplite_uvloop")
# Run only when named in --servers: mcplite_asgi (mcplite.asgi.App under uvicorn)
# answers what the ASGI path costs, not how mcplite compares with the others.
ON_REQUEST = ("mcplite_asgi",)


def jsonrpc_call(name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return json.dumps(message, separators=(",", ":")).encode()


def varied(body: bytes, text: str) -> bytes:
    """``body`` as a template (``bench.pyload.vary_body``): a new id per request and
    ``text`` padded, so that each body differs, and its length too, as a client's do."""
    quoted = json.dumps(text).encode()
    assert body.count(b'"id":1,') == 1 and body.count(quoted) == 1, body
    template = body.replace(b'"id":1,', b'"id":' + ID_MARK + b",")
    return template.replace(quoted, quoted[:-1] + PAD_MARK + b'"')


def mcp_2026_headers(name: str) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MCP_2026_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }


@dataclass(slots=True)
class Row:
    """One line of a load table: a server and the workload it is driven with."""

    label: str
    server: ServerProcess
    http: HttpTarget | None = None
    grpc: GrpcTarget | None = None
    runs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    note: str = ""
    dead: bool = False


# --- verification: every row answers the workload correctly before it is timed ----


def verify_http(target: HttpTarget, expect: str) -> str | None:
    """None when the POST answers 200 with a JSON-RPC result containing ``expect``
    (and, for a target with a template, the id its check body carries)."""
    answered = post_once(target, 10)
    if isinstance(answered, str):
        return answered
    result, data = answered
    if result.get("isError") or expect not in json.dumps(result):
        return f"unexpected result: {data[:300]!r}"
    if target.template is not None and json.loads(data).get("id") != CHECK_ID:
        return f"not the id sent ({CHECK_ID}): {data[:300]!r}"
    return None


def verify_grpc(stubs: GeneratedStubs, target: GrpcTarget, expect: str) -> str | None:
    """None when the call (read to the end of its stream) carries ``expect`` in a result.

    Also records in ``target.expect_bytes`` how many framed bytes a good call answers.
    """
    if str(stubs.directory) not in sys.path:
        sys.path.insert(0, str(stubs.directory))
    import grpc
    from google.protobuf import json_format

    mcplite_pb2 = importlib.import_module("mcplite_pb2")  # generated at bench time

    channel = grpc.insecure_channel(f"127.0.0.1:{target.port}")
    try:
        if target.stream:
            call = channel.unary_stream(
                target.method, response_deserializer=mcplite_pb2.ToolResponse.FromString
            )
            messages = list(call(target.message, timeout=10))
        else:
            unary = channel.unary_unary(
                target.method, response_deserializer=mcplite_pb2.ToolResponse.FromString
            )
            messages = [unary(target.message, timeout=10)]
    except grpc.RpcError as exc:
        return f"gRPC error {exc.code()}: {exc.details()}"
    finally:
        channel.close()
    target.expect_bytes = sum(5 + m.ByteSize() for m in messages)
    text = json.dumps([json_format.MessageToDict(m) for m in messages])
    if expect not in text:
        return f"unexpected response: {text[:300]}"
    return None


# --- the run ---------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick: bool = args.quick
        self.pinning = Pinning.detect(not args.no_pin)
        self.workdir = Path(tempfile.mkdtemp(prefix="mcplite-bench-"))
        self.http_gen = http_generator(args.http_generator)
        self.grpc_gen = grpc_generator(args.grpc_generator)
        self.notes: list[str] = []
        self.stubs: GeneratedStubs | None = None
        self.echo_arg = "text"
        self.servers: list[ServerProcess] = []
        self.results: dict[str, Any] = {}

    # -- helpers --

    def log(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def new_server(
        self, name: str, argv: list[str], ports: list[int], grpc: bool = False
    ) -> ServerProcess:
        server = ServerProcess(
            name=name,
            argv=argv,
            ports=ports,
            log_path=self.workdir / f"{name}-{len(self.servers)}.log",
            startup_timeout=self.args.startup_timeout,
            extra_env={"MCPLITE_SECRET": os.urandom(32).hex()},
        )
        if grpc:
            server.grpc_port = ports[0]
        else:
            server.http_port = ports[0]
        self.servers.append(server)
        return server

    def make_server(
        self,
        name: str,
        bindings: tuple[str, ...] = ("http", "grpc"),
        extra: tuple[str, ...] = (),
        app: str | None = None,
    ) -> ServerProcess | None:
        arg = ["--arg", self.echo_arg]
        if name == "bare_asyncio":
            port = free_port()
            return self.new_server(
                name, anchor_argv("bare_asyncio.py", "--port", str(port)), [port]
            )
        if name == "bare_h11":
            port = free_port()
            return self.new_server(
                name, anchor_argv("bare_h11.py", "--port", str(port), *arg), [port]
            )
        if name == "mcp_sdk":
            port = free_port()
            return self.new_server(
                name, anchor_argv("mcp_sdk.py", "--port", str(port), *arg), [port]
            )
        if name == "mcplite_asgi":
            port = free_port()
            return self.new_server(
                name, anchor_argv("mcplite_asgi.py", "--port", str(port)), [port]
            )
        if name in ("grpcio", "naive_grpclib"):
            if self.stubs is None or (name == "naive_grpclib" and not self.stubs.betterproto):
                return None
            port = free_port()
            script = "grpcio_server.py" if name == "grpcio" else "naive_grpclib.py"
            stubs = ["--stubs", str(self.stubs.directory)]
            argv = anchor_argv(script, "--port", str(port), *stubs, *arg)
            return self.new_server(name, argv, [port], grpc=True)
        if name in MCPLITE_LOOPS:
            argv = [sys.executable, "-m", "mcplite", "serve", app or self.args.app]
            argv += ["--loop", MCPLITE_LOOPS[name]]
            ports: list[int] = []
            http_port = grpc_port = None
            if "http" in bindings:
                http_port = free_port()
                argv += ["--http", f"127.0.0.1:{http_port}"]
                ports.append(http_port)
            else:
                argv.append("--no-http")
            if "grpc" in bindings:
                grpc_port = free_port()
                argv += ["--grpc", f"127.0.0.1:{grpc_port}"]
                ports.append(grpc_port)
            else:
                argv.append("--no-grpc")
            # The access log stays on (the default, and what the targets are measured with):
            # its lines go to the server's log file, like any deployment's.
            argv += extra
            server = self.new_server(name, argv, ports)
            server.http_port, server.grpc_port = http_port, grpc_port
            if name == "mcplite_plain":
                server.extra_env["MCPLITE_ACCEL"] = "0"
            return server
        raise ValueError(name)

    def http_target(
        self, server: ServerProcess, tool: str = "echo", vary: bool = False
    ) -> HttpTarget:
        """The POST of ``tool`` to ``server``; with ``vary``, another body each time."""
        assert server.http_port is not None
        port = server.http_port
        if tool == "mcp2026":  # the MCP endpoint, 2026-07-28 stateless: headers and _meta
            body = jsonrpc_call("echo", {self.echo_arg: ECHO_TEXT}, MCP_2026_META)
            target = HttpTarget(port, "/mcp", body, mcp_2026_headers("echo"))
        elif tool == "mcp2025":  # the MCP endpoint as 2025 clients call it: the SDK row's request
            body = jsonrpc_call("echo", {self.echo_arg: ECHO_TEXT})
            target = HttpTarget(port, "/mcp", body, dict(MCP_SDK_HEADERS))
        else:
            if tool == "echo":
                body = jsonrpc_call("echo", {self.echo_arg: ECHO_TEXT})
            else:
                body = jsonrpc_call("search_documents", {"query": "MCP specification", "limit": 5})
            if server.name == "mcp_sdk":
                target = HttpTarget(port, "/mcp", body, dict(MCP_SDK_HEADERS))
            else:
                path = f"{MCPLITE_BASE}/calltools"
                target = HttpTarget(port, path, body, {"Accept": "application/json"})
        if vary:
            target.template = varied(body, ECHO_TEXT)
            target.body = vary_body(target.template, CHECK_ID)
        return target

    def grpc_message(self) -> bytes:
        assert self.stubs is not None
        if str(self.stubs.directory) not in sys.path:
            sys.path.insert(0, str(self.stubs.directory))
        mcplite_pb2 = importlib.import_module("mcplite_pb2")
        request = mcplite_pb2.ToolRequest(name="echo")
        request.arguments.update({self.echo_arg: ECHO_TEXT})
        return bytes(request.SerializeToString())

    # -- phases --

    def run_inprocess(self) -> None:
        self.log("in-process hot path ...")
        argv = [sys.executable, "-m", "bench.inprocess"]
        if self.quick:
            argv.append("--quick")
        if self.stubs is not None:
            argv += ["--stubs", str(self.stubs.directory)]
        if not self._json_phase(argv, "inprocess"):
            return
        arg = self.results["inprocess"].get("echo_argument")
        if isinstance(arg, str) and arg:
            self.echo_arg = arg

    def start_rows(self) -> tuple[list[Row], list[Row], dict[str, dict[str, Any]]]:
        """Start every server of the run; verify each workload; return the live rows."""
        http_rows: list[Row] = []
        grpc_rows: list[Row] = []
        status: dict[str, dict[str, Any]] = {}
        wanted = [
            s for s in dict.fromkeys((*HTTP_SERVERS, *GRPC_SERVERS)) if s in self.args.servers
        ]
        for name in wanted:
            server = self.make_server(name)
            if server is None:
                status[name] = {"status": "skipped", "note": "gRPC stubs could not be generated"}
                continue
            self.log(f"starting {name} ...")
            started = server.start(self.pinning)
            partial = ""
            if not started and name == "mcplite":
                # One binding may be unfinished or broken: measure the other one alone.
                both = server.note
                self.log(f"  {name}: {both}")
                for alone in ("http", "grpc"):
                    self.servers.remove(server)
                    self.log(f"  {name}: retrying with {alone} only")
                    retry = self.make_server(name, (alone,))
                    assert retry is not None
                    server = retry
                    if retry.start(self.pinning):
                        started = True
                        partial = f"only the {alone} binding started; with both: {both}"
                        break
                if not started:
                    server.note = both
            if not started:
                status[name] = {
                    "status": "skipped",
                    "note": server.note,
                    "log_tail": server.log_tail(3000, 40),
                }
                self.log(f"  {name} skipped: {server.note}")
                continue
            status[name] = {"status": "ok", "pid": server.pid, "ports": server.ports}
            if partial:
                status[name]["note"] = partial
                status[name]["http"] = server.http_port is not None
                status[name]["grpc"] = server.grpc_port is not None
            if name in HTTP_SERVERS and server.http_port is not None:
                workloads = [("echo", name, False)]
                if name in ("mcplite", "mcplite_plain", "mcplite_asgi", "mcp_sdk"):
                    workloads.append(("mcp2026", f"{name}:mcp2026", False))
                if name == "mcplite":  # like for like with mcp_sdk's own row, 2025 JSON mode
                    workloads.append(("mcp2025", f"{name}:mcp2025", False))
                    if not self.quick:
                        workloads.append(("search_documents", f"{name}:search_documents", False))
                # A new id and argument per request, as a real client sends (report.VARIED).
                if name == "bare_h11":
                    workloads.append(("echo", f"{name}{report.VARIED}", True))
                if name == "mcplite":
                    workloads.append(("echo", f"{name}{report.VARIED}", True))
                    workloads.append(("mcp2026", f"{name}:mcp2026{report.VARIED}", True))
                for tool, label, vary in workloads:
                    target = self.http_target(server, tool, vary)
                    expect = ECHO_TEXT if tool != "search_documents" else ""
                    if vary:
                        expect = vary_body(ECHO_TEXT.encode() + PAD_MARK, CHECK_ID).decode()
                    problem = verify_http(target, expect)
                    row = Row(label, server, http=target)
                    if problem:
                        row.dead, row.note = True, f"HTTP check failed: {problem}"
                        self.log(f"  {label}: {row.note}")
                    http_rows.append(row)
            if name in GRPC_SERVERS and self.stubs is not None and server.grpc_port is not None:
                port = server.grpc_port
                kinds = [False] if self.quick and self.grpc_gen != "h2load" else [False, True]
                for stream in kinds:
                    method = "/mcplite.MCPLite/" + ("CallToolStream" if stream else "CallTool")
                    grpc_target = GrpcTarget(port, method, self.grpc_message(), stream)
                    problem = verify_grpc(self.stubs, grpc_target, ECHO_TEXT)
                    row = Row(name, server, grpc=grpc_target)
                    if problem:
                        row.dead, row.note = True, f"gRPC check failed: {problem}"
                        self.log(f"  {name} {method}: {row.note}")
                    grpc_rows.append(row)
        return http_rows, grpc_rows, status

    def one_pass(self, row: Row, conns: int, duration: float) -> LoadResult:
        if row.http is not None:
            return run_http(row.http, conns, duration, self.http_gen, self.pinning, self.workdir)
        assert row.grpc is not None
        return run_grpc(row.grpc, conns, duration, self.grpc_gen, self.pinning, self.workdir)

    def interleave(self, rows: list[Row], conns_list: list[int]) -> None:
        duration, rounds = self.args.duration, self.args.rounds
        for rnd in range(rounds):
            for conns in conns_list:
                for row in rows:
                    if row.dead:
                        continue
                    if rnd == 0 and self.args.warmup > 0:
                        self.one_pass(row, conns, self.args.warmup)
                        row.server.settle()
                    what = row.http.path if row.http else row.grpc.method if row.grpc else ""
                    self.log(f"round {rnd + 1}/{rounds} {row.label} {what} @{conns} conns ...")
                    result = self.one_pass(row, conns, duration)
                    row.runs.setdefault(conns, []).append(result.as_dict())
                    row.server.settle()  # its backlog done before the next pass starts
                    if not row.server.alive():
                        row.dead = True
                        row.note = f"server died during the run: {row.server.log_tail()}"

    def section(
        self,
        rows: list[Row],
        conns_list: list[int],
        workload: str,
        generator: str,
        skipped: dict[str, str],
    ) -> dict[str, Any]:
        servers: dict[str, Any] = {n: {"status": "skipped", "note": v} for n, v in skipped.items()}
        for row in rows:
            if not row.runs:
                servers[row.label] = {"status": "skipped", "note": row.note or "not run"}
                continue
            entry: dict[str, Any] = {"status": "ok", "results": {}}
            if row.note:
                entry["note"] = row.note
            for conns, runs in row.runs.items():
                entry["results"][str(conns)] = report.aggregate(runs)
            servers[row.label] = entry
        return {
            "workload": workload,
            "generator": generator,
            "duration_s": self.args.duration,
            "rounds": self.args.rounds,
            "conns": conns_list,
            "servers": servers,
        }

    def run_load(self) -> None:
        http_rows, grpc_rows, status = self.start_rows()
        self.results["servers"] = status
        conns_list = self.args.conns
        try:
            if http_rows:
                self.interleave(http_rows, conns_list)
            if grpc_rows:
                self.interleave(grpc_rows, conns_list)
        finally:
            for server in self.servers:
                server.stop()
        self.servers.clear()
        skipped = {n: e["note"] for n, e in status.items() if e["status"] != "ok"}
        http_skipped = {n: v for n, v in skipped.items() if n in HTTP_SERVERS}
        grpc_skipped = {n: v for n, v in skipped.items() if n in GRPC_SERVERS}
        for name, entry in status.items():  # a server with one binding that did not start
            if entry["status"] == "ok" and entry.get("http") is False:
                http_skipped[name] = entry["note"]
            if entry["status"] == "ok" and entry.get("grpc") is False:
                grpc_skipped[name] = entry["note"]
        workload = f"POST tools/call echo {{{self.echo_arg!r}: {ECHO_TEXT!r}}}"
        self.results["http"] = self.section(
            http_rows, conns_list, workload, self.http_gen, http_skipped
        )
        if self.stubs is not None:
            unary = [r for r in grpc_rows if r.grpc is not None and not r.grpc.stream]
            stream = [r for r in grpc_rows if r.grpc is not None and r.grpc.stream]
            gen = self.grpc_gen
            grpc_section = {
                "unary": self.section(unary, conns_list, "CallTool echo", gen, grpc_skipped)
            }
            if stream:
                grpc_section["stream"] = self.section(
                    stream, conns_list, "CallToolStream echo", gen, grpc_skipped
                )
            self.results["grpc"] = grpc_section

    def wait_for_log(self, server: ServerProcess, pattern: str, timeout: float) -> bool:
        """Poll the server's log until ``pattern`` appears (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and server.alive():
            try:
                if re.search(pattern, server.log_path.read_text(errors="replace")):
                    return True
            except OSError:
                pass
            time.sleep(0.05)  # polling interval of a file, not a wait for readiness
        return False

    def run_workers(self) -> None:
        """HTTP echo on mcplite with --workers 1 and --workers 2, interleaved, unpinned."""
        self.log("scale-out: --workers 1 and --workers 2 ...")
        conns = max(self.args.conns)
        unpinned = Pinning(None, None)
        rows: list[Row] = []
        status: dict[str, Any] = {}
        for workers in (1, 2):
            label = f"mcplite --workers {workers}"
            server = self.make_server(
                "mcplite", ("http",), ("--workers", str(workers), "--grace", "2")
            )
            assert server is not None
            server.name = label
            started = server.start(unpinned) and self.wait_for_log(
                server, r"serving \d+ tools on", self.args.startup_timeout
            )
            if not started:
                status[label] = {"status": "skipped", "note": server.note or server.log_tail()}
                server.stop()
                continue
            target = self.http_target(server)
            problem = verify_http(target, ECHO_TEXT)
            if problem:
                status[label] = {"status": "skipped", "note": f"HTTP check failed: {problem}"}
                continue
            rows.append(Row(label, server, http=target))
        saved, self.pinning = self.pinning, unpinned
        try:
            self.interleave(rows, [conns])
        finally:
            self.pinning = saved
            for row in rows:
                row.server.stop()
                self.servers.remove(row.server)
        workload = f"POST tools/call echo {{{self.echo_arg!r}: {ECHO_TEXT!r}}}"
        section = self.section(rows, [conns], workload, self.http_gen, {})
        section["servers"].update(status)
        section["pinning"] = "none: the servers and the generator share every core"
        section["cpus"] = os.cpu_count()
        one = report.figure(section, "mcplite --workers 1", conns, "rps")
        two = report.figure(section, "mcplite --workers 2", conns, "rps")
        section["ratio"] = round(two / one, 2) if one and two else None
        # Rounds are interleaved (1, 2, 1, 2, ...): a round's ratio is paired in time,
        # so background load that comes and goes shows as one odd round, not a bias.
        runs = {
            label: entry.get("results", {}).get(str(conns), {}).get("runs", [])
            for label, entry in section["servers"].items()
        }
        pairs = zip(
            runs.get("mcplite --workers 1", []), runs.get("mcplite --workers 2", []), strict=False
        )
        section["round_ratios"] = [
            round(b["rps"] / a["rps"], 2) for a, b in pairs if a.get("rps") and b.get("rps")
        ]
        section["why"] = WORKERS_WHY.format(cpus=os.cpu_count())
        self.results["workers"] = section

    def run_redeem(self) -> None:
        """Promise round trip and wake-up per store, in its own process (``bench.redeem``)."""
        self.log("promise round trip and wake-up per store ...")
        argv = [sys.executable, "-m", "bench.redeem", *(["--quick"] if self.quick else [])]
        self._json_phase(argv, "redeem")

    def run_coldstart(self) -> None:
        """Process start to first answer, and idle RSS, in its own process (``bench.coldstart``)."""
        self.log("cold start: mcplite stdio and serve, the SDK and fastmcp on stdio ...")
        argv = [sys.executable, "-m", "bench.coldstart", *(["--quick"] if self.quick else [])]
        self._json_phase(argv, "coldstart")

    def run_manytools(self) -> None:
        """Start and tools/list with a thousand tools, in its own process (``bench.manytools``)."""
        self.log("many tools: start and tools/list of mcplite, the SDK and fastmcp ...")
        argv = [sys.executable, "-m", "bench.manytools", *(["--quick"] if self.quick else [])]
        self._json_phase(argv, "manytools")

    def run_payload(self) -> None:
        """Big payloads (1 MiB each way) per server, in its own process (``bench.payload``)."""
        self.log("big payloads ...")
        self._json_phase([sys.executable, "-m", "bench.payload", *self._phase_args()], "payload")

    def run_streams(self) -> None:
        """Many open streams (SSE, gRPC) on mcplite, in its own process (``bench.streams``)."""
        self.log("many streams ...")
        self._json_phase([sys.executable, "-m", "bench.streams", *self._phase_args()], "streams")

    def _phase_args(self) -> list[str]:
        """--quick, and the cores a phase that starts its own servers pins them to."""
        pins = self.pinning
        cores = (
            ["--no-pin"]
            if pins.server_cpu is None
            else ["--cpus", f"{pins.server_cpu},{pins.load_cpu}"]
        )
        return [*(["--quick"] if self.quick else []), *cores]

    def _json_phase(self, argv: list[str], key: str) -> bool:
        """Run a phase that prints its results as one JSON line last, pinned like a
        server; store them under ``key`` (or why not); whether it worked."""
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        try:
            done = subprocess.run(
                self.pinning.server(argv),
                capture_output=True,
                text=True,
                env=env,
                timeout=120 if self.quick else 600,
                check=False,
                cwd=ROOT,
            )
            self.results[key] = json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
            tail = locals().get("done")
            err = tail.stderr[-500:] if isinstance(tail, subprocess.CompletedProcess) else ""
            self.results[key] = {"status": "n/a", "note": f"{exc!r} {err}"}
            return False
        return True

    def run_memory(self) -> None:
        idle_count = 200 if self.quick else 1000
        promise_count = 1000 if self.quick else 10_000
        out: dict[str, Any] = {
            "idle_connections_opened": idle_count,
            "promises_requested": promise_count,
        }
        names = (
            ["mcplite", "bare_h11"]
            if self.quick
            else ["mcplite", "bare_h11", "bare_asyncio", "mcp_sdk"]
        )
        for name in names:
            if name not in self.args.servers:
                continue
            # mcplite serves bench.tools, whose `hold` always promises and holds no
            # data of its own: the growth is the framework's cost per promise.
            app = "bench.tools:tools" if name == "mcplite" else None
            server = self.make_server(name, ("http",), (), app)
            assert server is not None
            self.log(f"memory: {name} ...")
            try:
                if not server.start(self.pinning):
                    out[name] = {"note": f"not started: {server.note}"}
                    continue
                target = self.http_target(server)
                assert server.pid is not None
                headers = [f"{k}: {v}" for k, v in target.headers.items()]
                entry: dict[str, Any] = {
                    "idle_connections": memory.idle_connections(
                        server.pid, target.port, target.path, target.body, headers, idle_count
                    )
                }
                if name == "mcplite":
                    body = jsonrpc_call("hold", {"seconds": 600})
                    entry["promises"] = memory.pending_promises(
                        server.pid,
                        target.port,
                        target.path,
                        body,
                        promise_count,
                        conns=50 if self.quick else 100,
                        timeout=20 if self.quick else 120,
                    )
                out[name] = entry
            finally:
                server.stop()
                self.servers.remove(server)
        self.results["memory"] = out

    def meta(self) -> dict[str, Any]:
        def version(dist: str) -> str | None:
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                return None

        def tool_version(argv: list[str]) -> str | None:
            if shutil.which(argv[0]) is None:
                return None
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
            first = (done.stdout or done.stderr).strip().splitlines()
            return first[0][:80] if first else None

        return {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "quick": self.quick,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_at_start": list(os.getloadavg()),
            "pinning": self.pinning.describe(),
            "http_generator": self.http_gen,
            "grpc_generator": self.grpc_gen,
            "duration_s": self.args.duration,
            "warmup_s": self.args.warmup,
            "rounds": self.args.rounds,
            "conns": self.args.conns,
            "wrk": tool_version(["wrk", "-v"]),
            "h2load": tool_version(["h2load", "--version"]),
            "versions": {
                d: version(d)
                for d in (
                    "mcplite",
                    "mcp",
                    "uvicorn",
                    "uvloop",
                    "h11",
                    "grpcio",
                    "grpclib",
                    "betterproto",
                    "protobuf",
                )
            },
            "proto": self.stubs.proto_source if self.stubs else None,
            "echo_argument": self.echo_arg,
        }

    def run(self) -> Path:
        memory.raise_fd_limit()
        started = time.monotonic()
        meta_start = os.getloadavg()
        try:
            try:
                self.stubs = generate_stubs(self.workdir / "stubs")
                if not self.stubs.betterproto:
                    self.notes.append(f"naive grpclib skipped: {self.stubs.note}")
            except Exception as exc:
                self.notes.append(f"gRPC skipped: no stubs ({exc})")
            missing = uvloop_missing()
            if missing and "mcplite_uvloop" not in self.args.servers:
                self.notes.append(f"mcplite_uvloop not run: {missing}")
            if not self.args.no_inprocess:
                self.run_inprocess()
            if not self.args.no_load:
                self.run_load()
            if not self.args.no_memory:
                self.run_memory()
            if not self.args.no_workers and "mcplite" in self.args.servers:
                self.run_workers()
            if not self.args.no_redeem and not self.args.no_inprocess:
                self.run_redeem()
            if not self.args.no_coldstart:
                self.run_coldstart()
            if not self.args.no_manytools:
                self.run_manytools()
            if not self.args.no_payload:
                self.run_payload()
            if not self.args.no_streams:
                self.run_streams()
        finally:
            for server in self.servers:
                server.stop()
        if self.http_gen == "python":
            self.notes.append(
                "wrk not installed: HTTP figures come from the Python generator (bench.pyload), "
                "which saturates before fast servers do; compare rows, not absolute numbers"
            )
        if self.grpc_gen == "grpcio":
            self.notes.append(
                "h2load not installed: gRPC figures come from bench.grpcload (grpcio)"
            )
        self.results["meta"] = self.meta()
        self.results["meta"]["loadavg_at_start"] = list(meta_start)
        self.results["meta"]["elapsed_s"] = round(time.monotonic() - started, 1)
        self.results["notes"] = self.notes
        self.results["targets"] = report.evaluate_targets(self.results)
        out_dir = Path(self.args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        json_path = out_dir / f"{stamp}.json"
        if not self.args.no_plot:
            png = json_path.with_suffix(".png")
            problem = report.plot(self.results, png)
            self.results["plot"] = None if problem else str(png)
            if problem:
                self.notes.append(problem)
        json_path.write_text(json.dumps(self.results, indent=1) + "\n")
        print(report.render(self.results))
        print(
            f"\nresults: {json_path}"
            + (f"\nplot: {self.results['plot']}" if self.results.get("plot") else "")
        )
        shutil.rmtree(self.workdir, ignore_errors=True)
        return json_path


def default_servers() -> list[str]:
    """Every server but those run on request, and ``mcplite_uvloop`` where uvloop
    does not import (:meth:`Bench.run` notes why)."""
    left_out = (*ON_REQUEST, *(("mcplite_uvloop",) if uvloop_missing() else ()))
    return [s for s in dict.fromkeys((*HTTP_SERVERS, *GRPC_SERVERS)) if s not in left_out]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a few-second smoke run")
    parser.add_argument("--duration", type=float, help="seconds per timed pass (10; quick 1)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (3; quick 1)")
    parser.add_argument(
        "--warmup", type=float, help="seconds of warm-up per row before round 1 (1; quick 0)"
    )
    parser.add_argument(
        "--conns",
        type=lambda s: [int(x) for x in s.split(",")],
        help="connection counts (1,50; quick 50)",
    )
    parser.add_argument(
        "--servers",
        type=lambda s: s.split(","),
        default=default_servers(),
        help="comma-separated subset of: "
        + ",".join(dict.fromkeys((*HTTP_SERVERS, *GRPC_SERVERS))),
    )
    parser.add_argument(
        "--app", default=MCPLITE_APP, help="mcplite app to serve (mcplite.demo:tools)"
    )
    parser.add_argument("--http-generator", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--grpc-generator", choices=("auto", "h2load", "grpcio"), default="auto")
    parser.add_argument(
        "--startup-timeout", type=float, default=30.0, help="seconds a server gets to listen"
    )
    parser.add_argument("--no-pin", action="store_true", help="do not use taskset")
    parser.add_argument("--no-inprocess", action="store_true")
    parser.add_argument("--no-load", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--no-workers", action="store_true", help="skip --workers 1 vs 2 (needs mcplite)"
    )
    parser.add_argument(
        "--no-redeem", action="store_true", help="skip the promise round trip per store"
    )
    parser.add_argument(
        "--no-coldstart", action="store_true", help="skip cold start (process start to answer)"
    )
    parser.add_argument(
        "--no-manytools", action="store_true", help="skip start and tools/list with 1,000 tools"
    )
    parser.add_argument(
        "--no-payload", action="store_true", help="skip big payloads (1 MiB each way)"
    )
    parser.add_argument(
        "--no-streams", action="store_true", help="skip many open streams (SSE, gRPC)"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="results directory")
    args = parser.parse_args(argv)
    unknown = set(args.servers) - {*HTTP_SERVERS, *GRPC_SERVERS}
    if unknown:
        parser.error(f"unknown server(s): {', '.join(sorted(unknown))}")
    if args.duration is None:
        args.duration = 1.0 if args.quick else 10.0
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.warmup is None:
        args.warmup = 0.0 if args.quick else 1.0
    if args.conns is None:
        args.conns = [50] if args.quick else [1, 50]
    args.duration = min(max(args.duration, 0.5), 120.0)
    args.rounds = min(max(args.rounds, 1), 20)
    args.conns = [min(max(c, 1), 1000) for c in args.conns]
    return args


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)  # unwinds through the finally blocks that stop the servers


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    Bench(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
