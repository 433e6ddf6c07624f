"""A common response's bytes written directly, with h11's state moved through it.

h11 builds and validates a ``Response`` event, then a cleaned copy of it, then a
``Data`` and an ``EndOfMessage`` event, and writes each through its writer:
about a fifth of a request's CPU.  For the answer almost every request gets (a
keep-alive HTTP/1.1 POST answered with a known length, constant lowercase
headers that are valid) the bytes are known: :func:`send_fast` writes them, and
tells h11's state machine what it must still know (that the response went out,
its framing, its end) through ``Connection._process_event``.  Anything else
(HEAD, HTTP/1.0, a closing connection) goes through ``conn.send``; see
:func:`fast_head`.  ``tests/test_http_fastpath.py`` checks both give the
same bytes and leave h11 in the same state.

h11 internals used (only on the versions :mod:`mcplite.bindings.http.accel`
lists): ``Connection._process_event`` and ``_cstate.keep_alive``.
"""

from __future__ import annotations

import h11

from ..statuses import REASONS
from .cycle import ServerConnection

__all__ = ["fast_head", "send_fast", "send_head"]

#: What h11's state machine is told of a response send_fast writes: its framing
#: (a Content-Length) and that it keeps the connection alive.  The status and the
#: real length are in the bytes; h11 reads neither for a POST's response.
_FRAMED = h11.Response(status_code=200, headers=[(b"content-length", b"0")])
_END = h11.EndOfMessage()
_STATUS_LINES = {
    status: b"HTTP/1.1 %d %s\r\n" % (status, reason) for status, reason in REASONS.items()
}


def send_head(
    conn: h11.Connection, status: int, headers: list[tuple[bytes, bytes]], length: int
) -> bytes:
    """The head of a response whose body is ``length`` bytes, exactly as ``conn.send``
    would write it for a keep-alive HTTP/1.1 POST (status line, the headers in order,
    Content-Length last), with h11's state advanced through the response and its
    end: the caller writes the body after it.  The caller knows the request was such
    a POST; raises h11.LocalProtocolError when h11 is not waiting for a response."""
    if type(conn) is not ServerConnection or not conn.respond_plain():
        conn._process_event(h11.SERVER, _FRAMED)
        conn._process_event(h11.SERVER, _END)
    head = _STATUS_LINES[status] + b"".join([b"%s: %s\r\n" % header for header in headers])
    return head + b"content-length: %d\r\n\r\n" % length


def send_fast(
    conn: h11.Connection, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> bytes:
    """:func:`send_head` followed by the body: the whole response's bytes."""
    return send_head(conn, status, headers, len(body)) + body


def fast_head(
    conn: h11.Connection, status: int, headers: list[tuple[bytes, bytes]], length: int
) -> bytes | None:
    """:func:`send_head` when the connection is on the common answer's path (h11
    waits for the response of an HTTP/1.1 request and keeps the connection
    alive), else None and h11 untouched; the caller checks the request was a POST."""
    if (
        conn.our_state is h11.SEND_RESPONSE
        and conn.their_http_version == b"1.1"
        and conn._cstate.keep_alive
    ):
        return send_head(conn, status, headers, length)
    return None
