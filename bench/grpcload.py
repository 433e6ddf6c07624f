"""A grpcio-based gRPC load generator, for when h2load is not installed.

``python -m bench.grpcload --port P --method /mcplite.MCPLite/CallTool
--body-file F [--stream] --conns 50 --duration 2 [--procs 1]`` sends the same
serialized request (raw bytes, no client-side codec) over ``conns`` concurrent
callers, each on its own channel (a local subchannel pool, so its own HTTP/2
connection), for ``duration`` seconds.  ``--stream`` calls a server-streaming
method and reads the stream to its end.  ``--procs N`` splits the callers over N
processes (the GIL of one grpcio client process is otherwise the limit); their
counts and latencies are merged.  Prints one JSON object like bench.pyload.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
from typing import Any

from bench.pyload import percentile

__all__ = ["main"]


async def _caller(
    port: int,
    method: str,
    request: bytes,
    stream: bool,
    deadline: float,
    latencies: list[int],
    counts: dict[str, int],
) -> None:
    import grpc

    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
    )
    clock = time.perf_counter_ns
    try:
        if stream:
            call_stream = channel.unary_stream(method)
            while time.monotonic() < deadline:
                started = clock()
                async for _ in call_stream(request, timeout=5):
                    pass
                latencies.append(clock() - started)
        else:
            call_unary = channel.unary_unary(method)
            while time.monotonic() < deadline:
                started = clock()
                await call_unary(request, timeout=5)
                latencies.append(clock() - started)
    except grpc.RpcError:
        counts["errors"] += 1
    finally:
        await channel.close()


async def _run(
    port: int, method: str, request: bytes, stream: bool, conns: int, duration: float
) -> tuple[list[int], int, float]:
    latencies: list[int] = []
    counts = {"errors": 0}
    started = time.monotonic()
    deadline = started + duration
    await asyncio.gather(
        *(_caller(port, method, request, stream, deadline, latencies, counts) for _ in range(conns))
    )
    return latencies, counts["errors"], time.monotonic() - started


def _worker(args: tuple[int, str, bytes, bool, int, float]) -> tuple[list[int], int, float]:
    return asyncio.run(_run(*args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument("--body-file", required=True, help="serialized request message")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--conns", type=int, default=1)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--procs", type=int, default=1)
    args = parser.parse_args()
    with open(args.body_file, "rb") as f:
        request = f.read()
    duration = min(max(args.duration, 0.1), 120.0)
    procs = max(1, min(args.procs, args.conns))
    shares = [args.conns // procs + (1 if i < args.conns % procs else 0) for i in range(procs)]
    jobs = [(args.port, args.method, request, args.stream, n, duration) for n in shares]
    if procs == 1:
        results = [_worker(jobs[0])]
    else:
        with multiprocessing.get_context("spawn").Pool(procs) as pool:
            results = pool.map(_worker, jobs)
    latencies = sorted(v // 1000 for r in results for v in r[0])
    errors = sum(r[1] for r in results)
    elapsed = max(r[2] for r in results)
    out: dict[str, Any] = {
        "requests": len(latencies),
        "duration_s": round(elapsed, 3),
        "rps": round(len(latencies) / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_us": percentile(latencies, 50),
        "p90_us": percentile(latencies, 90),
        "p99_us": percentile(latencies, 99),
        "p999_us": percentile(latencies, 99.9),
        "errors": errors,
        "non2xx": 0,
        "procs": procs,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
