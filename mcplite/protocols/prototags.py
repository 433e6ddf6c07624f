"""Every field tag mcplite's protobuf codec reads and writes, and where each comes from.

``proto/mcplite.proto`` is the one source.  Every field tag used by the codec
(field number and wire type) is read once, at import, from the betterproto
classes generated from it (``mcplite.protocols._proto``, rebuilt by
``scripts/gen_proto.sh``) and from betterproto's bundled well-known types
(``Struct``, ``Value``, ``ListValue``, ``Any``); each field's type is checked against
what the codec writes, so a proto change it cannot follow fails at import, not on
the wire.  Only ``google.rpc.Status`` and ``ErrorInfo``, in neither, keep numbers
written here.
"""

from __future__ import annotations

import dataclasses
import typing

import betterproto
import betterproto.lib.google.protobuf as wkt

from ._proto import mcplite as generated
from .protowire import varint

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

# --- field tags, read from the generated code ---------------------------------------
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


def _field(message: type[betterproto.Message], name: str) -> betterproto.FieldMetadata:
    # Generated messages are dataclasses; betterproto.Message is not typed as one.
    for field in dataclasses.fields(message):  # type: ignore[arg-type]
        if field.name == name:
            return betterproto.FieldMetadata.get(field)
    raise LookupError(f"{message.__name__} has no field {name!r}: see proto/mcplite.proto")


def field_tag(
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
    return meta.number << 3 | WIRE_TYPES[proto_type]


def map_entry_tags(
    message: type[betterproto.Message], name: str, key_type: str, value_type: str
) -> tuple[int, int]:
    """The tags of ``key`` and ``value`` in the entries of a map field: protobuf
    defines ``map<K, V>`` as a repeated entry message with ``key = 1`` and ``value = 2``."""
    meta = _field(message, name)
    if meta.proto_type != "map" or meta.map_types != (key_type, value_type):
        raise TypeError(f"{message.__name__}.{name} is not a map<{key_type}, {value_type}>")
    return 1 << 3 | WIRE_TYPES[key_type], 2 << 3 | WIRE_TYPES[value_type]


# google/protobuf/struct.proto, from betterproto's bundled classes.
STRUCT_FIELDS = field_tag(wkt.Struct, "fields", "map")
ENTRY_KEY, ENTRY_VALUE = map_entry_tags(wkt.Struct, "fields", "string", "message")
LIST_VALUES = field_tag(wkt.ListValue, "values", "message", wkt.Value)
VALUE_NULL = field_tag(wkt.Value, "null_value", "enum")
VALUE_NUMBER = field_tag(wkt.Value, "number_value", "double")
VALUE_STRING = field_tag(wkt.Value, "string_value", "string")
VALUE_BOOL = field_tag(wkt.Value, "bool_value", "bool")
VALUE_STRUCT = field_tag(wkt.Value, "struct_value", "message", wkt.Struct)
VALUE_LIST = field_tag(wkt.Value, "list_value", "message", wkt.ListValue)

# proto/mcplite.proto, from the generated classes.
REQUEST_NAME = field_tag(generated.ToolRequest, "name", "string")
REQUEST_ARGUMENTS = field_tag(generated.ToolRequest, "arguments", "message", wkt.Struct)
RESPONSE_RESULT = field_tag(generated.ToolResponse, "result", "message", wkt.Struct)
RESPONSE_META = field_tag(generated.ToolResponse, "meta", "message", generated.ResponseMeta)
META_RESPONSE_TYPE = field_tag(generated.ResponseMeta, "response_type", "enum")
META_PROMISE_TOKEN = field_tag(generated.ResponseMeta, "promise_token", "string")
META_TIMESTAMP = field_tag(generated.ResponseMeta, "timestamp", "int64")
META_PROCESSING_TIME_MS = field_tag(generated.ResponseMeta, "processing_time_ms", "int32")
META_SERVER_VERSION = field_tag(generated.ResponseMeta, "server_version", "string")
META_EXPIRES_AT = field_tag(generated.ResponseMeta, "expires_at", "int64")
META_EXTRA = field_tag(generated.ResponseMeta, "extra", "message", wkt.Struct)
TOOL_NAME = field_tag(generated.Tool, "name", "string")
TOOL_TYPE = field_tag(generated.Tool, "type", "string")
TOOL_DESCRIPTION = field_tag(generated.Tool, "description", "string")
TOOL_INPUT_SCHEMA = field_tag(generated.Tool, "input_schema", "message", wkt.Struct)
TOOL_TITLE = field_tag(generated.Tool, "title", "string")
TOOL_ANNOTATIONS = field_tag(generated.Tool, "annotations", "message", generated.ToolAnnotations)
TOOL_ICONS = field_tag(generated.Tool, "icons", "message", generated.Icon)
TOOLS_LIST_TOOLS = field_tag(generated.ToolsList, "tools", "message", generated.Tool)

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
