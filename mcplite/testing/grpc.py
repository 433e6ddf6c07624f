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
from collections.abc import AsyncIterator, Callable
from typing import Any

from grpclib.client import Channel, Stream
from grpclib.const import Cardinality
from grpclib.encoding.base import CodecBase, StatusDetailsCodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.protocol import H2Protocol

from ..client import Partial, ProgressUpdate, RequestTimeout, TransportError
from ..client._grpc import BytesCodec, grpc_error, result_of
from ..protocols.protobuf import (
    CodecError,
    decode_tool_response,
    decode_tools_list,
    encode_tool_request,
)
from .transports import transport_pair

__all__ = ["GrpcLiteTransport", "MemoryChannel"]

_SERVICE = "/mcplite.MCPLite/"
#: Seconds the closing of a connection is waited for.
CLOSE_WAIT = 1.0
#: What grpclib raises for an answer or a broken connection (see mcplite.client).
_GRPCLIB_ERRORS = (GRPCError, StreamTerminatedError, OSError, CodecError)


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


class GrpcLiteTransport:
    """The ``mcplite.MCPLite`` service as a :class:`mcplite.client.Transport`, over a
    :class:`MemoryChannel` to ``connection()`` made on first use.  ``authorization``
    is the ``authorization`` metadata of every call.  No prompts or resources (the
    HTTP binding carries those)."""

    origin = "grpc://in-memory"

    def __init__(
        self,
        connection: Callable[[], asyncio.BaseProtocol],
        *,
        authorization: str | None = None,
        socket_buffer: int = 64 * 1024,
    ) -> None:
        self.connection = connection
        self.socket_buffer = socket_buffer
        self._metadata = {"authorization": authorization} if authorization is not None else None
        self._channel: MemoryChannel | None = None

    def _chan(self) -> MemoryChannel:
        # Made on first use: grpclib binds a channel to the running loop.
        if self._channel is None:
            self._channel = MemoryChannel(
                self.connection, codec=BytesCodec(), socket_buffer=self.socket_buffer
            )
        return self._channel

    def _failure(self, exc: BaseException, stream: Stream[bytes, bytes] | None) -> Exception:
        if isinstance(exc, GRPCError):
            metadata = stream.trailing_metadata if stream is not None else None
            return grpc_error(exc, metadata, self.origin)
        if isinstance(exc, TimeoutError):
            return RequestTimeout(f"no answer from {self.origin} in time")
        return TransportError(f"connection to {self.origin} broken: {exc or type(exc).__name__}")

    def _request(self, name: str, arguments: dict[str, Any]) -> bytes:
        try:
            return encode_tool_request(name, arguments)
        except UnicodeEncodeError:
            raise TransportError("gRPC cannot carry a string with a lone surrogate") from None

    async def _unary(self, method: str, payload: bytes, timeout: float) -> bytes:
        stream: Stream[bytes, bytes] | None = None
        try:
            stream = self._chan().request(
                _SERVICE + method,
                Cardinality.UNARY_UNARY,
                bytes,
                bytes,
                timeout=timeout,
                metadata=self._metadata,
            )
            async with stream:
                await stream.send_message(payload, end=True)
                reply = await stream.recv_message()
        except _GRPCLIB_ERRORS as exc:
            raise self._failure(exc, stream) from None
        if reply is None:
            raise TransportError(f"{self.origin} answered {method} without a message")
        return reply

    async def list_tools(self, timeout: float) -> list[dict[str, Any]]:
        data = await self._unary("GetTools", b"", timeout)
        try:
            return decode_tools_list(data)
        except CodecError as exc:
            raise self._failure(exc, None) from None

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float, *, idempotent: bool = False
    ) -> dict[str, Any]:
        data = await self._unary("CallTool", self._request(name, arguments), timeout)
        try:
            result, meta = decode_tool_response(data)
        except CodecError as exc:
            raise self._failure(exc, None) from None
        if meta is None:
            raise TransportError(f"{self.origin} answered CallTool without meta")
        return result_of(result, meta)

    async def stream(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> AsyncIterator[Partial | ProgressUpdate | dict[str, Any]]:
        payload = self._request(name, arguments)
        stream: Stream[bytes, bytes] | None = None
        final: dict[str, Any] | None = None
        try:
            stream = self._chan().request(
                _SERVICE + "CallToolStream",
                Cardinality.UNARY_STREAM,
                bytes,
                bytes,
                metadata=self._metadata,
            )
            async with stream:
                async with asyncio.timeout(timeout):
                    await stream.send_message(payload, end=True)
                while True:
                    async with asyncio.timeout(timeout):
                        data = await stream.recv_message()
                    if data is None:
                        break
                    result, meta = decode_tool_response(data)
                    if meta is None and "partial" not in result and "progress" in result:
                        progress = ProgressUpdate.from_json(result)  # the tool's progress
                        if progress is not None:
                            yield progress
                    elif meta is None or (meta.extra or {}).get("partial") is True:
                        yield Partial(result.get("partial"))
                    else:
                        final = result_of(result, meta)
        except _GRPCLIB_ERRORS as exc:
            raise self._failure(exc, stream) from None
        if final is None:
            raise TransportError("the stream ended without its final result")
        yield final

    async def aclose(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.aclose()
