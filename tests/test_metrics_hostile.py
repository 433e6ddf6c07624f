"""The ``--metrics`` listener under clients that misbehave.

It is meant for a scraper on a private address, but it still faces whatever can
reach that address: malformed and oversized heads, clients that vanish mid-request,
and more idle connections than a scraper ever opens.  Each is closed without an
answer and without a log line at ERROR, no task is left behind, and the next scrape
is answered as usual.  The listener runs on the test's loop; the clients are raw
sockets (their bytes are the point) and ``http.client``.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import struct
from collections.abc import AsyncIterator

import pytest
from conftest import WAIT

from mcplite.ops.metrics import Health, MetricsServer, Registry

MALFORMED = [
    b"\x00\x01\x02garbage\r\n\r\n",
    b"GET /metrics HTTP/1.1 extra\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"\xff\xfe\xfd\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\n" + b"X-Long: " + b"a" * 9000 + b"\r\n\r\n",  # over 8 KiB
]


class Errors(logging.Handler):
    """Every record at ERROR or above, from any logger."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
async def listener() -> AsyncIterator[tuple[MetricsServer, Errors]]:
    errors = Errors()
    logging.getLogger().addHandler(errors)
    registry = Registry()
    registry.gauge("test_gauge", "A figure to scrape.", lambda: [({}, 1.0)])
    server = MetricsServer(registry, Health())
    await server.start("127.0.0.1", 0)
    try:
        yield server, errors
    finally:
        await server.close()
        logging.getLogger().removeHandler(errors)


async def exchange(port: int, data: bytes, *, reset: bool = False) -> bytes:
    """Send ``data``, then read to the end (or reset at once): what came back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        if reset:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return b""
        if writer.can_write_eof():
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()


def scrape(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


async def settled(server: MetricsServer) -> None:
    """Every connection's task has ended (bounded)."""
    async with asyncio.timeout(WAIT):
        while server._tasks:  # the listener's own bookkeeping, read by its test
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("data", MALFORMED, ids=range(len(MALFORMED)))
async def test_a_malformed_or_oversized_head_is_closed_without_an_answer_or_an_error(
    listener: tuple[MetricsServer, Errors], data: bytes
) -> None:
    server, errors = listener
    assert await exchange(server.port, data) == b""
    await settled(server)
    status, body = await asyncio.to_thread(scrape, server.port)
    assert status == 200 and b"test_gauge 1" in body
    assert errors.records == []


@pytest.mark.parametrize(
    "data",
    [b"", b"GET /metr", b"GET /metrics HTTP/1.1\r\nHost: x\r\n"],
    ids=["nothing", "half a line", "half a head"],
)
@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
async def test_a_client_that_leaves_mid_request_leaves_nothing_behind(
    listener: tuple[MetricsServer, Errors], data: bytes, reset: bool
) -> None:
    server, errors = listener
    assert await exchange(server.port, data, reset=reset) == b""
    await settled(server)
    assert errors.records == []


async def test_idle_connections_past_the_cap_are_closed_at_once_and_scrapes_resume(
    listener: tuple[MetricsServer, Errors],
) -> None:
    server, errors = listener
    held = []
    try:
        for _ in range(server.max_connections):
            held.append(await asyncio.open_connection("127.0.0.1", server.port))
        async with asyncio.timeout(WAIT):
            while len(server._tasks) < server.max_connections:
                await asyncio.sleep(0.01)
        # One more: closed at once, not left waiting for the 5 s head timeout.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await asyncio.wait_for(reader.read(), WAIT) == b""
        writer.close()
    finally:
        for _, writer in held:
            writer.close()
    await settled(server)
    status, _ = await asyncio.to_thread(scrape, server.port)
    assert status == 200
    assert errors.records == []


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("POST", "/metrics", 405), ("GET", "/../../etc/passwd", 404), ("GET", "/metrics?x=1", 200)],
)
def test_methods_and_paths_a_scraper_never_sends_get_their_status(
    method: str, path: str, status: int
) -> None:
    async def run() -> int:
        server = MetricsServer(Registry(), Health())
        await server.start("127.0.0.1", 0)
        try:
            return await asyncio.to_thread(answer, server.port)
        finally:
            await server.close()

    def answer(port: int) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        try:
            conn.request(method, path, body=b"x" * 100 if method == "POST" else None)
            return conn.getresponse().status
        finally:
            conn.close()

    assert asyncio.run(run()) == status
