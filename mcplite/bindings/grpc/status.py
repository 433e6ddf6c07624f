"""How a gRPC call ends when it fails: an error's status, message and data, in one place.

An :class:`~mcplite.core.errors.MCPLiteError` becomes its ``grpc_status`` with its
message (``NOT_FOUND`` says ``Tool not found: NAME``; ``INVALID_ARGUMENT`` names
each field).  Its structured ``data`` (spec A.5: ``requested_tool``,
``available_tools``, ``suggestion``; ``errors``; ``error_id``; ``retry_after``) goes
in the trailing metadata, twice:

* ``mcplite-error-data``: the data as a compact JSON object (ASCII, so it is a
  legal header value).  Any gRPC client reads it from the trailing metadata, e.g.
  ``json.loads(dict(err.trailing_metadata())["mcplite-error-data"])`` in grpcio.
* ``grpc-status-details-bin``: the standard rich error model, a ``google.rpc.Status``
  with one ``google.rpc.ErrorInfo`` (``domain`` ``"mcplite"``, ``reason`` the error
  class in UPPER_SNAKE such as ``TOOL_NOT_FOUND``, ``metadata`` each data entry,
  non-strings as JSON), as the spec's A.5 sketches; readable with
  ``grpc_status.rpc_status.from_call``.  Sent only when the server encodes status
  details with :class:`ErrorDetailsCodec` (as :func:`~.service.create_server`'s
  does), which the :class:`StatusSender` is told.

Data over :data:`ERROR_DATA_LIMIT` bytes of JSON is cut down (the list of
``available_tools`` is shortened and ``"truncated": true`` added), because clients
reject large trailers (grpcio's default limit is 8 KiB) and would then lose the
status itself.

An unexpected exception becomes ``INTERNAL`` with an error id; the traceback goes
to the ``mcplite.bindings.grpc`` log with that id, never on the wire.

The ``grpc-message`` is percent-encoded as gRPC says (grpclib does it), and a
leading or trailing space as ``%20`` too (:func:`grpc_message`): a header value
must not start or end with whitespace.  grpclib's public API writes such a space
bare, so that takes the speed paths' :func:`.accel.trailers.send_trailers`; on
the plain path the message is sent with those spaces trimmed instead
(``Tool not found:`` for a tool named ``""``; the name itself is in the data).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from grpclib.const import Status
from grpclib.encoding.base import StatusDetailsCodecBase
from grpclib.metadata import encode_grpc_message
from grpclib.server import Stream

from ...core.errors import MCPLiteError, RateLimited, StoreUnavailable, ToolNotFound
from ...core.wire import ERROR_DATA_KEY
from ...protocols.protobuf import ErrorInfo, encode_rpc_status

__all__ = [
    "ERROR_DATA_LIMIT",
    "ErrorDetailsCodec",
    "SendSpaced",
    "StatusSender",
    "Trailers",
    "grpc_message",
    "send_trimmed",
]

log = logging.getLogger("mcplite.bindings.grpc")

#: Largest JSON error data sent, in bytes.
ERROR_DATA_LIMIT = 2048


#: How a path ends a call whose status message has a space at either end:
#: ``(stream, status, message, details, metadata)``.
@dataclasses.dataclass(frozen=True, slots=True)
class Trailers:
    """What ends a call: its status, message, ErrorInfo details and metadata."""

    status: Status
    message: str
    details: Any
    metadata: dict[str, str | bytes]


SendSpaced = Callable[[Stream[Any, Any], Trailers], Awaitable[None]]


class ErrorDetailsCodec(StatusDetailsCodecBase):
    """grpclib status-details codec writing ``grpc-status-details-bin`` as a
    ``google.rpc.Status`` with ``google.rpc.ErrorInfo`` details, by
    :func:`~mcplite.protocols.protobuf.encode_rpc_status` (google.rpc is not in our proto)."""

    def encode(self, status: Status, message: str | None, details: Any) -> bytes:
        infos = [details] if isinstance(details, ErrorInfo) else list(details)
        return encode_rpc_status(status.value, message or "", infos)

    def decode(self, status: Status, message: str | None, data: bytes) -> Any:
        return data  # a server never decodes details


class StatusSender:
    """Ends calls with a status, its message and its data in the trailing metadata.

    ``error_details``: whether the server encodes status details with
    :class:`ErrorDetailsCodec` (only that codec knows ``ErrorInfo``; grpclib's
    protobuf one would fail on it).  ``send_spaced``: the path's way to send a
    message with a space at either end (see the module docstring).
    """

    def __init__(self, *, error_details: bool, send_spaced: SendSpaced) -> None:
        self.error_details = error_details
        self._send_spaced = send_spaced

    async def error(self, stream: Stream[Any, Any], err: MCPLiteError) -> None:
        """End a call with the gRPC status of ``err``, its data in trailing metadata."""
        message = err.message
        if isinstance(err, ToolNotFound):
            message = f"Tool not found: {err.name}"
        if isinstance(err, RateLimited):
            stream._mcplite_reason = "rate_limited"  # type: ignore[attr-defined]  # for metrics
        elif isinstance(err, StoreUnavailable):  # UNAVAILABLE, as HTTP's 503: not a drain
            stream._mcplite_reason = "overloaded"  # type: ignore[attr-defined]
        await self.status(
            stream, Status(err.grpc_status), message, _reason(type(err).__name__), err.data
        )

    async def unexpected(self, stream: Stream[Any, Any], method: str) -> None:
        """End a call with INTERNAL and an error id, logging the exception being handled."""
        error_id = secrets.token_hex(6)
        log.exception(
            "unexpected error in gRPC %s (error id %s)",
            method,
            error_id,
            extra={"error_id": error_id},
        )
        await self.status(
            stream,
            Status.INTERNAL,
            f"Internal error (error id {error_id})",
            "INTERNAL_ERROR",
            {"error_id": error_id},
        )

    async def status(
        self,
        stream: Stream[Any, Any],
        status: Status,
        message: str,
        reason: str,
        data: Mapping[str, Any] | None,
    ) -> None:
        """End a call with ``status`` and ``message``; ``data`` (with the ErrorInfo
        ``reason``) in the trailing metadata."""
        stream._mcplite_status = status.name  # type: ignore[attr-defined]  # for metrics and logs
        metadata: dict[str, str | bytes] = {}
        details = None
        if data:
            text, data = _error_data_json(data)
            metadata[ERROR_DATA_KEY] = text
            if self.error_details:
                details = ErrorInfo(reason, "mcplite", _string_map(data))
        if message[:1] == " " or message[-1:] == " ":  # e.g. "Tool not found: " for name ""
            await self._send_spaced(stream, Trailers(status, message, details, metadata))
            return
        await stream.send_trailing_metadata(
            status=status, status_message=message, status_details=details, metadata=metadata
        )


async def send_trimmed(stream: Stream[Any, Any], trailers: Trailers) -> None:
    """The plain path's :data:`SendSpaced`: the message without its spaces at either
    end, by grpclib's public ``send_trailing_metadata``."""
    await stream.send_trailing_metadata(
        status=trailers.status,
        status_message=trailers.message.strip(" "),
        status_details=trailers.details,
        metadata=trailers.metadata,
    )


def grpc_message(message: str) -> str:
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
