"""``ToolRequest`` and ``ToolResponse`` (with its ``ResponseMeta``): the messages of
every call, the hot path of mcplite's protobuf codec.

Written from the field tags of :mod:`mcplite.protocols.prototags` alone, without
the betterproto classes, so a client that only calls tools loads neither them
nor grpclib's server.  Import them from :mod:`mcplite.protocols.protobuf`, which
has the rest of the codec (see there for what decoding accepts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .protostruct import (
    Pieces,
    encode_struct,
    read_struct,
    struct_payload,
    write_struct,
)
from .prototags import (
    META_EXPIRES_AT,
    META_EXPIRES_AT_B,
    META_EXTRA,
    META_EXTRA_B,
    META_PROCESSING_TIME_MS,
    META_PROCESSING_TIME_MS_B,
    META_PROMISE_TOKEN,
    META_PROMISE_TOKEN_B,
    META_RESPONSE_TYPE,
    META_RESPONSE_TYPE_B,
    META_SERVER_VERSION,
    META_SERVER_VERSION_B,
    META_TIMESTAMP,
    META_TIMESTAMP_B,
    REQUEST_ARGUMENTS,
    REQUEST_ARGUMENTS_B,
    REQUEST_NAME,
    REQUEST_NAME_B,
    RESPONSE_META,
    RESPONSE_META_B,
    RESPONSE_RESULT,
    RESPONSE_RESULT_B,
)
from .protowire import (
    MALFORMED,
    as_bytes,
    iter_fields,
    length_delimited,
    malformed,
    read_length,
    signed,
    skip_field,
    text_field,
    varint,
    varint_tail,
)

__all__ = [
    "ResponseMeta",
    "decode_tool_request",
    "decode_tool_response",
    "encode_tool_request",
    "encode_tool_response",
]


@dataclass(frozen=True, slots=True)
class ResponseMeta:
    """``mcplite.ResponseMeta``; fields 5 to 7 are mcplite additions (see the proto)."""

    #: A ``ResponseType`` number (0: ANSWER); a newer server's unknown one is kept.
    response_type: int = 0
    promise_token: str = ""
    timestamp: int = 0  # epoch milliseconds (int64)
    processing_time_ms: int = 0  # int32
    server_version: str = ""
    expires_at: int = 0  # epoch milliseconds (int64)
    extra: dict[str, Any] | None = None  # other _meta entries, a Struct


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1


# --- ToolRequest ---------------------------------------------------------------------


def decode_tool_request(data: bytes | bytearray | memoryview) -> tuple[str, dict[str, Any]]:
    """Parse ``ToolRequest`` bytes into ``(name, arguments)``.

    Absent ``arguments`` give ``{}``.  Raises CodecError for malformed bytes.
    """
    raw = as_bytes(data)
    end = len(raw)
    name = ""
    arguments: dict[str, Any] = {}
    i = 0
    try:
        while i < end:
            tag = raw[i]
            i += 1
            if tag >= 0x80:
                tag, i = varint_tail(raw, i, tag)
            if tag == REQUEST_NAME:
                start, i = read_length(raw, i, end)
                name = raw[start:i].decode()
            elif tag == REQUEST_ARGUMENTS:  # a repeated message field merges, as in protobuf
                start, i = read_length(raw, i, end)
                read_struct(raw, start, i, 1, arguments)
            else:
                i = skip_field(raw, i, end, tag)
    except MALFORMED as exc:
        raise malformed("ToolRequest", exc) from None
    return name, arguments


def encode_tool_request(name: str, arguments: Mapping[Any, Any] | None = None) -> bytes:
    """Serialize a ``ToolRequest`` (for clients and tests). Raises as encode_struct."""
    out = text_field(REQUEST_NAME_B, name) if name else b""
    if arguments is not None:
        out += length_delimited(REQUEST_ARGUMENTS_B, encode_struct(arguments))
    return out


# --- ToolResponse --------------------------------------------------------------------


def _int64(tag: bytes, number: int) -> bytes:
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ValueError(f"{number} is out of the int64 range")
    return tag + varint(number)


def _enc_meta(meta: ResponseMeta) -> bytes:
    out = b""
    if meta.response_type:
        out += META_RESPONSE_TYPE_B + varint(int(meta.response_type))
    if meta.promise_token:
        out += text_field(META_PROMISE_TOKEN_B, meta.promise_token)
    if meta.timestamp:
        out += _int64(META_TIMESTAMP_B, meta.timestamp)
    if meta.processing_time_ms:
        if not _INT32_MIN <= meta.processing_time_ms <= _INT32_MAX:
            raise ValueError(f"processing_time_ms {meta.processing_time_ms} is out of int32 range")
        out += META_PROCESSING_TIME_MS_B + varint(meta.processing_time_ms)
    if meta.server_version:
        out += text_field(META_SERVER_VERSION_B, meta.server_version)
    if meta.expires_at:
        out += _int64(META_EXPIRES_AT_B, meta.expires_at)
    if meta.extra:
        out += length_delimited(META_EXTRA_B, write_struct(meta.extra, 1))
    return out


def encode_tool_response(result: Mapping[Any, Any] | None, meta: ResponseMeta | None) -> bytes:
    """Serialize a ``ToolResponse``.

    ``result`` None leaves the field unset; ``{}`` sets an empty Struct.  ``meta``
    None leaves meta unset, as on a streamed part.  Raises as :func:`encode_struct`,
    and ValueError for a meta number out of its int32/int64 range.
    """
    out = b""
    if result is not None:
        if type(result) is not dict and not isinstance(result, Mapping):
            raise TypeError(f"a Struct is made from a dict, not {type(result).__name__}")
        payload = struct_payload(result, 1)
        if isinstance(payload, Pieces):  # a long one: its pieces and the meta joined once
            pieces = payload.prefixed(RESPONSE_RESULT_B)
            if meta is not None:
                pieces.append(length_delimited(RESPONSE_META_B, _enc_meta(meta)))
            return b"".join(pieces)
        out = length_delimited(RESPONSE_RESULT_B, payload)
    if meta is not None:
        out += length_delimited(RESPONSE_META_B, _enc_meta(meta))
    return out


def _dec_meta(data: bytes, spans: list[tuple[int, int]]) -> ResponseMeta:
    """ResponseMeta from the payloads at ``spans``: a message field that occurs more
    than once merges, each occurrence parsed on its own."""
    numbers = dict.fromkeys(
        (META_RESPONSE_TYPE, META_TIMESTAMP, META_PROCESSING_TIME_MS, META_EXPIRES_AT), 0
    )
    texts = dict.fromkeys((META_PROMISE_TOKEN, META_SERVER_VERSION), "")
    extra: dict[str, Any] | None = None
    for start, stop in spans:
        for tag, a, b in iter_fields(data, start, stop):
            if tag in numbers:
                numbers[tag] = a
            elif tag in texts:
                texts[tag] = data[a:b].decode()
            elif tag == META_EXTRA:
                extra = read_struct(data, a, b, 1, extra)
    return ResponseMeta(
        response_type=signed(numbers[META_RESPONSE_TYPE], 32),
        promise_token=texts[META_PROMISE_TOKEN],
        timestamp=signed(numbers[META_TIMESTAMP], 64),
        processing_time_ms=signed(numbers[META_PROCESSING_TIME_MS], 32),
        server_version=texts[META_SERVER_VERSION],
        expires_at=signed(numbers[META_EXPIRES_AT], 64),
        extra=extra,
    )


def decode_tool_response(
    data: bytes | bytearray | memoryview,
) -> tuple[dict[str, Any], ResponseMeta | None]:
    """Parse ``ToolResponse`` bytes into ``(result, meta)``.

    An unset result gives ``{}``; an unset meta gives None (a streamed part).
    Raises CodecError for malformed bytes.
    """
    raw = as_bytes(data)
    result: dict[str, Any] = {}
    meta_spans: list[tuple[int, int]] = []
    try:
        for tag, a, b in iter_fields(raw, 0, len(raw)):
            if tag == RESPONSE_RESULT:
                read_struct(raw, a, b, 1, result)
            elif tag == RESPONSE_META:
                meta_spans.append((a, b))
        meta = _dec_meta(raw, meta_spans) if meta_spans else None
    except MALFORMED as exc:
        raise malformed("ToolResponse", exc) from None
    return result, meta
