"""The gRPC transport: ``grpclib.client.Channel`` carrying bytes our codec writes.

grpclib frames messages and calls a codec to turn them into bytes; ours
(:class:`BytesCodec`) passes bytes through, and :mod:`mcplite.protocols.protobuf` reads and
writes the protobuf messages.  Results are rebuilt in the HTTP binding's shape:
``ResponseMeta`` becomes ``_meta`` (epoch milliseconds as ISO 8601, ``extra``
merged in).

Errors: the status maps to the same :class:`~mcplite.client.RPCError` classes as
the HTTP binding's JSON-RPC codes, with ``data`` from the trailing metadata
``mcplite-error-data`` (JSON).  UNAVAILABLE, CANCELLED and connection failures are
:class:`~mcplite.client.TransportError`, but for an UNAVAILABLE whose data says the
server's promise store is down (``reason: store_unavailable``), which is
:class:`~mcplite.client.OverloadedError` with its ``retry_after`` as over HTTP;
DEADLINE_EXCEEDED is :class:`~mcplite.client.RequestTimeout`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

from grpclib.client import Channel, Stream
from grpclib.const import Cardinality, Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError

from ..core import wire
from ..core.outcomes import Partial, ProgressUpdate
from ..core.wire import ERROR_DATA_KEY, iso_timestamp
from ..protocols.protocalls import ResponseMeta, decode_tool_response, encode_tool_request
from ..protocols.protostruct import decode_struct
from ..protocols.protowire import CodecError
from . import accel
from ._tls import tls_reason
from .errors import RequestTimeout, TransportError, rpc_error

__all__ = ["BytesCodec", "GrpcTransport", "grpc_error", "result_of"]

_SERVICE = "/mcplite.MCPLite/"

_TYPE_NAMES = wire.RESPONSE_TYPE_NAMES

# gRPC status -> the JSON-RPC code of the same error (mcplite/core/errors.py in reverse).
_JSONRPC_CODES: dict[Status, int] = {
    Status.NOT_FOUND: wire.METHOD_NOT_FOUND,
    Status.INVALID_ARGUMENT: wire.INVALID_PARAMS,
    Status.RESOURCE_EXHAUSTED: wire.SERVER_ERROR,
    Status.INTERNAL: wire.INTERNAL_ERROR,
    Status.UNIMPLEMENTED: wire.METHOD_NOT_FOUND,
    Status.UNAUTHENTICATED: wire.UNAUTHENTICATED_ERROR,
    Status.PERMISSION_DENIED: wire.FORBIDDEN_ERROR,
}


# What grpclib and the sockets under it raise for the server's answers and for
# broken connections (TimeoutError is an OSError); grpclib's ProtocolError would
# be a bug of ours and is left alone.
_GRPCLIB_ERRORS = (GRPCError, StreamTerminatedError, OSError, CodecError)


class BytesCodec(CodecBase):
    """A grpclib codec whose messages are already serialized bytes."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        if not isinstance(message, bytes):
            raise TypeError(f"expected bytes, not {type(message).__name__}")
        return message

    def decode(self, data: bytes, message_type: Any) -> Any:
        return bytes(data)


def result_of(result: dict[str, Any], meta: ResponseMeta) -> dict[str, Any]:
    """A ``ToolResponse`` as the HTTP binding's result object (``_meta`` included)."""
    out: dict[str, Any] = {
        "response_type": _TYPE_NAMES.get(meta.response_type, str(meta.response_type)),
    }
    if meta.timestamp:
        out["timestamp"] = iso_timestamp(meta.timestamp / 1000)
    out["processing_time_ms"] = meta.processing_time_ms
    if meta.server_version:
        out["server_version"] = meta.server_version
    if meta.promise_token:
        out["promise_token"] = meta.promise_token
    if meta.expires_at:
        out["expires_at"] = iso_timestamp(meta.expires_at / 1000)
    if meta.extra:
        out.update(meta.extra)
    return {**result, "_meta": out}


def _prompt_definition(prompt: Any) -> dict[str, Any]:
    """A proto ``Prompt`` as MCP's ``Prompt`` object."""
    out: dict[str, Any] = {"name": prompt.name}
    if prompt.title:
        out["title"] = prompt.title
    if prompt.description:
        out["description"] = prompt.description
    arguments = []
    for argument in prompt.arguments:
        entry: dict[str, Any] = {"name": argument.name}
        if argument.title:
            entry["title"] = argument.title
        if argument.description:
            entry["description"] = argument.description
        entry["required"] = argument.required
        arguments.append(entry)
    out["arguments"] = arguments
    if prompt.icons:
        from ..protocols.protobuf import icon_of

        out["icons"] = [icon_of(icon) for icon in prompt.icons]
    return out


def grpc_error(err: GRPCError, trailing_metadata: Any, origin: str) -> Exception:
    """The client exception for a non-OK status (``trailing_metadata``: a mapping or None)."""
    status = err.status
    message = err.message or status.name
    data: Any = None
    raw = trailing_metadata.get(ERROR_DATA_KEY) if trailing_metadata is not None else None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
    if (
        status is Status.UNAVAILABLE
        and isinstance(data, dict)
        and data.get("reason") == wire.STORE_UNAVAILABLE
    ):
        # The server's promise store, down for a moment: retryable, with the
        # retry_after HTTP's 503 gives (-32000, OverloadedError).
        return rpc_error(wire.SERVER_ERROR, message, data, grpc_status=status.value)
    if status in (Status.UNAVAILABLE, Status.CANCELLED):
        return TransportError(f"{origin}: {status.name}: {message}")
    if status is Status.DEADLINE_EXCEEDED:
        return RequestTimeout(f"{origin}: {status.name}: {message}")
    code = _JSONRPC_CODES.get(status, -32603)
    if status is Status.NOT_FOUND and isinstance(data, dict) and "reason" in data:
        code = -32602  # an unknown promise, not an unknown tool
    if status is Status.NOT_FOUND and isinstance(data, dict) and set(data) == {"name"}:
        code = -32602  # an unknown prompt: -32602 on JSON-RPC, as on MCP
    if status is Status.NOT_FOUND and isinstance(data, dict) and "requested_tool" in data:
        message = "Tool not found"  # as on HTTP; the service says "Tool not found: NAME"
    return rpc_error(code, message, data, grpc_status=status.value)


class GrpcTransport:
    """The MCP-lite gRPC binding from the client side (one HTTP/2 connection).

    ``ssl_context`` (which must offer ALPN ``h2``) turns TLS on; ``authorization``
    is the ``authorization`` metadata of every call.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        authorization: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        authority = f"[{host}]" if ":" in host else host
        scheme = "grpcs" if ssl_context is not None else "grpc"
        self.origin = f"{scheme}://{authority}:{port}"
        self._ssl = ssl_context
        self._metadata = {"authorization": authorization} if authorization is not None else None
        self._channel: Channel | None = None

    def _chan(self) -> Channel:
        # Made on first use: grpclib binds the channel to the running loop.
        if self._channel is None:
            self._channel = self._open()
        return self._channel

    def _open(self) -> Channel:
        """A new channel to the server (a subclass may connect otherwise)."""
        if accel.on():
            from .accel.channels import TrackingChannel

            return TrackingChannel(self.host, self.port, ssl=self._ssl, codec=BytesCodec())
        return Channel(self.host, self.port, ssl=self._ssl, codec=BytesCodec())

    async def aclose(self) -> None:
        """Close the channel.  With the client's speed path on (:mod:`.accel`), wait
        (at most a second) until its connection has ended: closing a TLS connection
        takes a close_notify exchange on the event loop, and a loop that ends first
        leaks the socket.  Off (``MCPLITE_ACCEL=0``, or a grpclib it was not tested
        with), just close: grpclib has no public way to wait.  Raises nothing."""
        channel, self._channel = self._channel, None
        if channel is None:
            return
        if accel.on():
            from .accel.channels import TrackingChannel

            if isinstance(channel, TrackingChannel):
                await channel.aclose()
                return
        channel.close()

    def _failure(self, exc: BaseException, stream: Stream[bytes, bytes] | None) -> Exception:
        """The client exception for what grpclib raised."""
        if isinstance(exc, GRPCError):
            metadata = stream.trailing_metadata if stream is not None else None
            return grpc_error(exc, metadata, self.origin)
        if isinstance(exc, TimeoutError):
            return RequestTimeout(f"no answer from {self.origin} in time")
        if isinstance(exc, ConnectionRefusedError):
            return TransportError(f"cannot connect to {self.origin}: Connection refused")
        if isinstance(exc, ssl.SSLError):
            return TransportError(f"cannot connect to {self.origin}: {tls_reason(exc)}")
        if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
            reason = exc.strerror or str(exc)
            return TransportError(f"cannot connect to {self.origin}: {reason}")
        if isinstance(exc, CodecError):
            return TransportError(f"{self.origin} sent a malformed message: {exc}")
        return TransportError(f"connection to {self.origin} broken: {exc or type(exc).__name__}")

    def _request(self, name: str, arguments: dict[str, Any]) -> bytes:
        """A ``ToolRequest``; TransportError for a str protobuf cannot carry."""
        try:
            return encode_tool_request(name, arguments)
        except UnicodeEncodeError:
            # A lone surrogate: JSON can escape it, a protobuf string (UTF-8) cannot.
            raise TransportError(
                f"{self.origin}: gRPC cannot carry a string with a lone surrogate; "
                "use the HTTP binding"
            ) from None

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
        # Discovery reads icons and annotations with the betterproto classes, which
        # load grpclib's server module: imported here, not by every client.
        from ..protocols.protobuf import decode_tools_list

        data = await self._unary("GetTools", b"", timeout)
        try:
            return decode_tools_list(data)
        except CodecError as exc:
            raise self._failure(exc, None) from None

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float, *, idempotent: bool = False
    ) -> dict[str, Any]:
        # HTTP/2 needs no stale-connection retry: grpclib reconnects a lost channel.
        data = await self._unary("CallTool", self._request(name, arguments), timeout)
        try:
            result, meta = decode_tool_response(data)
        except CodecError as exc:
            raise self._failure(exc, None) from None
        if meta is None:
            raise TransportError(f"{self.origin} answered CallTool without meta")
        return result_of(result, meta)

    async def list_prompts(self, timeout: float) -> list[dict[str, Any]]:
        """``GetPrompts``, as MCP ``Prompt`` objects (empty strings left out)."""
        from ..protocols.generated import mcplite as generated

        data = await self._unary("GetPrompts", b"", timeout)
        try:
            listed = generated.PromptsList().parse(data)
        except Exception as exc:
            raise TransportError(f"{self.origin} sent a malformed PromptsList: {exc}") from None
        return [_prompt_definition(p) for p in listed.prompts]

    async def get_prompt(
        self, name: str, arguments: dict[str, str], timeout: float
    ) -> dict[str, Any]:
        """``GetPrompt``, as MCP's ``GetPromptResult``."""
        from ..protocols.generated import mcplite as generated

        try:
            payload = bytes(generated.GetPromptRequest(name=name, arguments=arguments))
        except UnicodeEncodeError:
            raise TransportError(
                f"{self.origin}: gRPC cannot carry a string with a lone surrogate"
            ) from None
        data = await self._unary("GetPrompt", payload, timeout)
        try:
            answer = generated.GetPromptResponse().parse(data)
            messages = [decode_struct(bytes(m)) for m in answer.messages]
        except Exception as exc:
            raise TransportError(
                f"{self.origin} sent a malformed GetPromptResponse: {exc}"
            ) from None
        out: dict[str, Any] = {"messages": messages}
        if answer.description:
            out["description"] = answer.description
        return out

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
