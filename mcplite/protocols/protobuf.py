"""Protobuf wire encoding of MCP-lite's gRPC messages, without a protobuf runtime.

Why this exists: the hot messages (``ToolRequest``, ``ToolResponse``) are mostly a
``google.protobuf.Struct``, and betterproto 2.0.0b7 handles Struct slowly (about
1 ms per echo call) and wrongly (``Struct.from_dict`` output cannot be serialized,
betterproto issue 599; a decoded Struct's ``to_dict`` yields ``{"stringValue": ...}``
wrappers).  This module reads and writes those bytes directly, in pure Python
with the standard library only, between plain JSON-like values and bytes.

Import the codec from here; it is made of four modules, by concept:

- :mod:`~mcplite.protocols.protowire`: varints, length-delimited fields, skipping
  unknown fields, :class:`CodecError` and :data:`MAX_DEPTH`;
- :mod:`~mcplite.protocols.prototags`: every field tag, read at import from the
  code generated from ``proto/mcplite.proto`` (so a proto change the codec cannot
  follow fails at import, not on the wire);
- :mod:`~mcplite.protocols.protostruct`: ``Struct`` / ``Value`` <-> dicts and JSON
  values (the value mapping: numbers are doubles, dict keys as :func:`json.dumps`);
- this module: ``ToolRequest``, ``ToolResponse`` and its ``ResponseMeta``,
  ``ToolsList``, and ``google.rpc.Status`` for ``grpc-status-details-bin``.
  ``ResponseTypeCode`` is the generated ``ResponseType`` enum.

Decoding agrees with protobuf's own Python runtime (upb) on which bytes are a
message and what it holds, nesting limits aside (tests/test_grpc_codec.py fuzzes
the two against each other): strict on truncated data, bad lengths, invalid
UTF-8, out-of-range field numbers and stray end-group tags; lenient on unknown
fields (skipped, groups included); a repeated scalar keeps its last value, a
repeated message merges (Struct fields update, list values extend); a ``Value``
with no kind set is ``None``; a Struct entry carrying unknown fields is dropped,
as upb does.  Every malformed input raises :class:`CodecError` and nothing else.

Nesting deeper than :data:`MAX_DEPTH` dicts and lists raises :class:`CodecError`,
encoding and decoding, which bounds recursion and catches cyclic values.  Note
that official protobuf parsers stop at 100 *message* levels, and each JSON level
is two or three messages: a grpcio client cannot read a result nested deeper than
about 33 dicts (49 lists).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import betterproto
import betterproto.lib.google.protobuf as wkt

from ._proto import mcplite as generated
from .protostruct import (
    decode_struct,
    decode_value,
    encode_struct,
    encode_value,
    read_struct,
    write_struct,
)
from .prototags import (
    ERROR_INFO_DOMAIN_B,
    ERROR_INFO_METADATA_B,
    ERROR_INFO_REASON_B,
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
    METADATA_KEY_B,
    METADATA_VALUE_B,
    REQUEST_ARGUMENTS,
    REQUEST_ARGUMENTS_B,
    REQUEST_NAME,
    REQUEST_NAME_B,
    RESPONSE_META,
    RESPONSE_META_B,
    RESPONSE_RESULT,
    RESPONSE_RESULT_B,
    STATUS_CODE_B,
    STATUS_DETAILS_B,
    STATUS_MESSAGE_B,
    TOOL_ANNOTATIONS,
    TOOL_DESCRIPTION,
    TOOL_ICONS,
    TOOL_INPUT_SCHEMA,
    TOOL_INPUT_SCHEMA_B,
    TOOL_NAME,
    TOOL_TITLE,
    TOOL_TYPE,
    TOOLS_LIST_TOOLS,
    TOOLS_LIST_TOOLS_B,
)
from .protowire import (
    MALFORMED,
    MAX_DEPTH,
    CodecError,
    as_bytes,
    iter_fields,
    length_delimited,
    malformed,
    signed,
    skip_field,
    text_field,
    varint,
    varint_tail,
)

__all__ = [
    "MAX_DEPTH",
    "CodecError",
    "ErrorInfo",
    "ResponseMeta",
    "ResponseTypeCode",
    "decode_struct",
    "decode_tool_request",
    "decode_tool_response",
    "decode_tools_list",
    "decode_value",
    "encode_rpc_status",
    "encode_struct",
    "encode_tool_request",
    "encode_tool_response",
    "encode_tools_list",
    "encode_value",
    "icon_message",
    "icon_of",
]

#: ``mcplite.ResponseType`` as generated from the proto, an int enum
#: (``REQUEST_FOR_MORE_RESOURCE`` is our addition).  mcplite.core.wire.RESPONSE_TYPE_CODES
#: holds the same numbers for the client, which a test keeps in step.
ResponseTypeCode = generated.ResponseType


@dataclass(frozen=True, slots=True)
class ResponseMeta:
    """``mcplite.ResponseMeta``; fields 5 to 7 are mcplite additions (see the proto)."""

    response_type: int = ResponseTypeCode.ANSWER
    promise_token: str = ""
    timestamp: int = 0  # epoch milliseconds (int64)
    processing_time_ms: int = 0  # int32
    server_version: str = ""
    expires_at: int = 0  # epoch milliseconds (int64)
    extra: dict[str, Any] | None = None  # other _meta entries, a Struct


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """``google.rpc.ErrorInfo``: ``reason`` (UPPER_SNAKE), ``domain``, string ``metadata``."""

    reason: str
    domain: str
    metadata: Mapping[str, str]


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1

# Tags a decoder branch takes together (a module tuple: as fast as `==` chains).
_REQUEST_FIELDS = (REQUEST_NAME, REQUEST_ARGUMENTS)


# --- the service's messages ---------------------------------------------------------


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
            if tag in _REQUEST_FIELDS:
                n = raw[i]
                i += 1
                if n >= 0x80:
                    n, i = varint_tail(raw, i, n)
                field_end = i + n
                if field_end > end:
                    raise CodecError("malformed ToolRequest: a field runs past the end")
                if tag == REQUEST_NAME:
                    name = raw[i:field_end].decode()
                else:  # a repeated message field merges, as in protobuf
                    arguments.update(read_struct(raw, i, field_end, 1))
                i = field_end
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
        out = length_delimited(RESPONSE_RESULT_B, write_struct(result, 1))
    if meta is not None:
        out += length_delimited(RESPONSE_META_B, _enc_meta(meta))
    return out


_RESPONSE_TYPES: dict[int, int] = {code.value: code for code in ResponseTypeCode}


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
                fields = read_struct(data, a, b, 1)
                extra = fields if extra is None else {**extra, **fields}
    response_type = signed(numbers[META_RESPONSE_TYPE], 32)
    return ResponseMeta(
        # A newer server's value stays a plain number.
        response_type=_RESPONSE_TYPES.get(response_type, response_type),
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
                result.update(read_struct(raw, a, b, 1))
            elif tag == RESPONSE_META:
                meta_spans.append((a, b))
        meta = _dec_meta(raw, meta_spans) if meta_spans else None
    except MALFORMED as exc:
        raise malformed("ToolResponse", exc) from None
    return result, meta


#: MCP's ToolAnnotations hints and the proto's fields for them.
_HINTS = (
    ("readOnlyHint", "read_only_hint"),
    ("destructiveHint", "destructive_hint"),
    ("idempotentHint", "idempotent_hint"),
    ("openWorldHint", "open_world_hint"),
)


def icon_message(icon: Mapping[str, Any]) -> generated.Icon:
    """MCP's ``Icon`` as the proto's (absent fields empty)."""
    return generated.Icon(
        src=str(icon["src"]),
        mime_type=str(icon.get("mimeType") or ""),
        sizes=[str(size) for size in icon.get("sizes") or ()],
        theme=str(icon.get("theme") or ""),
    )


def icon_of(message: generated.Icon) -> dict[str, Any]:
    """The proto's ``Icon`` as MCP's (empty fields left out)."""
    icon: dict[str, Any] = {"src": message.src}
    if message.mime_type:
        icon["mimeType"] = message.mime_type
    if message.sizes:
        icon["sizes"] = list(message.sizes)
    if message.theme:
        icon["theme"] = message.theme
    return icon


def _enc_tool(tool: Mapping[str, Any]) -> bytes:
    """One ``Tool``: every field but ``input_schema`` by the generated class, that
    one by our Struct encoder, appended (a message's fields may come in any order).
    betterproto cannot serialize a Struct made from a dict (``Struct.from_dict``),
    and recurses past Python's limit on one nested as deep as MAX_DEPTH allows."""
    annotations = tool.get("annotations") or {}
    fields = generated.Tool(
        name=str(tool["name"]),
        type=str(tool.get("@type") or ""),
        description=str(tool.get("description") or ""),
        title=str(tool.get("title") or ""),
        icons=[icon_message(icon) for icon in tool.get("icons") or ()],
    )
    if annotations:
        hints = {field: annotations.get(key) for key, field in _HINTS}
        title = str(annotations.get("title") or "")
        fields.annotations = generated.ToolAnnotations(title=title, **hints)
    out = bytes(fields)
    schema = tool.get("inputSchema")
    if schema is not None:
        out += length_delimited(TOOL_INPUT_SCHEMA_B, encode_struct(schema))
    return out


def encode_tools_list(tools: Iterable[Mapping[str, Any]]) -> bytes:
    """Serialize a ``ToolsList`` from tool definitions as the HTTP binding lists them:
    ``{"name", "@type"?, "title"?, "description", "inputSchema", "annotations"?,
    "icons"?}`` (``@type`` goes to ``type``).

    Discovery is not a hot path: the fields are written by the betterproto classes
    generated from the proto, except ``input_schema`` (see :func:`_enc_tool`).
    Raises KeyError for a tool without a name, otherwise as :func:`encode_struct`.
    """
    return b"".join(length_delimited(TOOLS_LIST_TOOLS_B, _enc_tool(tool)) for tool in tools)


def _dec_tool(data: bytes, i: int, end: int) -> dict[str, Any]:
    texts = dict.fromkeys((TOOL_NAME, TOOL_TYPE, TOOL_DESCRIPTION, TOOL_TITLE), "")
    schema: dict[str, Any] = {}
    annotations = b""  # a message field that occurs more than once merges
    icons = []
    for tag, a, b in iter_fields(data, i, end):
        if tag in texts:
            texts[tag] = data[a:b].decode()
        elif tag == TOOL_INPUT_SCHEMA:
            schema.update(read_struct(data, a, b, 1))
        elif tag == TOOL_ANNOTATIONS:
            annotations += data[a:b]
        elif tag == TOOL_ICONS:
            icons.append(icon_of(_parse(generated.Icon(), data[a:b])))
    tool: dict[str, Any] = {"name": texts[TOOL_NAME]}
    if texts[TOOL_TYPE]:
        tool["@type"] = texts[TOOL_TYPE]
    if texts[TOOL_TITLE]:
        tool["title"] = texts[TOOL_TITLE]
    tool["description"] = texts[TOOL_DESCRIPTION]
    tool["inputSchema"] = schema
    if annotations:
        hints = _parse(generated.ToolAnnotations(), annotations)
        listed = {key: getattr(hints, field) for key, field in _HINTS}
        listed = {key: value for key, value in listed.items() if value is not None}
        tool["annotations"] = {"title": hints.title, **listed} if hints.title else listed
    if icons:
        tool["icons"] = icons
    return tool


_T = typing.TypeVar("_T", bound=betterproto.Message)


def _parse(message: _T, data: bytes) -> _T:
    """``message`` parsed from ``data`` by betterproto, whose errors are not ours."""
    try:
        return message.parse(data)
    except Exception as exc:
        raise CodecError(f"malformed {type(message).__name__}: {exc}") from None


def decode_tools_list(data: bytes | bytearray | memoryview) -> list[dict[str, Any]]:
    """Parse ``ToolsList`` bytes into tool definitions (the shape of
    :func:`encode_tools_list`; ``@type`` only when set). Raises CodecError."""
    raw = as_bytes(data)
    try:
        fields = iter_fields(raw, 0, len(raw))
        return [_dec_tool(raw, a, b) for tag, a, b in fields if tag == TOOLS_LIST_TOOLS]
    except MALFORMED as exc:
        raise malformed("ToolsList", exc) from None


# --- google.rpc.Status, for grpc-status-details-bin ---

_ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo"


def encode_rpc_status(code: int, message: str, details: Iterable[ErrorInfo] = ()) -> bytes:
    """Serialize a ``google.rpc.Status`` whose ``details`` are ``google.rpc.ErrorInfo``
    packed in ``google.protobuf.Any``: the payload of ``grpc-status-details-bin``."""
    out = STATUS_CODE_B + varint(code) if code else b""
    if message:
        out += text_field(STATUS_MESSAGE_B, message)
    for info in details:
        body = text_field(ERROR_INFO_REASON_B, info.reason) if info.reason else b""
        if info.domain:
            body += text_field(ERROR_INFO_DOMAIN_B, info.domain)
        for key, value in info.metadata.items():
            entry = text_field(METADATA_KEY_B, key) + text_field(METADATA_VALUE_B, value)
            body += length_delimited(ERROR_INFO_METADATA_B, entry)
        packed = wkt.Any(type_url=_ERROR_INFO_TYPE_URL, value=body)
        out += length_delimited(STATUS_DETAILS_B, bytes(packed))
    return out
