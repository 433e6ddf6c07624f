"""Tests for mcplite.core.envelope: content mapping, outcome shapes and ``_meta``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

import mcplite
from mcplite.core.envelope import Result, to_result
from mcplite.core.outcomes import (
    Answer,
    Elicitation,
    Failure,
    MoreResources,
    Promised,
    ResponseType,
    content_of,
)

ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@dataclass
class Hit:
    document_id: str
    score: float
    tags: list[str] = field(default_factory=list)


@dataclass
class Page:
    hits: list[Hit]
    total: int


class Opaque:
    def __str__(self) -> str:
        return "an opaque thing"


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


# --- the content table of the module docstring ------------------------------------------

CONTENT_TABLE: list[tuple[str, Any, list[Any]]] = [
    ("None", None, []),
    ("str", "hello", [text("hello")]),
    ("empty str", "", [text("")]),
    ("dict", {"answer": 42}, [{"answer": 42}]),
    ("list of dicts", [{"a": 1}, {"b": 2}], [{"a": 1}, {"b": 2}]),
    ("list with str items", ["one", {"b": 2}, "three"], [text("one"), {"b": 2}, text("three")]),
    ("empty list", [], []),
    ("tuple", ("x", {"y": 1}), [text("x"), {"y": 1}]),
    (
        "dataclass",
        Hit("doc_1", 0.5, ["a"]),
        [{"document_id": "doc_1", "score": 0.5, "tags": ["a"]}],
    ),
    (
        "nested dataclass",
        Page([Hit("d", 1.0)], 1),
        [{"hits": [{"document_id": "d", "score": 1.0, "tags": []}], "total": 1}],
    ),
    ("int", 42, [text("42")]),
    ("negative int", -7, [text("-7")]),
    ("float", 2.5, [text("2.5")]),
    ("True", True, [text("true")]),
    ("False", False, [text("false")]),
    ("other object", Opaque(), [text("an opaque thing")]),
    ("set (other object)", frozenset({1}), [text("frozenset({1})")]),
]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(value, expected) for _, value, expected in CONTENT_TABLE],
    ids=[name for name, _, _ in CONTENT_TABLE],
)
def test_a_plain_return_value_maps_to_content_as_the_table_says(
    value: Any, expected: list[Any]
) -> None:
    assert content_of(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(value, expected) for _, value, expected in CONTENT_TABLE],
    ids=[name for name, _, _ in CONTENT_TABLE],
)
def test_a_plain_return_value_becomes_an_answer_with_that_content(
    value: Any, expected: list[Any]
) -> None:
    result = to_result(value, 1704110400.0, 12.5)
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": expected}
    assert result.timestamp == 1704110400.0
    assert result.processing_time_ms == 12.5
    assert result.extra_meta == {}


def test_content_of_a_dataclass_is_a_copy_not_the_object() -> None:
    hit = Hit("d", 1.0, ["a"])
    [item] = content_of(hit)
    item["tags"].append("b")
    assert hit.tags == ["a"]


def test_a_dataclass_class_itself_is_not_treated_as_an_instance() -> None:
    assert content_of(Hit) == [text(str(Hit))]


# --- outcome shapes ---------------------------------------------------------------------


def test_a_failure_is_a_result_with_is_error_and_its_details() -> None:
    result = to_result(Failure("no such dataset", reason="not_found", retryable=True), 1.0, 2.0)
    assert result.response_type is ResponseType.FAILURE
    assert result.body == {
        "content": [text("no such dataset")],
        "isError": True,
        "failure": {"message": "no such dataset", "retryable": True, "reason": "not_found"},
    }


def test_a_failure_without_a_reason_leaves_the_reason_out_and_is_not_retryable() -> None:
    result = to_result(Failure("nope"), 1.0, 2.0)
    assert result.body["failure"] == {"message": "nope", "retryable": False}
    assert result.to_json()["_meta"]["response_type"] == "failure"


def test_a_failure_is_an_exception_that_can_be_raised() -> None:
    failure = Failure("out of stock", reason="stock")
    assert isinstance(failure, Exception)
    assert str(failure) == "out of stock"
    assert failure.message == "out of stock"
    assert failure.reason == "stock"
    assert failure.retryable is False


def test_an_elicitation_carries_the_message_and_the_requested_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    result = to_result(Elicitation("Which city?", schema), 1.0, 2.0)
    assert result.response_type is ResponseType.ELICITATION
    assert result.body == {
        "content": [text("Which city?")],
        "elicitation": {"message": "Which city?", "requestedSchema": schema},
    }
    assert "isError" not in result.body


def test_more_resources_lists_only_what_is_needed() -> None:
    result = to_result(MoreResources("allow a minute", time_seconds=60), 1.0, 2.0)
    assert result.response_type is ResponseType.MORE_RESOURCES
    assert result.body == {
        "content": [text("allow a minute")],
        "resources": {"message": "allow a minute", "time_seconds": 60},
    }
    everything = to_result(MoreResources("more", time_seconds=1.5, quota=3, budget=0.25), 1, 2)
    assert everything.body["resources"] == {
        "message": "more",
        "time_seconds": 1.5,
        "quota": 3,
        "budget": 0.25,
    }
    assert everything.to_json()["_meta"]["response_type"] == "request-for-more-resource"


def test_an_answer_gives_its_content_as_is_and_structured_content_when_set() -> None:
    items = [text("3 results"), {"type": "text", "text": "more"}]
    result = to_result(Answer(items, {"count": 3}), 1.0, 2.0)
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": items, "structuredContent": {"count": 3}}
    assert result.body["content"] is not items  # a copy: the tool's list is not shared

    plain = to_result(Answer([text("x")]), 1.0, 2.0)
    assert plain.body == {"content": [text("x")]}


def test_an_answer_keeps_a_falsy_structured_value() -> None:
    result = to_result(Answer([], {}), 1.0, 2.0)
    assert result.body == {"content": [], "structuredContent": {}}


def test_the_response_types_have_the_spec_names() -> None:
    assert [t.value for t in ResponseType] == [
        "answer",
        "promise",
        "elicitation",
        "failure",
        "request-for-more-resource",
    ]
    assert ResponseType("promise") is ResponseType.PROMISE
    assert isinstance(ResponseType.PROMISE, str)


# --- _meta -----------------------------------------------------------------------------


def test_meta_has_response_type_iso_timestamp_processing_time_and_server_version() -> None:
    result = Result(Answer([]), 1704110400.25, 3.14159)
    meta = result.meta()
    assert meta == {
        "response_type": "answer",
        "timestamp": "2024-01-01T12:00:00.250Z",
        "processing_time_ms": 3.142,
        "server_version": mcplite.__version__,
    }
    assert ISO_MS.match(meta["timestamp"])


def test_meta_adds_the_extra_fields_after_the_four_common_ones() -> None:
    result = Result(Promised("prom_x", 1704111000.0), 1704110400.0, 1.0)
    meta = result.meta()
    assert list(meta) == [
        "response_type",
        "timestamp",
        "processing_time_ms",
        "server_version",
        "promise_token",
        "expires_at",
    ]
    assert meta["response_type"] == "promise"
    assert meta["promise_token"] == "prom_x"


def test_to_json_is_the_body_plus_meta_and_leaves_the_body_alone() -> None:
    result = Result(Failure("hi"), 1704110400.0, 1.0)
    body = result.body
    out = result.to_json()
    assert out == {**body, "_meta": result.meta()}
    assert "_meta" not in result.body
    assert body["isError"] is True


def test_to_result_of_a_real_call_time_gives_a_timestamp_ending_in_z() -> None:
    result = to_result("x", 1704110400.5, 0.0)
    assert ISO_MS.match(result.meta()["timestamp"])
