"""The fast response path writes exactly what h11 writes, and leaves h11 where it would."""

from __future__ import annotations

import h11
import pytest

from mcplite.bindings.http import accel

if not accel.on():
    pytest.skip(
        "compares the HTTP speed paths with h11's own code; they are off in this run "
        "(MCPLITE_ACCEL=0, or an h11 version their gate does not list)",
        allow_module_level=True,
    )

from mcplite.bindings.http.accel.responses import fast_head, send_fast
from mcplite.bindings.http.statuses import REASONS

REQUEST = (
    b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)


def _received(data: bytes = REQUEST) -> h11.Connection:
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    while conn.next_event() is not h11.NEED_DATA:
        if conn.their_state is h11.DONE:
            break
    assert conn.our_state is h11.SEND_RESPONSE
    return conn


@pytest.mark.parametrize("status", [200, 202, 400, 401, 403, 404, 413, 429, 500, 503])
@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"content-type", b"application/json")],
        [(b"content-type", b"application/json"), (b"retry-after", b"1")],
        [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer scope="a"')],
    ],
)
@pytest.mark.parametrize("body", [b"", b'{"jsonrpc":"2.0","id":1,"result":{}}'])
def test_the_fast_path_writes_h11s_bytes_and_state(
    status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    by_h11, fast = _received(), _received()
    expected = by_h11.send(
        h11.Response(
            status_code=status,
            headers=[*headers, (b"content-length", b"%d" % len(body))],
            reason=REASONS[status],
        )
    )
    assert expected is not None
    if body:
        expected += by_h11.send(h11.Data(data=body)) or b""
    expected += by_h11.send(h11.EndOfMessage()) or b""

    assert send_fast(fast, status, headers, body) == expected
    assert (fast.our_state, fast.their_state) == (by_h11.our_state, by_h11.their_state)
    assert fast.our_state is h11.DONE
    # Both take the next request on the same connection the same way.
    for conn in (by_h11, fast):
        conn.start_next_cycle()
        conn.receive_data(REQUEST)
        event = conn.next_event()
        assert isinstance(event, h11.Request) and event.target == b"/mcp-lite/v1/rpc"


@pytest.mark.parametrize(
    "request_bytes",
    [
        REQUEST.replace(b"HTTP/1.1", b"HTTP/1.0"),
        REQUEST.replace(b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nConnection: close\r\n"),
    ],
)
def test_an_answer_off_the_common_path_is_left_to_h11(request_bytes: bytes) -> None:
    conn = _received(request_bytes)
    assert fast_head(conn, 200, [], 2) is None
    assert conn.our_state is h11.SEND_RESPONSE  # untouched: the caller sends events


def test_the_common_answer_takes_the_fast_path() -> None:
    conn = _received()
    head = fast_head(conn, 200, [(b"content-type", b"application/json")], 2)
    assert head is not None and head.endswith(b"content-length: 2\r\n\r\n")
    assert conn.our_state is h11.DONE
    # Once answered, nothing more.
    assert fast_head(conn, 200, [], 0) is None
