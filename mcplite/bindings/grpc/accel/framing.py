"""h2's server connection, writing a response's HEADERS and DATA frames itself,
and reading frames without formatting each for a log that drops it.

A unary gRPC answer is three frames: the response headers, one DATA frame and
the trailers.  h2 builds each as a hyperframe object (with a ``Flags`` set),
converts the headers to bytes, works out flags for header validation that is
off in grpclib's configuration, and serializes the object again: about a tenth
of a unary call's CPU on this server, for 9 bytes of frame header.

:class:`LeanH2Connection` is h2's ``H2Connection`` taking the plain case of
``send_headers`` and ``send_data`` in fewer steps.  Every state change stays
h2's own: the connection's and the stream's state machines take the same
inputs in the same order, the same flow-control windows are charged, HPACK
encodes the same bytes, and the bytes queued are byte for byte h2's.  The plain
case is what grpclib sends: headers that are a list of ``(name, value)`` tuples
of exactly ``str`` or ``bytes`` (UTF-8), on a stream the client opened, and
data as ``bytes`` that fits the frame size and both windows.  Anything else (a
``HeaderTuple``, a ``str`` subclass, text that is not UTF-8, 1xx headers, a
stream h2 would have to open, priority, padding, header validation or
normalization switched on, a logger to tell) takes h2's own path, which
raises h2's own errors in h2's own order.
tests/test_grpc_framing.py checks the byte-for-byte claim against h2.

Received frames take h2's own ``_receive_frame`` (h2 4.4.1), copied without its
first line, which formats the frame for ``logger.trace`` whether or not the
logger writes anything; a connection with a logger to tell keeps h2's.  The
same tests give both connections the same frames, good and bad (on streams
reset, ended, or never opened), and compare what they give back.

h2 internals used (h2 4.x): ``H2Connection.streams``, ``state_machine``,
``_data_to_send``, ``encoder``, ``_frame_dispatch_table``,
``_prepare_for_sending``, ``_stream_is_closed_by_reset`` and ``_by_end``;
``StreamClosedError._events``; ``H2Stream.state_machine``,
``outbound_flow_control_window`` and ``request_method``.  Those of h2's
``H2Configuration`` that make it validate, normalize or log are read once, when
a connection is adopted.
"""

from __future__ import annotations

import struct
from typing import Any

from h2.config import DummyLogger
from h2.connection import ConnectionInputs, H2Connection
from h2.errors import ErrorCodes
from h2.events import Event
from h2.exceptions import ProtocolError, StreamClosedError, StreamIDTooLowError
from h2.stream import StreamInputs
from h2.utilities import extract_method_header, is_informational_response
from hyperframe.frame import Frame, RstStreamFrame

__all__ = ["LeanH2Connection"]

#: An HTTP/2 frame header: 24-bit length, type, flags, 31-bit stream id (as hyperframe).
_FRAME_HEAD = struct.Struct(">HBBBL")
_DATA, _HEADERS, _CONTINUATION = 0x0, 0x1, 0x9
_END_STREAM, _END_HEADERS = 0x1, 0x4


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    size = len(payload)
    return _FRAME_HEAD.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


def _plain(headers: Any) -> list[tuple[bytes, bytes]] | None:
    """``headers`` as h2's ``utf8_encode_headers`` makes them, if every one is a
    plain ``(name, value)`` tuple of exactly ``str`` or ``bytes`` and the text is
    UTF-8 (what grpclib sends); else None, for h2 to handle (and refuse) itself."""
    if type(headers) is not list or not headers:  # h2 fails on [] after changing state
        return None
    out = []
    try:
        for header in headers:
            if type(header) is not tuple or len(header) != 2:
                return None
            name, value = header
            kind = type(name)
            if kind is str:
                name = name.encode("utf-8")
            elif kind is not bytes:
                return None
            kind = type(value)
            if kind is str:
                value = value.encode("utf-8")
            elif kind is not bytes:
                return None
            out.append((name, value))
    except UnicodeEncodeError:
        return None
    return out


class LeanH2Connection(H2Connection):
    """``H2Connection`` writing a server's plain HEADERS and DATA frames directly
    (see the module docstring).  Made with :meth:`adopt`."""

    #: Whether this connection's configuration lets it write frames directly.
    lean = False

    @classmethod
    def adopt(cls, connection: H2Connection) -> bool:
        """Turn ``connection``, a plain ``H2Connection`` (grpclib makes its own),
        into one of these: the class changes, no state does.  False, and nothing
        done, for any other kind of connection (a subclass may send otherwise)."""
        if type(connection) is not H2Connection:
            return False
        connection.__class__ = cls
        config = connection.config
        connection.lean = not (  # type: ignore[attr-defined]
            config.client_side
            or config.validate_outbound_headers
            or config.normalize_outbound_headers
            or type(config.logger) is not DummyLogger
        )
        return True

    def _receive_frame(self, frame: Frame) -> list[Event]:
        """h2's own, less its trace line: h2 formats each frame it receives
        (``repr``: its flags, its payload in hex) before its logger is called,
        and a ``DummyLogger`` drops it (about 4% of a unary call's CPU)."""
        if not self.lean:
            return super()._receive_frame(frame)
        events: list[Event]
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except StreamClosedError as e:
            # Closed by RST_STREAM: a RST_STREAM back; otherwise a connection error.
            if self._stream_is_closed_by_reset(e.stream_id):
                f = RstStreamFrame(e.stream_id)
                f.error_code = e.error_code
                self._prepare_for_sending([f])
                events = e._events
            else:
                raise
        except StreamIDTooLowError as e:
            # A stream closed (by reset: a stream error; by END_STREAM, or
            # implicitly: a connection error).
            if self._stream_is_closed_by_reset(e.stream_id):
                f = RstStreamFrame(e.stream_id)
                f.error_code = ErrorCodes.STREAM_CLOSED
                self._prepare_for_sending([f])
                events = []
            elif self._stream_is_closed_by_end(e.stream_id):
                raise StreamClosedError(e.stream_id) from e
            else:
                raise
        else:
            self._prepare_for_sending(frames)
        return events

    def send_headers(
        self,
        stream_id: int,
        headers: Any,
        end_stream: bool = False,
        priority_weight: int | None = None,
        priority_depends_on: int | None = None,
        priority_exclusive: bool | None = None,
    ) -> None:
        stream = self.streams.get(stream_id)
        plain = None
        if (
            stream is not None
            and self.lean
            and priority_weight is None
            and priority_depends_on is None
            and priority_exclusive is None
            and stream.state_machine.client is False  # a stream the client opened
        ):
            plain = _plain(headers)
        if stream is None or plain is None or is_informational_response(plain):
            super().send_headers(
                stream_id,
                headers,
                end_stream,
                priority_weight,
                priority_depends_on,
                priority_exclusive,
            )
            return
        # h2's order: the state changes come before HPACK changes its table.
        self.state_machine.process_input(ConnectionInputs.SEND_HEADERS)
        machine = stream.state_machine
        machine.process_input(StreamInputs.SEND_HEADERS)
        block = self.encoder.encode(plain)
        if end_stream:
            machine.process_input(StreamInputs.SEND_END_STREAM)
        if machine.trailers_sent and not end_stream:
            raise ProtocolError("Trailers must have END_STREAM set.")
        stream.request_method = extract_method_header(plain)
        first = _END_STREAM if end_stream else 0
        most = self.max_outbound_frame_size
        if len(block) <= most:
            self._data_to_send += _frame(_HEADERS, first | _END_HEADERS, stream_id, block)
            return
        parts = [block[i : i + most] for i in range(0, len(block), most)]
        frames = [_frame(_HEADERS, first, stream_id, parts[0])]
        frames += [_frame(_CONTINUATION, 0, stream_id, part) for part in parts[1:-1]]
        frames.append(_frame(_CONTINUATION, _END_HEADERS, stream_id, parts[-1]))
        self._data_to_send += b"".join(frames)

    def send_data(
        self,
        stream_id: int,
        data: bytes | memoryview,
        end_stream: bool = False,
        pad_length: Any = None,
    ) -> None:
        stream = self.streams.get(stream_id)
        size = len(data)
        if (
            stream is None
            or pad_length is not None
            or type(data) is not bytes
            or size > self.max_outbound_frame_size
            or size > self.outbound_flow_control_window
            or size > stream.outbound_flow_control_window
            or not self.lean
        ):
            super().send_data(stream_id, data, end_stream, pad_length)
            return
        self.state_machine.process_input(ConnectionInputs.SEND_DATA)
        machine = stream.state_machine
        machine.process_input(StreamInputs.SEND_DATA)
        if end_stream:
            machine.process_input(StreamInputs.SEND_END_STREAM)
        stream.outbound_flow_control_window -= size
        # The frame's header, then its data: each added to h2's buffer, the data not
        # first copied behind the header.
        flags = _END_STREAM if end_stream else 0
        self._data_to_send += _FRAME_HEAD.pack(size >> 8, size & 0xFF, _DATA, flags, stream_id)
        self._data_to_send += data
        self.outbound_flow_control_window -= size
