"""mcplite.core.schema with hand-written JSON Schema 2020-12: ``$ref`` (pointers,
anchors, embedded ``$id``), recursion, ``not``, ``if``/``then``/``else`` and the
``dependent*`` keywords, with the conformance suite's own schema as the example."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcplite.core.schema import SchemaError, compile_schema

#: The inputSchema of the conformance suite's ``json_schema_2020_12_tool``
#: (``@modelcontextprotocol/conformance``, scenario ``json-schema-2020-12``).
CONFORMANCE_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

TREE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#"}},
    },
    "required": ["value"],
    "additionalProperties": False,
}


def errors_of(schema: Any, value: Any) -> list[str]:
    with pytest.raises(SchemaError) as info:
        compile_schema(schema)(value)
    return [str(error) for error in info.value.errors]


# --- the conformance suite's schema ------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        {"name": "Ada", "email": "ada@example.com"},
        {"contactMethod": "phone", "phone": "555-0100"},
        {"contactMethod": "email", "email": "a@b", "address": {"city": "Paris"}},
        {"phone": "555", "email": "a@b", "address": {"street": "1 Main St", "extra": 1}},
    ],
)
def test_the_conformance_schema_accepts_what_it_describes(value: dict[str, Any]) -> None:
    assert compile_schema(CONFORMANCE_2020_12)(value) == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {"email": "a@b", "address": {"city": 3}},
            ["address.city: expected string, got integer 3"],
        ),
        ({"email": "a@b", "address": "Paris"}, ['address: expected object, got string "Paris"']),
        ({"contactMethod": "phone", "email": "a@b"}, ["phone: is required"]),
        (
            {"contactMethod": "fax", "email": "a@b"},
            ['contactMethod: "fax" is not one of "phone", "email"'],
        ),
        ({"email": "a@b", "zip": "75001"}, ["zip: is not allowed (unexpected property)"]),
        (
            {"name": "Ada"},
            ["(root): does not match any of the allowed schemas", "email: is required"],
        ),
    ],
)
def test_the_conformance_schema_names_the_offending_field(
    value: dict[str, Any], expected: list[str]
) -> None:
    assert errors_of(CONFORMANCE_2020_12, value) == expected


def test_compiling_leaves_the_schema_exactly_as_it_was() -> None:
    schema = copy.deepcopy(CONFORMANCE_2020_12)
    compile_schema(schema)({"email": "a@b"})
    assert schema == CONFORMANCE_2020_12


# --- every local form of $ref ----------------------------------------------------------

POSITIVE = {"type": "integer", "minimum": 1}

REFS: list[tuple[str, dict[str, Any]]] = [
    ("$defs", {"$defs": {"n": POSITIVE}, "$ref": "#/$defs/n"}),
    ("definitions (draft 7 spelling)", {"definitions": {"n": POSITIVE}, "$ref": "#/definitions/n"}),
    (
        "a pointer to another property",
        {"properties": {"a": POSITIVE, "b": {"$ref": "#/properties/a"}}, "$ref": "#/properties/b"},
    ),
    (
        "a pointer into a list",
        {"$defs": {"n": {"anyOf": [{"type": "string"}, POSITIVE]}}, "$ref": "#/$defs/n/anyOf/1"},
    ),
    ("an escaped pointer (~1 is /)", {"$defs": {"a/b": POSITIVE}, "$ref": "#/$defs/a~1b"}),
    ("an escaped pointer (~0 is ~)", {"$defs": {"a~b": POSITIVE}, "$ref": "#/$defs/a~0b"}),
    ("a percent-encoded pointer", {"$defs": {"a b": POSITIVE}, "$ref": "#/$defs/a%20b"}),
    ("an $anchor", {"$defs": {"n": {"$anchor": "positive", **POSITIVE}}, "$ref": "#positive"}),
    (
        "the root's own $id, absolute",
        {
            "$id": "https://example.com/n.json",
            "$defs": {"n": POSITIVE},
            "$ref": "https://example.com/n.json#/$defs/n",
        },
    ),
    (
        "an embedded resource by its relative $id",
        {
            "$id": "https://example.com/root.json",
            "$defs": {"n": {"$id": "positive.json", **POSITIVE}},
            "$ref": "positive.json",
        },
    ),
    (
        "a pointer inside an embedded resource is relative to it",
        {
            "$id": "https://example.com/root.json",
            "$defs": {
                "inner": {
                    "$id": "inner.json",
                    "$defs": {"n": POSITIVE},
                    "$ref": "#/$defs/n",
                }
            },
            "$ref": "inner.json",
        },
    ),
]


@pytest.mark.parametrize("schema", [case[1] for case in REFS], ids=[case[0] for case in REFS])
def test_every_local_reference_form_checks_with_its_target(schema: dict[str, Any]) -> None:
    check = compile_schema(schema)
    assert check(3) == 3
    assert check(3.0) == 3  # the target's normalisation applies too
    assert errors_of(schema, 0) == ["(root): 0 is less than the minimum of 1"]
    assert errors_of(schema, "3") == ['(root): expected integer, got string "3"']


def test_a_reference_with_sibling_keywords_applies_both() -> None:
    schema = {"$defs": {"n": POSITIVE}, "$ref": "#/$defs/n", "maximum": 10}
    assert compile_schema(schema)(10) == 10
    assert errors_of(schema, 11) == ["(root): 11 is greater than the maximum of 10"]
    assert errors_of(schema, 0) == ["(root): 0 is less than the minimum of 1"]


def test_a_referenced_object_fills_its_defaults() -> None:
    schema = {
        "$defs": {
            "page": {"type": "object", "properties": {"size": {"type": "integer", "default": 20}}}
        },
        "type": "object",
        "properties": {"page": {"$ref": "#/$defs/page"}},
    }
    assert compile_schema(schema)({"page": {}}) == {"page": {"size": 20}}


def test_a_definition_referenced_from_many_places_is_compiled_once() -> None:
    # d0 refers to d1 twice, d1 to d2 twice, ...: compiled per reference this would be
    # 2**40 compilations; once per target it is 41.
    defs: dict[str, Any] = {"d40": {"type": "integer"}}
    for n in range(40):
        ref = {"$ref": f"#/$defs/d{n + 1}"}
        defs[f"d{n}"] = {"type": "object", "properties": {"a": ref, "b": ref}}
    started = time.perf_counter()
    check = compile_schema({"$defs": defs, "$ref": "#/$defs/d0"})
    assert time.perf_counter() - started < 1.0
    assert check({"a": {"b": {}}}) == {"a": {"b": {}}}
    assert errors_of({"$defs": defs, "$ref": "#/$defs/d0"}, {"a": {"b": 7}}) == [
        "a.b: expected object, got integer 7"
    ]


# --- recursion --------------------------------------------------------------------------


def test_a_recursive_schema_checks_a_tree_and_names_the_deep_field() -> None:
    check = compile_schema(TREE)
    tree = {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]}
    assert check(tree) == tree
    bad = {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": "4"}]}]}
    assert errors_of(TREE, bad) == [
        'children[1].children[0].value: expected integer, got string "4"'
    ]


def test_mutually_recursive_definitions_compile_and_check() -> None:
    schema = {
        "$defs": {
            "folder": {
                "type": "object",
                "properties": {"files": {"type": "array", "items": {"$ref": "#/$defs/entry"}}},
            },
            "entry": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/folder"}]},
        },
        "$ref": "#/$defs/folder",
    }
    check = compile_schema(schema)
    assert check({"files": ["a", {"files": ["b", {"files": []}]}]})
    assert errors_of(schema, {"files": [{"files": [1]}]}) == [
        "files[0].files[0]: expected object, got integer 1"
    ]


def test_a_value_nested_deeper_than_the_stack_is_an_error_not_a_crash() -> None:
    value: dict[str, Any] = {"value": 0}
    for depth in range(10_000):
        value = {"value": depth, "children": [value]}
    assert errors_of(TREE, value) == ["(root): is nested too deeply to check"]


# --- refused at compile time -------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"$ref": "#"}, r"\$ref '#' refers to itself without a step into the value"),
        ({"anyOf": [{"type": "null"}, {"$ref": "#"}]}, "refers to itself"),
        (
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"not": {"$ref": "#/$defs/a"}}},
                "$ref": "#/$defs/a",
            },
            r"at #/\$defs/b/not: \$ref '#/\$defs/a' refers to itself",
        ),
        ({"$ref": "https://example.com/address.json"}, "remote ones are not fetched"),
        ({"$ref": "address.json"}, r"\$ref 'address.json' is not in this schema"),
        ({"$id": "https://example.com/a.json", "$ref": "b.json#/x"}, "is not in this schema"),
        (
            {"properties": {"a": {"$ref": "#/$defs/missing"}}},
            r"at #/properties/a: \$ref .* does not resolve",
        ),
        ({"$defs": {}, "$ref": "#/$defs/missing"}, "nothing at 'missing'"),
        ({"$ref": "#nowhere"}, "no \\$anchor named 'nowhere'"),
        ({"$ref": 5}, "'\\$ref' must be a string"),
        (
            {"$defs": {"bad": {"type": "nope"}}, "$ref": "#/$defs/bad"},
            r"at #/\$defs/bad: unknown type",
        ),
    ],
)
def test_a_reference_that_cannot_be_compiled_raises_value_error(schema: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compile_schema(schema)


def test_an_unreferenced_definition_is_not_compiled() -> None:
    # Only what a value can reach is compiled: $defs is a library, not a schema.
    assert compile_schema({"$defs": {"unused": {"type": "nope"}}, "type": "integer"})(1) == 1


def test_a_reference_inside_data_is_data() -> None:
    # const, enum, default and examples hold values, not schemas: no $ref is followed there.
    schema = {"const": {"$ref": "#/nowhere"}, "examples": [{"$ref": "https://x"}]}
    assert compile_schema(schema)({"$ref": "#/nowhere"}) == {"$ref": "#/nowhere"}


# --- not, if/then/else, dependentRequired, dependentSchemas -----------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"not": {"type": "string"}}, 1, None),
        (
            {"not": {"type": "string"}},
            "a",
            ["(root): matches the schema it must not match ('not')"],
        ),
        (
            {"if": {"minimum": 10}, "then": {"maximum": 20}},
            30,
            ["(root): 30 is greater than the maximum of 20"],
        ),
        ({"if": {"minimum": 10}, "then": {"maximum": 20}}, 5, None),
        (
            {"if": {"minimum": 10}, "else": {"minimum": 0}},
            -1,
            ["(root): -1 is less than the minimum of 0"],
        ),
        ({"if": {"minimum": 10}, "else": {"minimum": 0}}, 50, None),
        ({"if": {"type": "string"}}, 5, None),  # no then/else: if decides nothing
        ({"then": {"type": "string"}, "else": {"type": "string"}}, 5, None),  # no if: ignored
        (
            {"dependentRequired": {"card": ["billing", "cvv"]}},
            {"card": "4111", "cvv": "1"},
            ["billing: is required when 'card' is present"],
        ),
        ({"dependentRequired": {"card": ["billing"]}}, {"name": "x"}, None),
        (
            {
                "dependentSchemas": {
                    "card": {"properties": {"cvv": {"type": "string"}}, "required": ["cvv"]}
                }
            },
            {"card": "4111", "cvv": 123},
            ["cvv: expected string, got integer 123"],
        ),
        ({"dependentSchemas": {"card": {"required": ["cvv"]}}}, {"name": "x"}, None),
        ({"dependentSchemas": {"card": {"required": ["cvv"]}}}, "not an object", None),
    ],
)
def test_not_conditionals_and_dependencies_follow_json_schema(
    schema: dict[str, Any], value: Any, expected: list[str] | None
) -> None:
    if expected is None:
        assert compile_schema(schema)(value) == value
    else:
        assert errors_of(schema, value) == expected


def test_a_then_branch_fills_its_defaults() -> None:
    schema = {
        "type": "object",
        "if": {"required": ["paged"]},
        "then": {"properties": {"size": {"default": 20}}},
    }
    assert compile_schema(schema)({"paged": True}) == {"paged": True, "size": 20}
    assert compile_schema(schema)({}) == {}


# --- property: any JSON either passes or raises SchemaError ----------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["value", "children", "name", "email", "phone", "contactMethod", "address"]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@pytest.mark.parametrize("schema", [CONFORMANCE_2020_12, TREE], ids=["conformance", "tree"])
@settings(max_examples=150, deadline=None)
@given(value=json_values)
def test_any_json_value_passes_or_raises_schema_error(schema: dict[str, Any], value: Any) -> None:
    check = compile_schema(schema)
    try:
        result = check(value)
    except SchemaError as exc:
        assert exc.errors
    else:
        assert check(result) == result
