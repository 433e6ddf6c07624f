"""A soak: mixed load on every binding at once, for an hour, watching for leaks.

    python -m bench.soak --duration 3600     # the full hour (docs/operations.md)
    python -m bench.soak --duration 120      # the scaled-down run CI makes
    python -m bench.soak --loop uvloop       # both servers on uvloop (default: asyncio's)

It starts ``mcplite serve bench.soaktools`` (HTTP, the MCP endpoint, gRPC, bearer
tokens, ``--metrics``) as a subprocess and drives it from ``--clients`` threads, each
a client of its own picking, at random (seeded), among the scenarios of
:mod:`bench.soakload`: calls, streams, promises redeemed and cancelled, MCP calls in
both revisions, MCP tasks, gRPC calls and streams, bad inputs, auth failures and
clients that vanish mid-stream.  Every answer is checked.

Every ``--interval`` seconds it samples the server's resident memory and open files
(from ``/proc``), its asyncio tasks (``mcplite_tasks_alive``) and the latency of the
plain calls.  After the warm-up (the first fifth of the run, and at least the 20 s
promise TTL and 10 s more: finished promises stay redeemable for their TTL, so memory
climbs until the first ones expire) it holds the server to:

- every answer well-formed, no transport failure, no ERROR line in the server's log;
- resident memory at most ``--rss-growth`` MiB above the first sample after warm-up;
- open files and tasks under load no higher than the warm-up's peak plus a margin
  (the clients' own connections and calls come and go);
- once the clients have gone: no call in flight, no promise pending, tasks and open
  files back to where they stood before the load;
- the p99 latency of plain calls in the last quarter at most twice that of the first
  quarter after warm-up (plus 5 ms for the scheduler's noise).

It prints one line per sample, then the verdict; exit status 1 when a bound failed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.protogen import generate_stubs
from bench.soakload import SCENARIOS, Client, Malformed, StdioClient, Target

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "soak-token-0123456789abcdef"
SECRET = "soak-secret-0123456789abcdef"
FD_MARGIN = 8  # open files above the warm-up's peak that the load may still reach
TASK_MARGIN = 16  # asyncio tasks likewise
# Finished promises stay redeemable for their TTL, so memory climbs for that long
# before it levels: the warm-up lasts at least that and a bit.
PROMISE_TTL = 20
READY = re.compile(r"serving \d+ tools on (.*)$")


class GrpcStub:
    """grpcio stubs built from the project's proto, with Struct conversion."""

    def __init__(self, port: int, directory: Path) -> None:
        import grpc
        from google.protobuf import json_format

        sys.path.insert(0, str(directory))  # generated at run time: no stubs for mypy
        mcplite_pb2 = importlib.import_module("mcplite_pb2")
        mcplite_pb2_grpc = importlib.import_module("mcplite_pb2_grpc")

        self.pb2 = mcplite_pb2
        self.json_format = json_format
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = mcplite_pb2_grpc.MCPLiteStub(self.channel)
        self.CallTool = stub.CallTool
        self.CallToolStream = stub.CallToolStream

    def request(self, name: str, arguments: dict[str, Any]) -> Any:
        request = self.pb2.ToolRequest(name=name)
        request.arguments.update(arguments)
        return request

    def to_python(self, struct: Any) -> Any:
        return self.json_format.MessageToDict(struct)

    def close(self) -> None:
        self.channel.close()


class Process:
    """A subprocess of ``python -m mcplite ...`` whose JSON log lines on stderr are
    read as they come: the ERROR ones kept, ``on_line`` told of each."""

    def __init__(self, args: list[str], *, loop: str, stdio: bool = False) -> None:
        pipe = subprocess.PIPE if stdio else subprocess.DEVNULL
        args = [*args, "--loop", loop, "--log-format", "json", "--no-access-log"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcplite", *args],
            cwd=ROOT,
            stdin=pipe,
            stdout=pipe,
            stderr=subprocess.PIPE,
            text=not stdio,
        )
        self.errors: list[str] = []  # every log line at ERROR or above
        self.ready = threading.Event()
        self.announced = ""  # the "serving ..." line's end
        threading.Thread(target=self._read, name="soak-stderr", daemon=True).start()
        if not self.ready.wait(30):
            self.stop()
            raise RuntimeError(f"mcplite {args[0]} did not start: {self.errors}")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode() if isinstance(raw, bytes) else raw
            try:
                record = json.loads(line)
            except ValueError:  # a line not from the logger: a traceback, say
                self.errors.append(line.rstrip())
                continue
            if record.get("level") in ("error", "critical"):
                self.errors.append(line.rstrip())
            match = READY.search(record.get("message", ""))
            if match:
                self.announced = match.group(1)
                self.ready.set()
        self.ready.set()

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Server(Process):
    """``mcplite serve bench.soaktools``: HTTP, MCP, gRPC, bearer tokens, metrics."""

    def __init__(self, workdir: Path, loop: str) -> None:
        tokens = workdir / "tokens"
        tokens.write_text(f"{TOKEN}\n")
        args = ["serve", "bench.soaktools", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]
        args += ["--metrics", "127.0.0.1:0", "--auth-tokens", str(tokens)]
        args += ["--secret", SECRET, "--promise-ttl", str(PROMISE_TTL)]
        super().__init__(args, loop=loop)
        self.urls = self.announced
        ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", self.urls)]
        self.http_port, self.grpc_port, self.metrics_port = ports

    def metrics(self) -> dict[str, float]:
        """The unlabelled gauges and the sums of the labelled ones."""
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        figures: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                key = name.split("{")[0]
                figures[key] = figures.get(key, 0.0) + float(value)
        return figures


class Stdio(Process):
    """``mcplite stdio bench.soaktools``, driven over its pipes by one client."""

    def __init__(self, loop: str) -> None:
        args = ["stdio", "bench.soaktools", "--secret", SECRET, "--promise-ttl", str(PROMISE_TTL)]
        super().__init__(args, loop=loop, stdio=True)

    def close_stdin(self) -> float:
        """Close stdin as a client does at the end; the seconds until the process ended
        (the wait bounded at 10 s)."""
        assert self.proc.stdin is not None
        started = time.monotonic()
        self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        return time.monotonic() - started


@dataclass
class Tally:
    """What the clients did, shared by their threads (under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    done: Counter[str] = field(default_factory=Counter)
    malformed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # plain calls since last sample

    def record(self, name: str, seconds: float) -> None:
        with self.lock:
            self.done[name] += 1
            if name == "lite_call":
                self.latencies.append(seconds)

    def take_latencies(self) -> list[float]:
        with self.lock:
            taken, self.latencies = self.latencies, []
        return taken


def drive(client: Client, tally: Tally, stop: threading.Event) -> None:
    names = list(SCENARIOS)
    weights = [SCENARIOS[name][1] for name in names]
    try:
        while not stop.is_set():
            name = client.rng.choices(names, weights)[0]
            started = time.perf_counter()
            try:
                SCENARIOS[name][0](client)
            except Malformed as exc:
                with tally.lock:
                    tally.malformed.append(f"{name}: {exc}")
                client.close()
                continue
            except Exception as exc:  # a transport failure: counted, the run fails
                with tally.lock:
                    tally.failed.append(f"{name}: {type(exc).__name__}: {exc}")
                client.close()
                continue
            tally.record(name, time.perf_counter() - started)
    finally:
        client.close()


def drive_stdio(client: StdioClient, tally: Tally, stop: threading.Event) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            name = client.one()
        except Malformed as exc:
            with tally.lock:
                tally.malformed.append(f"stdio: {exc}")
            continue
        except Exception as exc:  # the pipe broke: nothing more can be sent
            with tally.lock:
                tally.failed.append(f"stdio: {type(exc).__name__}: {exc}")
            return
        tally.record(name, time.perf_counter() - started)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Sample:
    at: float  # seconds since the load started
    rss_mib: float
    open_files: int
    tasks: int
    in_flight: int
    calls: int  # scenarios finished since the previous sample
    p50_ms: float
    p99_ms: float
    stdio_rss_mib: float
    stdio_open_files: int
    latencies: list[float]

    def line(self) -> str:
        return (
            f"{self.at:6.0f}s rss {self.rss_mib:6.1f} MiB files {self.open_files:3d} "
            f"tasks {self.tasks:3d} in flight {self.in_flight:2d} done {self.calls:6d} "
            f"call p50 {self.p50_ms:5.2f} p99 {self.p99_ms:6.2f} ms | "
            f"stdio rss {self.stdio_rss_mib:5.1f} MiB files {self.stdio_open_files}"
        )


def sample(server: Server, stdio: Stdio, tally: Tally, started: float, last: list[int]) -> Sample:
    figures = server.metrics()
    latencies = tally.take_latencies()
    with tally.lock:
        total = sum(tally.done.values())
    calls, last[0] = total - last[0], total
    return Sample(
        at=time.monotonic() - started,
        rss_mib=server.rss_mib(),
        open_files=server.open_files(),
        tasks=int(figures.get("mcplite_tasks_alive", -1)),
        in_flight=int(figures.get("mcplite_calls_in_flight", -1)),
        calls=calls,
        p50_ms=percentile(latencies, 0.50) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
        stdio_rss_mib=stdio.rss_mib(),
        stdio_open_files=stdio.open_files(),
        latencies=latencies,
    )


def quiet(server: Server, bound: float) -> dict[str, float]:
    """The server's figures once no call is in flight and no promise pending (a poll,
    bounded by ``bound`` seconds); the last figures read when that time runs out."""
    deadline = time.monotonic() + bound
    while True:
        figures = server.metrics()
        idle = (
            figures.get("mcplite_calls_in_flight", 1) == 0
            and figures.get("mcplite_promises_pending", 1) == 0
            and figures.get("mcplite_connections_open", 1) == 0
        )
        if idle or time.monotonic() > deadline:
            return figures
        time.sleep(0.1)  # polling the server's own figures, with a deadline


@dataclass
class Ended:
    """How the two processes came through: their ERROR lines, the server's exit status
    while under load (None: still running), how and how fast stdio ended."""

    errors: list[str]
    server_exit: int | None
    stdio_status: int | None
    stdio_exit_seconds: float


def files_down_to(server: Server, target: int, bound: float) -> int:
    """The server's open files once they are down to ``target`` (a poll, bounded by
    ``bound`` seconds: a connection closed after an early error lingers up to 2 s to
    let its client read the answer), else the count when that time runs out."""
    deadline = time.monotonic() + bound
    while (files := server.open_files()) > target and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the process's own descriptors, with a deadline
    return files


def verdict(
    samples: list[Sample],
    warm: int,
    before: tuple[int, int],
    after: tuple[int, int, dict[str, float]],
    tally: Tally,
    ended: Ended,
    rss_growth: float,
) -> list[str]:
    """Every bound that failed (empty: the soak held)."""
    failures = []
    if tally.malformed:
        failures.append(f"{len(tally.malformed)} malformed answers, e.g. {tally.malformed[:3]}")
    if tally.failed:
        failures.append(f"{len(tally.failed)} transport failures, e.g. {tally.failed[:3]}")
    if ended.errors:
        failures.append(f"{len(ended.errors)} ERROR lines, e.g. {ended.errors[:3]}")
    if ended.server_exit is not None:
        failures.append(f"the server exited with {ended.server_exit}")
    if ended.stdio_status != 0 or ended.stdio_exit_seconds > 1.0:
        failures.append(
            f"stdio ended {ended.stdio_exit_seconds:.2f} s after stdin closed, "
            f"status {ended.stdio_status}"
        )
    stdio_kinds = [f"stdio_{kind}" for kind in ("echo", "count", "job", "garbage")]
    missing = [name for name in [*SCENARIOS, *stdio_kinds] if tally.done[name] == 0]
    if missing:
        failures.append(f"scenarios that never completed: {missing}")
    warmup, loaded = samples[:warm], samples[warm:]
    if not loaded:
        return [*failures, "too few samples after warm-up: lengthen --duration"]
    for rss in ("rss_mib", "stdio_rss_mib"):
        growth = max(getattr(s, rss) for s in loaded) - getattr(loaded[0], rss)
        if growth > rss_growth:
            failures.append(f"{rss} grew {growth:.1f} MiB after warm-up (> {rss_growth})")
    if max(s.stdio_open_files for s in loaded) > max(s.stdio_open_files for s in warmup):
        failures.append("stdio's open files grew after warm-up")
    for what, margin in (("open_files", FD_MARGIN), ("tasks", TASK_MARGIN)):
        peak = max(getattr(s, what) for s in warmup)
        worst = max(getattr(s, what) for s in loaded)
        if worst > peak + margin:
            failures.append(f"{what} reached {worst} under load, warm-up peak {peak} + {margin}")
    quarter = max(1, len(loaded) // 4)
    first = percentile([x for s in loaded[:quarter] for x in s.latencies], 0.99) * 1000
    last = percentile([x for s in loaded[-quarter:] for x in s.latencies], 0.99) * 1000
    if last > 2 * first + 5:
        failures.append(f"p99 of plain calls rose from {first:.2f} ms to {last:.2f} ms")
    tasks_before, files_before = before
    tasks_after, files_after, figures = after
    if figures.get("mcplite_calls_in_flight") or figures.get("mcplite_promises_pending"):
        failures.append(f"not idle after the load: {figures}")
    if tasks_after > tasks_before:
        failures.append(f"tasks after the load {tasks_after} > before it {tasks_before}")
    if files_after > files_before:
        failures.append(f"open files after the load {files_after} > before it {files_before}")
    return failures


def main(argv: list[str] | None = None) -> int:
    summary = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=summary)
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds of load")
    parser.add_argument("--clients", type=int, default=8, help="client threads")
    parser.add_argument("--interval", type=float, help="seconds between samples")
    parser.add_argument("--rss-growth", type=float, default=8.0, help="MiB after warm-up")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the servers' event loop"
    )
    parser.add_argument("--out", type=Path, help="write the samples and verdict as JSON")
    args = parser.parse_args(argv)
    interval = args.interval or min(60.0, max(2.0, args.duration / 30))

    with tempfile.TemporaryDirectory(prefix="mcplite-soak-") as tmp:
        workdir = Path(tmp)
        stubs = generate_stubs(workdir / "stubs")
        server = Server(workdir, args.loop)
        stdio = Stdio(args.loop)
        grpc_stubs: list[GrpcStub] = []
        try:
            target = Target(server.http_port, server.grpc_port, TOKEN)
            tally = Tally()
            # One round of every scenario first, so that lazily made state (imports,
            # caches, the first gRPC connection) counts as the baseline, not a leak.
            probe = GrpcStub(server.grpc_port, stubs.directory)
            client = Client(target, probe, random.Random(args.seed))
            for scenario, _ in SCENARIOS.values():
                scenario(client)
            client.close()
            stdio_client = StdioClient(stdio.proc, random.Random(args.seed))
            stdio_client.initialize()
            for _ in range(20):
                stdio_client.one()
            probe.close()
            figures = quiet(server, 15)
            before = (int(figures["mcplite_tasks_alive"]), server.open_files())

            stop = threading.Event()
            clients = []
            for i in range(args.clients):
                stub = GrpcStub(server.grpc_port, stubs.directory)
                grpc_stubs.append(stub)
                clients.append(Client(target, stub, random.Random(args.seed * 1000 + i)))
            threads = [
                threading.Thread(target=drive, args=(c, tally, stop), daemon=True) for c in clients
            ]
            threads.append(
                threading.Thread(target=drive_stdio, args=(stdio_client, tally, stop), daemon=True)
            )
            started = time.monotonic()
            for thread in threads:
                thread.start()
            print(f"soak: {args.duration:.0f} s, {args.clients} clients, {server.urls}")
            samples: list[Sample] = []
            last = [0]
            while time.monotonic() - started < args.duration and server.proc.poll() is None:
                stop.wait(min(interval, max(0.0, args.duration - (time.monotonic() - started))))
                samples.append(sample(server, stdio, tally, started, last))
                print(samples[-1].line(), flush=True)
            stop.set()
            for thread in threads:
                thread.join(30)
            for stub in grpc_stubs:
                stub.close()
            figures = quiet(server, 15)
            files = files_down_to(server, before[1], 5)
            after = (int(figures["mcplite_tasks_alive"]), files, figures)
            stdio_exit = stdio.close_stdin()
            warm = max(1, len(samples) // 5, int((PROMISE_TTL + 10) / interval))
            ended = Ended(
                [*server.errors, *stdio.errors],
                server.proc.poll(),
                stdio.proc.returncode,
                stdio_exit,
            )
            failures = verdict(samples, warm, before, after, tally, ended, args.rss_growth)
        finally:
            server.stop()
            stdio.stop()

    loaded = samples[warm:]
    print(
        f"\ndone: {sum(tally.done.values())} exchanges: "
        + ", ".join(f"{name} {count}" for name, count in sorted(tally.done.items()))
    )
    if loaded:
        print(
            f"after warm-up: rss {loaded[0].rss_mib:.1f} -> {loaded[-1].rss_mib:.1f} MiB "
            f"(max {max(s.rss_mib for s in loaded):.1f}), files {loaded[0].open_files} -> "
            f"{loaded[-1].open_files}, tasks {loaded[0].tasks} -> {loaded[-1].tasks}; "
            f"idle before {before[0]} tasks / {before[1]} files, after {after[0]} / {after[1]}; "
            f"stdio rss {loaded[0].stdio_rss_mib:.1f} -> {loaded[-1].stdio_rss_mib:.1f} MiB, "
            f"ended {stdio_exit:.2f} s after stdin closed"
        )
    if args.out:
        args.out.write_text(json.dumps({
            "duration": args.duration, "clients": args.clients, "done": dict(tally.done),
            "samples": [{k: v for k, v in vars(s).items() if k != "latencies"} for s in samples],
            "failures": failures,
        }, indent=1))  # fmt: skip
    for failure in failures:
        print(f"FAILED: {failure}")
    print("soak held" if not failures else "soak FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
