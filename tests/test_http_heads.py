"""The fast request-head reader (``mcplite.bindings.http.accel.heads``) against h11's own reader.

For any bytes, both readers must give the same outcome: the same ``Request``
(method, target, version, every header as h11 keeps it), the same error (type,
message, status hint), or the same wait for more data, and leave the same bytes
in the buffer.  Heads are generated from pieces that are valid, nearly valid
and hostile (folding, bare LF, NUL, two lengths, Transfer-Encoding, no Host...),
and also fed through whole connections in random pieces.  A few examples check
that the fast path does take the heads real clients send, so that agreement is
not only h11 agreeing with itself.
"""

from __future__ import annotations

import re
from typing import Any

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcplite.bindings.http import accel

if not accel.on():
    pytest.skip(
        "compares the HTTP speed paths with h11's own code; they are off in this run "
        "(MCPLITE_ACCEL=0, or an h11 version their gate does not list)",
        allow_module_level=True,
    )

from h11._readers import maybe_read_from_IDLE_client
from h11._receivebuffer import ReceiveBuffer

from mcplite.bindings.http.accel.cycle import ServerConnection
from mcplite.bindings.http.accel.heads import (
    FIELD_VALUE,
    fast_request,
    header_fields,
    read_request,
)
from mcplite.bindings.http.messages import header_dict

METHODS = [b"POST", b"GET", b"HEAD", b"M-SEARCH", b"PO ST", b"P\x00", b"", b"G\xc3\xa9T"]
TARGETS = [b"/mcp", b"/mcp-lite/v1/rpc?x=1", b"*", b"/a b", b"/\x7f", b"", b"/\xff"]
VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.10", b"http/1.1", b"HTTP/1.1 "]
NAMES = [
    b"Host",
    b"host",
    b"Content-Length",
    b"content-length",
    b"Transfer-Encoding",
    b"Content-Type",
    b"Mcp-Name",
    b"X-A",
    b"Bad Name",
    b"",
    b"X\x7f",
    b"X:Y",
]
SEPARATORS = [b":", b": ", b":\t", b" :", b"::", b":  \t "]
VALUES = [
    b"127.0.0.1:8080",
    b"5",
    b"05",
    b"0",
    b"5, 5",
    b"5,6",
    b"",
    b"a b",
    b"a\tb",
    b"\xff\xfe",
    b"chunked",
    b"CHUNKED",
    b"gzip",
    b"x ",
    b" x",
    b"1" * 20,
    b"1" * 21,
    b"a\x00b",
    b"a\rb",
    b"\xd9\xa5",  # a non-ASCII digit in UTF-8
]
ENDS = [b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"]

piece = st.binary(max_size=6)
header_line = st.one_of(
    st.tuples(
        st.one_of(st.sampled_from(NAMES), piece),
        st.sampled_from(SEPARATORS),
        st.one_of(st.sampled_from(VALUES), piece),
        st.sampled_from(ENDS),
    ).map(b"".join),
    st.sampled_from([b" folded\r\n", b"\tfolded\r\n", b"\r\n"]),
)
noise = st.tuples(
    st.sampled_from([b"", b"", b"", b"\r\n", b"\n"]),
    st.one_of(st.sampled_from(METHODS), piece),
    st.sampled_from([b" ", b" ", b"  "]),
    st.one_of(st.sampled_from(TARGETS), piece),
    st.sampled_from([b" ", b" ", b"\t"]),
    st.sampled_from(VERSIONS),
    st.sampled_from(ENDS),
    st.lists(header_line, max_size=6).map(b"".join),
    st.sampled_from([b"\r\n", b"\r\n", b"\n", b""]),
    st.sampled_from([b"", b"hello", b"POST / HTTP/1.1\r\nHost: a\r\n\r\n"]),
).map(b"".join)

# Heads a client would send (a Host line, maybe a length, other valid lines)...
TOKEN = "-!#$%&'*+.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
token = st.text(TOKEN, min_size=1, max_size=8).map(str.encode)
field_value = st.one_of(
    st.sampled_from([v for v in VALUES if b"\x00" not in v and b"\r" not in v]),
    st.binary(max_size=8).filter(lambda v: not (set(v) & set(b"\x00\r\n\x0b\x0c"))),
)
valid_line = st.tuples(
    st.one_of(st.sampled_from([n for n in NAMES if n not in (b"Bad Name", b"", b"X\x7f")]), token),
    st.sampled_from([b":", b": ", b":\t", b":  "]),
    field_value,
    st.sampled_from([b"", b"", b"", b"", b"", b" ", b"\t"]),  # trailing OWS: h11's reader
).map(lambda t: b"".join(t) + b"\r\n")
valid = st.tuples(
    st.one_of(st.sampled_from([b"POST", b"GET", b"M-SEARCH"]), token),
    st.sampled_from([b" /mcp", b" /mcp-lite/v1/rpc?x=1", b" *", b" /\x7e"]),
    st.just(b" HTTP/1.1\r\n"),
    st.sampled_from([b"Host: 127.0.0.1:8080\r\n", b"host:h\r\n", b""]),
    st.lists(valid_line, max_size=5).map(b"".join),
    st.sampled_from([b"", b"Content-Length: 5\r\n", b"content-length:0\r\n"]),
    st.just(b"\r\n"),
    st.sampled_from([b"", b"hello", b"POST / HTTP/1.1\r\nHost: a\r\n\r\n"]),
).map(b"".join)

# ...and exactly the heads the fast path is for, so that it is exercised widely.
clean_value = st.text('abcXYZ019 :;,/="-\t', max_size=12).map(lambda v: v.strip(" \t").encode())
typical = st.tuples(
    st.sampled_from([b"POST", b"GET", b"DELETE"]),
    st.sampled_from([b" /mcp", b" /mcp-lite/v1/rpc?x=1", b" /a%20b"]),
    st.just(b" HTTP/1.1\r\n"),
    st.lists(
        st.tuples(token, st.sampled_from([b":", b": ", b":\t"]), clean_value).map(
            lambda t: b"".join(t) + b"\r\n"
        ),
        max_size=6,
    ).map(b"".join),
    st.sampled_from([b"Host: 127.0.0.1:8080\r\n", b"host:h\r\n"]),
    st.sampled_from([b"", b"Content-Length: 5\r\n", b"content-length:0\r\n"]),
    st.just(b"\r\n"),
    st.sampled_from([b"", b"hello", b"POST / HTTP/1.1\r\nHost: a\r\n\r\n"]),
).map(b"".join)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """...and the same with one byte changed, added or taken away."""
    head = draw(st.one_of(valid, typical))
    at = draw(st.integers(min_value=0, max_value=len(head)))
    byte = draw(st.sampled_from([b" ", b"\t", b"\r", b"\n", b"\x00", b":", b"\x7f", b"\xff", b","]))
    how = draw(st.sampled_from(["replace", "insert", "delete"]))
    if how == "replace":
        return head[:at] + byte + head[at + 1 :]
    if how == "insert":
        return head[:at] + byte + head[at:]
    return head[:at] + head[at + 1 :]


heads = st.one_of(valid, typical, mutated(), noise)


def outcome(reader: Any, data: bytes) -> tuple[Any, ...]:
    buf = ReceiveBuffer()
    buf += data
    try:
        event = reader(buf)
    except h11.LocalProtocolError as exc:
        return ("error", type(exc), str(exc), exc.error_status_hint, bytes(buf))
    if event is None:
        return ("wait", bytes(buf))
    return (
        "request",
        type(event.method),
        event.method,
        type(event.target),
        event.target,
        event.http_version,
        list(event.headers._full_items),
        bytes(buf),
    )


@settings(max_examples=3000, deadline=None)
@given(heads)
def test_both_readers_agree_on_any_head(data: bytes) -> None:
    assert outcome(read_request, data) == outcome(maybe_read_from_IDLE_client, data)


def test_both_readers_wait_on_nothing() -> None:
    # Asked after every cycle, before the next request's bytes are in.
    assert outcome(read_request, b"") == outcome(maybe_read_from_IDLE_client, b"") == ("wait", b"")


def simple_heads() -> list[bytes]:
    return [
        b"POST /mcp-lite/v1/rpc HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
        b"Content-Type: application/json\r\nContent-Length: 105\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2026-07-28\r\n"
        b"Mcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: 200\r\n\r\n",
        b"GET /.well-known/oauth-protected-resource HTTP/1.1\r\nhost:x\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nX-Blank: \t\r\nX-Spaces: \t a  b\r\n"
        b"X-High: \xff\xfe\r\nContent-Length: 0\r\n\r\n",
    ]


@pytest.mark.parametrize("head", simple_heads())
def test_the_heads_clients_send_take_the_fast_path_and_read_the_same(head: bytes) -> None:
    buf = ReceiveBuffer()
    buf += head + b"body"
    fast = fast_request(buf)
    assert fast is not None  # not h11's reader: the fast path itself
    assert bytes(buf) == b"body"
    expected = outcome(maybe_read_from_IDLE_client, head + b"body")
    assert outcome(lambda b: fast_request(b), head + b"body") == expected


@pytest.mark.parametrize(
    "head",
    [
        b"POST / HTTP/1.0\r\nContent-Length: 1\r\n\r\n",  # HTTP/1.0
        b"POST / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n",  # folded
        b"POST / HTTP/1.1\nHost: h\n\n",  # bare LF
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h \r\n\r\n",  # whitespace after a value
        b"POST / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n",  # two Hosts: h11 refuses
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: " + b"1" * 21 + b"\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\n",  # incomplete
    ],
)
def test_other_heads_are_left_to_h11(head: bytes) -> None:
    buf = ReceiveBuffer()
    buf += head
    assert fast_request(buf) is None
    assert bytes(buf) == head  # untouched for h11's reader
    assert outcome(read_request, head) == outcome(maybe_read_from_IDLE_client, head)


def test_a_header_value_is_what_h11s_grammar_says_on_every_byte() -> None:
    from h11._abnf import OWS, field_content

    h11_value = re.compile(f"{OWS}(?:{field_content})?{OWS}".encode("ascii"))
    ours = re.compile(FIELD_VALUE.encode("ascii"))
    for byte in range(256):
        for value in (bytes([byte]), b"a" + bytes([byte]) + b"b", b" a\t" + bytes([byte])):
            expected = h11_value.fullmatch(value) is not None
            assert (ours.fullmatch(value) is not None) == expected, value


def events(conn: h11.Connection, chunks: list[bytes]) -> list[Any]:
    """What a server connection makes of ``chunks``, until it errs or pauses."""
    seen: list[Any] = []
    for chunk in chunks:
        conn.receive_data(chunk)  # never empty: b"" would say the client closed
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                seen.append(("error", str(exc), exc.error_status_hint))
                return seen
            if event is h11.NEED_DATA or event is h11.PAUSED:
                break
            seen.append(repr(event))
    return seen


@settings(max_examples=500, deadline=None)
@given(heads, st.lists(st.integers(min_value=1, max_value=40), max_size=6))
def test_connections_agree_however_the_bytes_arrive(data: bytes, cuts: list[int]) -> None:
    chunks, rest = [], data
    for cut in cuts:
        chunks.append(rest[:cut])
        rest = rest[cut:]
    chunks.append(rest)
    chunks = [chunk for chunk in chunks if chunk]
    options = {"max_incomplete_event_size": 64}
    ours = events(ServerConnection(h11.SERVER, **options), chunks)
    assert ours == events(h11.Connection(h11.SERVER, **options), chunks)


def test_a_second_request_on_the_connection_takes_the_fast_path_too() -> None:
    conn = ServerConnection(h11.SERVER)
    head = simple_heads()[0]
    for _ in range(2):
        assert conn._reader is read_request
        conn.receive_data(head + b"x" * 105)
        assert isinstance(conn.next_event(), h11.Request)
        assert isinstance(conn.next_event(), h11.Data)
        assert isinstance(conn.next_event(), h11.EndOfMessage)
        conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
        conn.send(h11.EndOfMessage())
        conn.start_next_cycle()


@settings(max_examples=300, deadline=None)
@given(st.one_of(valid, typical))
def test_the_headers_read_fast_are_the_public_ones(data: bytes) -> None:
    conn = ServerConnection(h11.SERVER)
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return
    if isinstance(event, h11.Request):
        assert header_fields(event) == header_dict(list(event.headers))
