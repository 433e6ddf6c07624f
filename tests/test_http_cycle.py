"""The plain request/response cycle in one step per event (``mcplite.bindings.http.accel.cycle``)
against h11's own code.

A reference connection is h11's ``Connection`` with the same head reader
plugged in, so that the two differ only in what ``ServerConnection`` changes.
Both are driven side by side through generated scripts: request streams of
every shape h11 handles (pipelined, HTTP/1.0, chunked, ``Expect``, ``Upgrade``,
``CONNECT``, ``Connection: close``, bad lengths, bodies cut short), cut into
random pieces, interleaved with every response a server sends (plain, early,
chunked, 1xx, 101, 204, to ``HEAD``, closing, trailers, too short or too long),
the next cycle, the client closing, and errors.  After every step both must
have given the same event, the same bytes or the same error, and be in the
same state: states, keep-alive, switch proposals, the request method, the
peer's version, the 100-continue flag, the reader and the writer (with their
counts) and the unread bytes.  Further tests check that the plain cycle does
take the short steps and that plain h11 agrees on whole exchanges.
"""

from __future__ import annotations

import itertools
from typing import Any, cast

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

from mcplite.bindings.http.accel import cycle
from mcplite.bindings.http.accel.cycle import ServerConnection
from mcplite.bindings.http.accel.heads import read_request
from mcplite.bindings.http.accel.responses import send_fast


class Reference(h11.Connection):
    """h11's connection with our head reader: all of its steps, h11's own."""

    def _get_io_object(self, role: Any, event: Any, io_dict: Any) -> Any:
        io = super()._get_io_object(role, event, io_dict)
        return read_request if io is maybe_read_from_IDLE_client else io


def _io(obj: Any) -> Any:
    """A reader or writer as a comparable value: its kind and its counts."""
    if obj is None or not hasattr(obj, "__dict__"):
        return obj
    return (type(obj).__name__, sorted(vars(obj).items()))


def state(conn: h11.Connection) -> dict[str, Any]:
    cstate = conn._cstate
    return {
        "states": dict(cstate.states),
        "keep_alive": cstate.keep_alive,
        "proposals": set(cstate.pending_switch_proposals),
        "method": conn._request_method,
        "their_version": conn.their_http_version,
        "waiting_100": conn.client_is_waiting_for_100_continue,
        "reader": _io(conn._reader),
        "writer": _io(conn._writer),
        "trailing": conn.trailing_data,
    }


def _outcome(call: Any) -> Any:
    try:
        result = call()
    except h11.ProtocolError as exc:
        return f"error {type(exc).__name__}: {exc} ({exc.error_status_hint})"
    except (AttributeError, RuntimeError) as exc:
        # h11's own: data after the close, and a slip formatting the error for
        # a request after an early response.  Both must raise them alike.
        return f"error {type(exc).__name__}: {exc}"
    if isinstance(result, list):  # bytes pieces
        return b"".join(result)
    return result if isinstance(result, bytes | type(None)) else repr(result)


# -- what a client sends ---------------------------------------------------

HEADERS = [
    b"Content-Type: application/json",
    b"Accept: application/json, text/event-stream",
    b"Connection: keep-alive",
    b"Connection: close",
    b"connection: Keep-Alive, Close",
    b"Connection: CLOSE",
    b"Connection: closed, x-close",
    b"Connection: upgrade",
    b"Connection:",
    b"Upgrade: websocket",
    b"Upgrade:",
    b"Expect: 100-continue",
    b"Expect: something",
    b"Transfer-Encoding: chunked",
    b"Transfer-Encoding: gzip",
    b"Content-Length: 5",
    b"Content-Length: 5",
    b"Content-Length: 3",
    b"Content-Length: 0",
    b"Content-Length: 5, 5",
    b"Content-Length: x",
    b"Mcp-Name: echo",
]
METHODS = [b"POST", b"POST", b"POST", b"GET", b"HEAD", b"CONNECT", b"OPTIONS"]
VERSIONS = [b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0"]
BODIES = [b"", b"hello", b"abc", b"5\r\nhello\r\n0\r\n\r\n", b"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"]

request = st.tuples(
    st.sampled_from(METHODS),
    st.sampled_from([b"/mcp", b"*", b"127.0.0.1:80"]),
    st.sampled_from(VERSIONS),
    st.sampled_from([b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\n", b""]),
    st.lists(st.sampled_from(HEADERS), max_size=4),
    st.sampled_from(BODIES),
).map(
    lambda r: (
        b"%s %s %s\r\n%s%s\r\n%s"
        % (r[0], r[1], r[2], r[3], b"".join(h + b"\r\n" for h in r[4]), r[5])
    )
)
# The request almost every client sends, so that the short steps run a lot.
PLAIN = (
    b"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
    b"Content-Length: 5\r\n\r\nhello"
)


def _plain_with(*lines: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    extra = b"".join(line + b"\r\n" for line in lines)
    return PLAIN.replace(b"HTTP/1.1\r\nHost: h\r\n", version + b"\r\nHost: h\r\n" + extra)


# ...and the requests just off it, each a step away from the plain cycle.
NEAR = [
    PLAIN,
    _plain_with(b"Connection: keep-alive"),
    _plain_with(b"Connection: close"),
    _plain_with(b"Expect: 100-continue"),
    _plain_with(b"Upgrade: websocket"),
    _plain_with(version=b"HTTP/1.0"),
    # The plain request with other Content-Length digits (a kept head, read again).
    PLAIN.replace(b"5\r\n\r\nhello", b"3\r\n\r\nabc"),
    PLAIN.replace(b"5\r\n\r\nhello", b"0005\r\n\r\nhello"),
    PLAIN.replace(b"5\r\n\r\nhello", b"12345678901234567890\r\n\r\nhello"),
    PLAIN.replace(b"5\r\n\r\nhello", b"123456789012345678901\r\n\r\nhello"),
    PLAIN.replace(b"5\r\n\r\nhello", b"+5\r\n\r\nhello"),
    PLAIN.replace(b"5\r\n\r\nhello", b"5 \r\n\r\nhello"),
    PLAIN.replace(b"5\r\n\r\nhello", b"\r\n\r\nhello"),
    b"CONNECT h:1 HTTP/1.1\r\nHost: h\r\n\r\n",
    b"CONNECT h:1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
    b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n",
]
stream = st.lists(st.one_of(st.sampled_from(NEAR), request), min_size=1, max_size=3).map(b"".join)

# -- what a server does ----------------------------------------------------

_CL = ("Content-Length", "2")
RESPONSES: dict[str, Any] = {
    "plain": lambda: h11.Response(status_code=200, headers=[_CL]),
    "plain-0": lambda: h11.Response(status_code=200, headers=[("content-length", "0")]),
    "chunked": lambda: h11.Response(status_code=200, headers=[]),
    "te": lambda: h11.Response(status_code=200, headers=[("Transfer-Encoding", "chunked")]),
    "close": lambda: h11.Response(status_code=200, headers=[_CL, ("Connection", "close")]),
    "keep": lambda: h11.Response(status_code=200, headers=[_CL, ("Connection", "keep-alive")]),
    "1.0": lambda: h11.Response(status_code=200, headers=[_CL], http_version="1.0"),
    "204": lambda: h11.Response(status_code=204, headers=[]),
    "204-cl": lambda: h11.Response(status_code=204, headers=[_CL]),
    "304": lambda: h11.Response(status_code=304, headers=[_CL]),
    "400": lambda: h11.Response(status_code=400, headers=[_CL]),
    "100": lambda: h11.InformationalResponse(status_code=100, headers=[]),
    "101": lambda: h11.InformationalResponse(status_code=101, headers=[("Upgrade", "x")]),
    "data": lambda: h11.Data(data=b"ok"),
    "data-3": lambda: h11.Data(data=b"abc"),
    "end": lambda: h11.EndOfMessage(),
    "trailers": lambda: h11.EndOfMessage(headers=[("X-T", "1")]),
    "closed": lambda: h11.ConnectionClosed(),
}

op = st.one_of(
    st.sampled_from(
        ["next", "next", "next", "next", "feed", "feed", "fast", "cycle", "eof", "whole", "whole"]
    ),
    st.sampled_from(sorted(RESPONSES)).map(lambda name: "send:" + name),
    # As send_fast does: straight to the state machine, no header clean-up.
    st.sampled_from(sorted(RESPONSES)).map(lambda name: "raw:" + name),
    st.sampled_from(["send_failed", "fast-404"]),
)


def step(conn: h11.Connection, action: str, pieces: list[bytes]) -> Any:
    if action == "next":
        return _outcome(conn.next_event)
    if action == "feed":
        if not pieces:
            return "nothing left"
        return _outcome(lambda: conn.receive_data(pieces.pop(0)))
    if action == "eof":
        return _outcome(lambda: conn.receive_data(b""))
    if action == "cycle":
        return _outcome(conn.start_next_cycle)
    if action == "send_failed":
        return _outcome(conn.send_failed)
    if action in ("fast", "fast-404"):
        # What the server writes for a keep-alive POST (mcplite.bindings.http.accel.responses).
        status = 404 if action == "fast-404" else 200
        return _outcome(lambda: send_fast(conn, status, [(b"content-type", b"x")], b"{}"))
    if action.startswith("raw:"):
        event = RESPONSES[action.removeprefix("raw:")]()
        return _outcome(lambda: conn._process_event(h11.SERVER, event))
    event = RESPONSES[action.removeprefix("send:")]()
    return _outcome(lambda: conn.send(event))


@settings(max_examples=4000, deadline=None)
@given(
    stream,
    st.lists(st.integers(min_value=1, max_value=60), max_size=5),
    st.lists(op, max_size=40),
    st.sampled_from([16 * 1024, 40]),  # the head limit: h11's default, and one heads reach
)
def test_every_step_agrees_with_h11(
    data: bytes, cuts: list[int], script: list[str], head_limit: int
) -> None:
    pieces, rest = [], data
    for cut in cuts:
        pieces.append(rest[:cut])
        rest = rest[cut:]
    pieces = [piece for piece in [*pieces, rest] if piece]
    agree(pieces, script, {"max_incomplete_event_size": head_limit})


def agree(pieces: list[bytes], script: Any, options: dict[str, Any]) -> None:
    """Both connections driven by ``script`` (fed ``pieces`` one per "feed"),
    step for step: the same outcome and the same state after each.  "whole"
    is ``take_whole`` on ours, and what it stands for on h11's: nothing when it
    declines, else ``next_event`` until the request's end."""
    ours, theirs = ServerConnection(h11.SERVER, **options), Reference(h11.SERVER, **options)
    our_pieces, their_pieces = list(pieces), list(pieces)
    for action in ["feed", *script]:
        if action == "whole":
            mine, expected = whole_step(ours, theirs)
        else:
            mine = step(ours, action, our_pieces)
            expected = step(theirs, action, their_pieces)
        assert mine == expected, (script, action)
        assert state(ours) == state(theirs), (script, action)


def take(conn: ServerConnection) -> tuple[h11.Request, bytes | None, int]:
    """``conn.take_whole()``, which must take a request: its event, its body as
    bytes (None: still coming) and its head size."""
    taken = conn.take_whole()
    assert taken is not None and taken is not h11.NEED_DATA
    event, body, head_size = taken  # type: ignore[misc]
    return event, None if body is None else bytes(body), head_size


def whole_step(ours: ServerConnection, theirs: h11.Connection) -> tuple[Any, Any]:
    """``take_whole`` on ours, and the events it stands for on h11's side: the
    request, its body and its head size, or ``NEED_DATA``, or nothing."""
    taken = ours.take_whole()
    if taken is None:
        return None, None
    if taken is h11.NEED_DATA:
        return taken, theirs.next_event()
    event, body, head_size = taken  # type: ignore[misc]
    before = len(theirs.trailing_data[0])
    request = theirs.next_event()
    size = before - len(theirs.trailing_data[0])
    if body is None:  # the head alone: the body is still coming
        return (event, None, head_size), (request, None, size)
    data = b""
    end = theirs.next_event()
    while type(end) is h11.Data:
        data += end.data
        end = theirs.next_event()
    assert type(end) is h11.EndOfMessage
    return (event, bytes(body), head_size), (request, data, size)


# Every short script over the steps that decide the cycle, from each request just
# off the plain one: the cases the generated scripts reach only now and then.
SHORT = [
    "next",
    "whole",
    "fast",
    "cycle",
    "eof",
    "send:plain",
    "send:end",
    "send:100",
    "raw:chunked",
]


@pytest.mark.parametrize("data", NEAR)
def test_every_short_script_agrees_with_h11(data: bytes) -> None:
    for script in itertools.product(SHORT, repeat=3):
        agree([data], script, {})


def serve(conn: h11.Connection, data: bytes, respond: Any, *, whole: bool = False) -> list[Any]:
    """A whole exchange the way the server drives it: events until h11 needs
    data, pauses or errs; a response after each request's end, then the next
    cycle when both sides are done; the states after each event.  ``whole``:
    as the server drives ours, a request taken whole first when it can be
    (seen as the events it stands for), and the states after each request's
    end only (within a request taken whole there are none to compare)."""
    seen: list[Any] = []
    conn.receive_data(data)
    while True:
        taken = conn.take_whole() if whole and isinstance(conn, ServerConnection) else None
        if taken is not None and taken is not h11.NEED_DATA:
            event, body, _ = taken  # type: ignore[misc]
            seen.append(repr(event))
            if body is None:
                continue  # the body is still coming: next_event gives the rest
            if body:
                # As h11's own Data event would hold it (a bytearray; typed bytes).
                seen.append(repr(h11.Data(data=cast(bytes, body))))
            outcome = repr(h11.EndOfMessage())
        else:
            outcome = _outcome(conn.next_event)
        seen.append(outcome)
        if not outcome.startswith(("Request", "Data", "EndOfMessage")):
            return seen  # NEED_DATA, PAUSED, or an error
        if outcome.startswith("EndOfMessage"):
            seen.append(respond(conn))
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                seen.append(_outcome(conn.start_next_cycle))
        if not whole or outcome.startswith("EndOfMessage"):
            seen.append(state(conn)["states"])


def _respond(conn: h11.Connection) -> Any:
    return [
        _outcome(lambda: conn.send(h11.Response(status_code=200, headers=[_CL]))),
        _outcome(lambda: conn.send(h11.Data(data=b"ok"))),
        _outcome(lambda: conn.send(h11.EndOfMessage())),
    ]


@settings(max_examples=500, deadline=None)
@given(stream)
def test_whole_exchanges_agree_with_plain_h11(data: bytes) -> None:
    # Against h11 exactly as shipped (its own head reader too).
    assert serve(ServerConnection(h11.SERVER), data, _respond) == serve(
        h11.Connection(h11.SERVER), data, _respond
    )


@settings(max_examples=500, deadline=None)
@given(stream)
def test_whole_exchanges_taken_whole_agree_with_plain_h11(data: bytes) -> None:
    assert serve(ServerConnection(h11.SERVER), data, _respond, whole=True) == serve(
        h11.Connection(h11.SERVER), data, _respond, whole=True
    )


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("h11's general step taken")


def refuse_general_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any of h11's general steps taken from here on fails the test."""
    for name in ("_process_event", "next_event", "start_next_cycle", "_respond_to_state_changes"):
        monkeypatch.setattr(h11.Connection, name, _refuse)


def test_the_plain_cycle_takes_none_of_h11s_general_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = ServerConnection(h11.SERVER)
    refuse_general_steps(monkeypatch)
    for _ in range(3):  # and again on the same connection
        conn.receive_data(PLAIN)
        assert type(conn.next_event()) is h11.Request
        assert conn.next_event() == h11.Data(data=b"hello")
        assert type(conn.next_event()) is h11.EndOfMessage
        written = send_fast(conn, 200, [(b"content-type", b"application/json")], b"{}")
        assert written.startswith(b"HTTP/1.1 200 OK\r\n")
        conn.start_next_cycle()
        assert conn.next_event() is h11.NEED_DATA
    assert conn.states == {h11.CLIENT: h11.IDLE, h11.SERVER: h11.IDLE}


def test_a_plain_request_all_in_is_taken_in_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = ServerConnection(h11.SERVER)
    refuse_general_steps(monkeypatch)
    monkeypatch.setattr(ServerConnection, "next_event", _refuse)
    monkeypatch.setattr(ServerConnection, "_process_event", _refuse)
    conn.receive_data(PLAIN * 2)  # pipelined: taken one at a time
    for _ in range(2):
        event, body, head_size = take(conn)
        assert (event.method, event.target, body) == (b"POST", b"/mcp", b"hello")
        assert head_size == len(PLAIN) - len(b"hello")
        assert conn.states == {h11.CLIENT: h11.DONE, h11.SERVER: h11.SEND_RESPONSE}
        send_fast(conn, 200, [(b"content-type", b"application/json")], b"{}")
        assert conn.states == {h11.CLIENT: h11.DONE, h11.SERVER: h11.DONE}
        conn.start_next_cycle()
    assert conn.take_whole() is h11.NEED_DATA


def test_a_head_whose_body_is_still_coming_is_taken_alone() -> None:
    ours, theirs = ServerConnection(h11.SERVER), h11.Connection(h11.SERVER)
    for conn in (ours, theirs):
        conn.receive_data(PLAIN[:-5])  # the head, then the body apart (as httpx writes)
    event, body, head_size = take(ours)
    assert body is None and head_size == len(PLAIN) - 5
    assert repr(event) == repr(theirs.next_event())
    assert state(ours) == state(theirs)  # h11's Content-Length reader takes the body
    assert ours.take_whole() is None
    for conn in (ours, theirs):
        conn.receive_data(b"hel")
        assert conn.next_event() == h11.Data(data=b"hel")
        conn.receive_data(b"lo")
        assert conn.next_event() == h11.Data(data=b"lo")
        assert type(conn.next_event()) is h11.EndOfMessage
    assert state(ours) == state(theirs)


def test_a_head_seen_before_is_read_by_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = ServerConnection(h11.SERVER)
    first = PLAIN.replace(b"hello", b"first")
    conn.receive_data(first + PLAIN)
    event, body, _ = take(conn)
    assert body == b"first"
    send_fast(conn, 200, [], b"")
    conn.start_next_cycle()
    monkeypatch.setattr(cycle, "common_head", pytest.fail)
    again, body, head_size = take(conn)
    assert again is event and body == b"hello"
    assert head_size == len(PLAIN) - 5 and conn.trailing_data == (b"", False)
    monkeypatch.undo()
    send_fast(conn, 200, [], b"")
    conn.start_next_cycle()
    # Another body length: still by comparison, with its own event and body.
    longer = PLAIN.replace(b"Length: 5", b"Length: 16").replace(b"hello", b"hello, everyone!")
    monkeypatch.setattr(cycle, "common_head", pytest.fail)
    conn.receive_data(longer)
    event, body, head_size = take(conn)
    assert (event.headers[-1], body) == ((b"content-length", b"16"), b"hello, everyone!")
    assert head_size == len(longer) - 16 and event is not again
    assert repr(event) == repr(h11_request(longer))
    monkeypatch.undo()
    send_fast(conn, 200, [], b"")
    conn.start_next_cycle()
    # Another header value: read afresh.
    other = PLAIN.replace(b"application/json", b"text/plain")
    conn.receive_data(other)
    event, body, _ = take(conn)
    assert (event.headers[1], body) == ((b"content-type", b"text/plain"), b"hello")


def h11_request(data: bytes) -> h11.Request:
    """The Request event plain h11 reads from ``data``."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    event = conn.next_event()
    assert isinstance(event, h11.Request)
    return event


#: After a kept head, heads that differ from it around its Content-Length value.
NEAR_THE_LENGTH = [
    b"6\r\n\r\nhello!",
    b"06\r\n\r\nhello!",
    b" 6\r\n\r\nhello!",
    b"6 \r\n\r\nhello!",
    b"+6\r\n\r\nhello!",
    b"-5\r\n\r\nhello",
    b"6,6\r\n\r\nhello!",
    b"\r\n\r\nhello",
    b"99999999999999999999\r\n\r\n",
    b"999999999999999999999\r\n\r\n",
    b"6\r\nX: y\r\n\r\nhello!",
    b"6\r\nContent-Length: 6\r\n\r\nhello!",
    b"6\r\nHost: h\r\n\r\nhello!",
    b"6\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello!\r\n0\r\n\r\n",
    b"6\r",
    b"6",
]


def test_heads_that_differ_in_their_length_alone_agree_with_h11(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bodies = [b"x" * n for n in (5, 16, 7, 7, 123, 0, 1000, 9)]
    data = b"".join(PLAIN.replace(b"5\r\n\r\nhello", b"%d\r\n\r\n%s" % (len(b), b)) for b in bodies)
    theirs = serve(h11.Connection(h11.SERVER), data, _respond, whole=True)
    ours = ServerConnection(h11.SERVER)
    ours.receive_data(PLAIN)  # the head to keep
    take(ours)
    _respond(ours)
    ours.start_next_cycle()
    monkeypatch.setattr(cycle, "common_head", pytest.fail)  # each read by comparison
    assert serve(ours, data, _respond, whole=True) == theirs


@pytest.mark.parametrize("tail", NEAR_THE_LENGTH)
def test_a_head_near_the_kept_one_is_read_as_h11_reads_it(tail: bytes) -> None:
    second = PLAIN.replace(b"5\r\n\r\nhello", tail)
    assert serve(ServerConnection(h11.SERVER), PLAIN + second, _respond, whole=True) == serve(
        h11.Connection(h11.SERVER), PLAIN + second, _respond, whole=True
    )


#: Requests just off the plain cycle, each with why.
OFF_THE_PLAIN_CYCLE = [
    (PLAIN.replace(b"HTTP/1.1", b"HTTP/1.0"), "HTTP/1.0 closes"),
    (PLAIN.replace(b"Host: h", b"Host: h\r\nConnection: close"), "the client closes"),
    (PLAIN.replace(b"Host: h", b"Host: h\r\nExpect: 100-continue"), "100-continue"),
    (PLAIN.replace(b"Host: h", b"Host: h\r\nUpgrade: websocket"), "an upgrade"),
    (b"CONNECT h:1 HTTP/1.1\r\nHost: h\r\n\r\n", "CONNECT"),
    (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", "chunked"),
]


@pytest.mark.parametrize(
    ("request_bytes", "why"),
    [
        *OFF_THE_PLAIN_CYCLE,
        (PLAIN[:20], "the head is not all in"),
        (PLAIN.replace(b"Host: h", b"Host: h\r\nConnection: x, Close"), "the client closes"),
        (PLAIN.replace(b"Host: h\r\n", b""), "no Host: h11 refuses it"),
    ],
)
def test_a_request_not_plain_or_not_all_in_is_left_to_next_event(
    request_bytes: bytes, why: str
) -> None:
    conn = ServerConnection(h11.SERVER)
    conn.receive_data(request_bytes)
    before = state(conn)
    assert conn.take_whole() is None, why
    assert state(conn) == before


def test_a_connection_header_that_keeps_alive_stays_on_the_short_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn = ServerConnection(h11.SERVER)
    monkeypatch.setattr(h11.Connection, "_process_event", pytest.fail)
    conn.receive_data(PLAIN.replace(b"Host: h\r\n", b"Host: h\r\nConnection: keep-alive\r\n"))
    assert type(conn.next_event()) is h11.Request
    assert conn.their_state is h11.SEND_BODY


@pytest.mark.parametrize(("request_bytes", "why"), OFF_THE_PLAIN_CYCLE)
def test_requests_off_the_plain_cycle_go_through_h11(
    monkeypatch: pytest.MonkeyPatch, request_bytes: bytes, why: str
) -> None:
    conn = ServerConnection(h11.SERVER)
    taken: list[Any] = []
    real = h11.Connection._process_event

    def spy(self: h11.Connection, role: Any, event: Any) -> None:
        taken.append(type(event))
        real(self, role, event)

    monkeypatch.setattr(h11.Connection, "_process_event", spy)
    conn.receive_data(request_bytes)
    assert type(conn.next_event()) is h11.Request
    assert taken == [h11.Request], why


def test_only_the_server_side() -> None:
    with pytest.raises(ValueError, match="server side"):
        ServerConnection(h11.CLIENT)
