"""Every HTTP limit of :class:`mcplite.Config`, hit over a real socket: each one gets
its clear error (413, 431, 408, 503, a closed idle connection), and the server goes
on serving afterwards.  Limits are configured small so that each test is quick.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import BASE, WAIT, StartServer, call_message, server_factory
from http_support import (
    RECV,
    SSE_HEADERS,
    assert_http_error,
    assert_still_serving,
    call_held,
    exchange,
)
from sse_client import RawHttp, connect, request_bytes

from mcplite import Tools


@dataclass
class Gate:
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


def make_tools(gate: Gate) -> Tools:
    tools = Tools()

    @tools.tool(promise_after=math.inf)
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @tools.tool(promise_after=math.inf)
    def blocking() -> str:
        """Hold a call slot until the test releases it."""
        gate.entered.set()
        gate.release.wait(WAIT)
        return "released"

    return tools


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def serve(gate: Gate) -> Iterator[StartServer]:
    """``serve(**config)`` starts a server with those limits; all stop at teardown."""
    with server_factory(lambda: make_tools(gate), lambda _: gate.release.set()) as start:
        yield start


def echo_body(text: str, request_id: Any = 1) -> bytes:
    return json.dumps(call_message("echo", {"text": text}, request_id)).encode()


def assert_closes(reader: RawHttp) -> None:
    assert reader.at_eof(), "the server kept the connection open"


# --- body size: 413 -----------------------------------------------------------


def test_a_body_over_the_limit_with_content_length_gets_413(
    serve: StartServer,
) -> None:
    server = serve(max_body_size=1024)
    body = echo_body("x" * 2000)
    response, reader = exchange(server, request_bytes(BASE + "/rpc", body))
    with reader.sock:
        error = assert_http_error(response, 413)
        assert "1024" in error["message"]
        assert response.head.header("connection") == "close"
        assert_closes(reader)
    assert_still_serving(server)


def test_a_declared_body_over_the_limit_gets_413_before_it_is_sent(
    serve: StartServer,
) -> None:
    server = serve(max_body_size=1024)
    head = request_bytes(
        BASE + "/rpc", headers={"Content-Length": str(10**9)}, content_length=False
    )
    response, reader = exchange(server, head)  # no body follows: the answer must not wait
    with reader.sock:
        assert_http_error(response, 413)
        assert_closes(reader)
    assert_still_serving(server)


def test_a_chunked_body_over_the_limit_gets_413(serve: StartServer) -> None:
    server = serve(max_body_size=1024)
    body = echo_body("y" * 1500)
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 300]), body[i : i + 300])
        for i in range(0, len(body), 300)
    )
    head = request_bytes(
        BASE + "/rpc", headers={"Transfer-Encoding": "chunked"}, content_length=False
    )
    response, reader = exchange(server, head + chunks + b"0\r\n\r\n")
    with reader.sock:
        assert_http_error(response, 413)
        assert_closes(reader)
    assert_still_serving(server)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_of_exactly_the_limit_is_accepted(serve: StartServer, chunked: bool) -> None:
    server = serve(max_body_size=1024)
    body = echo_body("z")
    body = body[:-1] + b" " * (1024 - len(body)) + b"}"  # JSON padded to 1024 bytes
    assert len(body) == 1024
    if chunked:
        data = request_bytes(
            BASE + "/rpc", headers={"Transfer-Encoding": "chunked"}, content_length=False
        )
        data += b"200\r\n%s\r\n200\r\n%s\r\n0\r\n\r\n" % (body[:512], body[512:])
    else:
        data = request_bytes(BASE + "/rpc", body)
    response, reader = exchange(server, data)
    with reader.sock:
        assert response.status == 200
        assert response.json()["result"]["content"][0]["text"] == "z"


def test_an_oversized_body_announced_with_expect_100_continue_gets_413_not_100(
    serve: StartServer,
) -> None:
    server = serve(max_body_size=1024)
    head = request_bytes(
        BASE + "/rpc",
        headers={"Expect": "100-continue", "Content-Length": "5000"},
        content_length=False,
    )
    response, reader = exchange(server, head)
    with reader.sock:
        assert_http_error(response, 413)
        assert_closes(reader)
    assert_still_serving(server)


def test_long_bodies_within_a_raised_limit_are_answered_whole_on_one_connection(
    serve: StartServer,
) -> None:
    server = serve(max_body_size=4 << 20)
    # 3 MiB of request (JSON escapes) and 1 MiB of UTF-8 answer; then a short one.
    texts = ["é" * (1 << 19), "x" * ((1 << 20) + 7), "short"]
    # A small receive buffer: the answer arrives while the server is still writing it.
    with connect(server.port, RECV, rcvbuf=16384) as sock:
        reader = RawHttp(sock)
        for i, text in enumerate(texts):
            sock.sendall(request_bytes(BASE + "/rpc", call_message("echo", {"text": text}, i)))
            response = reader.read_response()
            assert response.status == 200
            assert response.head.header("content-length") == str(len(response.body))
            reply = response.json()
            assert reply["id"] == i
            assert reply["result"]["content"][0]["text"] == text
    assert_still_serving(server)


# --- header size: 431 ---------------------------------------------------------


def test_a_header_block_growing_past_the_limit_gets_431(
    serve: StartServer,
) -> None:
    server = serve(max_header_size=1024)
    head = f"POST {BASE}/rpc HTTP/1.1\r\nHost: x\r\nX-Padding: {'p' * 2000}\r\n".encode()
    response, reader = exchange(server, head)  # not finished: still more headers to come
    with reader.sock:
        assert_http_error(response, 431)
        assert_closes(reader)
    assert_still_serving(server)


def test_a_header_block_over_the_limit_gets_431_even_when_it_arrives_at_once(
    serve: StartServer,
) -> None:
    # The limit must not depend on how the kernel splits the bytes: a whole
    # 4 KiB head delivered in one read is still over a 1 KiB limit.
    server = serve(max_header_size=1024)
    data = request_bytes(BASE + "/rpc", echo_body("big head"), headers={"X-Padding": "p" * 4096})
    response, reader = exchange(server, data)
    with reader.sock:
        assert_http_error(response, 431)
    assert_still_serving(server)


def test_headers_under_the_limit_are_accepted(serve: StartServer) -> None:
    server = serve(max_header_size=1024)
    data = request_bytes(BASE + "/rpc", echo_body("small head"), headers={"X-Padding": "p" * 500})
    response, reader = exchange(server, data)
    with reader.sock:
        assert response.status == 200


# --- request timeout: 408 -----------------------------------------------------


def test_a_request_head_sent_too_slowly_gets_408(serve: StartServer) -> None:
    server = serve(request_timeout=0.3, keepalive_timeout=10)
    data = request_bytes(BASE + "/rpc", echo_body("slow"))
    with connect(server.port, RECV) as sock:
        started = time.monotonic()
        sock.sendall(data[:20])  # half a request line; the rest never comes
        reader = RawHttp(sock)
        response = reader.read_response()
        elapsed = time.monotonic() - started
        error = assert_http_error(response, 408)
        assert "timeout" in error["message"].lower()
        assert_closes(reader)
    assert 0.25 <= elapsed < 3.0, elapsed
    assert_still_serving(server)


def test_a_request_body_sent_too_slowly_gets_408(serve: StartServer) -> None:
    server = serve(request_timeout=0.3, keepalive_timeout=10)
    data = request_bytes(BASE + "/rpc", echo_body("slow body"))
    head_end = data.index(b"\r\n\r\n") + 4
    with connect(server.port, 1.5) as sock:
        started = time.monotonic()
        sock.sendall(data[: head_end + 10])  # the whole head, then a stalled body
        reader = RawHttp(sock)
        try:
            response = reader.read_response()
        except TimeoutError:
            pytest.fail("no 408 within 1.5 s for a stalled body (request_timeout=0.3)")
        elapsed = time.monotonic() - started
        assert_http_error(response, 408)
        assert_closes(reader)
    assert elapsed < 3.0, elapsed
    assert_still_serving(server)


def test_a_request_that_takes_its_time_within_the_timeout_is_answered(
    serve: StartServer,
) -> None:
    server = serve(request_timeout=2.0, keepalive_timeout=10)
    data = request_bytes(BASE + "/rpc", echo_body("in pieces"))
    with connect(server.port, RECV) as sock:
        for i in range(0, len(data), 16):
            sock.sendall(data[i : i + 16])
        response = RawHttp(sock).read_response()
    assert response.status == 200


def test_a_call_that_outlasts_the_request_and_idle_timeouts_is_still_answered(
    serve: StartServer, gate: Gate
) -> None:
    server = serve(request_timeout=0.2, keepalive_timeout=0.2)
    with connect(server.port, RECV) as sock:
        sock.sendall(request_bytes(BASE + "/rpc", call_message("blocking")))
        assert gate.entered.wait(WAIT)
        sock.settimeout(0.6)  # three times both timeouts: the subject of this test
        with pytest.raises(TimeoutError):
            sock.recv(1)  # neither data nor a close while the call runs
        sock.settimeout(RECV)
        gate.release.set()
        response = RawHttp(sock).read_response()
    assert response.status == 200
    assert response.json()["result"]["content"] == [{"type": "text", "text": "released"}]


# --- keep-alive idle timeout --------------------------------------------------


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(
    serve: StartServer,
) -> None:
    server = serve(keepalive_timeout=0.3, request_timeout=10)
    with connect(server.port, RECV) as sock:
        sock.sendall(request_bytes(BASE + "/rpc", echo_body("once")))
        reader = RawHttp(sock)
        assert reader.read_response().status == 200
        started = time.monotonic()
        assert_closes(reader)  # recv returns b"" instead of timing out
        elapsed = time.monotonic() - started
        assert reader.buffer == b""  # closed quietly: no unsolicited response
    assert 0.2 <= elapsed < 3.0, elapsed
    assert_still_serving(server)


def test_a_connection_that_never_sends_a_request_is_closed_after_the_idle_timeout(
    serve: StartServer,
) -> None:
    server = serve(keepalive_timeout=0.3, request_timeout=10)
    with connect(server.port, RECV) as sock:
        started = time.monotonic()
        assert_closes(RawHttp(sock))
        elapsed = time.monotonic() - started
    assert elapsed < 3.0, elapsed


# --- connections: 503 and close ------------------------------------------------


def test_a_connection_beyond_max_connections_gets_503_and_close(
    serve: StartServer,
) -> None:
    server = serve(max_connections=2, keepalive_timeout=10)
    first, second = connect(server.port, RECV), connect(server.port, RECV)
    with first, second:
        readers = [RawHttp(first), RawHttp(second)]
        for i, sock in enumerate((first, second)):  # both accepted and kept alive
            sock.sendall(request_bytes(BASE + "/rpc", echo_body(f"held {i}")))
            assert readers[i].read_response().status == 200
        with connect(server.port, RECV) as third:
            reader = RawHttp(third)
            response = reader.read_response()
            error = assert_http_error(response, 503)
            assert error["code"] == -32000
            assert response.head.header("connection") == "close"
            retry_after = response.head.header("retry-after")
            assert retry_after is not None and int(retry_after) >= 1
            assert_closes(reader)
        # The first two still work, and closing one makes room for a new one.
        second.sendall(request_bytes(BASE + "/rpc", echo_body("still held")))
        assert readers[1].read_response().status == 200
        first.shutdown(socket.SHUT_WR)
        assert_closes(readers[0])  # the server has let go of it
        assert_still_serving(server)


# --- concurrent calls: 503 + Retry-After + -32000 ------------------------------


@pytest.mark.parametrize(
    "headers", [None, SSE_HEADERS], ids=["a plain call", "a call asking for a stream"]
)
def test_a_call_beyond_max_concurrent_calls_gets_503_with_retry_after(
    serve: StartServer, gate: Gate, headers: dict[str, str] | None
) -> None:
    server = serve(max_concurrent_calls=1, retry_after=2.0)
    with call_held(server, "blocking", gate.entered, gate.release) as blocked:
        message = call_message("echo", {"text": "one too many"}, "s")
        status, response_headers, body = server.post("/rpc", message, headers)
        assert status == 503
        assert response_headers["content-type"].startswith("application/json")
        assert response_headers["retry-after"] == "2"
        reply = json.loads(body)
        assert reply["id"] == "s"
        assert reply["error"]["code"] == -32000
        assert reply["error"]["data"]["retry_after"] == 2.0
    first = blocked.result(WAIT)
    assert first["result"]["content"] == [{"type": "text", "text": "released"}]
    assert server.dispatcher.active == 0
    assert_still_serving(server)
