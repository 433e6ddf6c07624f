"""gRPC over in-memory connections: grpclib's own client, HTTP/2 frames and all.

:class:`MemoryChannel` is a ``grpclib.client.Channel`` whose connection is a
:func:`~mcplite.testing.transports.transport_pair` to the server-side protocol
``connection()`` makes (such as :meth:`mcplite.bindings.grpc.service.GrpcServer.connection`),
as ``grpclib.testing.ChannelFor`` hands its channel a protocol; a lost connection
is made again on the next call, as over a socket.  Any stub takes it.

:class:`GrpcLiteTransport` is the :class:`mcplite.client.Transport` of the
``mcplite.MCPLite`` service on such a channel, so :class:`mcplite.client.BaseClient`
runs over the real gRPC binding: the messages are read and written by the
client's codec, statuses map to the same exceptions as over a socket.

:class:`MemoryChannel` connects through grpclib internals, as
``grpclib.testing.ChannelFor`` does: it is a
:class:`mcplite.client.accel.channels.TrackingChannel` with a ``connect`` hook,
and uses it whatever the gate of :mod:`mcplite.client.accel` says (that gate
is for the speed paths of real clients; this is a test tool, as the server
side's :mod:`mcplite.bindings.grpc.accel.inmemory` is).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from grpclib.client import Channel
from grpclib.encoding.base import CodecBase, StatusDetailsCodecBase

from ..client.accel.channels import TrackingChannel
from ..client.grpc import BytesCodec, GrpcTransport
from .transports import transport_pair

__all__ = ["GrpcLiteTransport", "MemoryChannel"]


class MemoryChannel(TrackingChannel):
    """A grpclib ``Channel`` to the protocols ``connection()`` makes, in memory.

    ``codec`` and ``status_details_codec`` are grpclib's (default: protobuf
    messages, as generated stubs use them).  Close it with :meth:`aclose` (which
    waits, at most a second, until the connection has ended), or grpclib's
    ``close``.  Make it in the running event loop.
    """

    def __init__(
        self,
        connection: Callable[[], asyncio.BaseProtocol],
        *,
        codec: CodecBase | None = None,
        status_details_codec: StatusDetailsCodecBase | None = None,
        socket_buffer: int = 64 * 1024,
    ) -> None:
        # The address only names the server in ``:authority``; nothing connects to it.
        super().__init__(
            "127.0.0.1",
            50051,
            codec=codec,
            status_details_codec=status_details_codec,
            connect=self._join,
        )
        self.connection = connection
        self.socket_buffer = socket_buffer

    def _join(self, protocol: asyncio.BaseProtocol) -> None:
        transport_pair(protocol, self.connection(), socket_buffer=self.socket_buffer)


class GrpcLiteTransport(GrpcTransport):
    """The ``mcplite.MCPLite`` service as a :class:`mcplite.client.Transport`, over a
    :class:`MemoryChannel` to ``connection()`` made on first use.  ``authorization``
    is the ``authorization`` metadata of every call.  Requests, answers and errors
    are :class:`mcplite.client.GrpcTransport`'s own; no resources (the HTTP
    binding carries those)."""

    def __init__(
        self,
        connection: Callable[[], asyncio.BaseProtocol],
        *,
        authorization: str | None = None,
        socket_buffer: int = 64 * 1024,
    ) -> None:
        # Not GrpcTransport's __init__: there is no host, port or TLS to keep.
        self.origin = "grpc://in-memory"
        self.connection = connection
        self.socket_buffer = socket_buffer
        self._metadata = {"authorization": authorization} if authorization is not None else None
        self._channel: Channel | None = None

    def _open(self) -> MemoryChannel:
        return MemoryChannel(self.connection, codec=BytesCodec(), socket_buffer=self.socket_buffer)

    async def aclose(self) -> None:
        channel, self._channel = self._channel, None
        if isinstance(channel, MemoryChannel):
            await channel.aclose()
