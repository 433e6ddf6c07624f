"""The gRPC binding: spec section 5's ``mcplite.MCPLite`` service on grpclib.

It only translates between the wire and the :class:`Dispatcher` (the one dispatch
path of every binding); it decides nothing about tools.

Messages.  ``CallTool`` and ``CallToolStream`` requests and responses are read and
written by :mod:`mcplite.protocols.protobuf` (the hot path); grpclib only frames bytes: the handlers
declare :class:`RawMessage` as their message type, which passes grpclib's default
``ProtoCodec`` untouched.  ``GetTools`` answers with ``ToolsList`` bytes encoded
once per list of tool definitions.

Streaming.  Each :class:`~mcplite.core.envelope.Partial` becomes a ``ToolResponse`` with
``result = {"partial": value}`` and NO ``meta`` (spec A.4); the final ``Result`` is
the one message with ``meta``.  What the tool reports of its progress
(``ctx.report_progress``) comes between them as a message without ``meta`` too,
``result = {"progress": p, "total": t, "message": m}`` (no ``partial`` key; spec
5.3's "server-pushed updates").  A client that leaves mid-stream stops the tool;
the call is logged ``CANCELLED ... client-gone`` and counted as ``disconnected``.

Prompts.  With a :class:`~mcplite.core.prompts.Prompts` registry (``prompts=``) the
service also answers ``GetPrompts`` (``PromptsList``: MCP's ``Prompt`` objects,
spec 8.1) and ``GetPrompt`` (``GetPromptResponse``: the description and each MCP
``PromptMessage`` as a ``Struct``), through betterproto's generated classes: off
the hot path.  An unknown prompt is ``NOT_FOUND`` (data ``{"name": ...}``), a
missing or invalid argument ``INVALID_ARGUMENT``, as ``prompts/get`` answers -32602
on JSON-RPC (whose handler this reuses).  Without prompts both are
``UNIMPLEMENTED``.

Errors.  An :class:`~mcplite.core.errors.MCPLiteError` becomes its ``grpc_status`` with
its message (``NOT_FOUND`` says ``Tool not found: NAME``; ``INVALID_ARGUMENT``
names each field).  Its structured ``data`` (spec A.5: ``requested_tool``,
``available_tools``, ``suggestion``; ``errors``; ``error_id``; ``retry_after``) goes
in the trailing metadata, twice:

* ``mcplite-error-data``: the data as a compact JSON object (ASCII, so it is a
  legal header value).  Any gRPC client reads it from the trailing metadata, e.g.
  ``json.loads(dict(err.trailing_metadata())["mcplite-error-data"])`` in grpcio.
* ``grpc-status-details-bin``: the standard rich error model, a ``google.rpc.Status``
  with one ``google.rpc.ErrorInfo`` (``domain`` ``"mcplite"``, ``reason`` the error
  class in UPPER_SNAKE such as ``TOOL_NOT_FOUND``, ``metadata`` each data entry,
  non-strings as JSON), as the spec's A.5 sketches; readable with
  ``grpc_status.rpc_status.from_call``.  Sent only when the server uses
  :class:`ErrorDetailsCodec` (as :func:`create_server` does).

Data over :data:`ERROR_DATA_LIMIT` bytes of JSON is cut down (the list of
``available_tools`` is shortened and ``"truncated": true`` added), because clients
reject large trailers (grpcio's default limit is 8 KiB) and would then lose the
status itself.

An unexpected exception becomes ``INTERNAL`` with an error id; the traceback goes
to the ``mcplite.bindings.grpc`` log with that id, never on the wire.

Limits.  A request message over ``max_message_size`` (default 4 MiB, as grpcio's)
is refused with ``RESOURCE_EXHAUSTED`` from its 5-byte length prefix, before its
body is read; a malformed one is ``INVALID_ARGUMENT``, a compressed one
``UNIMPLEMENTED``.  When the client's ``grpc-timeout`` passes before a result,
grpclib cancels the handler (and so the dispatcher's call, which cancels the tool)
and answers ``DEADLINE_EXCEEDED``.

The ``grpc-message`` is percent-encoded as gRPC says, and a leading or trailing
space as ``%20`` too (a header value must not start or end with whitespace).

Serving.  :class:`GrpcServer` is what the CLI runs: ``start(host, port)``, ``port``,
and a graceful ``shutdown(grace)``: new calls are refused with ``UNAVAILABLE``
(which clients retry), calls in flight get ``grace`` seconds, then the rest are
cancelled and the connections closed with a GOAWAY; its health service says
``NOT_SERVING`` from the start of that drain.  :func:`create_server` gives a
bare grpclib ``Server`` for embedding.  Both serve, beside ``mcplite.MCPLite``,
``grpc.health.v1.Health`` (:mod:`.health`) and server reflection (:mod:`.reflection`).  Both are a
:class:`~.connections.LimitedServer`: a connection cap, an idle timeout, and no
rapid-reset leak.

grpclib internals used, each because grpclib 0.4 has no public way (checked on
0.4.9 and covered by tests/test_grpc_service.py and test_grpc_hardening.py):
``Stream._stream`` to read the length prefix before the body; ``Server._server``
to tell the port; ``Stream._send_initial_metadata_done``,
``_send_trailing_metadata_done``, ``_content_type``, ``_status_details_codec`` and
``_dispatch`` to write trailers with a ``grpc-message`` grpclib would leave
malformed; and those listed in :mod:`.connections`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import re
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import betterproto.lib.google.protobuf as wkt
from grpclib.config import Configuration
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.base import StatusDetailsCodecBase
from grpclib.exceptions import GRPCError, ProtocolError
from grpclib.metadata import encode_bin_value, encode_grpc_message, encode_metadata
from grpclib.server import Server, Stream
from multidict import MultiDict

from ..._version import __version__
from ...core.authorize import Gate
from ...core.config import Config
from ...core.context import Caller, RequestContext
from ...core.dispatch import ToolStream
from ...core.envelope import Result
from ...core.errors import MCPLiteError, RateLimited, ShuttingDown, ToolNotFound
from ...core.observe import CLIENT_GONE, AccessLog, Metrics
from ...core.outcomes import Partial, ProgressUpdate
from ...core.prompts import Prompts
from ...core.wire import DEFAULT_MAX_MESSAGE_SIZE, ERROR_DATA_KEY, RESPONSE_TYPE_CODES
from ...protocols._proto import mcplite as generated
from ...protocols.methods import prompt_methods
from ...protocols.protobuf import (
    CodecError,
    ErrorInfo,
    ResponseMeta,
    decode_tool_request,
    encode_rpc_status,
    encode_struct,
    encode_tool_response,
    encode_tools_list,
    icon_message,
)
from .connections import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, LimitedServer
from .health import HealthService
from .messages import read_message
from .reflection import SERVICE_NAMES as REFLECTION_NAMES
from .reflection import ReflectionService

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ERROR_DATA_KEY",
    "ERROR_DATA_LIMIT",
    "DispatcherLike",
    "ErrorDetailsCodec",
    "GrpcServer",
    "MCPLiteService",
    "RawMessage",
    "create_server",
    "response_meta",
]

log = logging.getLogger("mcplite.bindings.grpc")

#: Largest JSON error data sent, in bytes.
ERROR_DATA_LIMIT = 2048

_SERVICE = "/mcplite.MCPLite/"
#: The RPC of each method name the auth checks know it by.
_RPC_NAMES = {
    "tools/list": "GetTools",
    "tools/call": "CallTool",
    "tools/call/stream": "CallToolStream",
    "prompts/list": "GetPrompts",
    "prompts/get": "GetPrompt",
}

_Handler = Callable[[Stream[Any, Any]], Awaitable[None]]
_ContextHandler = Callable[[Stream[Any, Any], RequestContext], Awaitable[None]]


class DispatcherLike(Protocol):
    """What the service needs of :class:`mcplite.core.dispatch.Dispatcher`."""

    auth: Gate | None
    metrics: Metrics
    access_log: AccessLog

    def tool_definitions(self, context: RequestContext = ...) -> list[dict[str, Any]]: ...

    async def call(
        self, name: str, arguments: dict[str, Any] | None, context: RequestContext = ...
    ) -> Result: ...

    def stream(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        context: RequestContext = ...,
        *,
        progress: bool = ...,
    ) -> AsyncIterator[Partial | Result]: ...


class RawMessage:
    """Serialized message bytes that grpclib's ``ProtoCodec`` passes through as they are
    (it only calls ``FromString`` and ``SerializeToString``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    @classmethod
    def FromString(cls, data: bytes) -> RawMessage:
        return cls(data)

    def SerializeToString(self) -> bytes:
        return self.data


class ErrorDetailsCodec(StatusDetailsCodecBase):
    """grpclib status-details codec writing ``grpc-status-details-bin`` as a
    ``google.rpc.Status`` with ``google.rpc.ErrorInfo`` details, by
    :func:`~mcplite.protocols.protobuf.encode_rpc_status` (google.rpc is not in our proto)."""

    def encode(self, status: Status, message: str | None, details: Any) -> bytes:
        infos = [details] if isinstance(details, ErrorInfo) else list(details)
        return encode_rpc_status(status.value, message or "", infos)

    def decode(self, status: Status, message: str | None, data: bytes) -> Any:
        return data  # a server never decodes details


class MCPLiteService:
    """The ``mcplite.MCPLite`` service over a dispatcher, for ``grpclib.server.Server``.

    ``max_message_size`` bounds a request message in bytes (RESOURCE_EXHAUSTED above).
    """

    def __init__(
        self,
        dispatcher: DispatcherLike,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        prompts: Prompts | None = None,
        access_log: bool = False,
    ) -> None:
        if max_message_size < 0:
            raise ValueError("max_message_size must not be negative")
        self._dispatcher = dispatcher
        self._access_log = access_log
        self._prompts = prompts
        self._prompt_get = None if prompts is None else prompt_methods(prompts)["prompts/get"]
        self._max_message_size = max_message_size
        self._tool_definitions: list[dict[str, Any]] | None = None
        self._tools_list = b""
        self._active: set[asyncio.Task[Any]] = set()
        self.draining = False
        self._closing = False

    def __mapping__(self) -> dict[str, Handler]:
        mapping = {
            _SERVICE + "GetTools": Handler(
                self._tracked(self._get_tools, "tools/list"),
                Cardinality.UNARY_UNARY,
                RawMessage,
                RawMessage,
            ),
            _SERVICE + "CallTool": Handler(
                self._tracked(self._call_tool, "tools/call"),
                Cardinality.UNARY_UNARY,
                RawMessage,
                RawMessage,
            ),
            _SERVICE + "CallToolStream": Handler(
                self._tracked(self._call_tool_stream, "tools/call/stream"),
                Cardinality.UNARY_STREAM,
                RawMessage,
                RawMessage,
            ),
        }
        if self._prompts is not None:
            mapping[_SERVICE + "GetPrompts"] = Handler(
                self._tracked(self._get_prompts, "prompts/list"),
                Cardinality.UNARY_UNARY,
                RawMessage,
                RawMessage,
            )
            mapping[_SERVICE + "GetPrompt"] = Handler(
                self._tracked(self._get_prompt, "prompts/get"),
                Cardinality.UNARY_UNARY,
                RawMessage,
                RawMessage,
            )
        return mapping

    async def drain(self, grace: float) -> bool:
        """Refuse new calls (UNAVAILABLE, which clients retry) and wait up to ``grace``
        seconds for the calls in flight; True if none is left."""
        self.draining = True
        if self._active:
            await asyncio.wait(set(self._active), timeout=grace)
        if self._active:
            # Grace is over: end each call with UNAVAILABLE "Server is shutting
            # down" (a stream's final word) rather than a bare reset.
            self._closing = True
            for task in self._active:
                task.cancel()
            await asyncio.wait(set(self._active), timeout=1.0)
        return not self._active

    def _tracked(self, handler: _ContextHandler, method: str) -> _Handler:
        """``handler`` refusing calls while draining, counted while it runs, and
        given the request's context (with its caller, once authenticated)."""

        path = _SERVICE + _RPC_NAMES[method]

        async def run(stream: Stream[RawMessage, RawMessage]) -> None:
            t0 = time.perf_counter()
            if self.draining:
                self._observe(stream, path, "UNAVAILABLE", "shutting_down", t0)
                raise GRPCError(Status.UNAVAILABLE, "the server is shutting down")
            task = asyncio.current_task()
            assert task is not None
            self._active.add(task)
            status, reason, outcome = "OK", None, None
            try:
                context = _context(stream)
                auth = self._dispatcher.auth
                if auth is not None:
                    try:
                        context = await _authenticated(auth, context, method)
                    except MCPLiteError as err:
                        await _send_error(stream, err)
                        return
                await handler(stream, context)
            except GRPCError as exc:
                status = exc.status.name
                if exc.status is Status.RESOURCE_EXHAUSTED:  # only a message over the limit
                    reason = "too_large"
                raise
            except asyncio.CancelledError:
                status = "CANCELLED"
                if not self._closing:
                    if _deadline_passed(stream):
                        status = "DEADLINE_EXCEEDED"  # what grpclib answers then
                    else:
                        outcome = CLIENT_GONE
                    raise
                task.uncancel()
                await _send_error(stream, ShuttingDown())
            finally:
                self._active.discard(task)
                status = getattr(stream, "_mcplite_status", status)
                reason = getattr(stream, "_mcplite_reason", reason)
                self._observe(stream, path, status, reason, t0, outcome)

        return run

    def _observe(
        self,
        stream: Stream[Any, Any],
        path: str,
        status: str,
        reason: str | None,
        t0: float,
        outcome: str | None = None,
    ) -> None:
        """The metrics and the access line of an RPC (``outcome``: ``client-gone``
        when the client cancelled it or went away)."""
        metrics = self._dispatcher.metrics
        if metrics.on:
            metrics.request("grpc", status, reason)
        if self._access_log:
            peer = stream.peer.addr()
            tool = getattr(stream, "_mcplite_tool", None)
            elapsed = (time.perf_counter() - t0) * 1000
            self._dispatcher.access_log.write(
                "grpc", "POST", path, tool, status, elapsed, peer, outcome
            )

    # --- handlers ---------------------------------------------------------------

    async def _get_tools(
        self, stream: Stream[RawMessage, RawMessage], context: RequestContext
    ) -> None:
        await self._recv_request(stream)  # Empty: nothing to read in it
        try:
            definitions = self._dispatcher.tool_definitions(context)
            # The dispatcher caches its list; encode again only when it is a new one.
            if definitions is not self._tool_definitions:
                self._tools_list = encode_tools_list(definitions)
                self._tool_definitions = definitions
        except Exception:
            await self._send_unexpected(stream, "GetTools")
            return
        await stream.send_message(RawMessage(self._tools_list))

    async def _call_tool(
        self, stream: Stream[RawMessage, RawMessage], context: RequestContext
    ) -> None:
        name, arguments = _decode_request(await self._recv_request(stream))
        stream._mcplite_tool = name  # type: ignore[attr-defined]  # for the access log
        try:
            result = await self._dispatcher.call(name, arguments, context)
            response = encode_tool_response(result.body, response_meta(result))
        except MCPLiteError as err:
            await _send_error(stream, err)
            return
        except Exception:
            await self._send_unexpected(stream, "CallTool")
            return
        await stream.send_message(RawMessage(response))

    async def _call_tool_stream(
        self, stream: Stream[RawMessage, RawMessage], context: RequestContext
    ) -> None:
        name, arguments = _decode_request(await self._recv_request(stream))
        stream._mcplite_tool = name  # type: ignore[attr-defined]  # for the access log
        parts: AsyncIterator[Partial | Result] | None = None
        gone = False
        try:
            parts = self._dispatcher.stream(name, arguments, context, progress=True)
            while True:
                try:
                    item = await _next_item(parts)
                except StopAsyncIteration:
                    break
                if isinstance(item, Partial):
                    message = encode_tool_response({"partial": item.value}, None)
                elif isinstance(item, ProgressUpdate):
                    message = encode_tool_response(item.to_json(), None)
                else:
                    message = encode_tool_response(item.body, response_meta(item))
                await stream.send_message(RawMessage(message))
        except MCPLiteError as err:
            await _send_error(stream, err)
        except asyncio.CancelledError:
            gone = not self._closing and not _deadline_passed(stream)
            raise
        except Exception:
            await self._send_unexpected(stream, "CallToolStream")
        finally:
            # Stop the tool when we stop early (error, cancellation, client gone).
            if isinstance(parts, ToolStream):
                await parts.aclose(disconnected=gone)
            else:
                aclose = getattr(parts, "aclose", None)
                if aclose is not None:
                    await aclose()

    async def _get_prompts(self, stream: Stream[RawMessage, RawMessage], _: RequestContext) -> None:
        await self._recv_request(stream)  # Empty
        assert self._prompts is not None
        try:
            listed = generated.PromptsList(
                prompts=[_prompt_message(p) for p in self._prompts.definitions()]
            )
            response = bytes(listed)
        except Exception:
            await self._send_unexpected(stream, "GetPrompts")
            return
        await stream.send_message(RawMessage(response))

    async def _get_prompt(
        self, stream: Stream[RawMessage, RawMessage], context: RequestContext
    ) -> None:
        data = await self._recv_request(stream)
        assert self._prompts is not None and self._prompt_get is not None
        try:
            request = generated.GetPromptRequest().parse(data)
        except Exception:
            raise GRPCError(Status.INVALID_ARGUMENT, "malformed GetPromptRequest") from None
        if self._prompts.get(request.name) is None:
            name = request.name
            data_ = {"name": name}
            await _send_status(
                stream, Status.NOT_FOUND, f"Unknown prompt: {name}", "PROMPT_NOT_FOUND", data_
            )
            return
        params = {"name": request.name, "arguments": dict(request.arguments)}
        try:
            result = await self._prompt_get.handler(params, context)
            response = bytes(
                generated.GetPromptResponse(
                    description=result.get("description") or "",
                    messages=[
                        wkt.Struct().parse(encode_struct(m)) for m in result.get("messages", [])
                    ],
                )
            )
        except MCPLiteError as err:
            await _send_error(stream, err)
            return
        except Exception:
            await self._send_unexpected(stream, "GetPrompt")
            return
        await stream.send_message(RawMessage(response))

    # --- helpers ----------------------------------------------------------------

    async def _recv_request(self, stream: Stream[RawMessage, RawMessage]) -> bytes:
        """Read the one request message, refusing an oversized one by its prefix
        (:func:`~.messages.read_message`).  Raises GRPCError."""
        data = await read_message(stream, self._max_message_size)
        if data is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "missing request message")
        return data

    async def _send_unexpected(self, stream: Stream[RawMessage, RawMessage], method: str) -> None:
        error_id = secrets.token_hex(6)
        log.exception(
            "unexpected error in gRPC %s (error id %s)",
            method,
            error_id,
            extra={"error_id": error_id},
        )
        await _send_status(
            stream,
            Status.INTERNAL,
            f"Internal error (error id {error_id})",
            "INTERNAL_ERROR",
            {"error_id": error_id},
        )


async def _next_item(parts: AsyncIterator[Partial | Result]) -> Partial | ProgressUpdate | Result:
    """A stream's next item, progress reports included (a ToolStream's ``next``
    gives them; iterating it skips them).  Raises StopAsyncIteration at the end."""
    if isinstance(parts, ToolStream):
        item = await parts.next()
        assert item is not None
        return item
    return await anext(parts)


def _deadline_passed(stream: Stream[Any, Any]) -> bool:
    """Whether the client's ``grpc-timeout`` has run out (grpclib then cancels the
    handler, as it does when the client cancels or goes away)."""
    deadline = stream.deadline
    return deadline is not None and deadline.time_remaining() <= 0


def _context(stream: Stream[Any, Any]) -> RequestContext:
    """The request context of a call: its peer and its (text) metadata."""
    peer = stream.peer.addr()
    metadata: Mapping[str, Any] = stream.metadata or {}
    headers = MappingProxyType({k.lower(): v for k, v in metadata.items() if isinstance(v, str)})
    return RequestContext("grpc", peer if isinstance(peer, tuple) else None, headers)


async def _authenticated(auth: Gate, context: RequestContext, method: str) -> RequestContext:
    """``context`` with its caller, from the ``authorization`` metadata; raises
    Unauthenticated (UNAUTHENTICATED) or RateLimited (RESOURCE_EXHAUSTED)."""
    found = auth.authenticate(context.headers.get("authorization"))
    caller = found if found is None or isinstance(found, Caller) else await found()
    context = dataclasses.replace(context, caller=caller)
    auth.admit(context, method)
    auth.limit(caller, context.peer)
    return context


def _prompt_message(definition: Mapping[str, Any]) -> generated.Prompt:
    """An MCP ``Prompt`` object as the proto's ``Prompt``."""
    return generated.Prompt(
        name=definition["name"],
        description=definition.get("description") or "",
        title=definition.get("title") or "",
        arguments=[
            generated.PromptArgument(
                name=a["name"],
                description=a.get("description") or "",
                required=bool(a.get("required", False)),
                title=a.get("title") or "",
            )
            for a in definition.get("arguments", [])
        ],
        icons=[icon_message(icon) for icon in definition.get("icons", ())],
    )


def _decode_request(data: bytes) -> tuple[str, dict[str, Any]]:
    """``ToolRequest`` bytes to ``(name, arguments)``; GRPCError INVALID_ARGUMENT if malformed."""
    try:
        return decode_tool_request(data)
    except CodecError as err:
        raise GRPCError(Status.INVALID_ARGUMENT, str(err)) from None


def response_meta(result: Result) -> ResponseMeta:
    """The ``ResponseMeta`` of a result (the gRPC form of ``Result.meta()``).

    ``extra_meta["promise_token"]`` and ``["expires_at"]`` (ISO 8601, datetime or
    epoch seconds) get their typed fields; every other entry goes to ``extra``.
    """
    token = ""
    expires_at = 0
    extra: dict[str, Any] | None = None
    if result.extra_meta:
        extra = dict(result.extra_meta)
        token = str(extra.pop("promise_token", "") or "")
        if "expires_at" in extra:
            millis = _epoch_ms(extra["expires_at"])
            if millis is not None:
                expires_at = millis
                del extra["expires_at"]
    elapsed = round(result.processing_time_ms)
    return ResponseMeta(
        response_type=RESPONSE_TYPE_CODES[result.response_type.value],
        promise_token=token,
        timestamp=int(result.timestamp * 1000),
        processing_time_ms=min(max(elapsed, 0), 2**31 - 1),
        server_version=__version__,
        expires_at=expires_at,
        extra=extra or None,
    )


def _epoch_ms(moment: Any) -> int | None:
    """Epoch milliseconds of an ISO 8601 string, a datetime or epoch seconds, else None."""
    if isinstance(moment, str):
        try:
            moment = datetime.datetime.fromisoformat(moment)
        except ValueError:
            return None
    if isinstance(moment, datetime.datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return int(moment.timestamp() * 1000)
    if isinstance(moment, int | float) and not isinstance(moment, bool):
        return int(moment * 1000)
    return None


async def _send_error(stream: Stream[Any, Any], err: MCPLiteError) -> None:
    """End a call with the gRPC status of ``err``, its data in trailing metadata."""
    message = err.message
    if isinstance(err, ToolNotFound):
        message = f"Tool not found: {err.name}"
    if isinstance(err, RateLimited):
        stream._mcplite_reason = "rate_limited"  # type: ignore[attr-defined]  # for metrics
    await _send_status(
        stream, Status(err.grpc_status), message, _reason(type(err).__name__), err.data
    )


async def _send_status(
    stream: Stream[Any, Any],
    status: Status,
    message: str,
    reason: str,
    data: Mapping[str, Any] | None,
) -> None:
    stream._mcplite_status = status.name  # type: ignore[attr-defined]  # for metrics and logs
    metadata: dict[str, str | bytes] = {}
    details = None
    if data:
        text, data = _error_data_json(data)
        metadata[ERROR_DATA_KEY] = text
        if isinstance(getattr(stream, "_status_details_codec", None), ErrorDetailsCodec):
            # Only our codec knows ErrorInfo; grpclib's protobuf one would choke on it.
            details = ErrorInfo(reason, "mcplite", _string_map(data))
    if message[:1] == " " or message[-1:] == " ":  # e.g. "Tool not found: " for name ""
        await _send_trailers(stream, status, message, details, metadata)
        return
    await stream.send_trailing_metadata(
        status=status, status_message=message, status_details=details, metadata=metadata
    )


def _grpc_message(message: str) -> str:
    """The ``grpc-message`` header value of a status message.

    Percent-encoded as gRPC's PROTOCOL-HTTP2.md says (UTF-8, then every byte outside
    0x20-0x7E and ``%`` itself), which grpclib's ``encode_grpc_message`` does, plus a
    leading or trailing space as ``%20``: RFC 9113 section 8.2.1 makes a field value
    with whitespace at either end malformed, and strict HTTP/2 clients then lose the
    status.  Decoders read ``%20`` as a space, so the message arrives intact.
    """
    value = encode_grpc_message(message)
    head = len(value) - len(value.lstrip(" "))
    if head:
        value = "%20" * head + value[head:]
    tail = len(value) - len(value.rstrip(" "))
    if tail:
        value = value[:-tail] + "%20" * tail
    return value


async def _send_trailers(
    stream: Stream[Any, Any],
    status: Status,
    message: str,
    details: Any,
    metadata: dict[str, str | bytes],
) -> None:
    """grpclib's ``Stream.send_trailing_metadata`` (0.4.9) with ``grpc-message`` written
    by :func:`_grpc_message`: grpclib leaves a leading or trailing space bare.  Used only
    for such messages; the stream's state is grpclib's, kept as grpclib keeps it."""
    if stream._send_trailing_metadata_done:
        raise ProtocolError("Trailing metadata was already sent")
    if stream._send_initial_metadata_done:
        headers: list[tuple[str, str]] = []
    else:  # a trailers-only response
        headers = [(":status", "200"), ("content-type", stream._content_type)]
    headers.append(("grpc-status", str(status.value)))
    headers.append(("grpc-message", _grpc_message(message)))
    codec = stream._status_details_codec
    if details is not None and codec is not None:
        encoded = encode_bin_value(codec.encode(status, message, details)).decode("ascii")
        headers.append(("grpc-status-details-bin", encoded))
    (sent,) = await stream._dispatch.send_trailing_metadata(
        MultiDict(metadata), status=status, status_message=message, status_details=details
    )
    headers.extend(encode_metadata(sent))
    h2_stream = stream._stream
    await h2_stream.send_headers(headers, end_stream=True)
    stream._send_trailing_metadata_done = True
    if h2_stream.closable:
        h2_stream.reset_nowait()


def _error_data_json(data: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """Compact ASCII JSON of ``data``, cut down to ERROR_DATA_LIMIT; and the data sent."""
    text = _json(data)
    if len(text) <= ERROR_DATA_LIMIT:
        return text, data
    trimmed = dict(data)
    trimmed["truncated"] = True
    tools = trimmed.get("available_tools")
    if isinstance(tools, Sequence) and not isinstance(tools, str):
        kept = list(tools)
        while kept:
            kept = kept[: len(kept) // 2]
            trimmed["available_tools"] = kept
            text = _json(trimmed)
            if len(text) <= ERROR_DATA_LIMIT:
                return text, trimmed
    trimmed = {"truncated": True}
    return _json(trimmed), trimmed


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, default=str)


def _string_map(data: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(key): value if isinstance(value, str) else _json(value) for key, value in data.items()
    }


def _reason(class_name: str) -> str:
    """``ToolNotFound`` -> ``TOOL_NOT_FOUND`` (google.rpc.ErrorInfo's reason style)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).upper()


class GrpcServer:
    """The gRPC binding as the CLI runs it: listen, tell the port, shut down gracefully.

    Uses ``config.grpc_max_message_size``, ``grpc_idle_timeout``,
    ``grpc_max_connections`` and ``grace``.  grpclib keeps h2's default of 100
    concurrent streams per connection.
    """

    name = "gRPC"

    def __init__(
        self,
        dispatcher: DispatcherLike,
        config: Config | None = None,
        *,
        prompts: Prompts | None = None,
    ) -> None:
        self.config = config or Config()
        self.dispatcher = dispatcher
        self.service = MCPLiteService(
            dispatcher,
            max_message_size=self.config.grpc_max_message_size,
            prompts=prompts,
            access_log=self.config.access_log,
        )
        self.health, self._served = _assemble(self.service, self.config.grpc_max_message_size)
        self._server: LimitedServer | None = None
        self._host = "127.0.0.1"
        self._tls: ssl.SSLContext | None = None

    async def start(
        self,
        host: str | None = None,
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        reuse_port: bool = False,
    ) -> asyncio.Server:
        """Listen on ``host:port`` (port 0: an ephemeral one; see :attr:`port`), or on
        an already-bound ``sock``; return the listening server.

        Raises OSError when the address cannot be bound.
        """
        self._server = LimitedServer(
            self._served,
            status_details_codec=ErrorDetailsCodec(),
            idle_timeout=self.config.grpc_idle_timeout,
            max_connections=self.config.grpc_max_connections,
            metrics=self.dispatcher.metrics,
        )
        self._tls = tls = self.config.server_ssl_context(alpn=("h2",))
        # The listen queue of HTTP's: a burst waits there (serve.ACCEPTS_PER_TURN a
        # turn are taken) instead of its SYNs being dropped and retried a second later.
        if sock is not None:
            await self._server.start(sock=sock, ssl=tls, backlog=1024)
            self._host = sock.getsockname()[0]
        else:
            await self._server.start(
                host, port, reuse_port=reuse_port or None, ssl=tls, backlog=1024
            )
            self._host = host or "0.0.0.0"
        listening = self._server._server
        assert isinstance(listening, asyncio.Server)
        return listening

    def connection(self) -> asyncio.Protocol:
        """The server side of one new connection, as :meth:`start` makes one for each
        socket it accepts: for a transport made elsewhere, such as the in-memory pairs
        of :mod:`mcplite.testing`.  Before :meth:`start`, each such connection gets a
        server of its own with no listener, which ends with it (close the transport
        to end it).  Call it in the running event loop."""
        server = self._server
        if server is None:
            server = LimitedServer(
                self._served,
                status_details_codec=ErrorDetailsCodec(),
                idle_timeout=self.config.grpc_idle_timeout,
                max_connections=self.config.grpc_max_connections,
                metrics=self.dispatcher.metrics,
            )
        return server._protocol_factory()

    def connection_count(self) -> int:
        return len(self._server.connections) if self._server is not None else 0

    def url(self) -> str:
        scheme = "grpcs" if self._tls is not None else "grpc"
        return f"{scheme}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The port listened on (grpclib keeps its asyncio server in ``_server``)."""
        assert self._server is not None, "not started"
        listening = self._server._server
        assert isinstance(listening, asyncio.Server), "not started"
        port: int = listening.sockets[0].getsockname()[1]
        return port

    async def shutdown(self, grace: float | None = None) -> None:
        """:meth:`drain` within ``grace`` seconds (default ``config.grace``), then :meth:`close`."""
        await self.drain(self.config.grace if grace is None else grace)
        await self.close()

    async def drain(self, grace: float) -> None:
        """Refuse new calls (UNAVAILABLE), let calls in flight finish within ``grace``
        seconds; open streams then get UNAVAILABLE "Server is shutting down".  The
        health service says NOT_SERVING from the start of the drain."""
        self.health.drain()
        if self._server is not None:
            await self.service.drain(grace)

    async def close(self) -> None:
        """Close the listener and every connection (GOAWAY); cancel what is left."""
        if self._server is None:
            return
        await self.health.close()  # health watches end with UNAVAILABLE
        self._server.close()  # and its connections
        # grpclib waits for the cancelled handlers; a tool deaf to cancellation
        # must not hold the shutdown forever.
        try:
            await asyncio.wait_for(self._server.wait_closed(), timeout=1.0)
        except TimeoutError:
            log.warning("gRPC calls still running after shutdown; abandoning them")
        self._server = None


def create_server(
    dispatcher: DispatcherLike,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    config: Configuration | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    prompts: Prompts | None = None,
) -> Server:
    """A grpclib Server with the MCPLite service (and the health and reflection services,
    :func:`_assemble`) and :class:`ErrorDetailsCodec`, whose
    ``close()`` also closes the clients' connections (grpclib's leaves them open), with
    a connection cap and an idle timeout (:class:`~.connections.LimitedServer`).

    Call it inside the running event loop; then ``await server.start(host, port)``.
    For a graceful shutdown use :class:`GrpcServer`.
    """
    service = MCPLiteService(dispatcher, max_message_size=max_message_size, prompts=prompts)
    return LimitedServer(
        _assemble(service, max_message_size)[1],
        status_details_codec=ErrorDetailsCodec(),
        config=config,
        idle_timeout=idle_timeout,
        max_connections=max_connections,
    )


def _assemble(service: MCPLiteService, max_message_size: int) -> tuple[HealthService, list[Any]]:
    """What a server serves: ``service`` and, beside it, the standard health service
    (for ``""`` and ``service``'s name; returned too, for the lifecycle to drive)
    and server reflection, which lists all three."""
    names = _service_names(service)
    health = HealthService(names, max_message_size=max_message_size)
    listed = names | _service_names(health) | set(REFLECTION_NAMES)
    reflection = ReflectionService(listed, max_message_size=max_message_size)
    return health, [service, health, reflection]


def _service_names(service: Any) -> set[str]:
    """``{"mcplite.MCPLite"}`` of a service whose methods are ``/mcplite.MCPLite/...``."""
    return {path.split("/")[1] for path in service.__mapping__()}
