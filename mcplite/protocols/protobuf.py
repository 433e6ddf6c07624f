"""Protobuf wire encoding of MCP-lite's gRPC messages, without a protobuf runtime.

Why this exists: the hot messages (``ToolRequest``, ``ToolResponse``) are mostly a
``google.protobuf.Struct``, and betterproto 2.0.0b7 handles Struct slowly (about
1 ms per echo call) and wrongly (``Struct.from_dict`` output cannot be serialized,
betterproto issue 599; a decoded Struct's ``to_dict`` yields ``{"stringValue": ...}``
wrappers).  This module reads and writes those bytes directly, in pure Python
with the standard library only, between plain JSON-like values and bytes.

Import the codec from here; it is made of five modules, by concept:

- :mod:`~mcplite.protocols.protowire`: varints, length-delimited fields, skipping
  unknown fields, :class:`CodecError` and :data:`MAX_DEPTH`;
- :mod:`~mcplite.protocols.prototags`: every field tag, read at import from the
  descriptors generated from ``proto/mcplite.proto`` (so a proto change the codec
  cannot follow fails at import, not on the wire);
- :mod:`~mcplite.protocols.protostruct`: ``Struct`` / ``Value`` <-> dicts and JSON
  values (the value mapping: numbers are doubles, dict keys as :func:`json.dumps`);
- :mod:`~mcplite.protocols.protocalls`: ``ToolRequest``, ``ToolResponse`` and its
  ``ResponseMeta``, the hot path, which needs no betterproto class;
- this module: ``ToolsList`` (with icons and annotations, through the betterproto
  classes generated from the proto), ``google.rpc.Status`` for
  ``grpc-status-details-bin``, and ``ResponseTypeCode``, the generated
  ``ResponseType`` enum.

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

from .generated import mcplite as generated
from .protocalls import (
    ResponseMeta,
    decode_tool_request,
    decode_tool_response,
    encode_tool_request,
    encode_tool_response,
)
from .protostruct import decode_struct, decode_value, encode_struct, encode_value, read_struct
from .prototags import (
    ERROR_INFO_DOMAIN_B,
    ERROR_INFO_METADATA_B,
    ERROR_INFO_REASON_B,
    METADATA_KEY_B,
    METADATA_VALUE_B,
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
    text_field,
    varint,
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
class ErrorInfo:
    """``google.rpc.ErrorInfo``: ``reason`` (UPPER_SNAKE), ``domain``, string ``metadata``."""

    reason: str
    domain: str
    metadata: Mapping[str, str]


# --- ToolsList ---------------------------------------------------------------------

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
            read_struct(data, a, b, 1, schema)
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
