"""Reading a request message by its length prefix first, before its body.

grpclib has no per-message limit and buffers a whole message (acknowledging it
to the client as it comes, so flow control does not bound it) before its codec
sees it.  :func:`read_message` reads the gRPC length-prefixed framing itself
from grpclib's HTTP/2 stream (``Stream._stream``, grpclib 0.4.x) with the same
calls as ``grpclib.stream.recv_message``, and refuses an oversized message by its
5-byte prefix, before its body is read.  The plain path's
:func:`..messages.read_message` answers the same, but only once the body is in.

A unary request's message usually arrives in one DATA frame of its own: the
stream's buffer then holds one chunk that is exactly the message.  Such a
chunk is taken from the buffer's queue as grpclib's ``Buffer.read`` takes it
(and acknowledged to the client the same way), without the two reads, the
``memoryview`` slices and the join that reading the prefix and then the body
cost.  grpclib internals also used: ``Buffer._unacked`` (an ``asyncio.Queue``
of ``UnackedData``, its ``_queue``), ``_acked_size`` and ``_ack_callback``
(tests/test_grpc_answers.py).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from grpclib.protocol import UnackedData
from grpclib.server import Stream

from ..messages import compressed, too_large, truncated

__all__ = ["read_message"]


async def read_message(stream: Stream[Any, Any], limit: int) -> bytes | None:
    """The next request message's bytes; None when the client's stream ended first.

    Raises GRPCError: RESOURCE_EXHAUSTED for a message over ``limit`` bytes,
    UNIMPLEMENTED for a compressed one, INVALID_ARGUMENT for one cut short.
    """
    h2_stream = stream._stream
    buffer = h2_stream.buffer
    waiting = buffer._unacked
    queued: deque[UnackedData] = waiting._queue  # type: ignore[attr-defined]
    if not buffer._acked_size and queued:
        data, data_size, ack_size = queued[0]
        if data_size >= 5 and data_size == int.from_bytes(data[1:5], "big") + 5:
            if data[0]:
                raise compressed()
            if data_size - 5 > limit:
                raise too_large(data_size - 5, limit)
            waiting.get_nowait()
            buffer._ack_callback(ack_size)
            return data[5:]
    try:
        prefix = await h2_stream.recv_data(5)
        if not prefix:
            return None
        if prefix[0]:
            raise compressed()
        size = int.from_bytes(prefix[1:], "big")
        if size > limit:
            raise too_large(size, limit)
        data = await h2_stream.recv_data(size)
    except AssertionError:  # grpclib's Buffer: the stream ended mid-message
        raise truncated() from None
    if len(data) != size:
        raise truncated()
    return data
