"""Protobuf wire encoding of MCP-lite's gRPC messages, without a protobuf runtime.

Why this exists: the hot messages (``ToolRequest``, ``ToolResponse``) are mostly a
``google.protobuf.Struct``, and betterproto 2.0.0b7 handles Struct slowly (about
1 ms per echo call) and wrongly (``Struct.from_dict`` output cannot be serialized,
betterproto issue 599; a decoded Struct's ``to_dict`` yields ``{"stringValue": ...}``
wrappers).  This module reads and writes those bytes directly, in pure Python
with the standard library only, between plain JSON-like values and bytes.

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

import json
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

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
]

#: Deepest nesting of dicts and lists accepted, like a JSON parser's limit.
MAX_DEPTH = 100


class CodecError(ValueError):
    """Bytes that are not a valid message of the expected type, or a value nested
    deeper than :data:`MAX_DEPTH`."""


class ResponseTypeCode(IntEnum):
    """``mcplite.ResponseType`` numbers (``REQUEST_FOR_MORE_RESOURCE`` is our addition)."""

    ANSWER = 0
    PROMISE = 1
    ELICITATION = 2
    FAILURE = 3
    REQUEST_FOR_MORE_RESOURCE = 4


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


# --- encoding Struct / Value / ListValue -----------------------------------------

# Encoded map-entry key prefixes (b"\n" + len + utf-8) for recently seen keys: keys
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
        return _text(b"\n", key)
    field = _KEY_CACHE.get(key)
    if field is None:
        field = _text(b"\n", key)
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
            value_msg = b"\x1a" + (_SMALL[n] if n < 0x80 else _varint(n)) + raw
        else:
            value_msg = _enc_value(value, depth)
        n = len(value_msg)
        entry = key_field + b"\x12" + (_SMALL[n] if n < 0x80 else _varint(n)) + value_msg
        n = len(entry)
        out.append(b"\n" + (_SMALL[n] if n < 0x80 else _varint(n)) + entry)
    return b"".join(out)


def _enc_list(items: Iterable[Any], depth: int) -> bytes:
    """ListValue payload: one ``values`` entry per item."""
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    out = []
    for item in items:
        value_msg = _enc_value(item, depth)
        n = len(value_msg)
        out.append(b"\n" + (_SMALL[n] if n < 0x80 else _varint(n)) + value_msg)
    return b"".join(out)


def _enc_value(value: Any, depth: int) -> bytes:
    """Value payload: exactly one ``kind`` field (oneof members are always written)."""
    kind = type(value)
    if kind is str:
        return _text(b"\x1a", value)
    if kind is dict:
        payload = _enc_struct(value, depth + 1)
        n = len(payload)
        return b"*" + (_SMALL[n] if n < 0x80 else _varint(n)) + payload
    if kind is list or kind is tuple:
        payload = _enc_list(value, depth + 1)
        n = len(payload)
        return b"2" + (_SMALL[n] if n < 0x80 else _varint(n)) + payload
    if kind is bool:
        return b" \x01" if value else b" \x00"
    if kind is float:
        return b"\x11" + _pack_double(value)
    if kind is int:
        return b"\x11" + _pack_double(_as_double(value))
    if value is None:
        return b"\x08\x00"
    # Subclasses (str enums, IntEnum, OrderedDict, named tuples): same as their base.
    if isinstance(value, str):
        return _text(b"\x1a", value)  # its own text, as json.dumps writes it
    if isinstance(value, bool):
        return b" \x01" if value else b" \x00"
    if isinstance(value, int | float):
        return b"\x11" + _pack_double(_as_double(value))
    if isinstance(value, dict):
        return _ld(b"*", _enc_struct(value, depth + 1))
    if isinstance(value, list | tuple):
        return _ld(b"2", _enc_list(value, depth + 1))
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
# enclosing one.  Tags are compared as whole varints (0x0A is field 1, LEN).
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
        if tag != 0x0A:  # anything but `fields` (1, LEN)
            i = _skip(data, i, end, tag)
            continue
        n = data[i]
        i += 1
        if n >= 0x80:
            n, i = _varint_tail(data, i, n)
        entry_end = i + n
        if entry_end > end:
            raise CodecError("Struct entry runs past the end of its message")
        # FieldsEntry: key = 1, value = 2.  A repeated key: the last entry wins.  An
        # entry with unknown fields is dropped, as upb (protobuf's Python runtime) does.
        key = ""
        value: Any = None
        known = True
        while i < entry_end:
            tag = data[i]
            i += 1
            if tag >= 0x80:
                tag, i = _varint_tail(data, i, tag)
            if tag == 0x0A or tag == 0x12:
                n = data[i]
                i += 1
                if n >= 0x80:
                    n, i = _varint_tail(data, i, n)
                field_end = i + n
                if field_end > entry_end:
                    raise CodecError("Struct entry field runs past the end of its entry")
                if tag == 0x0A:
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
        if tag != 0x0A:  # anything but `values` (1, LEN)
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
        if tag == 0x1A or tag == 0x2A or tag == 0x32:  # string, struct, list (LEN)
            n = data[i]
            i += 1
            if n >= 0x80:
                n, i = _varint_tail(data, i, n)
            field_end = i + n
            if field_end > end:
                raise CodecError("Value field runs past the end of its message")
            if tag == 0x1A:
                value = data[i:field_end].decode()
            elif tag == 0x2A:
                fields = _dec_struct(data, i, field_end, depth + 1)
                if kind == 0x2A:
                    value.update(fields)
                else:
                    value = fields
            else:
                items = _dec_list(data, i, field_end, depth + 1)
                if kind == 0x32:
                    value.extend(items)
                else:
                    value = items
            i = field_end
        elif tag == 0x11:  # number_value (I64)
            if i + 8 > end:
                raise CodecError("number_value runs past the end of its message")
            number: float = _unpack_double(data, i)[0]
            i += 8
            exact = number.is_integer() and -_EXACT <= number <= _EXACT
            value = int(number) if exact else number
        elif tag == 0x20 or tag == 0x08:  # bool_value, null_value (VARINT)
            b = data[i]
            i += 1
            if b >= 0x80:
                b, i = _varint_tail(data, i, b)
            value = (b != 0) if tag == 0x20 else None
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
            if tag == 0x0A or tag == 0x12:  # name, arguments
                n = raw[i]
                i += 1
                if n >= 0x80:
                    n, i = _varint_tail(raw, i, n)
                field_end = i + n
                if field_end > end:
                    raise CodecError("malformed ToolRequest: a field runs past the end")
                if tag == 0x0A:
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
    out = _text(b"\n", name) if name else b""
    if arguments is not None:
        out += _ld(b"\x12", encode_struct(arguments))
    return out


def _int64(tag: bytes, number: int) -> bytes:
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ValueError(f"{number} is out of the int64 range")
    return tag + _varint(number)


def _enc_meta(meta: ResponseMeta) -> bytes:
    out = b""
    if meta.response_type:
        out += b"\x08" + _varint(int(meta.response_type))
    if meta.promise_token:
        out += _text(b"\x12", meta.promise_token)
    if meta.timestamp:
        out += _int64(b"\x18", meta.timestamp)
    if meta.processing_time_ms:
        if not _INT32_MIN <= meta.processing_time_ms <= _INT32_MAX:
            raise ValueError(f"processing_time_ms {meta.processing_time_ms} is out of int32 range")
        out += b" " + _varint(meta.processing_time_ms)
    if meta.server_version:
        out += _text(b"*", meta.server_version)
    if meta.expires_at:
        out += _int64(b"0", meta.expires_at)
    if meta.extra:
        out += _ld(b":", _enc_struct(meta.extra, 1))
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
        out = _ld(b"\n", _enc_struct(result, 1))
    if meta is not None:
        out += _ld(b"\x12", _enc_meta(meta))
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
    numbers = {0x08: 0, 0x18: 0, 0x20: 0, 0x30: 0}
    texts = {0x12: "", 0x2A: ""}
    extra: dict[str, Any] | None = None
    for start, stop in spans:
        for tag, a, b in _iter_fields(data, start, stop):
            if tag in numbers:
                numbers[tag] = a
            elif tag in texts:
                texts[tag] = data[a:b].decode()
            elif tag == 0x3A:
                fields = _dec_struct(data, a, b, 1)
                extra = fields if extra is None else {**extra, **fields}
    response_type = _signed(numbers[0x08], 32)
    return ResponseMeta(
        # A newer server's value stays a plain number.
        response_type=_RESPONSE_TYPES.get(response_type, response_type),
        promise_token=texts[0x12],
        timestamp=_signed(numbers[0x18], 64),
        processing_time_ms=_signed(numbers[0x20], 32),
        server_version=texts[0x2A],
        expires_at=_signed(numbers[0x30], 64),
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
            if tag == 0x0A:
                result.update(_dec_struct(raw, a, b, 1))
            elif tag == 0x12:
                meta_spans.append((a, b))
        meta = _dec_meta(raw, meta_spans) if meta_spans else None
    except _MALFORMED as exc:
        raise _malformed("ToolResponse", exc) from None
    return result, meta


def _enc_tool(tool: Mapping[str, Any]) -> bytes:
    out = _text(b"\n", str(tool["name"]))
    if tool.get("@type"):
        out += _text(b"\x12", str(tool["@type"]))
    if tool.get("description"):
        out += _text(b"\x1a", str(tool["description"]))
    schema = tool.get("inputSchema")
    if schema is not None:
        out += _ld(b'"', encode_struct(schema))
    return out


def encode_tools_list(tools: Iterable[Mapping[str, Any]]) -> bytes:
    """Serialize a ``ToolsList`` from tool definitions as the HTTP binding lists them:
    ``{"name", "@type"?, "description", "inputSchema"}`` (``@type`` goes to ``type``).

    Raises KeyError for a tool without a name, otherwise as :func:`encode_struct`.
    """
    return b"".join(_ld(b"\n", _enc_tool(tool)) for tool in tools)


def _dec_tool(data: bytes, i: int, end: int) -> dict[str, Any]:
    texts = {0x0A: "", 0x12: "", 0x1A: ""}
    schema: dict[str, Any] = {}
    for tag, a, b in _iter_fields(data, i, end):
        if tag in texts:
            texts[tag] = data[a:b].decode()
        elif tag == 0x22:
            schema.update(_dec_struct(data, a, b, 1))
    tool: dict[str, Any] = {"name": texts[0x0A]}
    if texts[0x12]:
        tool["@type"] = texts[0x12]
    tool["description"] = texts[0x1A]
    tool["inputSchema"] = schema
    return tool


def decode_tools_list(data: bytes | bytearray | memoryview) -> list[dict[str, Any]]:
    """Parse ``ToolsList`` bytes into tool definitions (the shape of
    :func:`encode_tools_list`; ``@type`` only when set). Raises CodecError."""
    raw = _as_bytes(data)
    try:
        return [_dec_tool(raw, a, b) for tag, a, b in _iter_fields(raw, 0, len(raw)) if tag == 0x0A]
    except _MALFORMED as exc:
        raise _malformed("ToolsList", exc) from None


# --- google.rpc.Status, for grpc-status-details-bin --------------------------------

_ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo"


def encode_rpc_status(code: int, message: str, details: Iterable[ErrorInfo] = ()) -> bytes:
    """Serialize a ``google.rpc.Status`` whose ``details`` are ``google.rpc.ErrorInfo``
    packed in ``google.protobuf.Any``: the payload of ``grpc-status-details-bin``."""
    out = b"\x08" + _varint(code) if code else b""
    if message:
        out += _text(b"\x12", message)
    for info in details:
        body = _text(b"\n", info.reason) if info.reason else b""
        if info.domain:
            body += _text(b"\x12", info.domain)
        for key, value in info.metadata.items():
            body += _ld(b"\x1a", _text(b"\n", key) + _text(b"\x12", value))
        any_msg = _text(b"\n", _ERROR_INFO_TYPE_URL) + _ld(b"\x12", body)
        out += _ld(b"\x1a", any_msg)
    return out
