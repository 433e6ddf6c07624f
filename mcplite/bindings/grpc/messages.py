"""Reading a gRPC request message under a size limit, for every service we serve.

grpclib has no per-message limit and buffers a whole message (acknowledging it
to the client as it comes, so flow control does not bound it) before its codec
sees it.  :func:`read_message` reads the gRPC length-prefixed framing itself
from grpclib's HTTP/2 stream (``Stream._stream``, grpclib 0.4.x) with the same
calls as ``grpclib.stream.recv_message``, and refuses an oversized message by its
5-byte prefix, before its body is read.
"""

from __future__ import annotations

from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

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
            raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not supported")
        size = int.from_bytes(prefix[1:], "big")
        if size > limit:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"request message is {size} bytes, more than the limit of {limit}",
            )
        data = await h2_stream.recv_data(size)
    except AssertionError:  # grpclib's Buffer: the stream ended mid-message
        raise GRPCError(Status.INVALID_ARGUMENT, "truncated request message") from None
    if len(data) != size:
        raise GRPCError(Status.INVALID_ARGUMENT, "truncated request message")
    return data
