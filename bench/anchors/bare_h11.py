"""The ceiling for an h11-based server: h11 framing plus the JSON work of an echo call.

Per request: ``json.loads`` the body, take ``params.arguments[<arg>]``, build the
JSON-RPC result that mcplite answers for ``tools/call`` of ``echo`` (content item
plus a ``_meta`` with ``response_type``, ISO ``timestamp``, ``processing_time_ms``
and ``server_version``), ``json.dumps`` it and send it through h11.  No routing,
no validation, no tasks: the answer is written from ``data_received``.  A server
built on h11 that does more than this cannot be faster than this.

Run: ``python bench/anchors/bare_h11.py --port 8080 [--arg text]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from typing import Any

import h11

_second_cache: tuple[int, str] = (-1, "")


def iso_timestamp(epoch: float) -> str:
    global _second_cache
    second = int(epoch)
    cached, prefix = _second_cache
    if second != cached:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_cache = (second, prefix)
    return f"{prefix}.{int((epoch - second) * 1000):03d}Z"


def answer(body: bytes, arg: str) -> bytes:
    started = time.time()
    t0 = time.perf_counter()
    request = json.loads(body)
    text = request["params"]["arguments"][arg]
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": text}],
        "_meta": {
            "response_type": "answer",
            "timestamp": iso_timestamp(started),
            "processing_time_ms": round((time.perf_counter() - t0) * 1000, 3),
            "server_version": "0.1.0",
        },
    }
    response = {"jsonrpc": "2.0", "id": request.get("id"), "result": result}
    return json.dumps(response, separators=(",", ":")).encode()


class H11Protocol(asyncio.Protocol):
    def __init__(self, arg: str) -> None:
        self.arg = arg
        self.conn = h11.Connection(h11.SERVER)
        self.transport: asyncio.Transport | None = None
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        conn.receive_data(data)
        out: list[bytes] = []
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    break
                if isinstance(event, h11.Data):
                    self.body.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    out.append(self.respond(b"".join(self.body)))
                    self.body.clear()
                    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                        conn.start_next_cycle()
                    else:
                        break
                elif isinstance(event, h11.ConnectionClosed):
                    break
        except h11.RemoteProtocolError:
            if self.transport is not None:
                self.transport.close()
            return
        if out and self.transport is not None:
            self.transport.write(b"".join(out))
        if conn.our_state is h11.MUST_CLOSE and self.transport is not None:
            self.transport.close()

    def respond(self, body: bytes) -> bytes:
        try:
            payload, status = answer(body, self.arg), 200
        except (ValueError, KeyError, TypeError):
            payload, status = b'{"error":"bad request"}', 400
        headers = [("content-type", "application/json"), ("content-length", str(len(payload)))]
        conn = self.conn
        return b"".join(
            (
                conn.send(h11.Response(status_code=status, headers=headers)) or b"",
                conn.send(h11.Data(data=payload)) or b"",
                conn.send(h11.EndOfMessage()) or b"",
            )
        )


async def serve(host: str, port: int, arg: str) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: H11Protocol(arg), host, port, backlog=2048)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--arg", default="text", help="name of the echo argument")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.arg))


if __name__ == "__main__":
    main()
