"""HTTP/1.1 framing through h11: its public API, or the speed paths when the gate is on.

What the connection needs of h11 beyond ``receive_data``, ``next_event`` and
``send`` comes from here, in one of two versions chosen once at import:

- the plain path, h11's public API only: ``h11.Connection``, the headers
  read from the public ``Headers`` sequence, every response sent as events,
  and the head limit measured with ``trailing_data``;
- the speed paths of :mod:`mcplite.bindings.http.accel`, on h11's internals,
  when its gate is on (the h11 versions it was tested with, and not
  ``MCPLITE_ACCEL=0``).  Off, no module of that package but its
  ``__init__`` is imported.

Both give the same events and write the same bytes (the HTTP tests run both ways).
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import TYPE_CHECKING

import h11

from . import accel
from .messages import header_dict

if TYPE_CHECKING:
    from .accel.cycle import Whole

__all__ = ["Connection", "fast_head", "header_fields", "take_whole", "unread"]


class _Unread:
    """The size of what h11 has received and not read, for the head limit (see
    HttpConnection._advance).  h11's public count is ``trailing_data``, a copy of
    its buffer, so it is taken only around the event that reads a request head:
    while the client is idle, and once just after (any other time: 0).  A
    client that pipelines then costs two copies of what it sent ahead a request."""

    __slots__ = ("_around_head", "_conn")

    def __init__(self, conn: h11.Connection) -> None:
        self._conn = conn
        self._around_head = False

    def __len__(self) -> int:
        conn = self._conn
        if conn.their_state is h11.IDLE:
            self._around_head = True
        elif self._around_head:
            self._around_head = False
        else:
            return 0
        return len(conn.trailing_data[0])


def _plain_unread(conn: h11.Connection) -> Sized:
    return _Unread(conn)


def _plain_header_fields(request: h11.Request) -> dict[bytes, bytes]:
    return header_dict(request.headers)  # h11 lowercases names


def _not_whole(conn: h11.Connection) -> None:
    return None


def _no_shortcut(
    conn: h11.Connection, status: int, headers: list[tuple[bytes, bytes]], length: int
) -> bytes | None:
    return None


#: The server side's h11 connection class (called as ``Connection(h11.SERVER, **options)``).
Connection: type[h11.Connection] = h11.Connection
#: ``unread(conn)``: a live ``Sized`` whose length is what ``conn`` has not read yet
#: (asked before and after the event that reads a request head).
unread: Callable[[h11.Connection], Sized] = _plain_unread
#: ``header_fields(request)``: its headers by lowercase name (:func:`header_dict`).
header_fields: Callable[[h11.Request], dict[bytes, bytes]] = _plain_header_fields
#: ``take_whole(conn)``: the next request when it is plain (its event, body and
#: head size), with h11 moved past its end, or past its head only when its body
#: is still coming (body None: take events for the rest); ``h11.NEED_DATA`` when
#: nothing is buffered; None (nothing changed) for anything else: take events then.
take_whole: Callable[[h11.Connection], Whole | type[h11.NEED_DATA] | None] = _not_whole
#: ``fast_head(conn, status, headers, length)``: the head of a keep-alive POST's answer
#: of ``length`` body bytes, with h11 moved through the whole answer (the caller writes
#: the body after it), or None (then send it as events).
fast_head: Callable[[h11.Connection, int, list[tuple[bytes, bytes]], int], bytes | None] = (
    _no_shortcut
)

if accel.on():
    from .accel import cycle, heads, responses

    Connection = cycle.ServerConnection
    unread = cycle.unread
    header_fields = heads.header_fields
    fast_head = responses.fast_head
    take_whole = cycle.ServerConnection.take_whole  # type: ignore[assignment]
