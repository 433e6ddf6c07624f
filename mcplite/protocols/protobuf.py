"""Protobuf wire encoding of MCP-lite's gRPC messages, without a protobuf runtime.

Why this exists: the hot messages (``ToolRequest``, ``ToolResponse``) are mostly a
``google.protobuf.Struct``, and betterproto 2.0.0b7 handles Struct slowly (about
1 ms per echo call) and wrongly (``Struct.from_dict`` output cannot be serialized,
betterproto issue 599; a decoded Struct's ``to_dict`` yields ``{"stringValue": ...}``
wrappers).  This module reads and writes those bytes directly, in pure Python
with the standard library only, between plain JSON-like values and bytes.

Where the numbers come from: ``proto/mcplite.proto`` is the one source.  Every
field tag used here (field number and wire type) is read once, at import, from the
betterproto classes generated from it (``mcplite.protocols._proto``, rebuilt by
``scripts/gen_proto.sh``) and from betterproto's bundled well-known types
(``Struct``, ``Value``, ``ListValue``, ``Any``); each field's type is checked against
what this module writes, so a proto change it cannot follow fails at import, not on
the wire.  ``ResponseTypeCode`` is the generated ``ResponseType`` enum.  Only
``google.rpc.Status`` and ``ErrorInfo``, in neither, keep numbers written here.

Value mapping (``google/protobuf/struct.proto``):

=====================  ==========================  ==============================
Python                 Value field                 back to Python
=====================  ==========================  ==============================
``None``               ``null_value``              ``None``
``bool``               ``bool_value``              ``bool``
``int``, ``float``     ``number_value`` (double)   ``int`` if integral and
                                                   ``|x| <= 2**53``, else ``float``
``str``                ``string_value``            ``str``
``dict``               ``struct_value``            ``dict``
``list``, ``tuple``    ``list_value``              ``list``
=====================  ==========================  ==============================

Numbers: ``number_value`` is a double, so ``1.0`` comes back as ``1`` and an ``int``
above ``2**53`` loses precision exactly as it would in JSON parsed by a
JavaScript client.  An ``int`` beyond the range of a double (about ``1.8e308``)
raises :class:`ValueError`.  NaN and infinities are carried as doubles.

Dict keys follow :func:`json.dumps`: ``str`` keys as they are; ``int``, ``float``,
``bool`` and ``None`` keys become their JSON text (``1`` -> ``"1"``, ``True`` ->
``"true"``).  Any other key or value type raises :class:`TypeError`.

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

import dataclasses
import json
import struct
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import betterproto
import betterproto.lib.google.protobuf as wkt

from ._proto import mcplite as generated

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

#: Deepest nesting of dicts and lists accepted, like a JSON parser's limit.
MAX_DEPTH = 100


class CodecError(ValueError):
    """Bytes that are not a valid message of the expected type, or a value nested
    deeper than :data:`MAX_DEPTH`."""


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


# --- primitives ------------------------------------------------------------------

_pack_double = struct.Struct("<d").pack
_unpack_double = struct.Struct("<d").unpack_from
_SMALL = tuple(bytes((n,)) for n in range(128))  # one-byte varints
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_EXACT = float(1 << 53)  # largest magnitude at which every integer is a double


def _varint(n: int) -> bytes:
    """Unsigned varint; negative numbers as 64-bit two's complement (protobuf int32/64)."""
    if n < 0:
        n &= 0xFFFFFFFFFFFFFFFF
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    n = len(payload)
    return tag + (_SMALL[n] if n < 0x80 else _varint(n)) + payload


def _text(tag: bytes, text: str) -> bytes:
    raw = text.encode()
    n = len(raw)
    return tag + (_SMALL[n] if n < 0x80 else _varint(n)) + raw


# --- field tags, read from the generated code ---------------------------------------
#
# A tag is ``field number << 3 | wire type``.  Decoders compare ints (a whole tag
# varint as read); encoders write the same tag as bytes (the ``_B`` names).  All are
# module constants computed once here, used exactly as literals would be.

_WIRE_TYPES: dict[str, int] = {
    **dict.fromkeys(betterproto.WIRE_VARINT_TYPES, 0),
    **dict.fromkeys(betterproto.WIRE_FIXED_64_TYPES, 1),
    **dict.fromkeys(betterproto.WIRE_LEN_DELIM_TYPES, 2),
    **dict.fromkeys(betterproto.WIRE_FIXED_32_TYPES, 5),
}


def _field(message: type[betterproto.Message], name: str) -> betterproto.FieldMetadata:
    # Generated messages are dataclasses; betterproto.Message is not typed as one.
    for field in dataclasses.fields(message):  # type: ignore[arg-type]
        if field.name == name:
            return betterproto.FieldMetadata.get(field)
    raise LookupError(f"{message.__name__} has no field {name!r}: see proto/mcplite.proto")


def _tag(
    message: type[betterproto.Message], name: str, proto_type: str, of: type | None = None
) -> int:
    """The tag of field ``name`` of a betterproto message class, checking that it is
    still the ``proto_type`` (and, for a message field, the message ``of``) written here."""
    meta = _field(message, name)
    kind = typing.get_type_hints(message)[name] if of is not None else None
    if typing.get_origin(kind) is list:  # a repeated message field
        (kind,) = typing.get_args(kind)
    if meta.proto_type != proto_type or kind is not of:
        raise TypeError(
            f"{message.__name__}.{name} is {meta.proto_type} {kind or ''} in the proto, "
            f"but mcplite.protocols.protobuf writes {proto_type} {of or ''}"
        )
    return meta.number << 3 | _WIRE_TYPES[proto_type]


def _entry_tags(
    message: type[betterproto.Message], name: str, key_type: str, value_type: str
) -> tuple[int, int]:
    """The tags of ``key`` and ``value`` in the entries of a map field: protobuf
    defines ``map<K, V>`` as a repeated entry message with ``key = 1`` and ``value = 2``."""
    meta = _field(message, name)
    if meta.proto_type != "map" or meta.map_types != (key_type, value_type):
        raise TypeError(f"{message.__name__}.{name} is not a map<{key_type}, {value_type}>")
    return 1 << 3 | _WIRE_TYPES[key_type], 2 << 3 | _WIRE_TYPES[value_type]


# google/protobuf/struct.proto, from betterproto's bundled classes.
_STRUCT_FIELDS = _tag(wkt.Struct, "fields", "map")
_ENTRY_KEY, _ENTRY_VALUE = _entry_tags(wkt.Struct, "fields", "string", "message")
_LIST_VALUES = _tag(wkt.ListValue, "values", "message", wkt.Value)
_VALUE_NULL = _tag(wkt.Value, "null_value", "enum")
_VALUE_NUMBER = _tag(wkt.Value, "number_value", "double")
_VALUE_STRING = _tag(wkt.Value, "string_value", "string")
_VALUE_BOOL = _tag(wkt.Value, "bool_value", "bool")
_VALUE_STRUCT = _tag(wkt.Value, "struct_value", "message", wkt.Struct)
_VALUE_LIST = _tag(wkt.Value, "list_value", "message", wkt.ListValue)

# proto/mcplite.proto, from the generated classes.
_REQUEST_NAME = _tag(generated.ToolRequest, "name", "string")
_REQUEST_ARGUMENTS = _tag(generated.ToolRequest, "arguments", "message", wkt.Struct)
_RESPONSE_RESULT = _tag(generated.ToolResponse, "result", "message", wkt.Struct)
_RESPONSE_META = _tag(generated.ToolResponse, "meta", "message", generated.ResponseMeta)
_META_RESPONSE_TYPE = _tag(generated.ResponseMeta, "response_type", "enum")
_META_PROMISE_TOKEN = _tag(generated.ResponseMeta, "promise_token", "string")
_META_TIMESTAMP = _tag(generated.ResponseMeta, "timestamp", "int64")
_META_PROCESSING_TIME_MS = _tag(generated.ResponseMeta, "processing_time_ms", "int32")
_META_SERVER_VERSION = _tag(generated.ResponseMeta, "server_version", "string")
_META_EXPIRES_AT = _tag(generated.ResponseMeta, "expires_at", "int64")
_META_EXTRA = _tag(generated.ResponseMeta, "extra", "message", wkt.Struct)
_TOOL_NAME = _tag(generated.Tool, "name", "string")
_TOOL_TYPE = _tag(generated.Tool, "type", "string")
_TOOL_DESCRIPTION = _tag(generated.Tool, "description", "string")
_TOOL_INPUT_SCHEMA = _tag(generated.Tool, "input_schema", "message", wkt.Struct)
_TOOL_TITLE = _tag(generated.Tool, "title", "string")
_TOOL_ANNOTATIONS = _tag(generated.Tool, "annotations", "message", generated.ToolAnnotations)
_TOOL_ICONS = _tag(generated.Tool, "icons", "message", generated.Icon)
_TOOLS_LIST_TOOLS = _tag(generated.ToolsList, "tools", "message", generated.Tool)

# Tags a decoder branch takes together (a module tuple: as fast as `==` chains).
_ENTRY_FIELDS = (_ENTRY_KEY, _ENTRY_VALUE)
_VALUE_LEN_KINDS = (_VALUE_STRING, _VALUE_STRUCT, _VALUE_LIST)
_VALUE_VARINT_KINDS = (_VALUE_BOOL, _VALUE_NULL)
_REQUEST_FIELDS = (_REQUEST_NAME, _REQUEST_ARGUMENTS)

_STRUCT_FIELDS_B = _varint(_STRUCT_FIELDS)
_ENTRY_KEY_B = _varint(_ENTRY_KEY)
_ENTRY_VALUE_B = _varint(_ENTRY_VALUE)
_LIST_VALUES_B = _varint(_LIST_VALUES)
_VALUE_NUMBER_B = _varint(_VALUE_NUMBER)
_VALUE_STRING_B = _varint(_VALUE_STRING)
_VALUE_STRUCT_B = _varint(_VALUE_STRUCT)
_VALUE_LIST_B = _varint(_VALUE_LIST)
_VALUE_NONE = _varint(_VALUE_NULL) + b"\x00"  # NULL_VALUE, NullValue's only value (0)
_VALUE_TRUE = _varint(_VALUE_BOOL) + b"\x01"
_VALUE_FALSE = _varint(_VALUE_BOOL) + b"\x00"
_REQUEST_NAME_B = _varint(_REQUEST_NAME)
_REQUEST_ARGUMENTS_B = _varint(_REQUEST_ARGUMENTS)
_RESPONSE_RESULT_B = _varint(_RESPONSE_RESULT)
_RESPONSE_META_B = _varint(_RESPONSE_META)
_META_RESPONSE_TYPE_B = _varint(_META_RESPONSE_TYPE)
_META_PROMISE_TOKEN_B = _varint(_META_PROMISE_TOKEN)
_META_TIMESTAMP_B = _varint(_META_TIMESTAMP)
_META_PROCESSING_TIME_MS_B = _varint(_META_PROCESSING_TIME_MS)
_META_SERVER_VERSION_B = _varint(_META_SERVER_VERSION)
_META_EXPIRES_AT_B = _varint(_META_EXPIRES_AT)
_META_EXTRA_B = _varint(_META_EXTRA)
_TOOL_INPUT_SCHEMA_B = _varint(_TOOL_INPUT_SCHEMA)
_TOOLS_LIST_TOOLS_B = _varint(_TOOLS_LIST_TOOLS)


# --- encoding Struct / Value / ListValue -----------------------------------------

# Encoded map-entry key fields (tag + len + utf-8) for recently seen keys: keys
# repeat across calls ("content", "type", "text"), so this skips most key encoding.
_KEY_CACHE: dict[str, bytes] = {}
_KEY_CACHE_LIMIT = 4096


def _key_field(key: Any) -> bytes:
    """The ``key`` field of a ``Struct.FieldsEntry``, converting keys as json.dumps does."""
    if not isinstance(key, str):
        if key is True:
            key = "true"
        elif key is False:
            key = "false"
        elif key is None:
            key = "null"
        elif isinstance(key, int | float):
            key = json.dumps(key)
        else:
            raise TypeError(
                f"Struct keys must be str, int, float, bool or None, not {type(key).__name__}"
            )
        return _text(_ENTRY_KEY_B, key)
    field = _KEY_CACHE.get(key)
    if field is None:
        field = _text(_ENTRY_KEY_B, key)
        if len(_KEY_CACHE) >= _KEY_CACHE_LIMIT:
            _KEY_CACHE.clear()
        _KEY_CACHE[key] = field
    return field


def _enc_struct(obj: Mapping[Any, Any], depth: int) -> bytes:
    """Struct payload: one ``fields`` map entry per item."""
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    out = []
    for key, value in obj.items():
        key_field = _KEY_CACHE.get(key) if type(key) is str else None
        if key_field is None:
            key_field = _key_field(key)
        if type(value) is str:  # the common case, inlined
            raw = value.encode()
            n = len(raw)
            value_msg = _VALUE_STRING_B + (_SMALL[n] if n < 0x80 else _varint(n)) + raw
        else:
            value_msg = _enc_value(value, depth)
        n = len(value_msg)
        entry = key_field + _ENTRY_VALUE_B + (_SMALL[n] if n < 0x80 else _varint(n)) + value_msg
        n = len(entry)
        out.append(_STRUCT_FIELDS_B + (_SMALL[n] if n < 0x80 else _varint(n)) + entry)
    return b"".join(out)


def _enc_list(items: Iterable[Any], depth: int) -> bytes:
    """ListValue payload: one ``values`` entry per item."""
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    out = []
    for item in items:
        value_msg = _enc_value(item, depth)
        n = len(value_msg)
        out.append(_LIST_VALUES_B + (_SMALL[n] if n < 0x80 else _varint(n)) + value_msg)
    return b"".join(out)


def _enc_value(value: Any, depth: int) -> bytes:
    """Value payload: exactly one ``kind`` field (oneof members are always written)."""
    kind = type(value)
    if kind is str:
        return _text(_VALUE_STRING_B, value)
    if kind is dict:
        payload = _enc_struct(value, depth + 1)
        n = len(payload)
        return _VALUE_STRUCT_B + (_SMALL[n] if n < 0x80 else _varint(n)) + payload
    if kind is list or kind is tuple:
        payload = _enc_list(value, depth + 1)
        n = len(payload)
        return _VALUE_LIST_B + (_SMALL[n] if n < 0x80 else _varint(n)) + payload
    if kind is bool:
        return _VALUE_TRUE if value else _VALUE_FALSE
    if kind is float:
        return _VALUE_NUMBER_B + _pack_double(value)
    if kind is int:
        return _VALUE_NUMBER_B + _pack_double(_as_double(value))
    if value is None:
        return _VALUE_NONE
    # Subclasses (str enums, IntEnum, OrderedDict, named tuples): same as their base.
    if isinstance(value, str):
        return _text(_VALUE_STRING_B, value)  # its own text, as json.dumps writes it
    if isinstance(value, bool):
        return _VALUE_TRUE if value else _VALUE_FALSE
    if isinstance(value, int | float):
        return _VALUE_NUMBER_B + _pack_double(_as_double(value))
    if isinstance(value, dict):
        return _ld(_VALUE_STRUCT_B, _enc_struct(value, depth + 1))
    if isinstance(value, list | tuple):
        return _ld(_VALUE_LIST_B, _enc_list(value, depth + 1))
    raise TypeError(f"{type(value).__name__} is not a JSON value; cannot put it in a Struct")


def _as_double(number: int | float) -> float:
    try:
        return float(number)
    except OverflowError:
        raise ValueError(
            f"integer with {int(number).bit_length()} bits is beyond the range of a double"
        ) from None


def encode_struct(obj: Mapping[Any, Any]) -> bytes:
    """Serialize a dict as a ``google.protobuf.Struct`` message.

    Raises TypeError for a non-JSON value or key, ValueError for an int beyond the
    range of a double or a str that is not valid Unicode, CodecError when nested
    deeper than MAX_DEPTH.
    """
    if not isinstance(obj, Mapping):
        raise TypeError(f"a Struct is made from a dict, not {type(obj).__name__}")
    return _enc_struct(obj, 1)


def encode_value(value: Any) -> bytes:
    """Serialize any JSON-like value as a ``google.protobuf.Value`` message.

    Raises as :func:`encode_struct`.
    """
    return _enc_value(value, 0)


# --- decoding ----------------------------------------------------------------------
#
# Each decoder walks ``data[i:end]``; ``end`` is where its message stops inside the
# enclosing one.  Tags are compared as whole varints (the ints above).
# Reading past ``end`` is caught by the length checks; reading past the buffer
# raises IndexError, which the public functions turn into CodecError.

_MALFORMED = (IndexError, struct.error, UnicodeDecodeError)


def _varint_tail(data: bytes, i: int, first: int) -> tuple[int, int]:
    """Rest of a varint whose first byte (``first`` >= 0x80) was already read."""
    result = first & 0x7F
    shift = 7
    while True:
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if shift >= 70:
            raise CodecError("varint longer than 10 bytes")


def _read_len(data: bytes, i: int, end: int) -> tuple[int, int]:
    """Read a length prefix at ``i``; return the (start, stop) of the payload."""
    n = data[i]
    i += 1
    if n >= 0x80:
        n, i = _varint_tail(data, i, n)
    stop = i + n
    if stop > end:
        raise CodecError("a field runs past the end of its message")
    return i, stop


def _skip(data: bytes, i: int, end: int, tag: int, depth: int = 0) -> int:
    """Skip the payload of an unknown field with this tag; return the next index."""
    wire_type = tag & 7
    if tag >> 3 == 0 or tag > 0xFFFFFFFF:
        raise CodecError("field number out of range")
    if wire_type == 0:
        b = data[i]
        i += 1
        if b >= 0x80:
            _, i = _varint_tail(data, i, b)
    elif wire_type == 2:
        _, i = _read_len(data, i, end)
    elif wire_type == 1:
        i += 8
    elif wire_type == 5:
        i += 4
    elif wire_type == 3:  # a (deprecated) group: skip up to its matching end tag
        if depth >= MAX_DEPTH:
            raise CodecError(f"groups nested deeper than {MAX_DEPTH} levels")
        while True:
            if i >= end:
                raise CodecError("group without its end")
            inner = data[i]
            i += 1
            if inner >= 0x80:
                inner, i = _varint_tail(data, i, inner)
            if inner & 7 == 4:
                if inner >> 3 != tag >> 3:
                    raise CodecError("group ends with the wrong field number")
                break
            i = _skip(data, i, end, inner, depth + 1)
    else:
        raise CodecError(f"unexpected wire type {wire_type}")
    if i > end:
        raise CodecError("a field runs past the end of its message")
    return i


def _dec_struct(data: bytes, i: int, end: int, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    out: dict[str, Any] = {}
    while i < end:
        tag = data[i]
        i += 1
        if tag >= 0x80:
            tag, i = _varint_tail(data, i, tag)
        if tag != _STRUCT_FIELDS:
            i = _skip(data, i, end, tag)
            continue
        n = data[i]
        i += 1
        if n >= 0x80:
            n, i = _varint_tail(data, i, n)
        entry_end = i + n
        if entry_end > end:
            raise CodecError("Struct entry runs past the end of its message")
        # FieldsEntry: key, value.  A repeated key: the last entry wins.  An
        # entry with unknown fields is dropped, as upb (protobuf's Python runtime) does.
        key = ""
        value: Any = None
        known = True
        while i < entry_end:
            tag = data[i]
            i += 1
            if tag >= 0x80:
                tag, i = _varint_tail(data, i, tag)
            if tag in _ENTRY_FIELDS:
                n = data[i]
                i += 1
                if n >= 0x80:
                    n, i = _varint_tail(data, i, n)
                field_end = i + n
                if field_end > entry_end:
                    raise CodecError("Struct entry field runs past the end of its entry")
                if tag == _ENTRY_KEY:
                    key = data[i:field_end].decode()
                else:
                    value = _dec_value(data, i, field_end, depth)
                i = field_end
            else:
                i = _skip(data, i, entry_end, tag)
                known = False
        if known:
            out[key] = value
    return out


def _dec_list(data: bytes, i: int, end: int, depth: int) -> list[Any]:
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    out: list[Any] = []
    while i < end:
        tag = data[i]
        i += 1
        if tag >= 0x80:
            tag, i = _varint_tail(data, i, tag)
        if tag != _LIST_VALUES:
            i = _skip(data, i, end, tag)
            continue
        n = data[i]
        i += 1
        if n >= 0x80:
            n, i = _varint_tail(data, i, n)
        item_end = i + n
        if item_end > end:
            raise CodecError("ListValue item runs past the end of its message")
        out.append(_dec_value(data, i, item_end, depth))
        i = item_end
    return out


def _dec_value(data: bytes, i: int, end: int, depth: int) -> Any:
    value: Any = None
    kind = 0  # tag of the oneof member last seen: a repeated message member merges
    while i < end:
        tag = data[i]
        i += 1
        if tag >= 0x80:
            tag, i = _varint_tail(data, i, tag)
        if tag in _VALUE_LEN_KINDS:
            n = data[i]
            i += 1
            if n >= 0x80:
                n, i = _varint_tail(data, i, n)
            field_end = i + n
            if field_end > end:
                raise CodecError("Value field runs past the end of its message")
            if tag == _VALUE_STRING:
                value = data[i:field_end].decode()
            elif tag == _VALUE_STRUCT:
                fields = _dec_struct(data, i, field_end, depth + 1)
                if kind == _VALUE_STRUCT:
                    value.update(fields)
                else:
                    value = fields
            else:
                items = _dec_list(data, i, field_end, depth + 1)
                if kind == _VALUE_LIST:
                    value.extend(items)
                else:
                    value = items
            i = field_end
        elif tag == _VALUE_NUMBER:
            if i + 8 > end:
                raise CodecError("number_value runs past the end of its message")
            number: float = _unpack_double(data, i)[0]
            i += 8
            exact = number.is_integer() and -_EXACT <= number <= _EXACT
            value = int(number) if exact else number
        elif tag in _VALUE_VARINT_KINDS:
            b = data[i]
            i += 1
            if b >= 0x80:
                b, i = _varint_tail(data, i, b)
            value = (b != 0) if tag == _VALUE_BOOL else None
        else:
            i = _skip(data, i, end, tag)
            continue
        kind = tag
    if i > end:  # a varint ran on into the enclosing message
        raise CodecError("Value runs past the end of its message")
    return value


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"expected bytes, not {type(data).__name__}")


def _malformed(what: str, exc: Exception) -> CodecError:
    if isinstance(exc, IndexError):
        return CodecError(f"malformed {what}: truncated")
    if isinstance(exc, UnicodeDecodeError):
        return CodecError(f"malformed {what}: a string is not valid UTF-8")
    return CodecError(f"malformed {what}: {exc}")


def decode_struct(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Parse a serialized ``google.protobuf.Struct`` into a dict. Raises CodecError."""
    raw = _as_bytes(data)
    try:
        return _dec_struct(raw, 0, len(raw), 1)
    except _MALFORMED as exc:
        raise _malformed("Struct", exc) from None


def decode_value(data: bytes | bytearray | memoryview) -> Any:
    """Parse a serialized ``google.protobuf.Value``. Raises CodecError."""
    raw = _as_bytes(data)
    try:
        return _dec_value(raw, 0, len(raw), 0)
    except _MALFORMED as exc:
        raise _malformed("Value", exc) from None


# --- the service's messages ---------------------------------------------------------


def decode_tool_request(data: bytes | bytearray | memoryview) -> tuple[str, dict[str, Any]]:
    """Parse ``ToolRequest`` bytes into ``(name, arguments)``.

    Absent ``arguments`` give ``{}``.  Raises CodecError for malformed bytes.
    """
    raw = _as_bytes(data)
    end = len(raw)
    name = ""
    arguments: dict[str, Any] = {}
    i = 0
    try:
        while i < end:
            tag = raw[i]
            i += 1
            if tag >= 0x80:
                tag, i = _varint_tail(raw, i, tag)
            if tag in _REQUEST_FIELDS:
                n = raw[i]
                i += 1
                if n >= 0x80:
                    n, i = _varint_tail(raw, i, n)
                field_end = i + n
                if field_end > end:
                    raise CodecError("malformed ToolRequest: a field runs past the end")
                if tag == _REQUEST_NAME:
                    name = raw[i:field_end].decode()
                else:  # a repeated message field merges, as in protobuf
                    arguments.update(_dec_struct(raw, i, field_end, 1))
                i = field_end
            else:
                i = _skip(raw, i, end, tag)
    except _MALFORMED as exc:
        raise _malformed("ToolRequest", exc) from None
    return name, arguments


def encode_tool_request(name: str, arguments: Mapping[Any, Any] | None = None) -> bytes:
    """Serialize a ``ToolRequest`` (for clients and tests). Raises as encode_struct."""
    out = _text(_REQUEST_NAME_B, name) if name else b""
    if arguments is not None:
        out += _ld(_REQUEST_ARGUMENTS_B, encode_struct(arguments))
    return out


def _int64(tag: bytes, number: int) -> bytes:
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ValueError(f"{number} is out of the int64 range")
    return tag + _varint(number)


def _enc_meta(meta: ResponseMeta) -> bytes:
    out = b""
    if meta.response_type:
        out += _META_RESPONSE_TYPE_B + _varint(int(meta.response_type))
    if meta.promise_token:
        out += _text(_META_PROMISE_TOKEN_B, meta.promise_token)
    if meta.timestamp:
        out += _int64(_META_TIMESTAMP_B, meta.timestamp)
    if meta.processing_time_ms:
        if not _INT32_MIN <= meta.processing_time_ms <= _INT32_MAX:
            raise ValueError(f"processing_time_ms {meta.processing_time_ms} is out of int32 range")
        out += _META_PROCESSING_TIME_MS_B + _varint(meta.processing_time_ms)
    if meta.server_version:
        out += _text(_META_SERVER_VERSION_B, meta.server_version)
    if meta.expires_at:
        out += _int64(_META_EXPIRES_AT_B, meta.expires_at)
    if meta.extra:
        out += _ld(_META_EXTRA_B, _enc_struct(meta.extra, 1))
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
        out = _ld(_RESPONSE_RESULT_B, _enc_struct(result, 1))
    if meta is not None:
        out += _ld(_RESPONSE_META_B, _enc_meta(meta))
    return out


_RESPONSE_TYPES: dict[int, int] = {code.value: code for code in ResponseTypeCode}


def _signed(number: int, bits: int) -> int:
    number &= (1 << bits) - 1
    return number - (1 << bits) if number >> (bits - 1) else number


def _iter_fields(data: bytes, i: int, end: int) -> Iterator[tuple[int, int, int]]:
    """Yield ``(tag, start, stop)`` of each LEN field and ``(tag, value, 0)`` of each
    VARINT field of ``data[i:end]``, skipping the others (for the less hot messages)."""
    while i < end:
        tag = data[i]
        i += 1
        if tag >= 0x80:
            tag, i = _varint_tail(data, i, tag)
            if tag > 0xFFFFFFFF:
                raise CodecError("field number out of range")
        wire_type = tag & 7
        if wire_type == 2 and tag >> 3:
            start, i = _read_len(data, i, end)
            yield tag, start, i
        elif wire_type == 0 and tag >> 3:
            number = data[i]
            i += 1
            if number >= 0x80:
                number, i = _varint_tail(data, i, number)
            if i > end:
                raise CodecError("a field runs past the end of its message")
            yield tag, number, 0
        else:
            i = _skip(data, i, end, tag)


def _dec_meta(data: bytes, spans: list[tuple[int, int]]) -> ResponseMeta:
    """ResponseMeta from the payloads at ``spans``: a message field that occurs more
    than once merges, each occurrence parsed on its own."""
    numbers = dict.fromkeys(
        (_META_RESPONSE_TYPE, _META_TIMESTAMP, _META_PROCESSING_TIME_MS, _META_EXPIRES_AT), 0
    )
    texts = dict.fromkeys((_META_PROMISE_TOKEN, _META_SERVER_VERSION), "")
    extra: dict[str, Any] | None = None
    for start, stop in spans:
        for tag, a, b in _iter_fields(data, start, stop):
            if tag in numbers:
                numbers[tag] = a
            elif tag in texts:
                texts[tag] = data[a:b].decode()
            elif tag == _META_EXTRA:
                fields = _dec_struct(data, a, b, 1)
                extra = fields if extra is None else {**extra, **fields}
    response_type = _signed(numbers[_META_RESPONSE_TYPE], 32)
    return ResponseMeta(
        # A newer server's value stays a plain number.
        response_type=_RESPONSE_TYPES.get(response_type, response_type),
        promise_token=texts[_META_PROMISE_TOKEN],
        timestamp=_signed(numbers[_META_TIMESTAMP], 64),
        processing_time_ms=_signed(numbers[_META_PROCESSING_TIME_MS], 32),
        server_version=texts[_META_SERVER_VERSION],
        expires_at=_signed(numbers[_META_EXPIRES_AT], 64),
        extra=extra,
    )


def decode_tool_response(
    data: bytes | bytearray | memoryview,
) -> tuple[dict[str, Any], ResponseMeta | None]:
    """Parse ``ToolResponse`` bytes into ``(result, meta)``.

    An unset result gives ``{}``; an unset meta gives None (a streamed part).
    Raises CodecError for malformed bytes.
    """
    raw = _as_bytes(data)
    result: dict[str, Any] = {}
    meta_spans: list[tuple[int, int]] = []
    try:
        for tag, a, b in _iter_fields(raw, 0, len(raw)):
            if tag == _RESPONSE_RESULT:
                result.update(_dec_struct(raw, a, b, 1))
            elif tag == _RESPONSE_META:
                meta_spans.append((a, b))
        meta = _dec_meta(raw, meta_spans) if meta_spans else None
    except _MALFORMED as exc:
        raise _malformed("ToolResponse", exc) from None
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
        out += _ld(_TOOL_INPUT_SCHEMA_B, encode_struct(schema))
    return out


def encode_tools_list(tools: Iterable[Mapping[str, Any]]) -> bytes:
    """Serialize a ``ToolsList`` from tool definitions as the HTTP binding lists them:
    ``{"name", "@type"?, "title"?, "description", "inputSchema", "annotations"?,
    "icons"?}`` (``@type`` goes to ``type``).

    Discovery is not a hot path: the fields are written by the betterproto classes
    generated from the proto, except ``input_schema`` (see :func:`_enc_tool`).
    Raises KeyError for a tool without a name, otherwise as :func:`encode_struct`.
    """
    return b"".join(_ld(_TOOLS_LIST_TOOLS_B, _enc_tool(tool)) for tool in tools)


def _dec_tool(data: bytes, i: int, end: int) -> dict[str, Any]:
    texts = dict.fromkeys((_TOOL_NAME, _TOOL_TYPE, _TOOL_DESCRIPTION, _TOOL_TITLE), "")
    schema: dict[str, Any] = {}
    annotations = b""  # a message field that occurs more than once merges
    icons = []
    for tag, a, b in _iter_fields(data, i, end):
        if tag in texts:
            texts[tag] = data[a:b].decode()
        elif tag == _TOOL_INPUT_SCHEMA:
            schema.update(_dec_struct(data, a, b, 1))
        elif tag == _TOOL_ANNOTATIONS:
            annotations += data[a:b]
        elif tag == _TOOL_ICONS:
            icons.append(icon_of(_parse(generated.Icon(), data[a:b])))
    tool: dict[str, Any] = {"name": texts[_TOOL_NAME]}
    if texts[_TOOL_TYPE]:
        tool["@type"] = texts[_TOOL_TYPE]
    if texts[_TOOL_TITLE]:
        tool["title"] = texts[_TOOL_TITLE]
    tool["description"] = texts[_TOOL_DESCRIPTION]
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
    raw = _as_bytes(data)
    try:
        fields = _iter_fields(raw, 0, len(raw))
        return [_dec_tool(raw, a, b) for tag, a, b in fields if tag == _TOOLS_LIST_TOOLS]
    except _MALFORMED as exc:
        raise _malformed("ToolsList", exc) from None


# --- google.rpc.Status, for grpc-status-details-bin --------------------------------
#
# google/rpc/status.proto and google/rpc/error_details.proto (googleapis) are in
# neither our proto nor betterproto's bundled types, so their numbers are written
# here; tests parse these bytes with classes protoc builds from those files.  The
# google.protobuf.Any around each detail is betterproto's.


def _rpc_tag(number: int, proto_type: str) -> bytes:
    return _varint(number << 3 | _WIRE_TYPES[proto_type])


_STATUS_CODE_B = _rpc_tag(1, "int32")
_STATUS_MESSAGE_B = _rpc_tag(2, "string")
_STATUS_DETAILS_B = _rpc_tag(3, "message")  # repeated google.protobuf.Any
_ERROR_INFO_REASON_B = _rpc_tag(1, "string")
_ERROR_INFO_DOMAIN_B = _rpc_tag(2, "string")
_ERROR_INFO_METADATA_B = _rpc_tag(3, "map")  # map<string, string>: entries key 1, value 2
_METADATA_KEY_B = _rpc_tag(1, "string")
_METADATA_VALUE_B = _rpc_tag(2, "string")
_ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo"


def encode_rpc_status(code: int, message: str, details: Iterable[ErrorInfo] = ()) -> bytes:
    """Serialize a ``google.rpc.Status`` whose ``details`` are ``google.rpc.ErrorInfo``
    packed in ``google.protobuf.Any``: the payload of ``grpc-status-details-bin``."""
    out = _STATUS_CODE_B + _varint(code) if code else b""
    if message:
        out += _text(_STATUS_MESSAGE_B, message)
    for info in details:
        body = _text(_ERROR_INFO_REASON_B, info.reason) if info.reason else b""
        if info.domain:
            body += _text(_ERROR_INFO_DOMAIN_B, info.domain)
        for key, value in info.metadata.items():
            entry = _text(_METADATA_KEY_B, key) + _text(_METADATA_VALUE_B, value)
            body += _ld(_ERROR_INFO_METADATA_B, entry)
        packed = wkt.Any(type_url=_ERROR_INFO_TYPE_URL, value=body)
        out += _ld(_STATUS_DETAILS_B, bytes(packed))
    return out
