"""mcplite.core.hints (type hints -> JSON Schema) and mcplite.core.schema (the checker)."""

from __future__ import annotations

import enum
import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NewType, NotRequired, Optional, TypedDict, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcplite.core.hints import Field, schema_for_function, schema_for_type
from mcplite.core.schema import FieldError, SchemaError, compile_schema

# --- types used by the tables ------------------------------------------------


class Depth(enum.Enum):
    QUICK = "quick"
    COMPREHENSIVE = "comprehensive"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mixed(enum.Enum):
    A = "a"
    ONE = 1


class Filters(TypedDict):
    tags: list[str]
    author: NotRequired[str]


class Loose(TypedDict, total=False):
    limit: int


@dataclass
class Options:
    depth: int
    verbose: bool = False
    labels: list[str] = field(default_factory=list)


@dataclass
class Node:
    child: Node | None = None


UserId = NewType("UserId", int)

OBJECT = {"type": "object", "additionalProperties": False}

HINTS: list[tuple[Any, dict[str, Any]]] = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (None, {"type": "null"}),
    (type(None), {"type": "null"}),
    (Any, {}),
    (Any | None, {}),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045
    (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),  # noqa: UP007
    (
        str | int | None,
        {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
    ),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (list, {"type": "array"}),
    (Sequence[str], {"type": "array", "items": {"type": "string"}}),
    (tuple[float, ...], {"type": "array", "items": {"type": "number"}}),
    (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
    (frozenset[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (dict[str, Any], {"type": "object"}),
    (dict, {"type": "object"}),
    (Literal["quick", "comprehensive"], {"type": "string", "enum": ["quick", "comprehensive"]}),
    (Literal[1, 2, 3], {"type": "integer", "enum": [1, 2, 3]}),
    (Literal["a", 1], {"enum": ["a", 1]}),
    (Literal[Depth.QUICK], {"type": "string", "enum": ["quick"]}),
    (Depth, {"type": "string", "enum": ["quick", "comprehensive"]}),
    (Priority, {"type": "integer", "enum": [1, 2]}),
    (Mixed, {"enum": ["a", 1]}),
    (
        Filters,
        {
            **OBJECT,
            "properties": {
                "tags": {"type": "array", "items": {"type": "string"}},
                "author": {"type": "string"},
            },
            "required": ["tags"],
        },
    ),
    (Loose, {**OBJECT, "properties": {"limit": {"type": "integer"}}}),
    (
        Options,
        {
            **OBJECT,
            "properties": {
                "depth": {"type": "integer"},
                "verbose": {"type": "boolean", "default": False},
                "labels": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["depth"],
        },
    ),
    (UserId, {"type": "integer"}),
    (Annotated[str, "The text to echo"], {"type": "string", "description": "The text to echo"}),
    (
        Annotated[int, Field("How many", ge=1, le=100)],
        {"type": "integer", "minimum": 1, "maximum": 100, "description": "How many"},
    ),
    (
        Annotated[float, Field(gt=0, lt=1)],
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    ),
    (
        Annotated[str, Field(min_length=1, max_length=5, pattern="^[a-z]+$")],
        {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
    ),
    (
        Annotated[list[str], Field(min_items=1, max_items=3)],
        {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    ),
    (
        Annotated[int | None, Field("Page size", ge=1)],
        {
            "anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}],
            "description": "Page size",
        },
    ),
    (
        Annotated[int, Field(ge=1)] | None,
        {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
    ),
    (
        list[Annotated[str, Field(max_length=3)]],
        {"type": "array", "items": {"type": "string", "maxLength": 3}},
    ),
    (Annotated[Any, Field(ge=0)], {"minimum": 0}),
]


@pytest.mark.parametrize(("hint", "expected"), HINTS, ids=[repr(h) for h, _ in HINTS])
def test_each_type_hint_maps_to_the_expected_schema(hint: Any, expected: dict[str, Any]) -> None:
    assert schema_for_type(hint) == expected


UNSUPPORTED: list[tuple[Any, str]] = [
    (bytes, "unsupported type hint bytes"),
    (list[bytes], "unsupported type hint bytes"),
    (tuple[int, str], "fixed-length tuple"),
    (dict[int, str], "use dict\\[str, ...\\]"),
    (Node, "recursive type Node"),
    (Annotated[str, Field(ge=1)], "minimum apply to integer or number values, not to str"),
    (Annotated[list[int], Field(min_length=1)], "minLength apply to string values"),
]


@pytest.mark.parametrize(("hint", "match"), UNSUPPORTED, ids=[repr(h) for h, _ in UNSUPPORTED])
def test_an_unsupported_type_hint_raises_type_error(hint: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        schema_for_type(hint)


# --- schema_for_function -------------------------------------------------------


class Context:
    pass


def analyze(  # type: ignore[no-untyped-def]  # "anything" is unannotated on purpose
    ctx: Context,
    query: Annotated[str, Field("What to look for", min_length=1)],
    limit: Annotated[int, Field(ge=1, le=100)] = 10,
    depth: Depth = Depth.QUICK,
    mode: Literal["fast", "slow"] = "fast",
    filters: Filters | None = None,
    options: Options | None = None,
    tags: list[str] | None = None,
    anything=None,
) -> str:
    return query


def test_a_function_schema_has_properties_required_and_defaults() -> None:
    schema = schema_for_function(analyze, skip={"ctx"})
    assert schema == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            "depth": {"type": "string", "enum": ["quick", "comprehensive"], "default": "quick"},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
            "filters": {"anyOf": [schema_for_type(Filters), {"type": "null"}], "default": None},
            "options": {"anyOf": [schema_for_type(Options), {"type": "null"}], "default": None},
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
            },
            "anything": {"default": None},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    json.dumps(schema)  # the schema itself is JSON


def test_a_function_schema_without_required_parameters_omits_required() -> None:
    def ping(message: str = "pong") -> str:
        return message

    assert schema_for_function(ping) == {
        "type": "object",
        "properties": {"message": {"type": "string", "default": "pong"}},
        "additionalProperties": False,
    }


def test_a_default_that_is_not_json_is_left_out_but_the_parameter_stays_optional() -> None:
    sentinel = object()

    def tool(x: Any = sentinel, y: tuple[int, ...] = (1, 2)) -> None:
        return None

    schema = schema_for_function(tool)
    assert schema["properties"] == {
        "x": {},
        "y": {"type": "array", "items": {"type": "integer"}, "default": [1, 2]},
    }
    assert "required" not in schema


def test_a_validated_function_schema_fills_defaults_and_reports_nested_paths() -> None:
    check = compile_schema(schema_for_function(analyze, skip={"ctx"}))
    assert check({"query": "x"}) == {
        "query": "x",
        "limit": 10,
        "depth": "quick",
        "mode": "fast",
        "filters": None,
        "options": None,
        "tags": None,
        "anything": None,
    }
    with pytest.raises(SchemaError) as info:
        check(
            {
                "query": "",
                "limit": 500,
                "depth": "deep",
                "filters": {"tags": ["a", "b", 3]},
                "options": {"depth": "2"},
            }
        )
    assert [str(e) for e in info.value.errors] == [
        "query: must be at least 1 characters long",
        "limit: 500 is greater than the maximum of 100",
        'depth: "deep" is not one of "quick", "comprehensive"',
        "filters.tags[2]: expected string, got integer 3",
        'options.depth: expected integer, got string "2"',
    ]


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("def f(*args: int) -> None: ...", r"\*args is not supported"),
        ("def f(**kwargs: int) -> None: ...", r"\*\*kwargs is not supported"),
        ("def f(x: int, /) -> None: ...", "positional-only parameter 'x'"),
        ("def f(data: bytes) -> None: ...", "parameter 'data' of f\\(\\) has type hint bytes"),
        ("def f(x: 'Missing') -> None: ...", "cannot resolve the type hints of f"),
    ],
)
def test_a_function_that_cannot_become_a_tool_raises_type_error(source: str, match: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(TypeError, match=match):
        schema_for_function(namespace["f"])


def test_skipped_parameters_are_left_out_even_when_they_are_variadic() -> None:
    def tool(ctx: Context, text: str, **extra: Any) -> None:
        return None

    schema = schema_for_function(tool, skip=("ctx", "extra"))
    assert schema["properties"] == {"text": {"type": "string"}}
    assert schema["required"] == ["text"]


def test_a_partial_gets_the_schema_of_its_remaining_parameters() -> None:
    def tool(prefix: str, count: int = 1) -> str:
        return prefix * count

    schema = schema_for_function(functools.partial(tool, "x"))
    assert schema["properties"] == {"count": {"type": "integer", "default": 1}}


@dataclass
class Upload:
    data: bytes


class CallableTool:
    name: str = "attribute, not a parameter"

    def __call__(self, text: str, times: int = 1) -> str:
        return text * times


def test_a_callable_instance_gets_the_schema_of_its_call_method() -> None:
    assert schema_for_function(CallableTool()) == {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "default": 1}},
        "required": ["text"],
        "additionalProperties": False,
    }


def test_a_nested_unsupported_hint_names_the_field_and_the_parameter() -> None:
    def tool(upload: Upload) -> None:
        return None

    expected = r"parameter 'upload'.*: field 'data' of Upload: unsupported type hint bytes"
    with pytest.raises(TypeError, match=expected):
        schema_for_function(tool)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Field(min_length=-1),
        lambda: Field(ge=5, le=1),
        lambda: Field(pattern="("),
        lambda: Field(ge=math.nan),
        lambda: Field(max_items=True),
    ],
)
def test_an_inconsistent_field_raises_value_error(make: Any) -> None:
    with pytest.raises(ValueError, match="Field"):
        make()


# --- compile_schema: errors ------------------------------------------------------

ECHO = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}
SEARCH = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 3, "maxLength": 10},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        "filters": {
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        },
        "options": {
            "anyOf": [
                {"type": "object", "properties": {"depth": {"type": "integer"}}},
                {"type": "null"},
            ]
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

ERRORS: list[tuple[str, Any, Any, list[str]]] = [
    (
        "a type error shows the JSON type and value",
        {"type": "integer"},
        "10",
        ['(root): expected integer, got string "10"'],
    ),
    (
        "true is not an integer",
        {"type": "integer"},
        True,
        ["(root): expected integer, got boolean true"],
    ),
    (
        "a fractional float is not an integer",
        {"type": "integer"},
        5.5,
        ["(root): expected integer, got number 5.5"],
    ),
    (
        "true is not a number",
        {"type": "number"},
        False,
        ["(root): expected number, got boolean false"],
    ),
    (
        "nan is not a number",
        {"type": "number"},
        math.nan,
        ["(root): expected a finite number, got nan"],
    ),
    (
        "infinity is not an integer",
        {"type": "integer"},
        math.inf,
        ["(root): expected integer, got number inf"],
    ),
    (
        "a list of types is named in the message",
        {"type": ["string", "null"]},
        1,
        ["(root): expected string or null, got integer 1"],
    ),
    (
        "long values are cut to forty characters",
        {"type": "integer"},
        "x" * 100,
        ['(root): expected integer, got string "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'],
    ),
    (
        "an object is a dict",
        {"type": "object"},
        [1, 2],
        ["(root): expected object, got array [1, 2]"],
    ),
    (
        "an array is a list",
        {"type": "array"},
        {"a": 1},
        ['(root): expected array, got object {"a": 1}'],
    ),
    ("a missing property is required", ECHO, {}, ["text: is required"]),
    (
        "an unexpected property is named",
        ECHO,
        {"text": "hi", "extra": 1},
        ["extra: is not allowed (unexpected property)"],
    ),
    (
        "additionalProperties as a schema checks each extra value",
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"a": 1, "b": "x"},
        ['b: expected integer, got string "x"'],
    ),
    (
        "enum lists the allowed values",
        {"enum": ["quick", "comprehensive"]},
        "x",
        ['(root): "x" is not one of "quick", "comprehensive"'],
    ),
    ("enum does not take true for 1", {"enum": [1, 2]}, True, ["(root): true is not one of 1, 2"]),
    ("const names the constant", {"const": "x"}, "y", ['(root): must be equal to "x"']),
    ("minimum", {"type": "integer", "minimum": 1}, 0, ["(root): 0 is less than the minimum of 1"]),
    (
        "maximum",
        {"type": "integer", "maximum": 100},
        500,
        ["(root): 500 is greater than the maximum of 100"],
    ),
    (
        "exclusiveMinimum",
        {"type": "number", "exclusiveMinimum": 0},
        0,
        ["(root): 0 must be greater than 0"],
    ),
    (
        "exclusiveMaximum",
        {"type": "number", "exclusiveMaximum": 5},
        5,
        ["(root): 5 must be less than 5"],
    ),
    (
        "minLength",
        {"type": "string", "minLength": 3},
        "ab",
        ["(root): must be at least 3 characters long"],
    ),
    (
        "maxLength counts code points",
        {"type": "string", "maxLength": 10},
        "é" * 11,
        ["(root): must be at most 10 characters long"],
    ),
    (
        "pattern",
        {"type": "string", "pattern": "^[0-9]+$"},
        "abc",
        ["(root): \"abc\" does not match the pattern '^[0-9]+$'"],
    ),
    ("minItems", {"type": "array", "minItems": 1}, [], ["(root): must have at least 1 items"]),
    ("maxItems", {"type": "array", "maxItems": 5}, [0] * 6, ["(root): must have at most 5 items"]),
    (
        "uniqueItems treats 1 and 1.0 as equal",
        {"type": "array", "uniqueItems": True},
        [1, 1.0],
        ["(root): has duplicate items"],
    ),
    (
        "uniqueItems compares objects by value",
        {"type": "array", "uniqueItems": True},
        [{"a": [1], "b": 2}, {"b": 2, "a": [1]}],
        ["(root): has duplicate items"],
    ),
    (
        "anyOf of simple types names the types",
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        5,
        ["(root): does not match any of the allowed types (string, null)"],
    ),
    (
        "anyOf of richer schemas says schemas",
        {"anyOf": [{"type": "string", "minLength": 5}, {"type": "string", "pattern": "^a"}]},
        "b",
        ["(root): does not match any of the allowed schemas"],
    ),
    (
        "anyOf with one branch for the type reports that branch",
        {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
        0,
        ["(root): 0 is less than the minimum of 1"],
    ),
    (
        "oneOf matching twice",
        {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        1,
        ["(root): matches more than one of the allowed schemas"],
    ),
    (
        "oneOf matching none",
        {"oneOf": [{"type": "integer"}, {"type": "boolean"}]},
        "x",
        ["(root): does not match any of the allowed types (integer, boolean)"],
    ),
    (
        "allOf collects the errors of every branch",
        {"allOf": [{"type": "string", "minLength": 3}, {"type": "string", "pattern": "^[0-9]"}]},
        "a",
        [
            "(root): must be at least 3 characters long",
            "(root): \"a\" does not match the pattern '^[0-9]'",
        ],
    ),
    (
        "a false schema allows nothing",
        {"type": "object", "properties": {"x": False}},
        {"x": 1},
        ["x: is not allowed"],
    ),
    (
        "every keyword failing on one value is reported",
        {"type": "string", "maxLength": 2, "pattern": "^[0-9]+$"},
        "abc",
        [
            "(root): must be at most 2 characters long",
            "(root): \"abc\" does not match the pattern '^[0-9]+$'",
        ],
    ),
    (
        "several offending fields at once",
        SEARCH,
        {"limit": 500, "filters": {"tags": ["a", "b", 3]}, "options": {"depth": "deep"}, "x": 1},
        [
            "query: is required",
            "limit: 500 is greater than the maximum of 100",
            "filters.tags[2]: expected string, got integer 3",
            'options.depth: expected integer, got string "deep"',
            "x: is not allowed (unexpected property)",
        ],
    ),
    (
        "errors in several items of one array",
        {"type": "array", "items": {"type": "integer"}},
        [1, "a", 2, None],
        ['[1]: expected integer, got string "a"', "[3]: expected integer, got null"],
    ),
    (
        "a non-string key is not an object key",
        {"type": "object"},
        {1: "a"},
        ["(root): has a property name that is not a string: 1"],
    ),
]


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [case[1:] for case in ERRORS],
    ids=[case[0] for case in ERRORS],
)
def test_an_invalid_value_reports_every_offending_field(
    schema: dict[str, Any], value: Any, expected: list[str]
) -> None:
    with pytest.raises(SchemaError) as info:
        compile_schema(schema)(value)
    assert [str(error) for error in info.value.errors] == expected
    assert str(info.value) == "; ".join(expected)


def test_a_field_error_has_a_path_and_a_message() -> None:
    with pytest.raises(SchemaError) as info:
        compile_schema(ECHO)({"text": 5})
    assert info.value.errors == [FieldError("text", "expected string, got integer 5")]


# --- compile_schema: accepted values ---------------------------------------------

DEFAULTS = {
    "type": "object",
    "properties": {
        "limit": {"type": "integer", "default": 10},
        "tags": {"type": "array", "default": []},
        "options": {
            "type": "object",
            "properties": {"depth": {"type": "integer", "default": 1}},
        },
    },
}

ACCEPTED: list[tuple[str, Any, Any, Any]] = [
    ("a missing property gets its default", DEFAULTS, {}, {"limit": 10, "tags": []}),
    (
        "a nested missing property gets its default",
        DEFAULTS,
        {"options": {}},
        {"limit": 10, "tags": [], "options": {"depth": 1}},
    ),
    (
        "a present property keeps its value",
        DEFAULTS,
        {"limit": 3, "tags": ["a"]},
        {"limit": 3, "tags": ["a"]},
    ),
    ("an integral float is an integer", {"type": "integer"}, 5.0, 5),
    (
        "an integral float inside an object becomes an int",
        DEFAULTS,
        {"limit": 5.0, "tags": []},
        {"limit": 5, "tags": []},
    ),
    (
        "an integral float inside an array becomes an int",
        {"type": "array", "items": {"type": "integer"}},
        [1, 2.0],
        [1, 2],
    ),
    (
        "an integral float in an optional integer becomes an int",
        {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        7.0,
        7,
    ),
    ("a number keeps its float", {"type": "number"}, 5.0, 5.0),
    ("a number accepts an int", {"type": "number"}, 5, 5),
    ("a tuple is an array", {"type": "array", "items": {"type": "string"}}, ("a", "b"), ("a", "b")),
    ("an empty schema accepts anything", {}, {"any": [1, {"x": None}]}, {"any": [1, {"x": None}]}),
    ("enum compares 1.0 and 1 by value", {"enum": [1, "a"]}, 1.0, 1.0),
    ("enum of objects compares by value", {"enum": [{"a": [1, 2]}]}, {"a": [1, 2]}, {"a": [1, 2]}),
    ("const", {"const": None}, None, None),
    ("oneOf matching once", {"oneOf": [{"type": "string"}, {"type": "integer"}]}, 3, 3),
    ("allOf threads the value", {"allOf": [{"type": "integer"}, {"minimum": 1}]}, 2.0, 2),
    ("unknown keywords are ignored", {"type": "string", "format": "email", "x-ui": 1}, "a", "a"),
    (
        "annotations are ignored",
        {
            "type": "string",
            "title": "t",
            "description": "d",
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "examples": ["a"],
        },
        "a",
        "a",
    ),
    ("keywords for other types do not apply", {"minimum": 5, "minItems": 3}, "ab", "ab"),
]


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [case[1:] for case in ACCEPTED],
    ids=[case[0] for case in ACCEPTED],
)
def test_a_valid_value_is_returned_with_defaults_filled_in(
    schema: dict[str, Any], value: Any, expected: Any
) -> None:
    result = compile_schema(schema)(value)
    assert result == expected
    assert type(result) is type(expected)


def test_a_valid_value_that_needs_no_change_is_returned_as_is() -> None:
    value = {"query": "abc", "filters": {"tags": ["a"]}, "options": None}
    assert compile_schema(SEARCH)(value) is value


def test_filling_a_default_copies_the_outer_dict_and_leaves_the_input_alone() -> None:
    value: dict[str, Any] = {"options": {"depth": 2}}
    result = compile_schema(DEFAULTS)(value)
    assert value == {"options": {"depth": 2}}
    assert result is not value
    assert result["options"] is value["options"]


def test_a_mutable_default_is_a_fresh_copy_on_every_call() -> None:
    check = compile_schema(DEFAULTS)
    first = check({})
    first["tags"].append("mutated")
    assert check({})["tags"] == []


def test_the_schema_can_change_after_compiling_without_affecting_the_checker() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"x": {"default": [1]}}}
    check = compile_schema(schema)
    schema["properties"]["x"]["default"].append(2)
    schema["type"] = "array"
    assert check({}) == {"x": [1]}


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer"}, "10"),
        ({"type": "integer"}, True),
        ({"type": "integer"}, False),
        ({"type": "number"}, True),
        ({"type": "number"}, "1.5"),
        ({"type": "string"}, 10),
        ({"type": "boolean"}, 1),
        ({"type": "boolean"}, "true"),
        ({"type": "null"}, 0),
        ({"type": "null"}, ""),
        ({"type": "array"}, "abc"),
        ({"type": "object"}, [("a", 1)]),
        ({"enum": [1]}, True),
        ({"const": 0}, False),
    ],
)
def test_values_are_never_coerced(schema: dict[str, Any], value: Any) -> None:
    with pytest.raises(SchemaError):
        compile_schema(schema)(value)


# --- compile_schema: malformed schemas -------------------------------------------


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "strnig"}, "unknown type 'strnig' \\(did you mean 'string'\\?\\)"),
        ({"type": []}, "'type' must be"),
        ({"type": "string", "pattern": "("}, "not a valid regex"),
        ({"type": "integer", "minimum": "1"}, "'minimum' must be a number"),
        ({"exclusiveMinimum": True}, "draft 2020"),
        ({"minLength": -1}, "'minLength' must be a non-negative integer"),
        ({"required": "name"}, "'required' must be a list"),
        ({"properties": []}, "'properties' must be an object"),
        ({"properties": {"x": {"type": "nope"}}}, "at #/properties/x: unknown type 'nope'"),
        ({"items": [{"type": "string"}]}, "'items' as a list"),
        ({"items": 5}, "at #/items: a schema must be an object or a boolean"),
        ({"enum": []}, "'enum' must be a non-empty list"),
        ({"anyOf": []}, "non-empty list of schemas"),
        ({"oneOf": [{"type": "x"}]}, "#/oneOf/0"),
        ({"uniqueItems": "yes"}, "'uniqueItems' must be true or false"),
        ({"$ref": "#/$defs/x"}, "\\$ref '#/\\$defs/x' does not resolve"),
        ({"$ref": "https://example.com/s.json"}, "remote ones are not fetched"),
        ({"$dynamicRef": "#node"}, "\\$dynamicRef is not supported"),
        ({"dependentRequired": {"a": "b"}}, "'dependentRequired' must map"),
        ("string", "a schema must be an object"),
    ],
)
def test_a_malformed_schema_raises_value_error_at_compile_time(schema: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compile_schema(schema)


# --- pathological input ------------------------------------------------------------


def deeply_nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"type": "array"},
        {"type": "array", "uniqueItems": True},
        {"type": "object", "properties": {"x": {}}},
        {"enum": [[1]]},
        {"type": "string"},
    ],
)
def test_a_deeply_nested_value_does_not_exhaust_the_stack(schema: dict[str, Any]) -> None:
    value = deeply_nested(100_000)
    for candidate in (value, [value, value], {"x": value}):
        try:
            compile_schema(schema)(candidate)
        except SchemaError as exc:
            assert len(str(exc)) < 200


def test_errors_from_a_huge_array_are_capped() -> None:
    check = compile_schema({"type": "array", "items": {"type": "integer"}})
    with pytest.raises(SchemaError) as info:
        check(["x"] * 100_000)
    errors = info.value.errors
    assert len(errors) == 101
    assert errors[-1] == FieldError(
        "(root)", "has too many errors; only the first 100 are reported"
    )


def test_a_huge_integer_is_described_without_failing() -> None:
    with pytest.raises(SchemaError, match="expected string, got integer <"):
        compile_schema({"type": "string"})(10**5000)


# --- property: anything JSON either passes or raises SchemaError ---------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(["query", "limit", "filters", "tags", "text", "x"])
            | st.text(max_size=5),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)

PROPERTY_SCHEMAS = [
    ECHO,
    SEARCH,
    DEFAULTS,
    schema_for_function(analyze, skip={"ctx"}),
    {"type": "array", "uniqueItems": True, "items": {"enum": [1, "a", None, [1]]}},
    {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "number", "maximum": 0.5}]},
    {"type": ["string", "integer", "null"], "minLength": 1, "exclusiveMaximum": 10},
]


@pytest.mark.parametrize("schema", PROPERTY_SCHEMAS)
@settings(max_examples=150, deadline=None)
@given(value=json_values)
def test_any_json_value_passes_or_raises_schema_error(schema: dict[str, Any], value: Any) -> None:
    check = compile_schema(schema)
    try:
        result = check(value)
    except SchemaError as exc:
        assert exc.errors
        assert all(isinstance(error, FieldError) for error in exc.errors)
    else:
        assert check(result) == result  # a checked value checks again, unchanged
