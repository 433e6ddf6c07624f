"""Reading a request message by its length prefix first, before its body.

grpclib has no per-message limit and buffers a whole message (acknowledging it
to the client as it comes, so flow control does not bound it) before its codec
sees it.  :func:`read_message` reads the gRPC length-prefixed framing itself
from grpclib's HTTP/2 stream (``Stream._stream``, grpclib 0.4.x) with the same
calls as ``grpclib.stream.recv_message``, and refuses an oversized message by its
5-byte prefix, before its body is read.  The plain path's
:func:`..messages.read_message` answers the same, but only once the body is in.
"""

from __future__ import annotations

from typing import Any

from grpclib.server import Stream

from ..messages import compressed, too_large, truncated

__all__ = ["read_message"]


async def read_message(stream: Stream[Any, Any], limit: int) -> bytes | None:
    """The next request message's bytes; None when the client's stream ended first.

    Raises GRPCError: RESOURCE_EXHAUSTED for a message over ``limit`` bytes,
    UNIMPLEMENTED for a compressed one, INVALID_ARGUMENT for one cut short.
    """
    h2_stream = stream._stream
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
