"""h11's server connection, its common request/response cycle in one step per event.

h11 moves every event of a cycle through the same general code: it copies the
state dict, asks the state table, re-runs the state-triggered transitions to a
fixed point, scans the headers once per question (``Upgrade``, ``Connection``,
``Expect``, ``Transfer-Encoding``, ``Content-Length``; again for the response),
then compares old and new states to pick the next reader and writer.  For the
cycle almost every request takes (an HTTP/1.1 request without ``Upgrade``,
``Expect``, ``Transfer-Encoding`` or ``Connection: close``, with at most one
``Content-Length``; a response framed by ``Content-Length``; keep-alive), the
outcome of all that is known.

That outcome is a table, :data:`PLAIN_CYCLE`, as h11 keeps its own legality in
one (``h11._state.EVENT_TRIGGERED_TRANSITIONS``): for a role, an event type and
that role's state, the peer states it needs, the next states, and what else h11
would set (reader, writer, flags).  Its rows are h11's own moves, restricted to
peer states under which no state-triggered transition can follow (h11's
``STATE_TRIGGERED_TRANSITIONS`` names none of those joint states) while the
connection keeps alive and no protocol switch is proposed.
:class:`ServerConnection` takes an event that has a row in one step; any other
event, state or header (``CONNECT``, an upgrade, ``Expect: 100-continue``,
chunked bodies, HTTP/1.0, ``Connection: close``, a response to ``HEAD``, 204,
304, an early response, a peer that closed, an error) goes through h11's own
code, untouched.

Beyond those rows, two steps take a whole part of the cycle at once, as the
same rows would: :meth:`ServerConnection.take_whole` takes a plain request's
head, body and end when they are all in (or its head alone when the body is
still coming), reading the head with
:mod:`mcplite.bindings.http.accel.heads`, or by comparison when it repeats
the connection's last one, but for its Content-Length's digits maybe
(:class:`~mcplite.bindings.http.accel.heads.KeptHead`);
:meth:`ServerConnection.respond_plain` takes a
plain response and its end.  Otherwise h11's readers parse every byte (with
the faster head reader) and its writers frame every byte sent through
``send``.  ``tests/test_http_cycle.py`` drives this class and h11's own side
by side with generated requests, responses and byte splits, and compares
every event, error, byte written and piece of state after each step.

h11 internals used (only on the versions :mod:`mcplite.bindings.http.accel`
lists): ``Connection._process_event``, ``_cstate`` (``states``, ``keep_alive``,
``pending_switch_proposals``), ``_reader``, ``_writer``, ``_request_method``,
``_receive_buffer``, ``_receive_buffer_closed``, ``_max_incomplete_event_size``,
``_get_io_object``, ``_process_error``, ``Headers._full_items`` and the reader
and writer tables (``h11._readers.READERS``, ``h11._writers.WRITERS``).
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Any

import h11
from h11._events import Event
from h11._readers import READERS, maybe_read_from_IDLE_client
from h11._state import CLIENT, DONE, IDLE, SEND_BODY, SEND_RESPONSE, SERVER
from h11._writers import WRITERS

from .heads import KeptHead, common_head, read_request, request_event

__all__ = ["PLAIN_CYCLE", "ServerConnection", "Step", "Whole", "unread"]

#: A request taken by :meth:`ServerConnection.take_whole`: its event, its body
#: (None: still coming, for h11's events), and the size of its head as sent.
Whole = tuple[h11.Request, bytes | bytearray | None, int]

_ContentLengthReader: Any = READERS[SEND_BODY]["content-length"]  # type: ignore[index]
_ContentLengthWriter: Any = WRITERS[SEND_BODY]["content-length"]  # type: ignore[index]
_RESPONSE_WRITER: Any = WRITERS[(SERVER, SEND_RESPONSE)]
_IDLE_WRITER: Any = WRITERS[(SERVER, IDLE)]
_DONE_READER: Any = READERS[(CLIENT, DONE)]
#: Request headers that change h11's decisions beyond the plain cycle (a
#: Content-Length is read; the others send the request to h11's own code).
_REQUEST_SPECIAL = frozenset(
    [b"content-length", b"connection", b"upgrade", b"expect", b"transfer-encoding"]
)
#: The longest head a connection keeps to compare the next one with (the
#: memory it costs an idle connection: about twice this, with its event).
_KEPT_HEAD = 1024
#: The same for a request taken whole (its head reader has judged the framing).
_WHOLE_SPECIAL = frozenset([b"connection", b"upgrade", b"expect"])
#: The same for a response (h11 reads neither Upgrade nor Expect there).
_RESPONSE_SPECIAL = frozenset([b"content-length", b"connection", b"transfer-encoding"])


def _says_close(value: bytes) -> bool:
    """Whether a ``Connection`` header's value has ``close`` among its values, as
    h11 reads it."""
    return any(part.strip() == b"close" for part in value.lower().split(b","))


def _plain_length(headers: Any, special: frozenset[bytes]) -> int | None:
    """The body length of a message on the plain cycle: its one all-digit
    ``Content-Length`` (-1 when it has none), or None when a header in
    ``special`` leaves the message to h11 (``Connection`` only with ``close``
    among its values, as h11 reads it)."""
    length = -1
    for _, name, value in headers._full_items:
        if name in special:
            if name == b"connection":
                if _says_close(value):
                    return None
            elif name != b"content-length" or length >= 0 or not value.isdigit():
                return None
            else:
                length = int(value)
    return length


# -- what a row sets besides the states (False: the event is not plain; nothing set)


def _body_data(conn: ServerConnection, event: Any) -> bool:
    conn.client_is_waiting_for_100_continue = False
    return True


def _body_end(conn: ServerConnection, event: Any) -> bool:
    conn.client_is_waiting_for_100_continue = False
    conn._reader = _DONE_READER
    return True


def _request(conn: ServerConnection, event: Any) -> bool:
    if event.http_version != b"1.1" or event.method == b"CONNECT":
        return False
    length = _plain_length(event.headers, _REQUEST_SPECIAL)
    if length is None:
        return False
    conn._request_method = event.method
    conn.their_http_version = event.http_version
    conn._writer = _RESPONSE_WRITER
    conn._reader = _ContentLengthReader(max(length, 0))
    return True


def _response(conn: ServerConnection, event: Any) -> bool:
    if (
        event.http_version != b"1.1"
        or event.status_code == 204
        or event.status_code == 304
        or conn._request_method == b"HEAD"
        or conn._request_method == b"CONNECT"
    ):
        return False
    length = _plain_length(event.headers, _RESPONSE_SPECIAL)
    if length is None or length < 0:
        return False
    conn._cstate.pending_switch_proposals = set()  # h11 starts a new one
    conn.client_is_waiting_for_100_continue = False
    conn._writer = _ContentLengthWriter(length)
    return True


def _response_data(conn: ServerConnection, event: Any) -> bool:
    return True


def _response_end(conn: ServerConnection, event: Any) -> bool:
    conn._writer = None
    return True


@dataclass(frozen=True, slots=True)
class Step:
    """One row of :data:`PLAIN_CYCLE`."""

    #: The other role, and the states of it under which the row holds (None: any).
    peer: Any
    peers: frozenset[Any] | None
    #: The role's state after the event, and the peer's (None: unchanged).
    next: Any
    peer_next: Any
    #: Sets the rest (reader, writer, flags); False when the event itself is not
    #: plain (a version, method, status or header h11 must judge), having set nothing.
    apply: Callable[[ServerConnection, Any], bool]


#: The plain cycle, by (role, event type, that role's state).  Every row also
#: needs keep-alive on and no protocol switch proposed.  Peer states left out
#: are those h11 would move on from (CLOSED, ERROR, MUST_CLOSE: see
#: ``h11._state.STATE_TRIGGERED_TRANSITIONS``).
PLAIN_CYCLE: dict[tuple[Any, type[Event], Any], Step] = {
    (CLIENT, h11.Request, IDLE): Step(
        SERVER, frozenset([IDLE]), SEND_BODY, SEND_RESPONSE, _request
    ),
    (CLIENT, h11.Data, SEND_BODY): Step(SERVER, None, SEND_BODY, None, _body_data),
    (CLIENT, h11.EndOfMessage, SEND_BODY): Step(
        SERVER, frozenset([SEND_RESPONSE, SEND_BODY, DONE]), DONE, None, _body_end
    ),
    (SERVER, h11.Response, SEND_RESPONSE): Step(CLIENT, None, SEND_BODY, None, _response),
    (SERVER, h11.Data, SEND_BODY): Step(CLIENT, None, SEND_BODY, None, _response_data),
    (SERVER, h11.EndOfMessage, SEND_BODY): Step(
        CLIENT, frozenset([SEND_BODY, DONE]), DONE, None, _response_end
    ),
}


class ServerConnection(h11.Connection):
    """An ``h11.Connection`` for the server side that reads request heads with
    :func:`mcplite.bindings.http.accel.heads.read_request` and takes the plain
    cycle's events in one step each (see the module docstring).  Only the
    server role: raises ValueError for another."""

    def __init__(self, our_role: Any, **options: Any) -> None:
        if our_role is not h11.SERVER:
            raise ValueError("ServerConnection is for the server side only")
        super().__init__(our_role, **options)
        # The last plain head take_whole read: a keep-alive client sends the
        # same head again and again (but for its Content-Length), which a
        # comparison then reads (see take_whole).
        self._last_head: KeptHead | None = None

    def _get_io_object(self, role: Any, event: Any, io_dict: Any) -> Any:
        io = super()._get_io_object(role, event, io_dict)
        return read_request if io is maybe_read_from_IDLE_client else io

    def next_event(self) -> Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        """h11's ``next_event``, without its general checks while the client
        sends a request and has not closed."""
        state = self._cstate.states[CLIENT]
        if (state is not IDLE and state is not SEND_BODY) or self._receive_buffer_closed:
            return super().next_event()
        try:
            event: Event | None = self._reader(self._receive_buffer)  # type: ignore[misc]
            if event is None:
                if len(self._receive_buffer) > self._max_incomplete_event_size:
                    # h11's words: the only way here is a head still incomplete.
                    raise h11.RemoteProtocolError("Receive buffer too long", error_status_hint=431)
                return h11.NEED_DATA
            self._process_event(CLIENT, event)
            return event
        except BaseException as exc:  # as h11 does: the peer is in ERROR after any
            self._process_error(CLIENT)
            if isinstance(exc, h11.LocalProtocolError):
                exc._reraise_as_remote_protocol_error()
            raise

    def _process_event(self, role: Any, event: Any) -> None:
        cstate = self._cstate
        if cstate.keep_alive and not cstate.pending_switch_proposals:
            states = cstate.states
            step = PLAIN_CYCLE.get((role, type(event), states[role]))
            if (
                step is not None
                and (step.peers is None or states[step.peer] in step.peers)
                and step.apply(self, event)
            ):
                states[role] = step.next
                if step.peer_next is not None:
                    states[step.peer] = step.peer_next
                return
        super()._process_event(role, event)

    def take_whole(self) -> Whole | type[h11.NEED_DATA] | None:
        """The next request in one step when it is plain (its head common, see
        :mod:`~mcplite.bindings.http.accel.heads`, and on the plain cycle):
        its event, body and head size, with h11 moved to where its ``Request``,
        ``Data`` and ``EndOfMessage`` events would leave it (the client done, a
        response awaited).  When the body is not all in yet, the head alone
        (body None), with h11 where its ``Request`` event leaves it: its
        ``next_event`` gives the body's events.  ``NEED_DATA`` when the client
        is idle and nothing is buffered (what ``next_event`` would say, and do
        nothing else); None, and nothing changed, for anything else, which
        ``next_event`` takes (a head still coming, a head off the plain
        cycle, any other state)."""
        cstate = self._cstate
        states = cstate.states
        if (
            states[CLIENT] is not IDLE
            or states[SERVER] is not IDLE
            or self._receive_buffer_closed
            or not cstate.keep_alive
            or cstate.pending_switch_proposals
        ):
            return None
        buffer = self._receive_buffer
        data = buffer._data
        if not data:
            return h11.NEED_DATA
        if buffer._multiple_lines_search != 0:  # a head h11 has started to search
            return None
        last = self._last_head
        kept = last.read(data) if last is not None else None
        if kept is not None:
            # The last head again (its bytes end with its first blank line, so
            # these do too), but for its Content-Length's digits maybe.
            event, length, size = kept
        else:
            head = common_head(data)
            if head is None:
                return None
            size, method, target, items, length = head
            if method == b"CONNECT":
                return None
            for _, name, value in items:
                if name in _WHOLE_SPECIAL and (name != b"connection" or _says_close(value)):
                    return None  # an upgrade, an Expect or a close: h11's
            length = max(length, 0)
            # An h11 event is immutable: one serves every request with this head.
            event = request_event(method, target, items)
            if size <= _KEPT_HEAD:
                self._last_head = KeptHead(bytes(data[:size]), event, length)
        end = size + length
        buffer._next_line_search = 0  # what ReceiveBuffer._extract does
        buffer._multiple_lines_search = 0
        states[SERVER] = SEND_RESPONSE
        self._request_method = event.method
        self.their_http_version = b"1.1"
        self.client_is_waiting_for_100_continue = False
        self._writer = _RESPONSE_WRITER
        if len(data) < end:
            # The body is still coming (a client that writes the head and the body
            # apart): the head alone, as h11's Request event leaves things; h11's
            # Content-Length reader takes the body.
            del data[:size]
            states[CLIENT] = SEND_BODY
            self._reader = _ContentLengthReader(length)
            return event, None, size
        body = data[size:end] if length else b""
        del data[:end]
        states[CLIENT] = DONE
        self._reader = _DONE_READER
        return event, body, size

    def respond_plain(self) -> bool:
        """Whether a plain response (framed by a Content-Length, to a keep-alive
        HTTP/1.1 request, not a HEAD or CONNECT) was taken whole in one step: h11
        moved to where its ``Response`` and ``EndOfMessage`` events would leave
        it.  False, and nothing changed, in any other state: then send the
        events."""
        cstate = self._cstate
        states = cstate.states
        if (
            states[SERVER] is not SEND_RESPONSE
            or states[CLIENT] is not DONE
            or not cstate.keep_alive
            or cstate.pending_switch_proposals
            or self.their_http_version != b"1.1"
            or self._request_method == b"HEAD"
            or self._request_method == b"CONNECT"
        ):
            return False
        states[SERVER] = DONE
        self.client_is_waiting_for_100_continue = False
        self._writer = None
        return True

    def start_next_cycle(self) -> None:
        """h11's ``start_next_cycle``; from (DONE, DONE) on a kept-alive
        connection, back to (IDLE, IDLE) in one step."""
        cstate = self._cstate
        states = cstate.states
        if (
            states[CLIENT] is DONE
            and states[SERVER] is DONE
            and cstate.keep_alive
            and not cstate.pending_switch_proposals
            and not self.client_is_waiting_for_100_continue  # h11 asserts it: its error
        ):
            cstate.states = {CLIENT: IDLE, SERVER: IDLE}
            self._request_method = None
            self._writer = _IDLE_WRITER
            self._reader = read_request
            return
        super().start_next_cycle()


def unread(conn: h11.Connection) -> Sized:
    """What ``conn`` has received and not read yet, as a live ``Sized`` (h11's
    receive buffer itself: its length costs nothing)."""
    buffer: Sized = conn._receive_buffer
    return buffer
