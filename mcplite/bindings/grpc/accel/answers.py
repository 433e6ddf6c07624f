"""A unary call's answer (headers, its one message, OK trailers) sent in one step.

grpclib sends a unary answer in three calls of its server ``Stream``:
``send_message`` sends the response headers (``send_initial_metadata``, with a
``MultiDict`` of metadata, an event dispatched and the metadata encoded) and
then the message (another event, the codec, a ``BytesIO`` cut into frames);
``Stream.__aexit__`` sends the trailers once the handler has returned (a third
event, another ``MultiDict``).  Each waits on the connection's ``write_ready``
and asks h2 for its bytes.  On a connection that can write, with no listener
on grpclib's server events and a message that fits the stream's and the
connection's flow-control windows and one frame, :func:`send_answer` hands h2
the same three header and data steps in a row and writes their bytes at once:
the frames are byte for byte grpclib's, in the same order, and the stream's
and the connection's counters are kept as grpclib keeps them.  Otherwise it
takes grpclib's own ``send_message`` (and ``__aexit__`` the trailers), which
waits for the window or the transport as it always does.

The trailers then leave with the message rather than once the handler's
bookkeeping (metrics, the access log) is done.  And on a quiet server (see
``_CoalescingTransport.write_now`` in :mod:`.connections`) the answer is
written at once, not at the event loop's next turn: a client calling one
call at a time has its answer before the server logs it.

grpclib internals used (grpclib 0.4.9; tests/test_grpc_answers.py):
``grpclib.events._ident`` (what a dispatcher with no listener for an event
calls), the server ``Stream``'s ``_stream``, ``_dispatch``, ``_cardinality``,
``_content_type``, ``_send_initial_metadata_done``, ``_send_message_done``,
``_messages_sent`` and ``_send_trailing_metadata_done``; the HTTP/2 stream's
``_h2_connection``, ``_transport``, ``connection`` and ``data_sent``; the
connection's ``write_ready``, ``messages_sent``, ``last_message_sent``,
``data_sent``, ``last_data_sent`` and ``ping_count_in_sequence``.
"""

from __future__ import annotations

import time
from typing import Any

from grpclib.events import _ident
from grpclib.server import Stream

from ..messages import RawMessage

__all__ = ["send_answer"]

#: The server events grpclib dispatches on the way: with a listener on any, its path.
_EVENTS = ("send_initial_metadata", "send_message", "send_trailing_metadata")
_OK = [("grpc-status", "0")]


async def send_answer(stream: Stream[Any, Any], data: bytes) -> None:
    """End a unary call with ``data`` as its one response message and status OK.

    Raises what grpclib's ``Stream.send_message`` raises (its path is taken
    whenever the one step is not possible)."""
    h2_stream = stream._stream
    connection = h2_stream.connection
    h2 = h2_stream._h2_connection
    stream_id = h2_stream.id
    events = stream._dispatch.__dict__
    size = len(data) + 5
    if (
        stream._send_initial_metadata_done
        or stream._send_message_done
        or stream._send_trailing_metadata_done
        or stream._cardinality.server_streaming
        or not connection.write_ready.is_set()
        or any(events.get(name) is not _ident for name in _EVENTS)
        or stream_id not in h2.streams
        or size > h2.max_outbound_frame_size
        or size > h2.local_flow_control_window(stream_id)
    ):
        await stream.send_message(RawMessage(data))
        return
    h2.send_headers(stream_id, [(":status", "200"), ("content-type", stream._content_type)])
    h2.send_data(stream_id, b"\x00" + len(data).to_bytes(4, "big") + data)
    h2.send_headers(stream_id, _OK, end_stream=True)
    transport = h2_stream._transport
    getattr(transport, "write_now", transport.write)(h2.data_to_send())
    stream._send_initial_metadata_done = True
    stream._send_message_done = True
    stream._messages_sent += 1
    stream._send_trailing_metadata_done = True
    now = time.monotonic()
    connection.messages_sent += 1
    connection.last_message_sent = now
    h2_stream.data_sent += size
    connection.data_sent += size
    connection.last_data_sent = now
    connection.ping_count_in_sequence = 0
