"""In-process hot path: request bytes -> response bytes, no sockets.

Run by the harness as its own process, pinned to the server core:
``python -m bench.inprocess [--quick] [--stubs DIR]`` prints one JSON object.

What is timed (each figure is microseconds per call):

- ``echo`` and ``search_documents`` through the binding-free JSON-RPC entry
  (``Dispatcher.handle_jsonrpc(body)``, the code the HTTP binding runs), as
  ``per_call_us`` (median over repeats of a batch's mean) and ``p50_us`` /
  ``p99_us`` of single timed calls; then the split of one call: JSON decode,
  dispatch + validation (``await dispatcher.call``), envelope
  (``result.to_json()``) and JSON encode.
- ``json_baseline``: stdlib ``json.loads`` of the same request plus ``json.dumps``
  of the same response; the target is mcplite's echo <= baseline + 5 us.
- ``promise_token``: ``TokenSealer.seal`` + ``.open`` of one token.
- ``grpc_codec``: ``mcplite.protocols.protobuf`` decode of a ``ToolRequest`` plus encode of
  the ``ToolResponse`` for one echo call, next to the same work done with
  protobuf (upb, what grpcio users run) and with naive betterproto.

Anything missing from mcplite is reported as ``{"status": "n/a", "note": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["main", "run"]

ECHO_TEXT = "hello world"
SEARCH_ARGS: dict[str, Any] = {"query": "MCP specification", "limit": 5}
TARGET_ECHO_OVER_JSON_US = 5.0
TARGET_SEAL_VERIFY_US = 5.0

SyncFn = Callable[[], object]
AsyncFn = Callable[[], Awaitable[object]]


def na(note: str) -> dict[str, Any]:
    return {"status": "n/a", "note": note}


def _summary(batch_us: list[float], singles_ns: list[int], n: int) -> dict[str, Any]:
    singles = sorted(singles_ns)
    per_call = statistics.median(batch_us)
    return {
        "status": "ok",
        "per_call_us": round(per_call, 3),
        "p50_us": round(singles[len(singles) // 2] / 1000, 3),
        "p99_us": round(singles[min(len(singles) - 1, int(len(singles) * 0.99))] / 1000, 3),
        "calls_per_s": round(1e6 / per_call, 1) if per_call > 0 else 0.0,
        "batch": n,
        "repeats": len(batch_us),
    }


class Timer:
    """Batches sized to a time budget; repeats; then single calls for percentiles."""

    def __init__(self, budget_s: float, repeats: int) -> None:
        self.budget_s = budget_s
        self.repeats = repeats

    def _batch_size(self, once_s: float) -> int:
        per_repeat = self.budget_s / (self.repeats + 1)
        return max(10, min(200_000, int(per_repeat / max(once_s, 1e-8))))

    def sync(self, fn: SyncFn) -> dict[str, Any]:
        perf = time.perf_counter
        t0 = perf()
        for _ in range(20):
            fn()
        n = self._batch_size((perf() - t0) / 20)
        batches = []
        for _ in range(self.repeats):
            t0 = perf()
            for _ in range(n):
                fn()
            batches.append((perf() - t0) / n * 1e6)
        clock = time.perf_counter_ns
        singles = []
        for _ in range(n):
            s = clock()
            fn()
            singles.append(clock() - s)
        return _summary(batches, singles, n)

    async def async_(self, fn: AsyncFn) -> dict[str, Any]:
        perf = time.perf_counter
        t0 = perf()
        for _ in range(20):
            await fn()
        n = self._batch_size((perf() - t0) / 20)
        batches = []
        for _ in range(self.repeats):
            t0 = perf()
            for _ in range(n):
                await fn()
            batches.append((perf() - t0) / n * 1e6)
        clock = time.perf_counter_ns
        singles = []
        for _ in range(n):
            s = clock()
            await fn()
            singles.append(clock() - s)
        return _summary(batches, singles, n)


def request_body(name: str, arguments: dict[str, Any]) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    return json.dumps(message, separators=(",", ":")).encode()


def stand_in_tools() -> tuple[Any, str]:
    """The demo tools when ``mcplite.demo`` exists; otherwise bench stand-ins."""
    try:
        demo = importlib.import_module("mcplite.demo")
        return demo.tools, "mcplite.demo:tools"
    except Exception as exc:  # missing, half-written or broken: use stand-ins
        demo_error = f"{type(exc).__name__}: {exc}"
    from mcplite.core.tools import Tools

    tools = Tools()

    @tools.tool(
        schema={
            "type": "object",
            "required": ["text"],
            "properties": {"text": {"type": "string"}},
        }
    )
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @tools.tool(
        type="query",
        schema={
            "type": "object",
            "required": ["query"],
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "default": 10, "minimum": 1, "maximum": 100},
            },
        },
    )
    async def search_documents(query: str, limit: int = 10) -> list[dict[str, Any]]:
        """Search through available documents."""
        return [
            {"document_id": f"doc_{i}", "title": f"{query} {i}", "excerpt": "..."}
            for i in range(min(limit, 3))
        ]

    return tools, f"bench stand-in tools (mcplite.demo missing: {demo_error})"


def echo_argument(definitions: list[dict[str, Any]]) -> str:
    """The name of echo's string argument, read from its discovery entry."""
    for tool in definitions:
        if tool.get("name") == "echo":
            schema = tool.get("inputSchema") or {}
            required = schema.get("required") or []
            if required:
                return str(required[0])
            properties = list((schema.get("properties") or {}).keys())
            if properties:
                return str(properties[0])
    return "text"


async def time_dispatcher(timer: Timer, out: dict[str, Any], stubs: str | None) -> None:
    try:
        from mcplite.core.config import Config
        from mcplite.core.dispatch import Dispatcher

        tools, source = stand_in_tools()
    except Exception as exc:
        note = f"mcplite dispatch path not importable: {type(exc).__name__}: {exc}"
        out["echo"] = out["search_documents"] = na(note)
        await time_grpc_codec(timer, out["grpc_codec"], None, "text")
        return
    out["tools_source"] = source
    dispatcher = Dispatcher(tools, Config(access_log=False, secret=os.urandom(32)))
    arg = echo_argument(dispatcher.tool_definitions())
    out["echo_argument"] = arg

    handle: Callable[[bytes], Awaitable[bytes | None]]
    entry = getattr(dispatcher, "handle_jsonrpc", None)
    if entry is not None:
        handle = entry
        out["entry"] = "Dispatcher.handle_jsonrpc"
    else:
        try:
            from mcplite.protocols.jsonrpc import JsonRpc
        except ImportError as exc:
            out["echo"] = out["search_documents"] = na(f"no JSON-RPC entry point: {exc}")
            return
        rpc = JsonRpc(dispatcher)

        async def handle(body: bytes) -> bytes | None:
            reply = await rpc.handle(body)
            return reply[0]

        out["entry"] = "JsonRpc(dispatcher).handle (Dispatcher.handle_jsonrpc missing)"

    try:
        from mcplite.protocols.jsonrpc import decode as decode_json
        from mcplite.protocols.jsonrpc import encode as encode_json
    except ImportError:

        def decode_json(body: bytes) -> Any:
            return json.loads(body)

        def encode_json(obj: Any) -> bytes:
            return json.dumps(obj, separators=(",", ":")).encode()

    workloads = {
        "echo": ("echo", {arg: ECHO_TEXT}),
        "search_documents": ("search_documents", SEARCH_ARGS),
    }
    for label, (name, arguments) in workloads.items():
        try:
            out[label] = await time_one_tool(
                timer, handle, dispatcher, decode_json, encode_json, name, arguments
            )
        except Exception as exc:
            out[label] = na(f"{type(exc).__name__}: {exc}")
    echo = out["echo"]
    base = out.get("json_baseline", {})
    if echo.get("status") == "ok" and base.get("status") == "ok":
        over = echo["per_call_us"] - base["per_call_us"]
        echo["over_json_us"] = round(over, 3)
        echo["target"] = f"<= json + {TARGET_ECHO_OVER_JSON_US:g} us"
        echo["meets_target"] = over <= TARGET_ECHO_OVER_JSON_US
    await time_grpc_codec(timer, out["grpc_codec"], dispatcher, arg)
    closer = getattr(dispatcher, "close", None)
    if closer is not None:
        closer()


async def time_one_tool(
    timer: Timer,
    handle: Callable[[bytes], Awaitable[bytes | None]],
    dispatcher: Any,
    decode_json: Callable[[bytes], Any],
    encode_json: Callable[[Any], bytes],
    name: str,
    arguments: dict[str, Any],
) -> dict[str, Any]:
    body = request_body(name, arguments)
    sample = await handle(body)
    if not sample:
        return na("empty reply")
    reply = json.loads(sample)
    if "result" not in reply:
        return na(f"call failed: {sample[:300]!r}")

    async def whole() -> object:
        return await handle(body)

    figures = await timer.async_(whole)
    message = decode_json(body)
    args = message["params"]["arguments"]
    result = await dispatcher.call(name, args)
    envelope = result.to_json()
    wrapped = {"jsonrpc": "2.0", "id": 1, "result": envelope}

    async def dispatch() -> object:
        return await dispatcher.call(name, args)

    split = {
        "json_decode_us": timer.sync(lambda: decode_json(body))["per_call_us"],
        "dispatch_validate_us": (await timer.async_(dispatch))["per_call_us"],
        "envelope_us": timer.sync(result.to_json)["per_call_us"],
        "json_encode_us": timer.sync(lambda: encode_json(wrapped))["per_call_us"],
    }
    split["other_us"] = round(figures["per_call_us"] - sum(split.values()), 3)
    figures["split"] = split
    figures["request_bytes"] = len(body)
    figures["response_bytes"] = len(sample)
    figures["sample_response"] = sample[:400].decode(errors="replace")
    return figures


def time_json_baseline(timer: Timer, out: dict[str, Any]) -> None:
    """stdlib json.loads of the echo request + json.dumps of an echo response."""
    body = request_body("echo", {"text": ECHO_TEXT})
    response = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "content": [{"type": "text", "text": ECHO_TEXT}],
            "_meta": {
                "response_type": "answer",
                "timestamp": "2024-01-01T12:00:00.000Z",
                "processing_time_ms": 0.004,
                "server_version": "0.1.0",
            },
        },
    }
    loads, dumps = json.loads, json.dumps

    def work() -> object:
        loads(body)
        return dumps(response, separators=(",", ":")).encode()

    out["json_baseline"] = timer.sync(work)
    out["json_baseline"]["what"] = "json.loads(echo request) + json.dumps(echo response).encode()"


def time_promise_tokens(timer: Timer, out: dict[str, Any]) -> None:
    try:
        from mcplite.core.tokens import TokenSealer
    except ImportError as exc:
        out["promise_token"] = na(f"mcplite.core.tokens.TokenSealer missing: {exc}")
        return
    try:
        sealer = TokenSealer(os.urandom(32))
        promise_id = os.urandom(16)
        expires = time.time() + 600

        def seal_open() -> object:
            return sealer.open(sealer.seal(promise_id, expires))

        got = seal_open()
        if not (isinstance(got, tuple) and got[0] == promise_id):
            out["promise_token"] = na(f"open(seal(id)) gave {got!r}")
            return
        figures = timer.sync(seal_open)
        figures["seal_us"] = timer.sync(lambda: sealer.seal(promise_id, expires))["per_call_us"]
        token = sealer.seal(promise_id, expires)
        figures["open_us"] = timer.sync(lambda: sealer.open(token))["per_call_us"]
        figures["token_chars"] = len(token)
        figures["target"] = f"<= {TARGET_SEAL_VERIFY_US:g} us"
        figures["meets_target"] = figures["per_call_us"] <= TARGET_SEAL_VERIFY_US
        out["promise_token"] = figures
    except Exception as exc:
        out["promise_token"] = na(f"{type(exc).__name__}: {exc}")


def _grpc_request_bytes(stubs: str | None, arg: str) -> bytes | None:
    try:
        from mcplite.protocols.protobuf import encode_tool_request

        return bytes(encode_tool_request("echo", {arg: ECHO_TEXT}))
    except ImportError:
        pass
    if stubs is None:
        return None
    mcplite_pb2 = importlib.import_module("mcplite_pb2")  # generated at bench time
    request = mcplite_pb2.ToolRequest(name="echo")
    request.arguments.update({arg: ECHO_TEXT})
    return bytes(request.SerializeToString())


def time_grpc_baselines(timer: Timer, out: dict[str, Any], stubs: str | None) -> None:
    """protobuf (upb) and naive betterproto doing one echo call's codec work."""
    if stubs is None:
        out["protobuf"] = out["betterproto"] = na("no generated stubs")
        return
    sys.path.insert(0, stubs)
    try:
        pb = importlib.import_module("mcplite_pb2")

        raw = _grpc_request_bytes(stubs, "text")
        assert raw is not None

        def upb() -> object:
            request = pb.ToolRequest.FromString(raw)
            text = request.arguments["text"]
            response = pb.ToolResponse()
            response.result.update({"content": [{"type": "text", "text": text}]})
            response.meta.timestamp = 1
            return response.SerializeToString()

        out["protobuf"] = timer.sync(upb)
        out["protobuf"]["what"] = "protobuf (upb): FromString + Struct.update + SerializeToString"
    except Exception as exc:
        out["protobuf"] = na(f"{type(exc).__name__}: {exc}")
    try:
        bp = importlib.import_module("mcplite_bp")
        from bench.anchors.naive_grpclib import from_struct, to_struct

        raw = _grpc_request_bytes(stubs, "text")
        assert raw is not None

        def naive() -> object:
            request = bp.ToolRequest().parse(raw)
            text = from_struct(request.arguments)["text"]
            result = to_struct({"content": [{"type": "text", "text": text}]})
            return bytes(bp.ToolResponse(result=result, meta=bp.ResponseMeta(timestamp=1)))

        out["betterproto"] = timer.sync(naive)
        out["betterproto"]["what"] = "betterproto 2.0.0b7: parse + Struct walk + bytes()"
    except Exception as exc:
        out["betterproto"] = na(f"{type(exc).__name__}: {exc}")


async def time_grpc_codec(
    timer: Timer, out: dict[str, Any], dispatcher: Any | None, arg: str
) -> None:
    """mcplite's codec for one echo call; with the dispatcher in between when there is one."""
    try:
        from mcplite.protocols import protobuf as codec
    except ImportError as exc:
        out["mcplite"] = na(f"mcplite.protocols.protobuf missing: {exc}")
        return
    decode = getattr(codec, "decode_tool_request", None)
    encode = getattr(codec, "encode_tool_response", None)
    meta_cls = getattr(codec, "ResponseMeta", None)
    if decode is None or encode is None:
        out["mcplite"] = na(f"codec lacks decode_tool_request/encode_tool_response: {dir(codec)}")
        return
    try:
        raw = _grpc_request_bytes(None, arg)
        assert raw is not None
        name, arguments = decode(raw)
        if dispatcher is not None:
            result = await dispatcher.call(name, arguments)
        else:
            from mcplite.core.envelope import to_result

            result = to_result(arguments[arg], time.time(), 0.004)
        params = list(inspect.signature(encode).parameters)

        response_meta: Callable[[Any], Any] | None = None
        try:  # the service's own Result -> ResponseMeta mapping, when it exists
            service = importlib.import_module("mcplite.bindings.grpc.service")
            response_meta = getattr(service, "response_meta", None)
        except Exception:
            response_meta = None
        meta_source = "mcplite.bindings.grpc.service.response_meta" if response_meta else "bench"

        def meta_of(res: Any) -> Any:
            if response_meta is not None:
                return response_meta(res)
            if meta_cls is None:
                return None
            return meta_cls(
                response_type=0,
                timestamp=int(res.timestamp * 1000),
                processing_time_ms=round(res.processing_time_ms),
                server_version="0.1.0",
            )

        def encode_result(res: Any) -> bytes:
            if len(params) >= 2:
                return bytes(encode(res.body, meta_of(res)))
            return bytes(encode(res.body))

        encode_result(result)

        def codec_only() -> object:
            decode(raw)
            return encode_result(result)

        figures = timer.sync(codec_only)
        figures["what"] = (
            f"decode_tool_request + encode_tool_response (meta from Result by {meta_source})"
        )
        figures["decode_us"] = timer.sync(lambda: decode(raw))["per_call_us"]
        figures["encode_us"] = timer.sync(lambda: encode_result(result))["per_call_us"]

        if dispatcher is not None:
            call = dispatcher.call

            async def full() -> object:
                n, a = decode(raw)
                return encode_result(await call(n, a))

            figures["with_dispatch_us"] = (await timer.async_(full))["per_call_us"]
        else:
            figures["with_dispatch_us"] = None
            figures["note"] = "codec only: the dispatch path is not importable yet"
        out["mcplite"] = figures
    except Exception as exc:
        out["mcplite"] = na(f"{type(exc).__name__}: {exc}; {traceback.format_exc(limit=2)}")


def run(quick: bool, stubs: str | None) -> dict[str, Any]:
    timer = Timer(budget_s=0.15 if quick else 1.0, repeats=3 if quick else 7)
    out: dict[str, Any] = {"quick": quick, "grpc_codec": {}}
    time_json_baseline(timer, out)
    time_promise_tokens(timer, out)
    time_grpc_baselines(timer, out["grpc_codec"], stubs)
    asyncio.run(time_dispatcher(timer, out, stubs))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="mcplite in-process hot path")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--stubs", help="directory with generated gRPC stubs")
    args = parser.parse_args()
    print(json.dumps(run(args.quick, args.stubs)))


if __name__ == "__main__":
    main()
