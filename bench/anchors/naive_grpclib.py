"""The naive grpclib + betterproto server: generated messages, no custom codec.

This is what the obvious implementation on mcplite's own stack looks like: the
betterproto service base class from ``protoc --python_betterproto_out`` (run at
bench time into ``--stubs DIR``, package ``mcplite_bp``), the request's Struct
walked through betterproto ``Value`` objects, and the result built as betterproto
``Struct``/``Value`` messages for betterproto to serialize.  The gap between this
row and mcplite's is what mcplite's own codec buys.

Run: ``python bench/anchors/naive_grpclib.py --port 50051 --stubs DIR [--arg text]``
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

import betterproto
from betterproto.lib.google.protobuf import ListValue, NullValue, Struct, Value


def to_value(obj: Any) -> Value:
    if obj is None:
        return Value(null_value=NullValue(0))
    if isinstance(obj, bool):
        return Value(bool_value=obj)
    if isinstance(obj, int | float):
        return Value(number_value=float(obj))
    if isinstance(obj, str):
        return Value(string_value=obj)
    if isinstance(obj, dict):
        return Value(struct_value=to_struct(obj))
    if isinstance(obj, list | tuple):
        return Value(list_value=ListValue(values=[to_value(item) for item in obj]))
    return Value(string_value=str(obj))


def to_struct(obj: dict[str, Any]) -> Struct:
    return Struct(fields={key: to_value(value) for key, value in obj.items()})


def from_value(value: Value) -> Any:
    kind, inner = betterproto.which_one_of(value, "kind")
    if isinstance(inner, Struct):
        return from_struct(inner)
    if isinstance(inner, ListValue):
        return [from_value(item) for item in inner.values]
    if kind == "null_value" or not kind:
        return None
    return inner


def from_struct(struct: Struct) -> dict[str, Any]:
    return {key: from_value(value) for key, value in struct.fields.items()}


def build_service(bp: Any, arg: str) -> Any:
    import grpclib

    class Service(bp.McpLiteBase):  # type: ignore[misc]
        async def get_tools(self, empty: Any) -> Any:
            schema = {"type": "object", "required": [arg], "properties": {arg: {"type": "string"}}}
            return bp.ToolsList(
                tools=[bp.Tool(name="echo", description="Echo.", input_schema=to_struct(schema))]
            )

        def _echo(self, request: Any) -> Any:
            started = time.time()
            t0 = time.perf_counter()
            if request.name != "echo":
                raise grpclib.GRPCError(grpclib.Status.NOT_FOUND, f"Tool not found: {request.name}")
            arguments = from_struct(request.arguments)
            result = {"content": [{"type": "text", "text": arguments[arg]}]}
            return bp.ToolResponse(
                result=to_struct(result),
                meta=bp.ResponseMeta(
                    response_type=bp.ResponseType.ANSWER,
                    timestamp=int(started * 1000),
                    processing_time_ms=round((time.perf_counter() - t0) * 1000),
                ),
            )

        async def call_tool(self, tool_request: Any) -> Any:
            return self._echo(tool_request)

        async def call_tool_stream(self, tool_request: Any) -> AsyncIterator[Any]:
            yield self._echo(tool_request)

    return Service()


async def serve(host: str, port: int, arg: str) -> None:
    import importlib

    from grpclib.server import Server

    mcplite_bp = importlib.import_module("mcplite_bp")  # generated at bench time

    server = Server([build_service(mcplite_bp, arg)])
    await server.start(host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    await server.wait_closed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stubs", required=True, help="directory with the mcplite_bp package")
    parser.add_argument("--arg", default="text", help="name of the echo argument")
    args = parser.parse_args()
    sys.path.insert(0, args.stubs)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.arg))


if __name__ == "__main__":
    main()
