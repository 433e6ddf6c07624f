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

grpclib internals used (as ``grpclib.testing.ChannelFor`` does; grpclib 0.4.9):
``Channel._create_connection`` (the one place a channel connects) and
``Channel._protocol_factory`` (the protocol it would connect with).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from grpclib.client import Channel
from grpclib.encoding.base import CodecBase, StatusDetailsCodecBase
from grpclib.protocol import H2Protocol

from ..client._grpc import BytesCodec, GrpcTransport
from .transports import transport_pair

__all__ = ["GrpcLiteTransport", "MemoryChannel"]

#: Seconds the closing of a connection is waited for.
CLOSE_WAIT = 1.0


class _Protocol(H2Protocol):
    """grpclib's protocol, telling when its connection has ended."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        if not self.closed.done():
            self.closed.set_result(None)


class MemoryChannel(Channel):
    """A grpclib ``Channel`` to the protocols ``connection()`` makes, in memory.

    ``codec`` and ``status_details_codec`` are grpclib's (default: protobuf
    messages, as generated stubs use them).  Close it with :meth:`aclose` (or
    grpclib's ``close``).  Make it in the running event loop.
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
        super().__init__("127.0.0.1", 50051, codec=codec, status_details_codec=status_details_codec)
        self.connection = connection
        self.socket_buffer = socket_buffer
        self._protocols: list[_Protocol] = []

    async def _create_connection(self) -> H2Protocol:
        made = self._protocol_factory()
        protocol = _Protocol(made.handler, made.config, made.h2_config)
        transport_pair(protocol, self.connection(), socket_buffer=self.socket_buffer)
        self._protocols = [p for p in self._protocols if not p.closed.done()]
        self._protocols.append(protocol)
        return protocol

    async def aclose(self) -> None:
        """Close the connection and wait (boundedly) until it has ended."""
        self.close()
        closing = [p.closed for p in self._protocols if not p.closed.done()]
        if closing:
            await asyncio.wait(closing, timeout=CLOSE_WAIT)


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
