"""Bounds at their exact edge: the compiled checker and the wire agree.

``minimum``/``maximum``, ``minLength``/``maxLength`` and ``minItems``/``maxItems``
are inclusive: the bound itself passes and one step beyond fails.
``exclusiveMinimum``/``exclusiveMaximum`` are not: the bound fails, one step
inside passes.  "One step" is 1 for integers, lengths and counts, and the next
float for float bounds.  Each failure names its field by its path.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import pytest
from conftest import RunningServer, start_server

from mcplite import Field, Tools
from mcplite.core.hints import schema_for_function
from mcplite.core.schema import SchemaError, compile_schema

BIG = 2**53  # floats stop telling integers apart here: 2**53 + 1 == float(2**53)


def _up(x: float) -> float:
    return math.nextafter(x, math.inf)


def _down(x: float) -> float:
    return math.nextafter(x, -math.inf)


# (keyword schema, values that pass, values that fail)
BOUNDS: list[tuple[dict[str, Any], list[Any], list[Any]]] = [
    ({"type": "integer", "maximum": 10}, [10, 10.0, 9, -5], [11, 11.0]),
    ({"type": "integer", "minimum": 1}, [1, 1.0, 2], [0, -1]),
    ({"type": "number", "maximum": 10}, [10, 10.0, _down(10.0)], [_up(10.0), 11, 10.5]),
    ({"type": "number", "minimum": 1}, [1, 1.0, _up(1.0)], [_down(1.0), 0]),
    ({"type": "number", "maximum": 2.5}, [2.5, _down(2.5), 2], [_up(2.5), 3]),
    ({"type": "number", "minimum": -2.5}, [-2.5, _up(-2.5), -2], [_down(-2.5), -3]),
    ({"type": "number", "maximum": 0}, [0, 0.0, -0.0], [5e-324]),
    ({"type": "number", "exclusiveMaximum": 10}, [9, _down(10.0)], [10, 10.0, _up(10.0)]),
    ({"type": "number", "exclusiveMinimum": 0}, [5e-324, 1], [0, 0.0, -0.0, -1]),
    ({"type": "integer", "exclusiveMaximum": 10}, [9], [10, 11]),
    ({"type": "integer", "exclusiveMinimum": 1}, [2], [1, 0]),
    # Integers beyond 2**53 are compared exactly, not as floats.
    ({"type": "integer", "maximum": BIG}, [BIG, BIG - 1], [BIG + 1]),
    ({"type": "integer", "minimum": BIG + 1}, [BIG + 1, BIG + 2], [BIG]),
    ({"type": "integer", "exclusiveMaximum": BIG + 1}, [BIG], [BIG + 1]),
    ({"type": "string", "maxLength": 3}, ["abc", "ab", ""], ["abcd"]),
    ({"type": "string", "minLength": 2}, ["ab", "abc"], ["a", ""]),
    # Lengths count code points: an emoji is one (two UTF-16 units, four UTF-8 bytes).
    ({"type": "string", "maxLength": 2}, ["😀😀", "éé"], ["😀😀😀"]),
    ({"type": "string", "minLength": 2}, ["😀😀"], ["😀"]),
    ({"type": "string", "maxLength": 0}, [""], ["a"]),
    ({"type": "array", "maxItems": 2}, [[1, 2], [1], []], [[1, 2, 3]]),
    ({"type": "array", "minItems": 1}, [[0], [0, 1]], [[]]),
    ({"type": "array", "maxItems": 0}, [[]], [[None]]),
]


def _ids() -> list[str]:
    return [" ".join(f"{k}={v}" for k, v in schema.items() if k != "type") for schema, *_ in BOUNDS]


@pytest.mark.parametrize(("keywords", "good", "bad"), BOUNDS, ids=_ids())
def test_a_bound_passes_at_its_edge_and_fails_one_step_beyond_naming_the_field(
    keywords: dict[str, Any], good: list[Any], bad: list[Any]
) -> None:
    check = compile_schema(
        {"type": "object", "properties": {"field": keywords, "items": {"type": "array"}}}
    )
    nested = compile_schema(
        {
            "type": "object",
            "properties": {
                "outer": {
                    "type": "object",
                    "properties": {"rows": {"type": "array", "items": keywords}},
                }
            },
        }
    )
    for value in good:
        assert check({"field": value}) == {"field": value}, value
        assert nested({"outer": {"rows": [value, value]}})
    for value in bad:
        with pytest.raises(SchemaError) as caught:
            check({"field": value})
        assert [e.path for e in caught.value.errors] == ["field"], value
        with pytest.raises(SchemaError) as caught:
            nested({"outer": {"rows": [good[0], value]}})
        assert [e.path for e in caught.value.errors] == ["outer.rows[1]"], value


def test_field_bounds_become_inclusive_and_exclusive_keywords() -> None:
    def tool(
        limit: Annotated[int, Field(ge=1, le=100)],
        ratio: Annotated[float, Field(gt=0, lt=1)],
        code: Annotated[str, Field(min_length=2, max_length=4)],
        tags: Annotated[list[str], Field(min_items=1, max_items=3)],
    ) -> None: ...

    check = compile_schema(schema_for_function(tool))
    edge = {"limit": 100, "ratio": _down(1.0), "code": "abcd", "tags": ["a", "b", "c"]}
    assert check(edge) == edge
    low = {"limit": 1, "ratio": 5e-324, "code": "ab", "tags": ["a"]}
    assert check(low) == low
    beyond = {"limit": 101, "ratio": 1.0, "code": "abcde", "tags": ["a", "b", "c", "d"]}
    with pytest.raises(SchemaError) as caught:
        check(beyond)
    assert sorted(e.path for e in caught.value.errors) == ["code", "limit", "ratio", "tags"]
    below = {"limit": 0, "ratio": 0, "code": "a", "tags": []}
    with pytest.raises(SchemaError) as caught:
        check(below)
    assert sorted(e.path for e in caught.value.errors) == ["code", "limit", "ratio", "tags"]


# --- over the wire -------------------------------------------------------------------


@pytest.fixture
def bounded_server() -> Any:
    tools = Tools()

    @tools.tool
    async def bounded(
        limit: Annotated[int, Field(ge=1, le=100)],
        code: Annotated[str, Field(max_length=4)] = "",
        tags: Annotated[list[str], Field(max_items=2)] | None = None,
    ) -> str:
        return f"{limit}:{code}:{len(tags or [])}"

    server = start_server(tools)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("edge", "beyond", "field"),
    [
        ({"limit": 100}, {"limit": 101}, "limit"),
        ({"limit": 1}, {"limit": 0}, "limit"),
        ({"limit": 5, "code": "abcd"}, {"limit": 5, "code": "abcde"}, "code"),
        ({"limit": 5, "tags": ["a", "b"]}, {"limit": 5, "tags": ["a", "b", "c"]}, "tags"),
    ],
)
def test_over_http_a_bound_passes_at_its_edge_and_one_beyond_is_invalid_params(
    bounded_server: RunningServer, edge: dict[str, Any], beyond: dict[str, Any], field: str
) -> None:
    ok = bounded_server.call("bounded", edge)
    assert ok["result"]["_meta"]["response_type"] == "answer", ok
    refused = bounded_server.call("bounded", beyond)
    error = refused["error"]
    assert error["code"] == -32602
    assert [e["field"] for e in error["data"]["errors"]] == [field]
    assert field in json.dumps(error)
