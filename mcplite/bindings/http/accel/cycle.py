"""h11's server connection, its common request/response cycle in fewer steps.

h11 moves every event of a cycle through the same general code: it copies the
state dict, asks the state table, re-runs the state-triggered transitions to a
fixed point, scans the headers once per question (``Upgrade``, ``Connection``,
``Expect``, ``Transfer-Encoding``, ``Content-Length``; again for the response),
then compares old and new states to pick the next reader and writer.  For the
cycle almost every request takes (an HTTP/1.1 request without ``Upgrade``,
``Expect``, ``Transfer-Encoding`` or ``Connection: close``, with at most one
``Content-Length``; a response framed by ``Content-Length``; keep-alive), the
outcome of all that is known: :class:`ServerConnection` sets exactly the state,
reader and writer h11 would set, in one step per event.

Nothing else changes.  h11's readers still parse every byte (with the faster
head reader of :mod:`mcplite.bindings.http.accel.heads`), its writers still frame every byte
sent through ``send``, and any event, state or header outside that cycle
(``CONNECT``, an upgrade, ``Expect: 100-continue``, chunked bodies, HTTP/1.0,
``Connection: close``, a response to ``HEAD``, 204, 304, an early response, a
peer that closed, an error) goes through h11's own code, untouched.
``tests/test_http_cycle.py`` drives this class and h11's own side by side with
generated requests, responses and byte splits, and compares every event, error,
byte written and piece of state after each step.

h11 internals used (h11 is pinned below 0.17): ``Connection._process_event``,
``_cstate`` (``states``, ``keep_alive``, ``pending_switch_proposals``),
``_reader``, ``_writer``, ``_request_method``, ``_receive_buffer``,
``_receive_buffer_closed``, ``_max_incomplete_event_size``,
``_get_io_object``, ``_process_error``, ``Headers._full_items`` and the reader
and writer tables (``h11._readers.READERS``, ``h11._writers.WRITERS``).
"""

from __future__ import annotations

from typing import Any

import h11
from h11._events import Event
from h11._readers import READERS, maybe_read_from_IDLE_client
from h11._state import CLIENT, DONE, IDLE, SEND_BODY, SEND_RESPONSE, SERVER
from h11._writers import WRITERS

from .heads import read_request

__all__ = ["ServerConnection"]

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
#: The same for a response (h11 reads neither Upgrade nor Expect there).
_RESPONSE_SPECIAL = frozenset([b"content-length", b"connection", b"transfer-encoding"])


def _plain_length(headers: Any, special: frozenset[bytes]) -> int | None:
    """The body length of a message on the plain cycle: its one all-digit
    ``Content-Length`` (-1 when it has none), or None when a header in
    ``special`` leaves the message to h11 (``Connection`` only with ``close``
    among its values, as h11 reads it)."""
    length = -1
    for _, name, value in headers._full_items:
        if name in special:
            if name == b"connection":
                parts = value.lower().split(b",")
                if any(part.strip() == b"close" for part in parts):
                    return None
            elif name != b"content-length" or length >= 0 or not value.isdigit():
                return None
            else:
                length = int(value)
    return length


class ServerConnection(h11.Connection):
    """An ``h11.Connection`` for the server side that reads request heads with
    :func:`mcplite.bindings.http.accel.heads.read_request` and takes the plain cycle's events
    in one step each (see the module docstring).  Only the server role."""

    def __init__(self, our_role: Any, **options: Any) -> None:
        if our_role is not h11.SERVER:
            raise ValueError("ServerConnection is for the server side only")
        super().__init__(our_role, **options)

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
        states = cstate.states
        kind = type(event)
        # Every case below needs keep-alive on and no protocol switch proposed
        # (h11 holds its states at a fixed point between events, so then no
        # state-triggered transition can follow the event-triggered one).
        if cstate.keep_alive and not cstate.pending_switch_proposals:
            if role is CLIENT:
                client = states[CLIENT]
                if kind is h11.Data:
                    if client is SEND_BODY:
                        self.client_is_waiting_for_100_continue = False
                        return
                elif kind is h11.EndOfMessage:
                    server = states[SERVER]
                    # (DONE, CLOSED) and (DONE, ERROR) would move on: not here.
                    if client is SEND_BODY and (
                        server is SEND_RESPONSE or server is SEND_BODY or server is DONE
                    ):
                        states[CLIENT] = DONE
                        self.client_is_waiting_for_100_continue = False
                        self._reader = _DONE_READER
                        return
                elif (
                    kind is h11.Request
                    and client is IDLE
                    and states[SERVER] is IDLE
                    and event.http_version == b"1.1"
                    and event.method != b"CONNECT"
                ):
                    length = _plain_length(event.headers, _REQUEST_SPECIAL)
                    if length is not None:
                        states[CLIENT] = SEND_BODY
                        states[SERVER] = SEND_RESPONSE
                        self._request_method = event.method
                        self.their_http_version = event.http_version
                        self._writer = _RESPONSE_WRITER
                        self._reader = _ContentLengthReader(max(length, 0))
                        return
            elif role is SERVER:
                server = states[SERVER]
                if kind is h11.Data:
                    if server is SEND_BODY:
                        return
                elif kind is h11.EndOfMessage:
                    client = states[CLIENT]
                    # (CLOSED, DONE) and (ERROR, DONE) would move on: not here.
                    if server is SEND_BODY and (client is SEND_BODY or client is DONE):
                        states[SERVER] = DONE
                        self._writer = None
                        return
                elif (
                    kind is h11.Response
                    and server is SEND_RESPONSE
                    and event.http_version == b"1.1"
                    and event.status_code != 204
                    and event.status_code != 304
                    and self._request_method != b"HEAD"
                    and self._request_method != b"CONNECT"
                ):
                    length = _plain_length(event.headers, _RESPONSE_SPECIAL)
                    if length is not None and length >= 0:
                        cstate.pending_switch_proposals = set()  # h11 starts a new one
                        states[SERVER] = SEND_BODY
                        self.client_is_waiting_for_100_continue = False
                        self._writer = _ContentLengthWriter(length)
                        return
        super()._process_event(role, event)

    def start_next_cycle(self) -> None:
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
