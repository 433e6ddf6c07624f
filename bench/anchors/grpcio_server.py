"""The official grpcio (``grpc.aio``) server implementing the MCPLite service, echoing.

Stubs come from ``grpc_tools.protoc`` run at bench time (``--stubs DIR`` holds
``mcplite_pb2`` and ``mcplite_pb2_grpc``).  ``CallTool`` of ``echo`` answers
``result = {"content": [{"type": "text", "text": <arg>}]}`` with an ANSWER meta,
as mcplite's echo does; ``CallToolStream`` sends that same single final message.
Arguments are read and the result built the way a grpcio user writes it: the
Struct's mapping interface and ``Struct.update``.

The big-payload phase's tools are served too: ``big_text`` answers its ``text`` as
one text item, ``big_records`` its ``records`` as ``{"records": [...]}`` in one
content item, the list copied message to message (``CopyFrom``, in upb) and not
checked against a schema (mcplite checks each record).  ``--max-message-size``
sets grpcio's receive and send limits (default 4 MiB, grpcio's own).

Run: ``python bench/anchors/grpcio_server.py --port 50051 --stubs DIR [--arg text]
[--max-message-size BYTES]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any


def build_servicer(pb2: Any, pb2_grpc: Any, arg: str) -> Any:
    class Servicer(pb2_grpc.MCPLiteServicer):  # type: ignore[misc]
        async def GetTools(self, request: Any, context: Any) -> Any:
            tool = pb2.Tool(name="echo", description="Echo the text back.")
            tool.input_schema.update(
                {"type": "object", "required": [arg], "properties": {arg: {"type": "string"}}}
            )
            return pb2.ToolsList(tools=[tool])

        def _answer(self, request: Any, context: Any) -> Any:
            started = time.time()
            t0 = time.perf_counter()
            response = pb2.ToolResponse()
            if request.name == "echo":
                text = request.arguments[arg]
                response.result.update({"content": [{"type": "text", "text": text}]})
            elif request.name == "big_text":
                text = request.arguments["text"]
                response.result.update({"content": [{"type": "text", "text": text}]})
            elif request.name == "big_records":
                item = response.result.get_or_create_list("content").add_struct()
                item.get_or_create_list("records").CopyFrom(request.arguments["records"])
            else:
                raise LookupError(request.name)
            meta = response.meta
            meta.response_type = pb2.ANSWER
            meta.timestamp = int(started * 1000)
            meta.processing_time_ms = round((time.perf_counter() - t0) * 1000)
            return response

        async def CallTool(self, request: Any, context: Any) -> Any:
            try:
                return self._answer(request, context)
            except LookupError:
                import grpc

                await context.abort(grpc.StatusCode.NOT_FOUND, f"Tool not found: {request.name}")

        async def CallToolStream(self, request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                yield self._answer(request, context)
            except LookupError:
                import grpc

                await context.abort(grpc.StatusCode.NOT_FOUND, f"Tool not found: {request.name}")

    return Servicer()


async def serve(host: str, port: int, arg: str, max_message_size: int) -> None:
    import importlib

    import grpc

    mcplite_pb2 = importlib.import_module("mcplite_pb2")  # generated at bench time
    mcplite_pb2_grpc = importlib.import_module("mcplite_pb2_grpc")
    limits = [
        ("grpc.max_receive_message_length", max_message_size),
        ("grpc.max_send_message_length", max_message_size),
    ]
    server = grpc.aio.server(options=limits)
    mcplite_pb2_grpc.add_MCPLiteServicer_to_server(
        build_servicer(mcplite_pb2, mcplite_pb2_grpc, arg), server
    )
    server.add_insecure_port(f"{host}:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stubs", required=True, help="directory with mcplite_pb2*.py")
    parser.add_argument("--arg", default="text", help="name of the echo argument")
    parser.add_argument(
        "--max-message-size", type=int, default=4 << 20, help="bytes, each way (4 MiB)"
    )
    args = parser.parse_args()
    sys.path.insert(0, args.stubs)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.arg, args.max_message_size))


if __name__ == "__main__":
    main()
