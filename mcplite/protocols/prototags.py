"""Every field tag mcplite's protobuf codec reads and writes, and where each comes from.

``proto/mcplite.proto`` is the one source.  Every field tag used by the codec
(field number and wire type) is read once, at import, from the descriptors that
``scripts/gen_proto.sh`` generates from it beside the betterproto classes
(``mcplite.protocols.generated.descriptors``: each proto file's serialized
``FileDescriptorProto``, ``google/protobuf/struct.proto`` included); each field's
type is checked against what the codec writes, so a proto change it cannot
follow fails at import, not on the wire.  Only ``google.rpc.Status`` and
``ErrorInfo``, in none of those files, keep numbers written here.

The descriptors are plain bytes: reading them imports neither the betterproto
classes nor, through them, grpclib's server, so a client that only calls tools
loads neither.
"""

from __future__ import annotations

from typing import NamedTuple

import betterproto

from .generated.descriptors import FILES
from .protowire import iter_fields, varint

__all__ = [
    "ENTRY_KEY",
    "ENTRY_KEY_B",
    "ENTRY_VALUE",
    "ENTRY_VALUE_B",
    "ERROR_INFO_DOMAIN_B",
    "ERROR_INFO_METADATA_B",
    "ERROR_INFO_REASON_B",
    "LIST_VALUES",
    "LIST_VALUES_B",
    "METADATA_KEY_B",
    "METADATA_VALUE_B",
    "META_EXPIRES_AT",
    "META_EXPIRES_AT_B",
    "META_EXTRA",
    "META_EXTRA_B",
    "META_PROCESSING_TIME_MS",
    "META_PROCESSING_TIME_MS_B",
    "META_PROMISE_TOKEN",
    "META_PROMISE_TOKEN_B",
    "META_RESPONSE_TYPE",
    "META_RESPONSE_TYPE_B",
    "META_SERVER_VERSION",
    "META_SERVER_VERSION_B",
    "META_TIMESTAMP",
    "META_TIMESTAMP_B",
    "REQUEST_ARGUMENTS",
    "REQUEST_ARGUMENTS_B",
    "REQUEST_NAME",
    "REQUEST_NAME_B",
    "RESPONSE_META",
    "RESPONSE_META_B",
    "RESPONSE_RESULT",
    "RESPONSE_RESULT_B",
    "STATUS_CODE_B",
    "STATUS_DETAILS_B",
    "STATUS_MESSAGE_B",
    "STRUCT_FIELDS",
    "STRUCT_FIELDS_B",
    "TOOLS_LIST_TOOLS",
    "TOOLS_LIST_TOOLS_B",
    "TOOL_ANNOTATIONS",
    "TOOL_DESCRIPTION",
    "TOOL_ICONS",
    "TOOL_INPUT_SCHEMA",
    "TOOL_INPUT_SCHEMA_B",
    "TOOL_NAME",
    "TOOL_TITLE",
    "TOOL_TYPE",
    "VALUE_BOOL",
    "VALUE_LIST",
    "VALUE_LIST_B",
    "VALUE_NULL",
    "VALUE_NUMBER",
    "VALUE_NUMBER_B",
    "VALUE_STRING",
    "VALUE_STRING_B",
    "VALUE_STRUCT",
    "VALUE_STRUCT_B",
    "WIRE_TYPES",
    "field_tag",
    "map_entry_tags",
]

# --- the proto files' messages, read from their descriptors -------------------------
#
# google/protobuf/descriptor.proto: the fields of FileDescriptorProto,
# DescriptorProto, FieldDescriptorProto and MessageOptions read here.
_FILE_PACKAGE = 2 << 3 | 2
_FILE_MESSAGE_TYPE = 4 << 3 | 2
_MESSAGE_NAME = 1 << 3 | 2
_MESSAGE_FIELD = 2 << 3 | 2
_MESSAGE_NESTED_TYPE = 3 << 3 | 2
_MESSAGE_OPTIONS = 7 << 3 | 2
_OPTIONS_MAP_ENTRY = 7 << 3 | 0
_FIELD_NAME = 1 << 3 | 2
_FIELD_NUMBER = 3 << 3 | 0
_FIELD_TYPE = 5 << 3 | 0
_FIELD_TYPE_NAME = 6 << 3 | 2

#: FieldDescriptorProto.Type -> the type's name, as betterproto names it.
_TYPE_NAMES = {
    1: betterproto.TYPE_DOUBLE,
    2: betterproto.TYPE_FLOAT,
    3: betterproto.TYPE_INT64,
    4: betterproto.TYPE_UINT64,
    5: betterproto.TYPE_INT32,
    6: betterproto.TYPE_FIXED64,
    7: betterproto.TYPE_FIXED32,
    8: betterproto.TYPE_BOOL,
    9: betterproto.TYPE_STRING,
    11: betterproto.TYPE_MESSAGE,
    12: betterproto.TYPE_BYTES,
    13: betterproto.TYPE_UINT32,
    14: betterproto.TYPE_ENUM,
    15: betterproto.TYPE_SFIXED32,
    16: betterproto.TYPE_SFIXED64,
    17: betterproto.TYPE_SINT32,
    18: betterproto.TYPE_SINT64,
}

#: The files whose messages the codec writes.
_PROTO_FILES = ("google/protobuf/struct.proto", "mcplite.proto")


class _Field(NamedTuple):
    number: int
    type: str  # betterproto's name: "string", "message", "map", ...
    type_name: str  # a message or enum field's type ("google.protobuf.Struct"), else ""


def _read_message(
    data: bytes, start: int, stop: int, scope: str, messages: dict[str, dict[str, _Field]]
) -> set[str]:
    """Add the DescriptorProto at ``data[start:stop]`` (and its nested types) to
    ``messages``; return the full names of the map entry types among them."""
    name = ""
    fields: list[tuple[str, int, int, str]] = []
    nested: list[tuple[int, int]] = []
    map_entry = False
    for tag, a, b in iter_fields(data, start, stop):
        if tag == _MESSAGE_NAME:
            name = data[a:b].decode()
        elif tag == _MESSAGE_NESTED_TYPE:
            nested.append((a, b))
        elif tag == _MESSAGE_OPTIONS:
            map_entry = any(t == _OPTIONS_MAP_ENTRY and v for t, v, _ in iter_fields(data, a, b))
        elif tag == _MESSAGE_FIELD:
            field = {_FIELD_NUMBER: 0, _FIELD_TYPE: 0}
            texts = {_FIELD_NAME: "", _FIELD_TYPE_NAME: ""}
            for item, x, y in iter_fields(data, a, b):
                if item in field:
                    field[item] = x
                elif item in texts:
                    texts[item] = data[x:y].decode()
            type_name = texts[_FIELD_TYPE_NAME].lstrip(".")
            fields.append((texts[_FIELD_NAME], field[_FIELD_NUMBER], field[_FIELD_TYPE], type_name))
    full_name = f"{scope}.{name}" if scope else name
    map_entries = {full_name} if map_entry else set()
    for a, b in nested:
        map_entries |= _read_message(data, a, b, full_name, messages)
    messages[full_name] = {
        field_name: _Field(
            number, "map" if type_name in map_entries else _TYPE_NAMES[kind], type_name
        )
        for field_name, number, kind, type_name in fields
    }
    return map_entries


def _read_files() -> dict[str, dict[str, _Field]]:
    """Every message of the files the codec writes: full name -> field name -> field."""
    messages: dict[str, dict[str, _Field]] = {}
    for file_name in _PROTO_FILES:
        data = FILES[file_name]
        package = ""
        types: list[tuple[int, int]] = []
        for tag, a, b in iter_fields(data, 0, len(data)):
            if tag == _FILE_PACKAGE:
                package = data[a:b].decode()
            elif tag == _FILE_MESSAGE_TYPE:
                types.append((a, b))
        for a, b in types:
            _read_message(data, a, b, package, messages)
    return messages


_MESSAGES = _read_files()


# --- field tags -----------------------------------------------------------------------
#
# A tag is ``field number << 3 | wire type``.  Decoders compare ints (a whole tag
# varint as read); encoders write the same tag as bytes (the ``_B`` names).  All are
# module constants computed once here, used exactly as literals would be.

WIRE_TYPES: dict[str, int] = {
    **dict.fromkeys(betterproto.WIRE_VARINT_TYPES, 0),
    **dict.fromkeys(betterproto.WIRE_FIXED_64_TYPES, 1),
    **dict.fromkeys(betterproto.WIRE_LEN_DELIM_TYPES, 2),
    **dict.fromkeys(betterproto.WIRE_FIXED_32_TYPES, 5),
}


def _field(message: str, name: str) -> _Field:
    fields = _MESSAGES.get(message)
    if fields is None:
        raise LookupError(f"no message {message}: see proto/mcplite.proto")
    field = fields.get(name)
    if field is None:
        raise LookupError(f"{message} has no field {name!r}: see proto/mcplite.proto")
    return field


def field_tag(message: str, name: str, proto_type: str, of: str | None = None) -> int:
    """The tag of field ``name`` of ``message`` (a full name: ``mcplite.ToolRequest``),
    checking that it is still the ``proto_type`` (and, for a message field, of the
    message ``of``) written here.  Raises LookupError for an unknown message or
    field, TypeError for a field of another type."""
    field = _field(message, name)
    kind = field.type_name if of is not None else None
    if field.type != proto_type or kind != of:
        raise TypeError(
            f"{message}.{name} is {field.type} {kind or ''} in the proto, "
            f"but mcplite.protocols.protobuf writes {proto_type} {of or ''}"
        )
    return field.number << 3 | WIRE_TYPES[proto_type]


def map_entry_tags(message: str, name: str, key_type: str, value_type: str) -> tuple[int, int]:
    """The tags of ``key`` and ``value`` in the entries of a map field: protobuf
    defines ``map<K, V>`` as a repeated entry message with ``key = 1`` and ``value = 2``.
    Raises LookupError for an unknown field, TypeError for one of another type."""
    field = _field(message, name)
    entry = _MESSAGES.get(field.type_name, {})
    key, value = entry.get("key"), entry.get("value")
    if (
        field.type != "map"
        or key is None
        or value is None
        or (key.type, value.type)
        != (
            key_type,
            value_type,
        )
    ):
        raise TypeError(f"{message}.{name} is not a map<{key_type}, {value_type}>")
    return key.number << 3 | WIRE_TYPES[key_type], value.number << 3 | WIRE_TYPES[value_type]


# google/protobuf/struct.proto.
STRUCT_FIELDS = field_tag("google.protobuf.Struct", "fields", "map")
ENTRY_KEY, ENTRY_VALUE = map_entry_tags("google.protobuf.Struct", "fields", "string", "message")
LIST_VALUES = field_tag("google.protobuf.ListValue", "values", "message", "google.protobuf.Value")
VALUE_NULL = field_tag("google.protobuf.Value", "null_value", "enum")
VALUE_NUMBER = field_tag("google.protobuf.Value", "number_value", "double")
VALUE_STRING = field_tag("google.protobuf.Value", "string_value", "string")
VALUE_BOOL = field_tag("google.protobuf.Value", "bool_value", "bool")
VALUE_STRUCT = field_tag(
    "google.protobuf.Value", "struct_value", "message", "google.protobuf.Struct"
)
VALUE_LIST = field_tag(
    "google.protobuf.Value", "list_value", "message", "google.protobuf.ListValue"
)

# proto/mcplite.proto.
REQUEST_NAME = field_tag("mcplite.ToolRequest", "name", "string")
REQUEST_ARGUMENTS = field_tag(
    "mcplite.ToolRequest", "arguments", "message", "google.protobuf.Struct"
)
RESPONSE_RESULT = field_tag("mcplite.ToolResponse", "result", "message", "google.protobuf.Struct")
RESPONSE_META = field_tag("mcplite.ToolResponse", "meta", "message", "mcplite.ResponseMeta")
META_RESPONSE_TYPE = field_tag("mcplite.ResponseMeta", "response_type", "enum")
META_PROMISE_TOKEN = field_tag("mcplite.ResponseMeta", "promise_token", "string")
META_TIMESTAMP = field_tag("mcplite.ResponseMeta", "timestamp", "int64")
META_PROCESSING_TIME_MS = field_tag("mcplite.ResponseMeta", "processing_time_ms", "int32")
META_SERVER_VERSION = field_tag("mcplite.ResponseMeta", "server_version", "string")
META_EXPIRES_AT = field_tag("mcplite.ResponseMeta", "expires_at", "int64")
META_EXTRA = field_tag("mcplite.ResponseMeta", "extra", "message", "google.protobuf.Struct")
TOOL_NAME = field_tag("mcplite.Tool", "name", "string")
TOOL_TYPE = field_tag("mcplite.Tool", "type", "string")
TOOL_DESCRIPTION = field_tag("mcplite.Tool", "description", "string")
TOOL_INPUT_SCHEMA = field_tag("mcplite.Tool", "input_schema", "message", "google.protobuf.Struct")
TOOL_TITLE = field_tag("mcplite.Tool", "title", "string")
TOOL_ANNOTATIONS = field_tag("mcplite.Tool", "annotations", "message", "mcplite.ToolAnnotations")
TOOL_ICONS = field_tag("mcplite.Tool", "icons", "message", "mcplite.Icon")
TOOLS_LIST_TOOLS = field_tag("mcplite.ToolsList", "tools", "message", "mcplite.Tool")

# The tags the encoders write, as bytes.
STRUCT_FIELDS_B = varint(STRUCT_FIELDS)
ENTRY_KEY_B = varint(ENTRY_KEY)
ENTRY_VALUE_B = varint(ENTRY_VALUE)
LIST_VALUES_B = varint(LIST_VALUES)
VALUE_NUMBER_B = varint(VALUE_NUMBER)
VALUE_STRING_B = varint(VALUE_STRING)
VALUE_STRUCT_B = varint(VALUE_STRUCT)
VALUE_LIST_B = varint(VALUE_LIST)
REQUEST_NAME_B = varint(REQUEST_NAME)
REQUEST_ARGUMENTS_B = varint(REQUEST_ARGUMENTS)
RESPONSE_RESULT_B = varint(RESPONSE_RESULT)
RESPONSE_META_B = varint(RESPONSE_META)
META_RESPONSE_TYPE_B = varint(META_RESPONSE_TYPE)
META_PROMISE_TOKEN_B = varint(META_PROMISE_TOKEN)
META_TIMESTAMP_B = varint(META_TIMESTAMP)
META_PROCESSING_TIME_MS_B = varint(META_PROCESSING_TIME_MS)
META_SERVER_VERSION_B = varint(META_SERVER_VERSION)
META_EXPIRES_AT_B = varint(META_EXPIRES_AT)
META_EXTRA_B = varint(META_EXTRA)
TOOL_INPUT_SCHEMA_B = varint(TOOL_INPUT_SCHEMA)
TOOLS_LIST_TOOLS_B = varint(TOOLS_LIST_TOOLS)


# --- google.rpc.Status, for grpc-status-details-bin --------------------------------
#
# google/rpc/status.proto and google/rpc/error_details.proto (googleapis) are in
# neither our proto nor betterproto's bundled types, so their numbers are written
# here; tests parse these bytes with classes protoc builds from those files.  The
# google.protobuf.Any around each detail is betterproto's.


def _rpc_tag(number: int, proto_type: str) -> bytes:
    return varint(number << 3 | WIRE_TYPES[proto_type])


STATUS_CODE_B = _rpc_tag(1, "int32")
STATUS_MESSAGE_B = _rpc_tag(2, "string")
STATUS_DETAILS_B = _rpc_tag(3, "message")  # repeated google.protobuf.Any
ERROR_INFO_REASON_B = _rpc_tag(1, "string")
ERROR_INFO_DOMAIN_B = _rpc_tag(2, "string")
ERROR_INFO_METADATA_B = _rpc_tag(3, "map")  # map<string, string>: entries key 1, value 2
METADATA_KEY_B = _rpc_tag(1, "string")
METADATA_VALUE_B = _rpc_tag(2, "string")
