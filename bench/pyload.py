"""A small keep-alive HTTP/1.1 load generator, for when wrk is not installed.

``python -m bench.pyload --port P --path /x --body-file F --conns 50 --duration 2
[--header 'name: value' ...] [--template]`` opens ``conns`` keep-alive connections
to 127.0.0.1, each sending the same POST back to back until the duration is over,
and prints one JSON object: requests, duration, req/s, latency percentiles (us),
errors and non-2xx counts.  With ``--template`` the body file is a template
(:func:`vary_body`): each request gets a new id and an argument of another length.

It is much slower than wrk (it is Python on one core), so with many connections
the generator, not the server, may be the limit; the harness marks its figures
with ``"generator": "python"`` and they are only comparable with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "ID_MARK",
    "PAD",
    "PAD_MARK",
    "build_request",
    "main",
    "percentile",
    "run_load",
    "vary_body",
]

#: Where a body template (``--template``) takes the request's number and its padding.
ID_MARK, PAD_MARK = b"\x00id\x00", b"\x00pad\x00"
#: Request ``n`` is padded with the first ``n % len(PAD)`` letters of this.
PAD = b"abcdefghijklmnopq"


def vary_body(template: bytes, n: int) -> bytes:
    """Request ``n``'s body: ``n`` at ``ID_MARK`` and ``n % 17`` letters at ``PAD_MARK``.

    Every body differs and its length changes from one request to the next, as the
    bodies of a real client's calls do (a new JSON-RPC id, other arguments).
    """
    return template.replace(ID_MARK, b"%d" % n).replace(PAD_MARK, PAD[: n % len(PAD)])


def build_request(host: str, port: int, path: str, body: bytes, headers: list[str]) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(len(sorted_values) * q / 100))
    return float(sorted_values[index])


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    at = lower.find(b"\r\ncontent-length:")
    if at >= 0:
        end = lower.find(b"\r\n", at + 2)
        await reader.readexactly(int(lower[at + 17 : end]))
    elif b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def _client(
    host: str,
    port: int,
    requests: Callable[[], bytes],
    deadline: float,
    latencies: list[int],
    counts: dict[str, int],
) -> None:
    clock = time.perf_counter_ns
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except (OSError, TimeoutError):
        counts["connect_errors"] += 1
        return
    try:
        while time.monotonic() < deadline:
            request = requests()
            started = clock()
            writer.write(request)
            status = await asyncio.wait_for(_read_response(reader), 5)
            latencies.append(clock() - started)
            if not 200 <= status < 300:
                counts["non2xx"] += 1
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
        counts["read_errors"] += 1
    finally:
        writer.close()


async def run_load(
    host: str, port: int, requests: Callable[[], bytes], conns: int, duration: float
) -> dict[str, Any]:
    """``conns`` connections, each sending ``requests()`` back to back for ``duration``."""
    latencies: list[int] = []
    counts = {"connect_errors": 0, "read_errors": 0, "non2xx": 0}
    started = time.monotonic()
    deadline = started + duration
    await asyncio.gather(
        *(_client(host, port, requests, deadline, latencies, counts) for _ in range(conns))
    )
    elapsed = time.monotonic() - started
    latencies.sort()
    us = [v // 1000 for v in latencies]
    return {
        "requests": len(latencies),
        "duration_s": round(elapsed, 3),
        "rps": round(len(latencies) / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_us": percentile(us, 50),
        "p90_us": percentile(us, 90),
        "p99_us": percentile(us, 99),
        "p999_us": percentile(us, 99.9),
        "errors": counts["connect_errors"] + counts["read_errors"],
        "non2xx": counts["non2xx"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/")
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--conns", type=int, default=1)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--template", action="store_true", help="the body file is a template")
    args = parser.parse_args()
    if args.host != "127.0.0.1":
        raise SystemExit("the benchmark only targets 127.0.0.1")
    with open(args.body_file, "rb") as f:
        body = f.read()
    if args.template:
        numbers = itertools.count(1)

        def requests() -> bytes:
            return build_request(
                args.host, args.port, args.path, vary_body(body, next(numbers)), args.header
            )
    else:
        request = build_request(args.host, args.port, args.path, body, args.header)

        def requests() -> bytes:
            return request

    duration = min(max(args.duration, 0.1), 120.0)
    print(json.dumps(asyncio.run(run_load(args.host, args.port, requests, args.conns, duration))))


if __name__ == "__main__":
    main()
