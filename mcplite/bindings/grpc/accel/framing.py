"""h2's server connection, writing a response's HEADERS and DATA frames itself,
and reading a request's plain HEADERS and DATA frames from their bytes.

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

Receiving, h2 makes a hyperframe object of each frame (a ``Flags`` set, its
payload copied out), formats it for ``logger.trace`` whether or not the logger
writes anything, and dispatches it on its class.  :meth:`LeanH2Connection.receive_data`
reads the 9-byte header of each frame in h2's buffer itself; a HEADERS frame
with END_HEADERS and without padding or priority, and a DATA frame without
padding, on a stream (not 0), within the frame size and with no header block
waiting for its CONTINUATION, go straight to h2's own steps for them (the
connection's state machine, HPACK, the stream's ``receive_headers`` or
``receive_data``, the same events), copied from h2 4.4.1's
``_receive_headers_frame`` and ``_receive_data_frame``.  Every other frame
takes h2's ``FrameBuffer`` and its handler, through h2's ``_receive_frame``
copied without that trace line.  A connection with a logger to tell keeps
h2's own.  The tests give both connections the same frames, good and bad
(padded, with priority, split over a CONTINUATION or left without it, on
stream 0, over the frame size, on streams reset, ended or forgotten), whole
and cut anywhere, and compare events, errors, bytes sent back and state.

h2 internals used (h2 4.x): ``H2Connection.streams``, ``state_machine``,
``_data_to_send``, ``encoder``, ``decoder``, ``incoming_buffer`` (its
``_data`` and ``_headers_buffer``), ``_frame_dispatch_table``,
``_prepare_for_sending``, ``_stream_is_closed_by_reset`` and ``_by_end``,
``_get_or_create_stream``, ``_get_stream_by_id``,
``_inbound_flow_control_window_manager``, ``_handle_data_on_closed_stream``,
``_terminate_connection``; ``h2.connection._decode_headers``;
``StreamClosedError._events``; ``H2Stream.state_machine``,
``outbound_flow_control_window`` and ``request_method``.  Those of h2's
``H2Configuration`` that make it validate, normalize or log are read once, when
a connection is adopted.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from h2.config import DummyLogger
from h2.connection import AllowedStreamIDs, ConnectionInputs, H2Connection, _decode_headers
from h2.errors import ErrorCodes
from h2.events import Event
from h2.exceptions import (
    ProtocolError,
    StreamClosedError,
    StreamIDTooLowError,
    TooManyStreamsError,
)
from h2.stream import StreamInputs
from h2.utilities import extract_method_header, is_informational_response
from hyperframe.exceptions import InvalidPaddingError
from hyperframe.frame import DataFrame, Frame, RstStreamFrame

__all__ = ["LeanH2Connection"]

#: An HTTP/2 frame header: 24-bit length, type, flags, 31-bit stream id (as hyperframe).
_FRAME_HEAD = struct.Struct(">HBBBL")
_DATA, _HEADERS, _CONTINUATION = 0x0, 0x1, 0x9
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20
#: What h2 sends and takes in frames: a list of frames to send, and events.
_Handled = tuple[list[Frame], list[Event]]


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

    def receive_data(self, data: Any) -> list[Event]:
        """h2's own, but a plain HEADERS or DATA frame is read from its bytes
        (see the module docstring); every other frame, and any frame while a
        header block waits for its CONTINUATION, is h2's ``FrameBuffer``'s."""
        if not self.lean:
            return super().receive_data(data)
        events: list[Event] = []
        buffer = self.incoming_buffer
        buffer.add_data(data)
        buffer.max_frame_size = most = self.max_inbound_frame_size
        raw = buffer._data
        try:
            while len(raw) >= 9:
                size = (raw[0] << 16) | (raw[1] << 8) | raw[2]
                kind, flags = raw[3], raw[4]
                stream_id = int.from_bytes(raw[5:9], "big") & 0x7FFFFFFF
                if (
                    (kind == _HEADERS and flags & _END_HEADERS and not flags & _PRIORITY)
                    or kind == _DATA
                ) and not (
                    flags & _PADDED or stream_id == 0 or size > most or buffer._headers_buffer
                ):
                    if len(raw) < 9 + size:
                        break
                    payload = bytes(raw[9 : 9 + size])
                    del raw[: 9 + size]
                    end = bool(flags & _END_STREAM)
                    if kind == _HEADERS:
                        events += self._handled(self._receive_headers, stream_id, payload, end)
                    else:
                        events += self._handled(self._receive_data, stream_id, payload, end)
                    continue
                try:
                    frame = next(buffer)
                except StopIteration:
                    break
                events += self._receive_frame(frame)
        except InvalidPaddingError as e:
            self._terminate_connection(ErrorCodes.PROTOCOL_ERROR)
            msg = "Received frame with invalid padding."
            raise ProtocolError(msg) from e
        except ProtocolError as e:
            self._terminate_connection(e.error_code)
            raise
        return events

    def _receive_headers(self, stream_id: int, block: bytes, end_stream: bool) -> _Handled:
        """h2's ``_receive_headers_frame`` for a HEADERS frame without priority."""
        if stream_id not in self.streams:
            max_open_streams = self.local_settings.max_concurrent_streams
            value = self.open_inbound_streams  # a property that also forgets closed streams
            if (value + 1) > max_open_streams:
                msg = f"Max inbound streams is {max_open_streams}, {value} open"
                raise TooManyStreamsError(msg)
        headers = _decode_headers(self.decoder, block)
        events = self.state_machine.process_input(ConnectionInputs.RECV_HEADERS)
        stream = self._get_or_create_stream(
            stream_id, AllowedStreamIDs(not self.config.client_side)
        )
        frames, stream_events = stream.receive_headers(
            headers, end_stream, self.config.header_encoding
        )
        return frames, events + stream_events

    def _receive_data(self, stream_id: int, data: bytes, end_stream: bool) -> _Handled:
        """h2's ``_receive_data_frame`` for a DATA frame without padding."""
        size = len(data)
        events = self.state_machine.process_input(ConnectionInputs.RECV_DATA)
        self._inbound_flow_control_window_manager.window_consumed(size)
        try:
            stream = self._get_stream_by_id(stream_id)
            frames, stream_events = stream.receive_data(data, end_stream, size)
        except StreamClosedError as e:
            # Rare: h2's own answer, from the frame h2 would have made.
            frame = DataFrame(stream_id, data, flags=["END_STREAM"] if end_stream else [])
            return self._handle_data_on_closed_stream(events, e, frame)
        return frames, events + stream_events

    def _receive_frame(self, frame: Frame) -> list[Event]:
        """h2's own, less its trace line: h2 formats each frame it receives
        (``repr``: its flags, its payload in hex) before its logger is called,
        and a ``DummyLogger`` drops it (about 4% of a unary call's CPU)."""
        if not self.lean:
            return super()._receive_frame(frame)
        return self._handled(self._frame_dispatch_table[frame.__class__], frame)

    def _handled(self, handle: Callable[..., _Handled], *args: Any) -> list[Event]:
        """What h2's ``_receive_frame`` does with a frame's handler: its frames
        sent, its events returned, a frame on a closed stream answered."""
        events: list[Event]
        try:
            frames, events = handle(*args)
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
