"""Where one big call is copied: ``python -m bench.copies [--shape S] [--wire W]``.

The server runs in this process (HTTP and gRPC bindings over ``bench.payloadtools``,
limits raised as ``bench.payload`` raises them); the client is a subprocess, so
that what is traced is the server's alone.  After three untraced calls, one call
is traced: a profile hook (``sys.setprofile``) reads ``tracemalloc``'s count of
allocated bytes at every Python and C call and return, and prints each jump of
``--min-kib`` (200) or more with where it happened: a copy of the body shows as a
jump up of its size, its release as one down.  A C function the hook does not see
(the JSON scanner) shows at the next event it does.  Also printed: the peak
above the count before the call.

Shapes: ``text`` (1 MiB string) and ``records`` (1 MiB of small objects); wires:
``lite`` (``POST /mcp-lite/v1/rpc``), ``mcp`` (``POST /mcp``, 2025-06-18) and
``grpc`` (``CallTool``).  Reads 256 KiB and smaller pieces (socket reads, frames)
fall under the default threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import tracemalloc
from types import FrameType
from typing import Any

from bench.payload import GRPC_MAX_MESSAGE_SIZE, MAX_BODY_SIZE, MCP_HEADERS, TOOLS
from bench.payloadtools import record_list, text_of, tools
from mcplite import Config, Dispatcher
from mcplite.bindings.grpc.service import GrpcServer
from mcplite.bindings.http.server import HttpServer
from mcplite.protocols.protobuf import encode_tool_request

__all__ = ["main"]

_HTTP_CLIENT = r"""
import http.client, json, sys
port, path, body_file, headers = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
conn.request("POST", path, open(body_file, "rb").read(), json.loads(headers))
response = conn.getresponse()
print(response.status, len(response.read()))
"""
_GRPC_CLIENT = r"""
import grpc, sys
port, body_file = sys.argv[1], sys.argv[2]
options = [("grpc.max_receive_message_length", 64 << 20)]
with grpc.insecure_channel("127.0.0.1:" + port, options=options) as channel:
    call = channel.unary_unary("/mcplite.MCPLite/CallTool")
    answer = call(open(body_file, "rb").read(), timeout=60)
print("OK", len(answer))
"""


class Jumps:
    """A profile hook noting each jump of the traced memory of ``threshold`` bytes."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.last = tracemalloc.get_traced_memory()[0]
        self.seen: list[tuple[int, int, str]] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        now = tracemalloc.get_traced_memory()[0]
        jump = now - self.last
        self.last = now
        if abs(jump) < self.threshold:
            return
        code = frame.f_code
        where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_qualname}"
        if event.startswith("c_"):
            what = f"{event} {getattr(arg, '__qualname__', repr(arg))} in {where}"
        else:
            what = f"{event} {where}"
        self.seen.append((jump, now, what))


async def trace(shape: str, wire: str, threshold: int) -> list[str]:
    config = Config(max_body_size=MAX_BODY_SIZE, grpc_max_message_size=GRPC_MAX_MESSAGE_SIZE)
    dispatcher = Dispatcher(tools, config)
    http, grpc = HttpServer(dispatcher, config), GrpcServer(dispatcher, config)
    await http.start("127.0.0.1", 0)
    await grpc.start("127.0.0.1", 0)
    tool, argument = TOOLS[shape]
    payload: Any = text_of() if shape == "text" else record_list()
    with tempfile.TemporaryDirectory(prefix="mcplite-bench-copies-") as workdir:
        body_file = os.path.join(workdir, "body")
        if wire == "grpc":
            with open(body_file, "wb") as f:
                f.write(encode_tool_request(tool, {argument: payload}))
            argv = [sys.executable, "-c", _GRPC_CLIENT, str(grpc.port), body_file]
        else:
            message = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": tool, "arguments": {argument: payload}},
            }
            with open(body_file, "wb") as f:
                f.write(json.dumps(message, separators=(",", ":")).encode())
            path, headers = ("/mcp-lite/v1/rpc", {}) if wire == "lite" else ("/mcp", MCP_HEADERS)
            headers = {"Content-Type": "application/json", **headers}
            argv = [sys.executable, "-c", _HTTP_CLIENT, str(http.port), path, body_file]
            argv.append(json.dumps(headers))
        del payload
        size = os.path.getsize(body_file)

        async def call() -> str:
            client = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
            out, _ = await asyncio.wait_for(client.communicate(), 120)
            return out.decode().strip()

        for _ in range(3):  # caches filled, code paths warm
            await call()
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            hook = Jumps(threshold)
            sys.setprofile(hook)
            try:
                answered = await call()
            finally:
                sys.setprofile(None)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    await http.shutdown(0.5)
    await grpc.shutdown(0.5)
    lines = [
        f"{shape} over {wire}: request {size} bytes; answered: {answered}",
        f"  peak {(peak - start) / 2**20:.2f} MiB above the count before the call",
    ]
    lines += [
        f"  {jump / 2**20:+6.2f} MiB (then {(now - start) / 2**20:5.2f})  {what}"
        for jump, now, what in hook.seen
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.copies", description=__doc__)
    parser.add_argument("--shape", choices=("text", "records", "all"), default="all")
    parser.add_argument("--wire", choices=("lite", "mcp", "grpc", "all"), default="all")
    parser.add_argument("--min-kib", type=int, default=200, help="smallest jump shown (KiB)")
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)  # the access log: not what is measured
    shapes = ["text", "records"] if args.shape == "all" else [args.shape]
    wires = ["lite", "mcp", "grpc"] if args.wire == "all" else [args.wire]
    for shape in shapes:
        for wire in wires:
            print("\n".join(asyncio.run(trace(shape, wire, args.min_kib * 1024))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
