"""Protobuf's wire format, the parts mcplite's codec is made of: varints, length-
delimited fields, skipping unknown fields, and the one error a malformed message
raises.  Standard library only.

The Struct decoder (:mod:`mcplite.protocols.protostruct`), the hot path, reads
tags and lengths inline in its one loop and calls these for the rest; the other
messages' codecs (:mod:`~mcplite.protocols.protocalls`,
:mod:`~mcplite.protocols.protobuf`) call them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

__all__ = [
    "MALFORMED",
    "MAX_DEPTH",
    "SMALL_VARINTS",
    "CodecError",
    "as_bytes",
    "iter_fields",
    "length_delimited",
    "malformed",
    "read_length",
    "signed",
    "skip_field",
    "text_field",
    "varint",
    "varint_tail",
]

#: Deepest nesting of dicts and lists accepted, like a JSON parser's limit.
MAX_DEPTH = 100


class CodecError(ValueError):
    """Bytes that are not a valid message of the expected type, or a value nested
    deeper than :data:`MAX_DEPTH`."""


# --- encoding ----------------------------------------------------------------------

SMALL_VARINTS = tuple(bytes((n,)) for n in range(128))  # one-byte varints


def varint(n: int) -> bytes:
    """Unsigned varint; negative numbers as 64-bit two's complement (protobuf int32/64)."""
    if n < 0:
        n &= 0xFFFFFFFFFFFFFFFF
    if n < 0x80:
        return SMALL_VARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    n = len(payload)
    return tag + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + payload


def text_field(tag: bytes, text: str) -> bytes:
    """A string field: tag, length, UTF-8. Raises UnicodeEncodeError for a lone surrogate."""
    raw = text.encode()
    n = len(raw)
    return tag + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + raw


# --- decoding ----------------------------------------------------------------------
#
# Each decoder walks ``data[i:end]``; ``end`` is where its message stops inside the
# enclosing one.  Tags are compared as whole varints (the ints above).
# Reading past ``end`` is caught by the length checks; reading past the buffer
# raises IndexError, which the public functions turn into CodecError.

#: What reading a malformed message raises: CodecError, or Python's own error for
#: reading past the buffer, unpacking a short double or decoding bad UTF-8.  Each
#: public decoder turns any of these into a CodecError that names its message.
MALFORMED = (CodecError, IndexError, struct.error, UnicodeDecodeError)


def varint_tail(data: bytes, i: int, first: int) -> tuple[int, int]:
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


def read_length(data: bytes, i: int, end: int) -> tuple[int, int]:
    """Read a length prefix at ``i``; return the (start, stop) of the payload."""
    n = data[i]
    i += 1
    if n >= 0x80:
        n, i = varint_tail(data, i, n)
    stop = i + n
    if stop > end:
        raise CodecError("a field runs past the end of its message")
    return i, stop


def skip_field(data: bytes, i: int, end: int, tag: int, depth: int = 0) -> int:
    """Skip the payload of an unknown field with this tag; return the next index."""
    wire_type = tag & 7
    if tag >> 3 == 0 or tag > 0xFFFFFFFF:
        raise CodecError("field number out of range")
    if wire_type == 0:
        b = data[i]
        i += 1
        if b >= 0x80:
            _, i = varint_tail(data, i, b)
    elif wire_type == 2:
        _, i = read_length(data, i, end)
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
                inner, i = varint_tail(data, i, inner)
            if inner & 7 == 4:
                if inner >> 3 != tag >> 3:
                    raise CodecError("group ends with the wrong field number")
                break
            i = skip_field(data, i, end, inner, depth + 1)
    else:
        raise CodecError(f"unexpected wire type {wire_type}")
    if i > end:
        raise CodecError("a field runs past the end of its message")
    return i


def as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """``data`` as bytes, copied only when it is not bytes. Raises TypeError otherwise."""
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"expected bytes, not {type(data).__name__}")


def malformed(what: str, exc: Exception) -> CodecError:
    """The CodecError for one of :data:`MALFORMED` caught while reading a ``what``,
    which names it: ``malformed ToolRequest: truncated``."""
    if isinstance(exc, IndexError):
        return CodecError(f"malformed {what}: truncated")
    if isinstance(exc, UnicodeDecodeError):
        return CodecError(f"malformed {what}: a string is not valid UTF-8")
    return CodecError(f"malformed {what}: {exc}")


def signed(number: int, bits: int) -> int:
    """A varint read as an int32 or int64 (``bits``): two's complement."""
    number &= (1 << bits) - 1
    return number - (1 << bits) if number >> (bits - 1) else number


def iter_fields(data: bytes, i: int, end: int) -> Iterator[tuple[int, int, int]]:
    """Yield ``(tag, start, stop)`` of each LEN field and ``(tag, value, 0)`` of each
    VARINT field of ``data[i:end]``, skipping the others (for the less hot messages)."""
    while i < end:
        tag = data[i]
        i += 1
        if tag >= 0x80:
            tag, i = varint_tail(data, i, tag)
            if tag > 0xFFFFFFFF:
                raise CodecError("field number out of range")
        wire_type = tag & 7
        if wire_type == 2 and tag >> 3:
            start, i = read_length(data, i, end)
            yield tag, start, i
        elif wire_type == 0 and tag >> 3:
            number = data[i]
            i += 1
            if number >= 0x80:
                number, i = varint_tail(data, i, number)
            if i > end:
                raise CodecError("a field runs past the end of its message")
            yield tag, number, 0
        else:
            i = skip_field(data, i, end, tag)
