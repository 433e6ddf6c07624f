"""``google.protobuf.Struct``, ``Value`` and ``ListValue`` <-> plain JSON-like values.

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

A repeated scalar keeps its last value, a repeated message merges (Struct fields
update, list values extend); a ``Value`` with no kind set is ``None``; a Struct
entry carrying unknown fields is dropped, as upb does.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from .prototags import (
    ENTRY_KEY,
    ENTRY_KEY_B,
    ENTRY_VALUE,
    ENTRY_VALUE_B,
    LIST_VALUES,
    LIST_VALUES_B,
    STRUCT_FIELDS,
    STRUCT_FIELDS_B,
    VALUE_BOOL,
    VALUE_LIST,
    VALUE_LIST_B,
    VALUE_NULL,
    VALUE_NUMBER,
    VALUE_NUMBER_B,
    VALUE_STRING,
    VALUE_STRING_B,
    VALUE_STRUCT,
    VALUE_STRUCT_B,
)
from .protowire import (
    MALFORMED,
    MAX_DEPTH,
    SMALL_VARINTS,
    CodecError,
    as_bytes,
    length_delimited,
    malformed,
    skip_field,
    text_field,
    varint,
    varint_tail,
)

__all__ = [
    "Pieces",
    "decode_struct",
    "decode_value",
    "encode_struct",
    "encode_value",
    "read_struct",
    "struct_payload",
    "write_struct",
]

_pack_double = struct.Struct("<d").pack
_unpack_double = struct.Struct("<d").unpack_from
_EXACT = float(1 << 53)  # largest magnitude at which every integer is a double

# The LEN fields of the three messages, whose length the decoder reads itself (any
# other field is skipped by protowire.skip_field), and the Value kinds that are varints.
_LEN_FIELDS = frozenset(
    (STRUCT_FIELDS, ENTRY_KEY, ENTRY_VALUE, LIST_VALUES, VALUE_STRING, VALUE_STRUCT, VALUE_LIST)
)
_VALUE_VARINT_KINDS = (VALUE_BOOL, VALUE_NULL)
_VALUE_NONE = varint(VALUE_NULL) + b"\x00"  # NULL_VALUE, NullValue's only value (0)
_VALUE_TRUE = varint(VALUE_BOOL) + b"\x01"
_VALUE_FALSE = varint(VALUE_BOOL) + b"\x00"


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
        return text_field(ENTRY_KEY_B, key)
    field = _KEY_CACHE.get(key)
    if field is None:
        field = text_field(ENTRY_KEY_B, key)
        if len(_KEY_CACHE) >= _KEY_CACHE_LIMIT:
            _KEY_CACHE.clear()
        _KEY_CACHE[key] = field
    return field


# A long payload is not copied into each message that encloses it.  Each message is
# made as bytes, and prefixed with its tag and length by the one around it, which
# copies it once per level: cheap for small ones, but a long string in a tool's result
# was copied eight times (a few milliseconds for a MiB).  So a string whose UTF-8 is
# _LONG bytes or more, and a Struct or list whose payload is, stay Pieces: the
# enclosing messages put their heads before them, and the message is joined once, at
# the end.


class Pieces(list[bytes]):
    """A payload too long to copy into each enclosing message: its pieces, in order, to
    be joined once, and ``size``, their total length."""

    __slots__ = ("size",)

    def __init__(self, pieces: list[bytes], size: int) -> None:
        super().__init__(pieces)
        self.size = size

    def prefixed(self, tag: bytes) -> Pieces:
        """These pieces as the payload of the length-delimited field ``tag``."""
        n = self.size
        head = tag + (SMALL_VARINTS[n] if n < 0x80 else varint(n))
        self.insert(0, head)
        self.size += len(head)
        return self


#: Bytes (of a string's UTF-8, or of a Struct or list payload) from which a payload
#: stays :class:`Pieces`.
_LONG = 1 << 12


def _long_string(raw: bytes) -> Pieces:
    """The Value payload of a long string: its UTF-8 a piece of its own."""
    return Pieces([raw], len(raw)).prefixed(VALUE_STRING_B)


def _delimited(tag: bytes, payload: bytes | Pieces) -> bytes | Pieces:
    """The length-delimited field ``tag`` around ``payload``."""
    if isinstance(payload, Pieces):
        return payload.prefixed(tag)
    return length_delimited(tag, payload)


def struct_payload(obj: Mapping[Any, Any], depth: int) -> bytes | Pieces:
    """Struct payload: one ``fields`` map entry per item, as bytes or (when long)
    :class:`Pieces`; ``depth`` is the nesting of ``obj`` (1 for a message's own Struct
    field).  Raises as :func:`encode_struct`."""
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    out: list[bytes] = []
    pieces = False
    value_msg: bytes | Pieces
    for key, value in obj.items():
        key_field = _KEY_CACHE.get(key) if type(key) is str else None
        if key_field is None:
            key_field = _key_field(key)
        if type(value) is str:  # the common case, inlined
            raw = value.encode()
            n = len(raw)
            if n >= _LONG:
                _splice_entry(out, key_field, _long_string(raw))
                pieces = True
                continue
            value_msg = VALUE_STRING_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + raw
        else:
            value_msg = _enc_value(value, depth)
            if isinstance(value_msg, Pieces):
                _splice_entry(out, key_field, value_msg)
                pieces = True
                continue
        n = len(value_msg)
        entry = (
            key_field + ENTRY_VALUE_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + value_msg
        )
        n = len(entry)
        out.append(STRUCT_FIELDS_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + entry)
    if pieces:
        return Pieces(out, sum(map(len, out)))
    payload = b"".join(out)
    return payload if len(payload) < _LONG else Pieces([payload], len(payload))


def _splice_entry(out: list[bytes], key_field: bytes, value_msg: Pieces) -> None:
    """Append a ``fields`` entry whose value is Pieces: its head, then the pieces."""
    n = value_msg.size
    entry = key_field + ENTRY_VALUE_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n))
    n += len(entry)
    out.append(STRUCT_FIELDS_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + entry)
    out += value_msg


def write_struct(obj: Mapping[Any, Any], depth: int) -> bytes:
    """:func:`struct_payload` as bytes."""
    payload = struct_payload(obj, depth)
    return b"".join(payload) if isinstance(payload, Pieces) else payload


def _enc_list(items: Iterable[Any], depth: int) -> bytes | Pieces:
    """ListValue payload: one ``values`` entry per item."""
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    out: list[bytes] = []
    pieces = False
    for item in items:
        value_msg = _enc_value(item, depth)
        if type(value_msg) is not bytes:  # Pieces: spliced in after the item's head
            assert isinstance(value_msg, Pieces)
            n = value_msg.size
            out.append(LIST_VALUES_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)))
            out += value_msg
            pieces = True
            continue
        n = len(value_msg)
        out.append(LIST_VALUES_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + value_msg)
    if pieces:
        return Pieces(out, sum(map(len, out)))
    payload = b"".join(out)
    return payload if len(payload) < _LONG else Pieces([payload], len(payload))


def _enc_value(value: Any, depth: int) -> bytes | Pieces:
    """Value payload: exactly one ``kind`` field (oneof members are always written)."""
    kind = type(value)
    if kind is str:
        raw: bytes = value.encode()
        n = len(raw)
        if n < _LONG:
            return VALUE_STRING_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + raw
        return _long_string(raw)
    if kind is dict:
        payload = struct_payload(value, depth + 1)
        if type(payload) is bytes:
            n = len(payload)
            return VALUE_STRUCT_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + payload
        return _delimited(VALUE_STRUCT_B, payload)
    if kind is list or kind is tuple:
        payload = _enc_list(value, depth + 1)
        if type(payload) is bytes:
            n = len(payload)
            return VALUE_LIST_B + (SMALL_VARINTS[n] if n < 0x80 else varint(n)) + payload
        return _delimited(VALUE_LIST_B, payload)
    if kind is bool:
        return _VALUE_TRUE if value else _VALUE_FALSE
    if kind is float:
        return VALUE_NUMBER_B + _pack_double(value)
    if kind is int:
        return VALUE_NUMBER_B + _pack_double(_as_double(value))
    if value is None:
        return _VALUE_NONE
    # Subclasses (str enums, IntEnum, OrderedDict, named tuples): same as their base.
    if isinstance(value, str):  # its own text, as json.dumps writes it
        raw = value.encode()
        return length_delimited(VALUE_STRING_B, raw) if len(raw) < _LONG else _long_string(raw)
    if isinstance(value, bool):
        return _VALUE_TRUE if value else _VALUE_FALSE
    if isinstance(value, int | float):
        return VALUE_NUMBER_B + _pack_double(_as_double(value))
    if isinstance(value, dict):
        return _delimited(VALUE_STRUCT_B, struct_payload(value, depth + 1))
    if isinstance(value, list | tuple):
        return _delimited(VALUE_LIST_B, _enc_list(value, depth + 1))
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
    return write_struct(obj, 1)


def encode_value(value: Any) -> bytes:
    """Serialize any JSON-like value as a ``google.protobuf.Value`` message.

    Raises as :func:`encode_struct`.
    """
    message = _enc_value(value, 0)
    return b"".join(message) if isinstance(message, Pieces) else message


# --- decoding Struct / Value / ListValue -----------------------------------------


# One loop reads a Struct or a ListValue whole: its own fields, its entries' fields
# and their Values' fields.  Two flags say which of these messages it is in, and
# ``stop`` where that message ends; only a Value's own Struct or ListValue recurses.
# This is the hot path of every call, and the shape is chosen by measurement: a
# function called per field (a tag and length reader) made decoding 40% slower, and a
# loop per message (Struct, entry, ListValue, Value) repeats the same field reading
# in each while costing about the same as these flags.
#
# A length is not checked against the enclosing message where it is read: ``i`` only
# grows, so a field that runs past its message leaves ``i > stop`` when that message
# ends, and it raises there, with what the field held still discarded.


def _decode(
    data: bytes, i: int, end: int, depth: int, out: Any, struct: bool, in_value: bool
) -> None:
    """Add what ``data[i:end]`` holds to ``out``: the entries of a Struct (``struct``,
    ``out`` a dict), the items of a ListValue, or with ``in_value`` the one Value it
    is (``out`` a list).  ``depth`` is the nesting of that Struct or ListValue.
    Raises CodecError, or one of MALFORMED (which the public decoders turn into
    CodecError)."""
    if depth > MAX_DEPTH:
        raise CodecError(f"value nested deeper than {MAX_DEPTH} levels")
    item = STRUCT_FIELDS if struct else LIST_VALUES
    stop = end  # where the message being read ends
    in_entry = False  # in a Struct entry (and in its Value when in_value)
    value: Any = None
    # Entering an entry sets entry_end, its key, and whether all its fields are
    # known (upb drops an entry that has an unknown field).
    while True:
        while i < stop:
            tag = data[i]
            i += 1
            if tag >= 0x80:
                tag, i = varint_tail(data, i, tag)
            if tag in _LEN_FIELDS:
                n = data[i]
                i += 1
                if n >= 0x80:
                    n, i = varint_tail(data, i, n)
                if in_value:  # a repeated member: the last one wins, messages merge
                    if tag == VALUE_STRING:  # a long one decoded in place, not sliced first
                        value = (
                            data[i : i + n].decode()
                            if n < _LONG
                            else str(memoryview(data)[i : i + n], "utf-8")
                        )
                    elif tag == VALUE_STRUCT:
                        if type(value) is not dict:
                            value = {}
                        _decode(data, i, i + n, depth + 1, value, True, False)
                    elif tag == VALUE_LIST:
                        if type(value) is not list:
                            value = []
                        _decode(data, i, i + n, depth + 1, value, False, False)
                    i += n
                elif in_entry:
                    if tag == ENTRY_KEY:  # a repeated key or value: the last one wins
                        key = data[i : i + n].decode()
                        i += n
                    elif tag == ENTRY_VALUE:
                        in_value = True
                        value = None
                        stop = i + n
                    else:
                        i += n
                        known = False
                elif tag == item:
                    value = None
                    stop = i + n
                    if struct:
                        in_entry = True
                        entry_end = stop
                        key = ""
                        known = True
                    else:
                        in_value = True
                else:
                    i += n
            elif in_value and tag == VALUE_NUMBER:
                number: float = _unpack_double(data, i)[0]
                i += 8
                exact = number.is_integer() and -_EXACT <= number <= _EXACT
                value = int(number) if exact else number
            elif in_value and tag in _VALUE_VARINT_KINDS:
                b = data[i]
                i += 1
                if b >= 0x80:
                    b, i = varint_tail(data, i, b)
                value = (b != 0) if tag == VALUE_BOOL else None
            else:
                i = skip_field(data, i, stop, tag)
                if in_entry and not in_value:
                    known = False
        # The message being read ends here: give it to the one around it.
        if i > stop:
            raise CodecError("a field runs past the end of its message")
        if in_value:  # a list item, or an entry's value
            in_value = False
            if not in_entry:
                out.append(value)
                stop = end
                continue
            if i != entry_end:  # the entry goes on after its value, or the value overran it
                if i < entry_end:
                    stop = entry_end
                    continue
                raise CodecError("a field runs past the end of its message")
        elif not in_entry:  # the Struct or ListValue itself
            return
        if known:
            out[key] = value
        in_entry = False
        stop = end


def read_struct(
    data: bytes, i: int, end: int, depth: int, into: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The Struct whose payload is ``data[i:end]``, at nesting ``depth``, merged into
    ``into`` if given (as a repeated message field merges).  Raises CodecError, or one
    of MALFORMED (which the public decoders turn into CodecError)."""
    out: dict[str, Any] = {} if into is None else into
    _decode(data, i, end, depth, out, True, False)
    return out


def decode_struct(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Parse a serialized ``google.protobuf.Struct`` into a dict. Raises CodecError."""
    raw = as_bytes(data)
    try:
        return read_struct(raw, 0, len(raw), 1)
    except MALFORMED as exc:
        raise malformed("Struct", exc) from None


def decode_value(data: bytes | bytearray | memoryview) -> Any:
    """Parse a serialized ``google.protobuf.Value``. Raises CodecError."""
    raw = as_bytes(data)
    out: list[Any] = []
    try:
        _decode(raw, 0, len(raw), 0, out, False, True)
    except MALFORMED as exc:
        raise malformed("Value", exc) from None
    return out[0]
