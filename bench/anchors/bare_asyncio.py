"""The floor: a bare ``asyncio.Protocol`` that answers every POST with canned bytes.

No HTTP library and no JSON work: it finds the end of the head, skips
``Content-Length`` bytes of body and writes a fixed response of the same size as
an echo ``tools/call`` answer.  Nothing written in Python on asyncio's default
loop answers HTTP faster, so this bounds every other row from above.

Run: ``python bench/anchors/bare_asyncio.py --port 8080``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

BODY = (
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello world"}],'
    b'"_meta":{"response_type":"answer","timestamp":"2024-01-01T12:00:00.000Z",'
    b'"processing_time_ms":0.004,"server_version":"0.1.0"}}}'
)
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)
_CL = b"\r\ncontent-length:"


class CannedProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        answers = 0
        while True:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                break
            head = buffer[:head_end].lower()
            length = 0
            at = head.find(_CL)
            if at >= 0:
                line_end = head.find(b"\r\n", at + 2)
                length = int(head[at + len(_CL) : line_end if line_end >= 0 else None])
            end = head_end + 4 + length
            if len(buffer) < end:
                break
            buffer = buffer[end:]
            answers += 1
        self.buffer = buffer
        if answers and self.transport is not None:
            self.transport.write(RESPONSE * answers)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(CannedProtocol, host, port, backlog=2048)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
