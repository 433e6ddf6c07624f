"""The HTTP binding at its edges (issue 10), over real sockets: methods other than
POST, HEAD, the SSE path's request checks, request smuggling, a client that never
reads, lingering closes, half-closed clients, the grace period, batches with a bad
member, notifications that fail, the access log, the exact header-size boundary,
and integers too long to parse.

Peers we did not write: the stdlib ``http.client`` and raw sockets read with the
byte-level reader in ``sse_client.py``.  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    BASE,
    SECRET,
    WAIT,
    RunningServer,
    StartServer,
    call_message,
    notification,
    serve_process,
    server_factory,
)
from http_support import (
    JSON_HEADERS,
    RECV,
    SSE_HEADERS,
    assert_http_error,
    assert_still_serving,
    echo_on,
    exchange,
)
from sse_client import RawHttp, connect, request_bytes

from mcplite import Tools

ENDPOINTS = ["/listtools", "/tools", "/calltools", "/rpc"]


@dataclass
class Probe:
    """What the test tools tell the test, and the gates the test opens."""

    entered: threading.Event = field(default_factory=threading.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # set on the server loop
    never: asyncio.Event = field(default_factory=asyncio.Event)  # never set
    calls: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.calls)


def make_tools(probe: Probe) -> Tools:
    tools = Tools()

    @tools.tool(promise_after=math.inf)
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @tools.tool(promise_after=math.inf)
    async def note(text: str) -> str:
        """Record a call."""
        with probe.lock:
            probe.calls.append(text)
        return text

    @tools.tool(promise_after=math.inf)
    async def blob(size: int) -> str:
        """A response of about ``size`` bytes; counts its calls."""
        with probe.lock:
            probe.calls.append("blob")
        return "x" * size

    @tools.tool(promise_after=math.inf)
    async def gated() -> str:
        """Suspend until the test opens the gate."""
        probe.entered.set()
        await probe.gate.wait()
        return "opened"

    @tools.tool(promise_after=math.inf)
    async def endless() -> str:
        """Never finish by itself."""
        probe.entered.set()
        await probe.never.wait()
        return "unreachable"

    @tools.tool(promise_after=math.inf)
    async def not_a_number() -> dict[str, float]:
        """A result JSON cannot hold."""
        return {"ratio": math.nan}

    @tools.tool(promise_after=math.inf)
    async def raw_bytes() -> dict[str, Any]:
        """Another result JSON cannot hold."""
        return {"data": b"\x00\x01"}

    @tools.tool(promise_after=math.inf)
    async def circular() -> dict[str, Any]:
        """A result that contains itself."""
        loop: dict[str, Any] = {}
        loop["self"] = loop
        return loop

    @tools.tool(promise_after=math.inf)
    async def crash() -> str:
        """Raise an unexpected exception."""
        raise RuntimeError("boom")

    return tools


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def serve(probe: Probe) -> Iterator[StartServer]:
    """``serve(**config)`` starts a server for the test tools; all stop at teardown."""
    with server_factory(lambda: make_tools(probe), lambda s: s.call_soon(probe.gate.set)) as start:
        yield start


@pytest.fixture
def server(serve: StartServer) -> RunningServer:
    return serve()


def rpc(path: str, body: Any, headers: dict[str, str] | None = None) -> bytes:
    return request_bytes(BASE + path, body, headers=headers)


def text_of(reply: dict[str, Any]) -> str:
    assert "error" not in reply, reply
    text: str = reply["result"]["content"][0]["text"]
    return text


def on_server_loop(server: RunningServer, check: Any, timeout: float = WAIT) -> Any:
    """Poll ``check()`` on the server's loop until it returns something truthy
    (a bounded poll of the server's own state); fails the test at ``timeout``."""

    async def poll() -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = check()
            if found:
                return found
            if loop.time() > deadline:
                return None
            await asyncio.sleep(0.01)

    found = server.run(poll(), timeout=timeout + WAIT)
    assert found, f"condition not reached within {timeout} s"
    return found


# --- 1. methods other than POST, and HEAD ---------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "OPTIONS", "PATCH"])
def test_every_method_but_post_gets_405_with_allow_post_on_every_endpoint(
    server: RunningServer, method: str
) -> None:
    conn = server.connection()
    try:
        for path in ENDPOINTS:
            conn.request(method, BASE + path)
            response = conn.getresponse()
            body = response.read()
            assert response.status == 405, (path, body)
            assert response.getheader("allow") == "POST"
            assert json.loads(body)["error"]["data"]["http_status"] == 405
        assert echo_on(conn, "after") == "after"  # the same connection still serves a POST
    finally:
        conn.close()


def test_a_method_other_than_post_on_an_unknown_path_gets_404_as_a_post_does(
    server: RunningServer,
) -> None:
    conn = server.connection()
    try:
        for method in ("POST", "GET", "DELETE"):
            conn.request(method, BASE + "/nowhere", b"{}", JSON_HEADERS)
            response = conn.getresponse()
            assert response.status == 404, method
            assert json.loads(response.read())["error"]["data"]["http_status"] == 404
    finally:
        conn.close()


def test_head_gets_405_headers_and_no_body_and_the_connection_goes_on(
    server: RunningServer,
) -> None:
    # What `curl -I .../rpc` does.  RFC 9110 9.3.2: the headers a GET gets, no body.
    conn = server.connection()
    try:
        conn.request("GET", BASE + "/rpc")
        get = conn.getresponse()
        get_body = get.read()
        for path in ENDPOINTS:
            conn.request("HEAD", BASE + path)
            head = conn.getresponse()
            assert head.status == 405, path
            assert head.getheader("allow") == "POST"
            assert head.getheader("content-type") == "application/json"
            assert head.getheader("content-length") == str(len(get_body))
            assert head.read() == b""
        assert echo_on(conn, "next") == "next"
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("path", "status"), [("/rpc", 405), ("/listtools", 405), ("/nowhere", 404)]
)
def test_a_request_pipelined_behind_a_head_is_answered(
    server: RunningServer, path: str, status: int
) -> None:
    data = request_bytes(BASE + path, b"", method="HEAD") + rpc(
        "/rpc", call_message("echo", {"text": "behind"})
    )
    with connect(server.port, RECV) as sock:
        sock.sendall(data)
        reader = RawHttp(sock)
        head = reader.read_head()  # a HEAD response: no body follows its head
        assert head.status == status
        assert head.header("connection") is None  # kept alive
        behind = reader.read_response()
        assert behind.status == 200
        assert text_of(behind.json()) == "behind"


@pytest.mark.parametrize(
    "first",
    [
        request_bytes(
            BASE + "/rpc",
            b"",
            method="GET",
            headers={"Upgrade": "websocket", "Connection": "Upgrade"},
        ),
        b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n",
    ],
    ids=["an upgrade GET", "CONNECT"],
)
def test_a_refused_upgrade_or_connect_keeps_the_connection_for_the_next_request(
    server: RunningServer, first: bytes
) -> None:
    with connect(server.port, RECV) as sock:
        sock.sendall(first + rpc("/rpc", call_message("echo", {"text": "next"})))
        reader = RawHttp(sock)
        assert reader.read_response().status in (404, 405)
        assert text_of(reader.read_response().json()) == "next"


# --- 2. the SSE path checks a request exactly as the plain path does -------------

CALL_TAIL = b'"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}'
ODD_REQUESTS: dict[str, bytes] = {
    "id 1e400": b'{"jsonrpc":"2.0","id":1e400,' + CALL_TAIL,
    "id -1e400": b'{"jsonrpc":"2.0","id":-1e400,' + CALL_TAIL,
    "id true": b'{"jsonrpc":"2.0","id":true,' + CALL_TAIL,
    "id false": b'{"jsonrpc":"2.0","id":false,' + CALL_TAIL,
    "id []": b'{"jsonrpc":"2.0","id":[],' + CALL_TAIL,
    "id {}": b'{"jsonrpc":"2.0","id":{},' + CALL_TAIL,
    "id null and an unknown tool": (
        b'{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"nope"}}'
    ),
    "id 1e400 and no jsonrpc": b'{"id":1e400,' + CALL_TAIL,
    "jsonrpc missing": b'{"id":1,' + CALL_TAIL,
    "jsonrpc 1.0": b'{"jsonrpc":"1.0","id":1,' + CALL_TAIL,
    "method not a string": b'{"jsonrpc":"2.0","id":1,"method":5}',
    "params a string": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"echo"}',
    "params an array": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["echo"]}',
    "params missing": b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}',
    "name missing": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}',
    "name a number": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}',
    "arguments an array": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":[]}}'
    ),
    "arguments of the wrong type": (
        b'{"jsonrpc":"2.0","id":"a","method":"tools/call",'
        b'"params":{"name":"echo","arguments":{"text":5}}}'
    ),
    "an unknown tool": b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ecko"}}',
    "a lone surrogate id": (
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call","params":{"name":"nope"}}'
    ),
    "not JSON": b'{"jsonrpc":"2.0","id":1,',
    "an integer of 5000 digits": b'{"jsonrpc":"2.0","id":' + b"7" * 5000 + b"," + CALL_TAIL,
    "a batch": b"[" + b'{"jsonrpc":"2.0","id":true,' + CALL_TAIL + b"]",
}


@pytest.mark.parametrize("body", ODD_REQUESTS.values(), ids=ODD_REQUESTS.keys())
def test_a_request_asking_for_sse_gets_the_same_error_as_a_plain_one(
    server: RunningServer, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    plain_status, plain_headers, plain = server.post("/rpc", body)
    sse_status, sse_headers, streamed = server.post("/rpc", body, SSE_HEADERS)
    assert plain_status == 200, plain
    assert (sse_status, sse_headers["content-type"]) == (200, plain_headers["content-type"])
    assert json.loads(streamed) == json.loads(plain)
    replies = json.loads(plain)
    for reply in replies if isinstance(replies, list) else [replies]:
        assert reply["error"]["code"] in (-32700, -32600, -32601, -32602), reply
        assert not isinstance(reply["id"], bool)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback


def test_a_valid_call_with_a_null_id_streams_under_that_id(server: RunningServer) -> None:
    body = call_message("echo", {"text": "streamed"}, request_id=None)
    status, headers, raw = server.post("/rpc", body, SSE_HEADERS)
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert b"event: done" in raw


# --- 4. request smuggling: Content-Length and Transfer-Encoding together ----------


@pytest.mark.parametrize("te_first", [True, False], ids=["TE first", "CL first"])
def test_a_request_with_both_content_length_and_transfer_encoding_gets_400_and_close(
    server: RunningServer, probe: Probe, te_first: bool
) -> None:
    hidden = rpc("/rpc", call_message("note", {"text": "smuggled"}, "hidden"))
    body = b"0\r\n\r\n" + hidden  # chunked: an empty body, then a second request
    framing = ["Transfer-Encoding: chunked\r\n", f"Content-Length: {len(body)}\r\n"]
    if not te_first:
        framing.reverse()
    head = (
        f"POST {BASE}/rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + "".join(framing)
        + "\r\n"
    ).encode()
    with connect(server.port, RECV) as sock:
        sock.sendall(head + body)
        reader = RawHttp(sock)
        error = assert_http_error(reader.read_response(), 400)
        assert "Content-Length" in error["message"]
        assert reader.at_eof(), "the connection stayed open"
        assert reader.buffer == b"", "the hidden request was answered"
    assert probe.calls == []
    assert_still_serving(server)


def test_an_unsupported_transfer_encoding_gets_501_and_close(server: RunningServer) -> None:
    data = request_bytes(
        BASE + "/rpc", b"", headers={"Transfer-Encoding": "gzip"}, content_length=False
    )
    response, reader = exchange(server, data)
    with reader.sock:
        error = assert_http_error(response, 501)
        assert "chunked" in error["message"]
        assert response.head.header("connection") == "close"
        assert reader.at_eof()


# --- 7. a client that pipelines and never reads ----------------------------------


def test_a_client_that_pipelines_without_reading_holds_a_bounded_buffer_and_loses_nothing(
    server: RunningServer, probe: Probe
) -> None:
    count, size = 200, 64 * 1024  # 12.5 MiB of answers: more than any socket buffer holds
    data = b"".join(rpc("/rpc", call_message("blob", {"size": size}, i)) for i in range(count))
    with connect(server.port, WAIT, rcvbuf=4096) as sock:
        sender = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
        sender.start()

        def stopped() -> tuple[int, int] | None:
            # The server reads nothing more and runs no call: it waits for us.
            for conn in server.http.connections:
                transport = conn.transport
                if transport is not None and not transport.is_reading() and conn.task is None:
                    return probe.count(), transport.get_write_buffer_size()
            return None

        answered, buffered = on_server_loop(server, stopped)
        assert answered < count  # it stopped taking requests ...
        assert buffered <= 64 * 1024 + size + 1024  # ... once its unsent output passed 64 KiB
        reader = RawHttp(sock)
        for i in range(count):  # and once we read, every answer comes, in order
            response = reader.read_response()
            assert response.status == 200
            reply = response.json()
            assert reply["id"] == i
            assert len(text_of(reply)) == size
        sender.join(WAIT)
    assert probe.count() == count


def test_shutdown_does_not_wait_for_a_client_that_reads_nothing(
    server: RunningServer, probe: Probe
) -> None:
    data = b"".join(rpc("/rpc", call_message("blob", {"size": 64 * 1024}, i)) for i in range(100))
    with connect(server.port, WAIT, rcvbuf=4096) as sock:
        sock.sendall(data)

        def stopped() -> bool:
            return any(
                c.transport is not None and not c.transport.is_reading() and c.task is None
                for c in server.http.connections
            )

        on_server_loop(server, stopped)
        elapsed = shut_down(server, 0.0)
        assert elapsed < 1.0, elapsed
        assert not server.http.connections
        reader = RawHttp(sock)
        assert reader.at_eof()  # what was sent, then the end (or a reset): no hang


# --- 10. lingering close: an early error response is not lost ---------------------

# More than the kernel's socket buffers take at once, so that the client is still
# sending when the server answers (and less than the server drops while lingering).
EARLY_BODY = 3 * 1024 * 1024


@pytest.mark.parametrize("in_two_steps", [False, True], ids=["at once", "head then body"])
def test_a_body_over_the_limit_gets_its_413_every_time(
    serve: StartServer, in_two_steps: bool
) -> None:
    server = serve(max_body_size=1024)
    body = b'{"pad":"' + b"p" * EARLY_BODY + b'"}'
    for attempt in range(50):
        conn = server.connection()
        try:
            if in_two_steps:
                conn.putrequest("POST", BASE + "/rpc")
                conn.putheader("Content-Type", "application/json")
                conn.putheader("Content-Length", str(len(body)))
                conn.endheaders()
                conn.send(body)
            else:
                conn.request("POST", BASE + "/rpc", body, JSON_HEADERS)
            response = conn.getresponse()
            assert response.status == 413, attempt
            assert json.loads(response.read())["error"]["data"]["http_status"] == 413
        finally:
            conn.close()
    assert_still_serving(server)


def test_a_chunked_body_over_the_limit_gets_its_413_every_time(serve: StartServer) -> None:
    server = serve(max_body_size=1024)
    chunk = b"p" * 65536
    count = EARLY_BODY // len(chunk)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(count)) + b"0\r\n\r\n"
    head = request_bytes(
        BASE + "/rpc", headers={"Transfer-Encoding": "chunked"}, content_length=False
    )
    for attempt in range(50):
        with connect(server.port, RECV) as sock:
            sock.sendall(head + chunks)
            reader = RawHttp(sock)
            assert reader.read_response().status == 413, attempt
            assert reader.at_eof()


def test_a_connection_over_the_limit_gets_its_503_though_it_sent_a_request_at_once(
    serve: StartServer,
) -> None:
    server = serve(max_connections=1, keepalive_timeout=WAIT)
    with connect(server.port, RECV) as held:
        held.sendall(rpc("/rpc", call_message("echo", {"text": "held"})))
        assert RawHttp(held).read_response().status == 200
        big = rpc("/rpc", {"pad": "p" * EARLY_BODY})
        for attempt in range(30):
            with connect(server.port, RECV) as sock:
                sock.sendall(big)
                reader = RawHttp(sock)
                response = reader.read_response()
                assert response.status == 503, attempt
                assert response.json()["error"]["code"] == -32000


def test_a_refused_expect_100_continue_gets_its_415_though_the_body_comes_anyway(
    serve: StartServer,
) -> None:
    server = serve(max_body_size=2 * EARLY_BODY)
    body = b"p" * EARLY_BODY
    data = request_bytes(
        BASE + "/rpc", body, headers={"Expect": "100-continue", "Content-Type": "text/plain"}
    )
    for attempt in range(20):
        with connect(server.port, RECV) as sock:
            sock.sendall(data)  # a client that does not wait for 100 Continue
            reader = RawHttp(sock)
            assert_http_error(reader.read_response(), 415)
            assert reader.at_eof(), attempt


# --- a client that half-closes after its request ---------------------------------


def test_a_client_that_half_closes_after_its_request_gets_the_whole_answer(
    server: RunningServer,
) -> None:
    with connect(server.port, RECV) as sock:
        sock.sendall(rpc("/rpc", call_message("echo", {"text": "half"})))
        sock.shutdown(socket.SHUT_WR)
        reader = RawHttp(sock)
        assert text_of(reader.read_response().json()) == "half"
        assert reader.at_eof()


def test_a_client_that_half_closes_while_its_tool_is_suspended_gets_the_answer(
    server: RunningServer, probe: Probe
) -> None:
    with connect(server.port, RECV) as sock:
        sock.sendall(rpc("/rpc", call_message("gated")))
        assert probe.entered.wait(WAIT)
        sock.shutdown(socket.SHUT_WR)

        def eof_seen() -> bool:  # the server has read our FIN while the tool waits
            return any(conn.conn.trailing_data[1] for conn in server.http.connections)

        on_server_loop(server, eof_seen)
        server.call_soon(probe.gate.set)
        reader = RawHttp(sock)
        response = reader.read_response()
        assert response.status == 200
        assert text_of(response.json()) == "opened"
        assert reader.at_eof()


# --- the grace period ---------------------------------------------------------------


def shut_down(server: RunningServer, grace: float) -> float:
    """Run the HTTP server's shutdown with ``grace``; return how long it took."""
    started = time.monotonic()
    server.run(server.http.shutdown(grace), timeout=grace + WAIT)
    return time.monotonic() - started


def test_a_call_still_running_when_the_grace_period_ends_gets_503_shutting_down(
    server: RunningServer, probe: Probe
) -> None:
    grace = 0.3
    with connect(server.port, WAIT) as sock:
        sock.sendall(rpc("/rpc", call_message("endless", request_id="late")))
        assert probe.entered.wait(WAIT)
        elapsed = shut_down(server, grace)
        reader = RawHttp(sock)
        response = reader.read_response()
        assert response.status == 503
        assert response.head.header("connection") == "close"
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": "late",
            "error": {"code": -32000, "message": "Server is shutting down"},
        }
        assert reader.at_eof()
    assert grace <= elapsed < grace + 1.0, elapsed


def test_a_batch_still_running_when_the_grace_period_ends_gets_an_error_per_request(
    server: RunningServer, probe: Probe
) -> None:
    batch = [
        call_message("endless", request_id="a"),
        call_message("echo", {"text": "b"}, "b"),
        notification("endless"),
    ]
    with connect(server.port, WAIT) as sock:
        sock.sendall(rpc("/rpc", batch))
        assert probe.entered.wait(WAIT)
        shut_down(server, 0.0)
        response = RawHttp(sock).read_response()
    assert response.status == 503
    replies = response.json()
    assert [r["id"] for r in replies] == ["a", "b"]
    assert all(r["error"]["code"] == -32000 for r in replies)


def test_a_call_that_ends_within_the_grace_period_gets_its_answer(
    server: RunningServer, probe: Probe
) -> None:
    with connect(server.port, WAIT) as sock, ThreadPoolExecutor(1) as pool:
        sock.sendall(rpc("/rpc", call_message("gated")))
        assert probe.entered.wait(WAIT)
        stopping = pool.submit(shut_down, server, WAIT)
        on_server_loop(server, lambda: server.http.draining)  # the grace period has begun
        server.call_soon(probe.gate.set)
        response = RawHttp(sock).read_response()
        assert response.status == 200
        assert response.head.header("connection") == "close"
        assert text_of(response.json()) == "opened"
        assert stopping.result(WAIT) < WAIT  # it did not wait out the grace period


FOREVER_MODULE = """
import asyncio
import sys

from mcplite import NEVER, Tools

tools = Tools()


@tools.tool(promise_after=NEVER)
async def forever() -> str:
    print("forever tool started", file=sys.stderr, flush=True)
    await asyncio.sleep(3600)
    return "never"
"""


def test_serve_answers_a_call_cut_short_by_sigterm_with_503_and_exits_in_time(
    tmp_path: Path,
) -> None:
    (tmp_path / "hardening_forever.py").write_text(FOREVER_MODULE)
    grace = 1.0
    with (
        serve_process(
            *("hardening_forever", "--http", "127.0.0.1:0", "--no-grpc", "--no-access-log"),
            *("--secret", SECRET.decode(), "--grace", str(grace)),
            extra_path=tmp_path,
        ) as server,
        connect(server.http_port, WAIT) as sock,
    ):
        sock.sendall(rpc("/rpc", call_message("forever", request_id=9)))
        server.wait_for("forever tool started", WAIT)
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        response = RawHttp(sock).read_response()
        assert server.proc.wait(WAIT) == 0
        took = time.monotonic() - signalled
    assert response.status == 503
    assert response.json()["error"] == {"code": -32000, "message": "Server is shutting down"}
    assert response.json()["id"] == 9
    assert took < grace + 1.0 + 2.0, took  # + 2 s for the interpreter to stop


# --- batches and notifications ----------------------------------------------------


def test_a_batch_member_whose_result_is_not_json_is_the_only_error(server: RunningServer) -> None:
    batch = [
        call_message("echo", {"text": "one"}, 1),
        call_message("not_a_number", request_id=2),
        call_message("echo", {"text": "three"}, 3),
        call_message("raw_bytes", request_id=4),
        call_message("circular", request_id=5),
        notification("not_a_number"),
    ]
    status, _, body = server.post("/rpc", batch)
    assert status == 200
    replies = json.loads(body)
    assert [r["id"] for r in replies] == [1, 2, 3, 4, 5]
    assert text_of(replies[0]) == "one"
    assert text_of(replies[2]) == "three"
    for bad in (replies[1], replies[3], replies[4]):
        assert "result" not in bad
        assert bad["error"]["code"] == -32603
        assert "not valid JSON" in bad["error"]["message"]


FAILING_NOTIFICATIONS = {
    "an unknown tool": notification("nope"),
    "invalid arguments": notification("echo", {"text": 5}),
    "no tool name": {"jsonrpc": "2.0", "method": "tools/call", "params": {"arguments": {}}},
    "an unknown method": {"jsonrpc": "2.0", "method": "nope/nope"},
    "a tool that raises": notification("crash"),
}


@pytest.mark.parametrize(
    "message", FAILING_NOTIFICATIONS.values(), ids=FAILING_NOTIFICATIONS.keys()
)
def test_a_failing_notification_gets_no_answer_alone_or_in_a_batch(
    server: RunningServer, message: dict[str, Any]
) -> None:
    assert server.post("/rpc", message)[:3:2] == (202, b"")
    assert server.post("/rpc", [message, message])[:3:2] == (202, b"")
    status, _, body = server.post("/rpc", [message, call_message("echo", {"text": "x"}, "c")])
    assert status == 200
    (reply,) = json.loads(body)
    assert reply["id"] == "c" and text_of(reply) == "x"


# --- the access log ---------------------------------------------------------------


class AccessLines(logging.Handler):
    """Collects ``mcplite.access`` lines from the server's thread."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.cond = threading.Condition()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with self.cond:
            self.lines.append(record.getMessage())
            self.cond.notify_all()

    def wait(self, count: int) -> list[str]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.lines) >= count, WAIT), self.lines
            return list(self.lines)


@pytest.fixture
def access_lines() -> Iterator[AccessLines]:
    logger = logging.getLogger("mcplite.access")
    handler = AccessLines()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_the_access_log_names_method_path_tool_status_and_duration(
    serve: StartServer, access_lines: AccessLines
) -> None:
    server = serve(access_log=True, max_body_size=1024)
    server.post("/rpc?x=1", call_message("echo", {"text": "logged"}))
    server.post("/rpc", call_message("ecko"))
    server.post("/nowhere", {})
    server.post("/rpc", {"pad": "p" * 2000})
    conn = server.connection()
    conn.request("HEAD", BASE + "/tools")
    conn.getresponse().read()
    conn.close()
    lines = access_lines.wait(5)
    duration = r" \d+\.\d\dms$"
    expected = [
        rf"^POST {BASE}/rpc echo 200{duration}",  # no query string
        rf"^POST {BASE}/rpc ecko 200{duration}",  # a JSON-RPC error is an HTTP 200
        rf"^POST {BASE}/nowhere - 404{duration}",
        rf"^POST {BASE}/rpc - 413{duration}",
        rf"^HEAD {BASE}/tools - 405{duration}",
    ]
    assert len(lines) == len(expected), lines
    for line, pattern in zip(lines, expected, strict=True):
        assert re.match(pattern, line), (line, pattern)


# --- the header-size limit at its exact boundary -----------------------------------

HEAD_LIMIT = 1024


def head_of_size(size: int, body: bytes) -> bytes:
    """A request head of exactly ``size`` bytes (request line through the blank line)."""
    start = (
        f"POST {BASE}/rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-Pad: "
    ).encode()
    end = b"\r\n\r\n"
    head = start + b"p" * (size - len(start) - len(end)) + end
    assert len(head) == size
    return head


def send_in(sock: socket.socket, data: bytes, how: str) -> None:
    if how == "whole":
        sock.sendall(data)
    else:
        for byte in range(len(data)):
            sock.sendall(data[byte : byte + 1])


@pytest.mark.parametrize("how", ["whole", "byte by byte"])
@pytest.mark.parametrize(("size", "status"), [(HEAD_LIMIT, 200), (HEAD_LIMIT + 1, 431)])
def test_a_head_of_exactly_max_header_size_passes_and_one_byte_more_gets_431(
    serve: StartServer, how: str, size: int, status: int
) -> None:
    server = serve(max_header_size=HEAD_LIMIT)
    body = json.dumps(call_message("echo", {"text": "at the limit"})).encode()
    with connect(server.port, RECV) as sock:
        send_in(sock, head_of_size(size, body), how)
        if status == 200:
            sock.sendall(body)
        response = RawHttp(sock).read_response()
    assert response.status == status, response
    if status == 431:
        assert str(HEAD_LIMIT) in assert_http_error(response, 431)["message"]


def test_a_head_one_byte_over_the_limit_gets_431_before_its_last_byte(serve: StartServer) -> None:
    server = serve(max_header_size=HEAD_LIMIT)
    head = head_of_size(HEAD_LIMIT + 1, b"{}")
    with connect(server.port, RECV) as sock:
        sock.sendall(head[:-1])  # max_header_size bytes, and still no end of the head
        assert_http_error(RawHttp(sock).read_response(), 431)


def test_a_head_at_the_limit_sent_with_its_body_and_a_pipelined_request_passes(
    serve: StartServer,
) -> None:
    server = serve(max_header_size=HEAD_LIMIT)
    body = json.dumps(call_message("echo", {"text": "first"})).encode()
    second = rpc("/rpc", call_message("echo", {"text": "second"}))
    with connect(server.port, RECV) as sock:
        sock.sendall(head_of_size(HEAD_LIMIT, body) + body + second)
        reader = RawHttp(sock)
        assert text_of(reader.read_response().json()) == "first"
        assert text_of(reader.read_response().json()) == "second"


# --- integers too long to parse -------------------------------------------------------


@pytest.mark.parametrize("where", ["id", "arguments"])
@pytest.mark.parametrize("accept", [None, "text/event-stream"])
def test_an_integer_over_4300_digits_gets_a_clean_parse_error(
    server: RunningServer, where: str, accept: str | None
) -> None:
    digits = b"9" * 5000
    if where == "id":
        body = b'{"jsonrpc":"2.0","id":' + digits + b',"method":"ping"}'
    else:
        body = b'{"jsonrpc":"2.0","id":1,' + CALL_TAIL.replace(b'"x"', digits)
    status, _, raw = server.post("/rpc", body, {"Accept": accept} if accept else None)
    assert status == 200
    error = json.loads(raw)["error"]
    assert error == {
        "code": -32700,
        "message": f"Parse error: integer too large (over {sys.get_int_max_str_digits()} digits)",
    }
