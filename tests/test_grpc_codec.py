"""mcplite.protocols.protobuf against itself, official protobuf and the generated code."""

from __future__ import annotations

import contextlib
import enum
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError
from grpc_support import ROOT, protos, to_python
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mcplite.core.outcomes import ResponseType
from mcplite.core.wire import RESPONSE_TYPE_CODES
from mcplite.protocols import prototags, protowire
from mcplite.protocols.generated import mcplite as generated
from mcplite.protocols.protobuf import (
    MAX_DEPTH,
    CodecError,
    ErrorInfo,
    ResponseMeta,
    ResponseTypeCode,
    decode_struct,
    decode_tool_request,
    decode_tool_response,
    decode_tools_list,
    decode_value,
    encode_rpc_status,
    encode_struct,
    encode_tool_request,
    encode_tool_response,
    encode_tools_list,
    encode_value,
)

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)
JSON_OBJECTS = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5)
DECODERS: list[Callable[[bytes], Any]] = [
    decode_value,
    decode_struct,
    decode_tool_request,
    decode_tool_response,
    decode_tools_list,
]


def decode_with_each(data: bytes) -> None:
    """Every decoder either parses ``data`` or raises CodecError (nothing else)."""
    for decoder in DECODERS:
        with contextlib.suppress(CodecError):
            decoder(data)


def official_value(data: bytes) -> Any:
    return to_python(struct_pb2.Value.FromString(data))


def nested_lists(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def nested_list_bytes(levels: int) -> bytes:
    """A serialized Value of ``levels`` nested lists, built without our encoder."""
    value = b"2\x00"  # list_value: an empty ListValue
    for _ in range(levels - 1):
        list_value = b"\n" + protowire.varint(len(value)) + value
        value = b"2" + protowire.varint(len(list_value)) + list_value
    return value


# --- values ---------------------------------------------------------------------------


@given(JSON_VALUES)
def test_json_values_survive_a_round_trip(value: Any) -> None:
    assert decode_value(encode_value(value)) == value


@given(JSON_OBJECTS)
def test_dicts_survive_a_round_trip_as_structs(obj: dict[str, Any]) -> None:
    assert decode_struct(encode_struct(obj)) == obj


@given(JSON_VALUES)
def test_our_bytes_parse_with_official_protobuf_to_the_same_value(value: Any) -> None:
    assert official_value(encode_value(value)) == value


@given(JSON_VALUES)
def test_official_bytes_parse_with_our_codec_to_the_same_value(value: Any) -> None:
    message = struct_pb2.Value()
    json_format.ParseDict(value, message)
    assert decode_value(message.SerializeToString()) == value


@given(JSON_OBJECTS)
def test_structs_interoperate_with_official_protobuf_both_ways(obj: dict[str, Any]) -> None:
    official = struct_pb2.Struct.FromString(encode_struct(obj))
    assert to_python(official) == obj
    assert decode_struct(official.SerializeToString()) == obj


def test_integral_numbers_come_back_as_int_and_others_as_float() -> None:
    for number, expected in [
        (3.0, 3),
        (-7, -7),
        (2**53, 2**53),
        (-(2**53), -(2**53)),
        (2.5, 2.5),
        (1e300, 1e300),
        (2**53 + 2, float(2**53 + 2)),
    ]:
        decoded = decode_value(encode_value(number))
        assert decoded == expected
        assert type(decoded) is type(expected)


def test_an_int_above_2_53_loses_precision_like_a_double() -> None:
    assert decode_value(encode_value(2**60 + 1)) == float(2**60)


def test_an_int_beyond_the_range_of_a_double_raises_value_error() -> None:
    with pytest.raises(ValueError, match="beyond the range of a double"):
        encode_value(10**400)
    with pytest.raises(ValueError, match="beyond the range of a double"):
        encode_struct({"n": [-(10**400)]})


def test_nan_and_infinities_travel_as_doubles() -> None:
    assert math.isnan(decode_value(encode_value(math.nan)))
    assert decode_value(encode_value(math.inf)) == math.inf
    assert official_value(encode_value(-math.inf)) == -math.inf


def test_tuples_become_lists() -> None:
    assert decode_value(encode_value((1, ("a", None)))) == [1, ["a", None]]


@pytest.mark.parametrize("value", [{1, 2}, b"bytes", object(), 1j, {"a": [frozenset()]}])
def test_a_non_json_value_raises_type_error(value: Any) -> None:
    with pytest.raises(TypeError, match="not a JSON value"):
        encode_value(value)


def test_non_string_keys_are_converted_as_json_dumps_does() -> None:
    obj = {1: "a", 2.5: "b", False: "c", None: "d"}
    assert decode_struct(encode_struct(obj)) == {"1": "a", "2.5": "b", "false": "c", "null": "d"}
    with pytest.raises(TypeError, match="keys must be"):
        encode_struct({(1, 2): "tuple key"})


def test_subclasses_of_json_types_encode_as_their_base_type() -> None:
    class Color(str, enum.Enum):  # noqa: UP042 (a str mixin, not StrEnum, on purpose)
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    value = {"color": Color.RED, "level": Level.HIGH}
    assert decode_value(encode_value(value)) == {"color": "red", "level": 3}


def test_a_string_that_is_not_valid_unicode_raises_value_error() -> None:
    with pytest.raises(ValueError):
        encode_value("\ud800")


def test_encode_struct_wants_a_dict() -> None:
    with pytest.raises(TypeError, match="made from a dict"):
        encode_struct([1, 2])  # type: ignore[arg-type]


# --- nesting ---------------------------------------------------------------------------


def test_nesting_up_to_the_limit_works_both_ways() -> None:
    value = nested_lists(MAX_DEPTH)
    assert decode_value(encode_value(value)) == value
    assert decode_value(nested_list_bytes(MAX_DEPTH)) == value


def test_nesting_beyond_the_limit_raises_codec_error_both_ways() -> None:
    with pytest.raises(CodecError, match="nested deeper"):
        encode_value(nested_lists(MAX_DEPTH + 1))
    with pytest.raises(CodecError, match="nested deeper"):
        decode_value(nested_list_bytes(MAX_DEPTH + 1))


def test_very_deep_bytes_raise_codec_error_not_recursion_error() -> None:
    data = nested_list_bytes(3000)
    decode_with_each(data)


def test_a_cyclic_value_raises_codec_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(CodecError):
        encode_value(cycle)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(CodecError):
        encode_struct(loop)


# --- malformed bytes -------------------------------------------------------------------


@settings(max_examples=500)
@given(st.binary(max_size=64))
@example(b"\x0a\x80")  # truncated varint
@example(b"\x0a\x05ab")  # length past the end
@example(b"\x12\x02\x0a\x02")  # nested length past its parent
@example(b"\x0a\x02\xff\xfe")  # invalid UTF-8
@example(b"\x0b\x0c")  # an empty group, then a stray end
@example(b"\x08" + b"\xff" * 11)  # varint longer than 10 bytes
@example(b"\x00\x00")  # field number 0
def test_any_bytes_decode_or_raise_codec_error_only(data: bytes) -> None:
    decode_with_each(data)


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    """A valid ToolResponse with a few bytes changed, inserted or cut."""
    result = draw(JSON_OBJECTS)
    data = bytearray(encode_tool_response(result, ResponseMeta(1, "tok", 5, 6, "v", 7, result)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if action == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif action == "insert":
            data.insert(at, draw(st.integers(0, 255)))
        elif action == "delete":
            del data[at]
        else:
            del data[at:]
    return bytes(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(corrupted())
def test_corrupted_messages_decode_or_raise_codec_error_only(data: bytes) -> None:
    decode_with_each(data)


@settings(max_examples=500)
@given(st.binary(max_size=48) | JSON_VALUES.map(encode_value))
@example(b"*\x04\n\x02\n\x00*\x04\n\x02\n\x00")  # struct_value twice: merged
@example(b"2\x02\n\x002\x02\n\x00")  # list_value twice: concatenated
@example(b"\x9a\x00")  # string_value with a two-byte tag
@example(b"\x0b\x0c\x08\x00")  # an unknown empty group, then null_value
@example(b"2\x04\n\x01\x08\x00")  # a varint running on past its item
@example(b"*\x06\n\x04\n\x00\x18\x00")  # an entry with an unknown field: dropped
@example(b"*\x07\n\x02\x12\x03\x1a\x01a")  # an entry's value past its entry, not its Struct
@example(b"2\x02\n\x05\x1a\x03abc")  # a list item past its list, not the Value
def test_bytes_agree_with_official_protobuf_on_what_is_a_value(data: bytes) -> None:
    try:
        official: Any = official_value(data)
    except DecodeError:
        official = DecodeError
    try:
        ours: Any = decode_value(data)
    except CodecError:
        ours = DecodeError
    if isinstance(official, float) and math.isnan(official):
        assert isinstance(ours, float) and math.isnan(ours)
    else:
        assert ours == official


# A Struct whose one entry has a value that runs past the entry (not past the Struct).
PAST_ITS_ENTRY = b"\x0a\x02\x12\x05\x1a\x03abc"


@pytest.mark.parametrize(
    ("decoder", "data", "message"),
    [
        (decode_tool_request, b"\x12\x09" + PAST_ITS_ENTRY, "ToolRequest"),
        (decode_tool_response, b"\x0a\x09" + PAST_ITS_ENTRY, "ToolResponse"),
        (decode_struct, PAST_ITS_ENTRY, "Struct"),
        (decode_value, b"\x2a\x09" + PAST_ITS_ENTRY, "Value"),
        (decode_tools_list, b"\x0a\x0b\x22\x09" + PAST_ITS_ENTRY, "ToolsList"),
    ],
)
def test_a_decoding_error_names_the_message_being_decoded(
    decoder: Callable[[bytes], Any], data: bytes, message: str
) -> None:
    with pytest.raises(CodecError, match=f"^malformed {message}: a field runs past the end"):
        decoder(data)


def test_decoders_accept_bytearray_and_memoryview() -> None:
    data = encode_tool_request("echo", {"text": "hi"})
    assert decode_tool_request(bytearray(data)) == ("echo", {"text": "hi"})
    assert decode_tool_request(memoryview(data)) == ("echo", {"text": "hi"})
    with pytest.raises(TypeError):
        decode_tool_request("not bytes")  # type: ignore[arg-type]


# --- ToolRequest / ToolResponse / ToolsList against code generated from both protos ----


@pytest.mark.parametrize("proto", ["ours", "spec"])
@given(name=st.text(max_size=20), arguments=JSON_OBJECTS)
def test_a_tool_request_from_generated_code_decodes(
    proto: str, name: str, arguments: dict[str, Any]
) -> None:
    request = protos()[proto].request(name, arguments)
    assert decode_tool_request(request.SerializeToString()) == (name, arguments)


@pytest.mark.parametrize("proto", ["ours", "spec"])
def test_our_tool_request_parses_with_generated_code(proto: str) -> None:
    cls = protos()[proto].cls("ToolRequest")
    request = cls.FromString(encode_tool_request("search_documents", {"query": "q", "limit": 5}))
    assert request.name == "search_documents"
    assert to_python(request.arguments) == {"query": "q", "limit": 5}


def test_a_tool_request_without_arguments_has_empty_arguments() -> None:
    assert decode_tool_request(b"") == ("", {})
    assert decode_tool_request(encode_tool_request("redeem")) == ("redeem", {})


def test_a_repeated_arguments_field_merges_as_in_protobuf() -> None:
    data = encode_tool_request("t", {"a": 1}) + encode_tool_request("", {"b": 2})
    official = protos()["ours"].cls("ToolRequest").FromString(data)
    expected = ("t", {"a": 1, "b": 2})
    assert decode_tool_request(data) == ("t", to_python(official.arguments)) == expected


FULL_META = ResponseMeta(
    response_type=ResponseTypeCode.PROMISE,
    promise_token="prom_a7b9c2d4e6f8",
    timestamp=1704110400000,
    processing_time_ms=145,
    server_version="0.1.0",
    expires_at=1704111000000,
    extra={"estimated_completion": "2024-01-01T12:05:00Z", "progress": {"progress": 0.5}},
)
RESULT = {"content": [{"document_id": "doc_123", "title": "MCP", "score": 0.5}]}


def test_a_tool_response_parses_with_our_proto_with_every_meta_field() -> None:
    ours = protos()["ours"]
    response = ours.cls("ToolResponse").FromString(encode_tool_response(RESULT, FULL_META))
    assert to_python(response.result) == RESULT
    meta = response.meta
    assert meta.response_type == ours.enum_value("ResponseType", "PROMISE")
    assert meta.promise_token == "prom_a7b9c2d4e6f8"
    assert meta.timestamp == 1704110400000
    assert meta.processing_time_ms == 145
    assert meta.server_version == "0.1.0"
    assert meta.expires_at == 1704111000000
    assert to_python(meta.extra) == FULL_META.extra


def test_a_tool_response_parses_with_the_spec_proto_which_ignores_our_additions() -> None:
    spec = protos()["spec"]
    response = spec.cls("ToolResponse").FromString(encode_tool_response(RESULT, FULL_META))
    assert to_python(response.result) == RESULT
    assert response.meta.response_type == spec.enum_value("ResponseType", "PROMISE")
    assert response.meta.promise_token == "prom_a7b9c2d4e6f8"
    assert response.meta.timestamp == 1704110400000
    assert response.meta.processing_time_ms == 145


@pytest.mark.parametrize("proto", ["ours", "spec"])
def test_request_for_more_resource_reads_as_4_with_either_proto(proto: str) -> None:
    meta = ResponseMeta(response_type=ResponseTypeCode.REQUEST_FOR_MORE_RESOURCE)
    response = protos()[proto].cls("ToolResponse").FromString(encode_tool_response({}, meta))
    assert response.meta.response_type == 4


@pytest.mark.parametrize("proto", ["ours", "spec"])
def test_a_streamed_part_has_no_meta(proto: str) -> None:
    data = encode_tool_response({"partial": "Quarterly Report"}, None)
    response = protos()[proto].cls("ToolResponse").FromString(data)
    assert not response.HasField("meta")
    assert to_python(response.result) == {"partial": "Quarterly Report"}
    assert decode_tool_response(data) == ({"partial": "Quarterly Report"}, None)


# Strings of 4 KiB and more, and Structs and lists whose payload is, are written as
# pieces joined once (not copied into each enclosing message): the same bytes.
LONG_TEXT = st.text(min_size=1, max_size=4).map(lambda s: s * 1100)  # 1,100 to 17,600 bytes
LONG_VALUES = st.recursive(
    JSON_SCALARS | LONG_TEXT | st.lists(st.integers(-(2**53), 2**53), min_size=400, max_size=450),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=8), LONG_VALUES, max_size=3))
def test_long_strings_and_long_lists_interoperate_with_official_protobuf_both_ways(
    obj: dict[str, Any],
) -> None:
    official = struct_pb2.Struct.FromString(encode_struct(obj))
    assert to_python(official) == obj
    assert decode_struct(official.SerializeToString()) == obj
    assert official_value(encode_value(obj)) == obj


@pytest.mark.parametrize("proto", ["ours", "spec"])
def test_a_result_of_a_mebibyte_parses_with_either_proto_and_decodes_back(proto: str) -> None:
    text = "Grüße, \u4e16\u754c! " * (1 << 16)  # 1.3 MiB of UTF-8, multi-byte characters in it
    records = [{"id": i, "name": f"record {i}", "tags": ["a", "b"]} for i in range(20_000)]
    result = {"content": [{"type": "text", "text": text}, {"records": records}]}
    data = encode_tool_response(result, FULL_META)
    response = protos()[proto].cls("ToolResponse").FromString(data)
    assert to_python(response.result) == result
    assert response.meta.promise_token == FULL_META.promise_token
    assert decode_tool_response(data) == (result, FULL_META)
    assert decode_tool_response(response.SerializeToString())[0] == result


def test_a_long_string_that_is_not_valid_utf8_is_malformed() -> None:
    data = bytearray(encode_value("x" * 5000))
    data[-1] = 0xFF
    with pytest.raises(CodecError, match="not valid UTF-8"):
        decode_value(bytes(data))


def test_an_answer_with_default_meta_still_has_meta_set() -> None:
    data = encode_tool_response({}, ResponseMeta())
    response = protos()["spec"].cls("ToolResponse").FromString(data)
    assert response.HasField("meta") and response.HasField("result")


def test_negative_and_wide_meta_numbers_survive() -> None:
    meta = ResponseMeta(ResponseTypeCode.FAILURE, "", -1, -5, "", 2**62, None)
    response = protos()["ours"].cls("ToolResponse").FromString(encode_tool_response(None, meta))
    assert (response.meta.timestamp, response.meta.processing_time_ms) == (-1, -5)
    assert decode_tool_response(encode_tool_response(None, meta)) == ({}, meta)
    with pytest.raises(ValueError, match="int32"):
        encode_tool_response({}, ResponseMeta(processing_time_ms=2**31))


def test_a_tool_response_from_our_proto_decodes_with_every_meta_field() -> None:
    ours = protos()["ours"]
    response = ours.cls("ToolResponse")()
    json_format.ParseDict(RESULT, response.result)
    response.meta.response_type = 1
    response.meta.promise_token = "prom_a7b9c2d4e6f8"
    response.meta.timestamp = 1704110400000
    response.meta.processing_time_ms = 145
    response.meta.server_version = "0.1.0"
    response.meta.expires_at = 1704111000000
    json_format.ParseDict(FULL_META.extra, response.meta.extra)
    assert decode_tool_response(response.SerializeToString()) == (RESULT, FULL_META)


def test_an_unknown_response_type_stays_a_number() -> None:
    _, meta = decode_tool_response(b"\x12\x02\x08\x09")
    assert meta is not None and meta.response_type == 9


TOOLS = [
    {
        "name": "search_documents",
        "@type": "query",
        "description": "Search through available documents",
        "inputSchema": {
            "type": "object",
            "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
        },
    },
    {"name": "echo", "description": "", "inputSchema": {}},
]


@pytest.mark.parametrize("proto", ["ours", "spec"])
def test_a_tools_list_interoperates_with_generated_code(proto: str) -> None:
    cls = protos()[proto].cls("ToolsList")
    parsed = cls.FromString(encode_tools_list(TOOLS))
    assert [(t.name, t.type, t.description) for t in parsed.tools] == [
        ("search_documents", "query", "Search through available documents"),
        ("echo", "", ""),
    ]
    assert to_python(parsed.tools[0].input_schema) == TOOLS[0]["inputSchema"]
    assert decode_tools_list(parsed.SerializeToString()) == TOOLS


@given(name=st.text(min_size=1, max_size=10), description=st.text(max_size=10), schema=JSON_OBJECTS)
def test_a_tools_list_with_any_schema_parses_with_official_protobuf(
    name: str, description: str, schema: dict[str, Any]
) -> None:
    tools = [{"name": name, "description": description, "inputSchema": schema}]
    (tool,) = protos()["ours"].cls("ToolsList").FromString(encode_tools_list(tools)).tools
    assert (tool.name, tool.description, to_python(tool.input_schema)) == (
        name,
        description,
        schema,
    )


def test_a_tool_whose_schema_is_nested_to_the_limit_is_listed() -> None:
    # betterproto's own Struct serializer overflows Python's stack at this depth.
    schema: dict[str, Any] = {}
    for _ in range(MAX_DEPTH - 1):
        schema = {"a": schema}
    data = encode_tools_list([{"name": "deep", "description": "", "inputSchema": schema}])
    assert decode_tools_list(data) == [{"name": "deep", "description": "", "inputSchema": schema}]


def test_an_rpc_status_parses_as_google_rpc_status_with_error_info() -> None:
    rpc = protos()["rpc"]
    info = ErrorInfo("TOOL_NOT_FOUND", "mcplite", {"suggestion": "Did you mean 'echo'?"})
    status = rpc.cls("google.rpc.Status").FromString(
        encode_rpc_status(5, "Tool not found: ech", [info])
    )
    assert (status.code, status.message) == (5, "Tool not found: ech")
    (detail,) = status.details
    assert detail.type_url == "type.googleapis.com/google.rpc.ErrorInfo"
    error_info = rpc.cls("google.rpc.ErrorInfo").FromString(detail.value)
    assert (error_info.reason, error_info.domain) == ("TOOL_NOT_FOUND", "mcplite")
    assert dict(error_info.metadata) == {"suggestion": "Did you mean 'echo'?"}


# --- one source: proto/mcplite.proto, the generated code, and the codec's tags --------

_WIRE_TYPES = {
    FieldDescriptor.TYPE_BOOL: 0,
    FieldDescriptor.TYPE_ENUM: 0,
    FieldDescriptor.TYPE_INT32: 0,
    FieldDescriptor.TYPE_INT64: 0,
    FieldDescriptor.TYPE_DOUBLE: 1,
    FieldDescriptor.TYPE_STRING: 2,
    FieldDescriptor.TYPE_MESSAGE: 2,  # maps too: repeated entry messages
}
# The codec's tag constants and the field each must be, as protoc reads the protos.
CODEC_TAGS = [
    ("ours", "google.protobuf.Struct", "fields", "STRUCT_FIELDS"),
    ("ours", "google.protobuf.Struct.FieldsEntry", "key", "ENTRY_KEY"),
    ("ours", "google.protobuf.Struct.FieldsEntry", "value", "ENTRY_VALUE"),
    ("ours", "google.protobuf.ListValue", "values", "LIST_VALUES"),
    ("ours", "google.protobuf.Value", "null_value", "VALUE_NULL"),
    ("ours", "google.protobuf.Value", "number_value", "VALUE_NUMBER"),
    ("ours", "google.protobuf.Value", "string_value", "VALUE_STRING"),
    ("ours", "google.protobuf.Value", "bool_value", "VALUE_BOOL"),
    ("ours", "google.protobuf.Value", "struct_value", "VALUE_STRUCT"),
    ("ours", "google.protobuf.Value", "list_value", "VALUE_LIST"),
    ("ours", "mcplite.ToolRequest", "name", "REQUEST_NAME"),
    ("ours", "mcplite.ToolRequest", "arguments", "REQUEST_ARGUMENTS"),
    ("ours", "mcplite.ToolResponse", "result", "RESPONSE_RESULT"),
    ("ours", "mcplite.ToolResponse", "meta", "RESPONSE_META"),
    ("ours", "mcplite.ResponseMeta", "response_type", "META_RESPONSE_TYPE"),
    ("ours", "mcplite.ResponseMeta", "promise_token", "META_PROMISE_TOKEN"),
    ("ours", "mcplite.ResponseMeta", "timestamp", "META_TIMESTAMP"),
    ("ours", "mcplite.ResponseMeta", "processing_time_ms", "META_PROCESSING_TIME_MS"),
    ("ours", "mcplite.ResponseMeta", "server_version", "META_SERVER_VERSION"),
    ("ours", "mcplite.ResponseMeta", "expires_at", "META_EXPIRES_AT"),
    ("ours", "mcplite.ResponseMeta", "extra", "META_EXTRA"),
    ("ours", "mcplite.Tool", "name", "TOOL_NAME"),
    ("ours", "mcplite.Tool", "type", "TOOL_TYPE"),
    ("ours", "mcplite.Tool", "description", "TOOL_DESCRIPTION"),
    ("ours", "mcplite.Tool", "input_schema", "TOOL_INPUT_SCHEMA"),
    ("ours", "mcplite.Tool", "title", "TOOL_TITLE"),
    ("ours", "mcplite.Tool", "annotations", "TOOL_ANNOTATIONS"),
    ("ours", "mcplite.Tool", "icons", "TOOL_ICONS"),
    ("ours", "mcplite.ToolsList", "tools", "TOOLS_LIST_TOOLS"),
    ("rpc", "google.rpc.Status", "code", "STATUS_CODE_B"),
    ("rpc", "google.rpc.Status", "message", "STATUS_MESSAGE_B"),
    ("rpc", "google.rpc.Status", "details", "STATUS_DETAILS_B"),
    ("rpc", "google.rpc.ErrorInfo", "reason", "ERROR_INFO_REASON_B"),
    ("rpc", "google.rpc.ErrorInfo", "domain", "ERROR_INFO_DOMAIN_B"),
    ("rpc", "google.rpc.ErrorInfo", "metadata", "ERROR_INFO_METADATA_B"),
    ("rpc", "google.rpc.ErrorInfo.MetadataEntry", "key", "METADATA_KEY_B"),
    ("rpc", "google.rpc.ErrorInfo.MetadataEntry", "value", "METADATA_VALUE_B"),
]


@pytest.mark.parametrize(("proto", "message", "field", "constant"), CODEC_TAGS)
def test_each_codec_tag_is_the_field_number_and_wire_type_in_the_proto(
    proto: str, message: str, field: str, constant: str
) -> None:
    descriptor = protos()[proto].pool.FindMessageTypeByName(message).fields_by_name[field]
    tag = descriptor.number << 3 | _WIRE_TYPES[descriptor.type]
    ours = getattr(prototags, constant)
    assert ours == (protowire.varint(tag) if constant.endswith("_B") else tag)


def test_a_proto_field_the_codec_cannot_write_fails_at_import_not_on_the_wire() -> None:
    with pytest.raises(TypeError, match=r"ToolRequest\.name is string"):
        prototags.field_tag("mcplite.ToolRequest", "name", "int32")
    with pytest.raises(TypeError, match=r"ToolRequest\.arguments"):
        prototags.field_tag("mcplite.ToolRequest", "arguments", "message", "mcplite.ResponseMeta")
    with pytest.raises(LookupError, match="no field 'deadline'"):
        prototags.field_tag("mcplite.ToolRequest", "deadline", "int64")
    with pytest.raises(TypeError, match="map<string, string>"):
        prototags.map_entry_tags("google.protobuf.Struct", "fields", "string", "string")
    with pytest.raises(LookupError, match=r"no message mcplite\.Deadline"):
        prototags.field_tag("mcplite.Deadline", "seconds", "int64")


def test_response_type_numbers_agree_across_proto_generated_code_and_wire_table() -> None:
    ours = protos()["ours"]
    by_name = {code.name: int(code) for code in ResponseTypeCode}
    assert by_name == {name: ours.enum_value("ResponseType", name) for name in by_name}
    assert {n.lower().replace("_", "-"): v for n, v in by_name.items()} == RESPONSE_TYPE_CODES
    assert {kind.value for kind in ResponseType} == set(RESPONSE_TYPE_CODES)
    assert ResponseTypeCode is generated.ResponseType


def test_the_call_codec_and_the_grpc_client_load_no_server_code() -> None:
    # The field tags come from the descriptors, not the betterproto classes, whose
    # module imports grpclib.server (for the service base class).
    code = (
        "import sys, mcplite.protocols.protocalls, mcplite.client.grpc; "
        "loaded = [m for m in sys.modules if m.startswith(('grpclib.server', "
        "'mcplite.bindings', 'mcplite.protocols.generated.mcplite'))]; "
        "assert loaded == [], loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_codec_imports_on_its_own_without_the_grpc_server() -> None:
    # The client imports the codec first; the codec imports mcplite.protocols.generated.
    code = (
        "import sys, mcplite.protocols.protobuf; "
        "assert 'mcplite.bindings.grpc.service' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_committed_betterproto_code_is_what_the_proto_generates(tmp_path: Path) -> None:
    # Fails, never skips: the test extra has grpcio-tools and betterproto[compiler].
    plugin = Path(sys.executable).parent / "protoc-gen-python_betterproto"
    assert plugin.exists(), "install the test extra: betterproto[compiler] is missing"
    fresh = tmp_path / "_proto"
    done = subprocess.run(
        ["sh", str(ROOT / "scripts" / "gen_proto.sh")],
        env={**os.environ, "PYTHON": sys.executable, "OUT": str(fresh)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr

    def sources(root: Path) -> dict[str, str]:
        return {path.relative_to(root).as_posix(): path.read_text() for path in root.rglob("*.py")}

    committed = sources(ROOT / "mcplite" / "protocols" / "generated")
    assert committed == sources(fresh), "run scripts/gen_proto.sh"
    assert "mcplite/__init__.py" in committed
    # The standard health and reflection messages, and the descriptors reflection sends.
    assert {
        "grpc/health/v1/__init__.py",
        "grpc/reflection/v1/__init__.py",
        "descriptors.py",
    } <= set(committed)


def test_betterproto_reads_our_tool_response_meta() -> None:
    from mcplite.protocols.generated import mcplite as generated

    response = generated.ToolResponse().parse(encode_tool_response(RESULT, FULL_META))
    assert response.meta.response_type == generated.ResponseType.PROMISE
    assert response.meta.promise_token == "prom_a7b9c2d4e6f8"
    assert response.meta.expires_at == 1704111000000


def test_a_number_cut_short_is_a_codec_error_which_is_a_value_error() -> None:
    with pytest.raises(CodecError):
        decode_value(b"\x11\x00\x00")
    assert issubclass(CodecError, ValueError)
