"""Tests for mcplite.core.tools: the registry, the decorator and what a Tool knows."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pytest
from conftest import serve

from mcplite import ALWAYS, NEVER, Context, Dispatcher, Failure, Field, InvalidParams, Tools
from mcplite.core.outcomes import Answer, Elicitation, InputRequired, MoreResources, ResponseType
from mcplite.core.schema import compile_schema
from mcplite.core.tools import Kind, Tool
from mcplite.protocols.jsonrpc import encode
from mcplite.protocols.mcp.render import call_result


class Depth(enum.Enum):
    QUICK = "quick"
    FULL = "full"


@dataclass
class Window:
    start: int
    end: int
    depth: Depth = Depth.QUICK

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError("the window ends before it starts")


@dataclass
class Plan:
    name: str
    windows: list[Window]
    fallback: Window | None = None


# --- the decorator --------------------------------------------------------------


def test_the_bare_decorator_registers_the_function_under_its_own_name_and_returns_it() -> None:
    tools = Tools()

    @tools.tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        return key

    tool = tools.get("lookup")
    assert tool is not None
    assert tool.fn is lookup
    assert tool.name == "lookup"
    assert tool.type is None
    assert tool.promise_after is None
    assert "lookup" in tools
    assert len(tools) == 1
    assert [t.name for t in tools] == ["lookup"]


def test_the_decorator_with_options_sets_name_type_description_and_promise_after() -> None:
    tools = Tools()

    @tools.tool(name="find", type="query", description="Find things.", promise_after=2.5)
    async def lookup(key: str) -> str:
        """Not this docstring."""
        return key

    assert tools.get("lookup") is None
    tool = tools.get("find")
    assert tool is not None
    assert tool.fn is lookup
    assert tool.type == "query"
    assert tool.description == "Find things."
    assert tool.promise_after == 2.5


def test_the_decorator_with_empty_parentheses_works_like_the_bare_one() -> None:
    tools = Tools()

    @tools.tool()
    def ping() -> str:
        return "pong"

    assert tools.get("ping") is not None
    assert ping() == "pong"


def test_the_description_defaults_to_the_cleaned_docstring() -> None:
    tools = Tools()

    @tools.tool
    async def summarise(text: str) -> str:
        """Summarise a text.

        Long texts are cut first.
        """
        return text

    tool = tools.get("summarise")
    assert tool is not None
    assert tool.description == "Summarise a text.\n\nLong texts are cut first."


def test_a_function_without_a_docstring_gets_an_empty_description() -> None:
    tools = Tools()

    @tools.tool
    async def bare(x: int) -> int:
        return x

    tool = tools.get("bare")
    assert tool is not None
    assert tool.description == ""


def test_an_explicit_empty_description_wins_over_the_docstring() -> None:
    tools = Tools()

    @tools.tool(description="")
    async def quiet(x: int) -> int:
        """A docstring nobody should see."""
        return x

    tool = tools.get("quiet")
    assert tool is not None
    assert tool.description == ""


def test_add_registers_a_function_and_returns_its_tool() -> None:
    tools = Tools()

    def double(x: int) -> int:
        return 2 * x

    tool = tools.add(double, name="twice")
    assert isinstance(tool, Tool)
    assert tools.get("twice") is tool
    assert tool.fn is double


# --- definition() -------------------------------------------------------------------


def test_definition_has_name_type_description_and_input_schema_in_that_order() -> None:
    tools = Tools()

    @tools.tool(type="query")
    async def search(query: str, limit: Annotated[int, Field(ge=1, le=100)] = 10) -> str:
        """Search through available documents."""
        return query

    tool = tools.get("search")
    assert tool is not None
    definition = tool.definition()
    assert list(definition) == ["name", "@type", "description", "inputSchema"]
    assert definition["name"] == "search"
    assert definition["@type"] == "query"
    assert definition["description"] == "Search through available documents."
    schema = definition["inputSchema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"] == {"type": "string"}
    assert schema["properties"]["limit"]["minimum"] == 1
    assert schema["properties"]["limit"]["maximum"] == 100
    assert schema["properties"]["limit"]["default"] == 10


def test_definition_leaves_out_at_type_when_no_type_was_given() -> None:
    tools = Tools()

    @tools.tool
    async def plain(x: int) -> int:
        """Plain."""
        return x

    tool = tools.get("plain")
    assert tool is not None
    assert "@type" not in tool.definition()
    assert list(tool.definition()) == ["name", "description", "inputSchema"]


# --- refusals -------------------------------------------------------------------------


def test_registering_a_second_tool_under_a_taken_name_raises_value_error() -> None:
    tools = Tools()

    @tools.tool
    async def lookup(key: str) -> str:
        return key

    async def other(key: str) -> str:
        return key

    with pytest.raises(ValueError, match="lookup"):
        tools.tool(name="lookup")(other)
    with pytest.raises(ValueError, match="lookup"):
        tools.add(lookup)
    tool = tools.get("lookup")
    assert tool is not None
    assert tool.fn is lookup  # the first registration is untouched
    assert len(tools) == 1


@pytest.mark.parametrize("bad", [-1.0, math.nan])
def test_a_negative_or_nan_promise_after_raises_value_error(bad: float) -> None:
    tools = Tools()

    async def slow() -> str:
        return "x"

    with pytest.raises(ValueError, match="promise_after"):
        tools.add(slow, promise_after=bad)
    assert "slow" not in tools


def test_always_and_never_are_zero_and_infinity() -> None:
    assert ALWAYS == 0
    assert math.isinf(NEVER) and NEVER > 0
    tools = Tools()

    async def a() -> None:
        return None

    async def b() -> None:
        return None

    assert tools.add(a, promise_after=ALWAYS).promise_after == 0
    assert tools.add(b, promise_after=NEVER).promise_after == math.inf


def test_a_malformed_hand_written_schema_raises_value_error() -> None:
    tools = Tools()

    async def odd(x: Any) -> Any:
        return x

    with pytest.raises(ValueError):
        tools.add(odd, schema={"type": "object", "properties": {"x": {"type": "nonsense"}}})
    assert "odd" not in tools


def test_a_signature_that_cannot_be_described_raises_type_error() -> None:
    tools = Tools()

    async def variadic(*items: int) -> int:
        return len(items)

    with pytest.raises(TypeError, match="items"):
        tools.add(variadic)
    assert "variadic" not in tools


def test_a_lookup_of_an_unknown_name_gives_none() -> None:
    tools = Tools()
    assert tools.get("nothing") is None
    assert "nothing" not in tools
    assert 42 not in tools


# --- hand-written schemas -------------------------------------------------------------

HAND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "amount": {"type": "number", "minimum": 0, "default": 1},
    },
    "required": ["code"],
    "additionalProperties": False,
}


def test_a_hand_written_schema_is_used_instead_of_the_generated_one() -> None:
    tools = Tools()

    @tools.tool(schema=HAND_SCHEMA)
    async def convert(code: str, amount: float = 0.0) -> str:
        """Convert an amount."""
        return f"{amount} {code}"

    tool = tools.get("convert")
    assert tool is not None
    assert tool.input_schema == HAND_SCHEMA
    assert tool.definition()["inputSchema"] == HAND_SCHEMA


async def test_a_dispatcher_validates_arguments_against_the_hand_written_schema(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    seen: list[tuple[str, float]] = []

    # The signature alone would accept any str and a float: the schema is stricter.
    @tools.tool(schema=HAND_SCHEMA)
    async def convert(code: str, amount: float = 0.0) -> str:
        seen.append((code, amount))
        return f"{amount} {code}"

    dispatcher = serve(dispatchers, tools)
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("convert", {"code": "usd", "amount": -5})
    assert caught.value.data is not None
    fields = {e["field"] for e in caught.value.data["errors"]}
    assert fields == {"code", "amount"}
    assert seen == []

    result = await dispatcher.call("convert", {"code": "USD"})
    assert result.response_type is ResponseType.ANSWER
    assert seen == [("USD", 1)]  # the schema's default, not the signature's


# --- the context parameter ------------------------------------------------------------


def test_a_context_parameter_is_left_out_of_the_generated_schema() -> None:
    tools = Tools()

    @tools.tool
    async def crunch(rows: int, ctx: Context) -> int:
        return rows

    @tools.tool
    async def crunch_maybe(rows: int, context: Context | None = None) -> int:
        return rows

    for name, param in (("crunch", "ctx"), ("crunch_maybe", "context")):
        tool = tools.get(name)
        assert tool is not None
        assert tool.context_param == param
        assert set(tool.input_schema["properties"]) == {"rows"}
        assert tool.input_schema.get("required", []) == ["rows"]


async def test_a_context_parameter_is_injected_by_the_dispatcher(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    received: list[Any] = []

    @tools.tool
    async def crunch(rows: int, ctx: Context) -> int:
        received.append(ctx)
        ctx.report_progress(1, rows, "started")
        return rows

    @tools.tool
    def crunch_sync(rows: int, ctx: Context | None = None) -> int:
        received.append(ctx)
        return rows

    dispatcher = serve(dispatchers, tools)
    await dispatcher.call("crunch", {"rows": 3})
    await dispatcher.call("crunch_sync", {"rows": 4})
    assert [type(c) for c in received] == [Context, Context]
    assert [c.tool for c in received] == ["crunch", "crunch_sync"]
    assert received[0].progress.snapshot() == {"progress": 1, "total": 3, "message": "started"}


async def test_a_caller_cannot_pass_the_context_parameter_as_an_argument(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def crunch(rows: int, ctx: Context) -> int:
        return rows

    dispatcher = serve(dispatchers, tools)
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("crunch", {"rows": 1, "ctx": "forged"})
    assert caught.value.data is not None
    assert [e["field"] for e in caught.value.data["errors"]] == ["ctx"]


# --- kind detection ------------------------------------------------------------------


def test_the_kind_of_a_tool_follows_the_function() -> None:
    tools = Tools()

    def blocking(x: int) -> int:
        return x

    async def awaiting(x: int) -> int:
        return x

    async def streaming(x: int) -> AsyncIterator[int]:
        yield x

    assert tools.add(blocking).kind is Kind.SYNC
    assert tools.add(awaiting).kind is Kind.ASYNC
    assert tools.add(streaming).kind is Kind.STREAM


# --- arguments arrive as the declared Python types --------------------------------------


async def test_enum_arguments_arrive_as_enum_members(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()
    seen: list[Any] = []

    @tools.tool
    async def analyse(
        depth: Depth,
        fallback: Depth = Depth.FULL,
        maybe: Depth | None = None,
        many: list[Depth] | None = None,
    ) -> str:
        seen.append((depth, fallback, maybe, many))
        return "ok"

    dispatcher = serve(dispatchers, tools)
    await dispatcher.call("analyse", {"depth": "quick"})
    await dispatcher.call("analyse", {"depth": "full", "maybe": "quick", "many": ["full"]})
    assert seen == [
        (Depth.QUICK, Depth.FULL, None, None),
        (Depth.FULL, Depth.FULL, Depth.QUICK, [Depth.FULL]),
    ]


async def test_an_optional_mapping_of_enums_may_be_left_out(dispatchers: list[Dispatcher]) -> None:
    tools = Tools()
    seen: list[Any] = []

    @tools.tool
    async def label(names: dict[str, Depth] | None = None) -> str:
        seen.append(names)
        return "ok"

    dispatcher = serve(dispatchers, tools)
    await dispatcher.call("label", {"names": {"a": "full"}})
    await dispatcher.call("label", {})  # the default None must not be converted
    await dispatcher.call("label", {"names": None})
    assert seen == [{"a": Depth.FULL}, None, None]


async def test_dataclass_arguments_arrive_as_instances_all_the_way_down(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    seen: list[Plan] = []

    @tools.tool
    def schedule(plan: Plan) -> str:
        seen.append(plan)
        return plan.name

    dispatcher = serve(dispatchers, tools)
    await dispatcher.call(
        "schedule",
        {
            "plan": {
                "name": "q3",
                "windows": [{"start": 1, "end": 2}, {"start": 3, "end": 4, "depth": "full"}],
                "fallback": {"start": 0, "end": 9},
            }
        },
    )
    assert seen == [
        Plan(
            "q3",
            [Window(1, 2), Window(3, 4, Depth.FULL)],
            Window(0, 9),
        )
    ]
    assert isinstance(seen[0].windows[1].depth, Depth)


async def test_a_hand_written_schema_gives_plain_json_arguments(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    seen: list[Any] = []

    @tools.tool(schema={"type": "object", "properties": {"depth": {"enum": ["quick", "full"]}}})
    async def analyse(depth: Depth = Depth.QUICK) -> str:
        seen.append(depth)
        return "ok"

    dispatcher = serve(dispatchers, tools)
    await dispatcher.call("analyse", {"depth": "full"})
    assert seen == ["full"]


async def test_a_dataclass_that_refuses_its_values_gives_invalid_params_for_that_field(
    dispatchers: list[Dispatcher],
) -> None:
    # The schema cannot say "end >= start"; Window.__post_init__ does.  Its refusal is
    # a refusal of the caller's arguments, not a crash: InvalidParams naming the field
    # (today a bare ValueError escapes call(), and over HTTP it becomes a 500).
    tools = Tools()
    ran: list[bool] = []

    @tools.tool
    async def book(window: Window) -> str:
        ran.append(True)
        return "booked"

    dispatcher = serve(dispatchers, tools)
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("book", {"window": {"start": 5, "end": 1}})
    assert caught.value.data is not None
    [error] = caught.value.data["errors"]
    assert error["field"] == "window"
    assert "ends before it starts" in error["message"]
    assert ran == []


# --- hand-written JSON Schema 2020-12 -----------------------------------------------------

#: The conformance suite's 2020-12 schema: $defs, $anchor, $ref, allOf/anyOf, if/then/else.
CONTACT_SCHEMA: dict[str, Any] = {
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


async def test_a_2020_12_schema_with_refs_is_listed_as_given_and_checks_the_arguments(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    schema = copy.deepcopy(CONTACT_SCHEMA)

    @tools.tool(schema=schema)
    async def contact(**arguments: Any) -> str:
        return ", ".join(sorted(arguments))

    dispatcher = serve(dispatchers, tools)
    [listed] = [d for d in dispatcher.tool_definitions() if d["name"] == "contact"]
    assert listed["inputSchema"] is schema
    assert schema == CONTACT_SCHEMA  # registering and calling leave it as it was

    result = await dispatcher.call("contact", {"contactMethod": "phone", "phone": "555"})
    assert result.to_json()["content"] == [{"type": "text", "text": "contactMethod, phone"}]
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("contact", {"email": "a@b", "address": {"city": 75}})
    assert caught.value.data is not None
    assert [e["field"] for e in caught.value.data["errors"]] == ["address.city"]
    assert schema == CONTACT_SCHEMA


def test_a_schema_with_a_remote_ref_is_refused_at_registration() -> None:
    tools = Tools()

    async def mail(**arguments: Any) -> str:
        return "sent"

    remote = {"type": "object", "properties": {"to": {"$ref": "https://example.com/address.json"}}}
    with pytest.raises(ValueError, match="remote ones are not fetched"):
        tools.add(mail, schema=remote)
    assert "mail" not in tools


# --- the output schema (MCP outputSchema) ---------------------------------------------------


@dataclass
class Forecast:
    city: str
    celsius: float
    depth: Depth = Depth.QUICK
    window: Window | None = None
    tags: tuple[str, ...] = ()
    source: str = dataclasses.field(default="model", init=False)


class Totals(TypedDict):
    count: int
    mean: NotRequired[float]


class Member(TypedDict):
    type: Literal["user", "group"]
    name: str


class Labelled(TypedDict):
    type: str  # "text" would make the answer a content block, sent without structuredContent


FORECAST_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "celsius": {"type": "number"},
        "depth": {"type": "string", "enum": ["quick", "full"]},
        "window": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "start": {"type": "integer"},
                        "end": {"type": "integer"},
                        "depth": {"type": "string", "enum": ["quick", "full"]},
                    },
                    "required": ["start", "end", "depth"],
                },
                {"type": "null"},
            ]
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "source": {"type": "string"},
    },
    "required": ["city", "celsius", "depth", "window", "tags", "source"],
}


def output_schema_of(fn: Any, **options: Any) -> dict[str, Any] | None:
    return Tools().add(fn, **options).output_schema


def test_a_dataclass_return_gives_the_schema_of_every_field_as_it_is_sent() -> None:
    async def forecast(city: str) -> Forecast:
        return Forecast(city, 21.5)

    # dataclasses.asdict writes every field (init=False too), so all are required;
    # other keys are not refused: the schema describes an answer, not arguments.
    assert output_schema_of(forecast) == FORECAST_OUTPUT


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (
            Totals,
            {
                "type": "object",
                "properties": {"count": {"type": "integer"}, "mean": {"type": "number"}},
                "required": ["count"],
            },
        ),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (
            Annotated[Totals, "The totals"],
            {
                "type": "object",
                "properties": {"count": {"type": "integer"}, "mean": {"type": "number"}},
                "required": ["count"],
                "description": "The totals",
            },
        ),
        (
            Member,
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["user", "group"]},
                    "name": {"type": "string"},
                },
                "required": ["type", "name"],
            },
        ),
    ],
    ids=["TypedDict", "dict[str, int]", "Annotated", "a type that names no content block"],
)
def test_a_return_annotation_of_a_json_object_gives_its_output_schema(
    hint: Any, expected: dict[str, Any]
) -> None:
    def tool() -> Any:
        return {}

    tool.__annotations__["return"] = hint
    assert output_schema_of(tool) == expected


@pytest.mark.parametrize(
    "hint",
    [
        str,
        int,
        list[int],
        list[dict[str, Any]],
        dict[str, Any],
        dict,
        dict[str, str],
        Forecast | None,
        Forecast | Failure,
        Forecast | str,
        Labelled,
        Answer,
        Elicitation,
        MoreResources,
        InputRequired,
        datetime.datetime,
    ],
    ids=lambda hint: repr(hint).replace("typing.", "").replace("tests.test_tools.", ""),
)
def test_no_output_schema_when_the_answer_may_not_be_structured_content(hint: Any) -> None:
    # A union may answer None, text or an outcome; a list becomes {"result": [...]}; a
    # dict that may have "type": "text" may be a content block: none of them has a
    # fixed object shape, so an MCP client must not be told to expect one.
    def tool() -> Any:
        return None

    tool.__annotations__["return"] = hint
    assert output_schema_of(tool) is None


def test_no_output_schema_without_a_return_annotation_or_for_a_stream() -> None:
    def plain():  # type: ignore[no-untyped-def]
        return {"a": 1}

    async def streaming() -> AsyncIterator[Totals]:
        yield {"count": 1}

    assert output_schema_of(plain) is None
    assert output_schema_of(streaming) is None


def test_an_explicit_output_schema_wins_and_false_lists_none() -> None:
    wrapped = {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
        "required": ["result"],
    }

    async def evens(n: int) -> list[int]:
        return list(range(0, n, 2))

    async def forecast(city: str) -> Forecast:
        return Forecast(city, 21.5)

    assert output_schema_of(evens, output_schema=wrapped) is wrapped
    assert output_schema_of(forecast, output_schema=False) is None


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "array"}, '"type": "object"'),
        ([], '"type": "object"'),
        ({"type": "object", "properties": {"x": {"type": "nope"}}}, "unknown type 'nope'"),
        ({"type": "object", "properties": {"x": {"$ref": "other.json"}}}, "not in this schema"),
    ],
)
def test_a_bad_explicit_output_schema_raises_value_error(schema: Any, match: str) -> None:
    tools = Tools()

    async def report() -> str:
        return "ok"

    with pytest.raises(ValueError, match=match):
        tools.add(report, output_schema=schema)
    assert "report" not in tools


def test_the_mcp_lite_definition_has_no_output_schema() -> None:
    async def forecast(city: str) -> Forecast:
        return Forecast(city, 21.5)

    tool = Tools().add(forecast)
    assert tool.output_schema is not None
    assert list(tool.definition()) == ["name", "description", "inputSchema"]


async def test_the_structured_content_of_a_call_matches_the_generated_output_schema(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()

    @tools.tool
    async def forecast(city: str) -> Forecast:
        return Forecast(city, 21.5, Depth.FULL, Window(1, 2), ("sunny", "dry"))

    @tools.tool
    def totals(values: list[float]) -> Totals:
        return {"count": len(values)}

    @tools.tool
    def counts(words: list[str]) -> dict[str, int]:
        return {word: len(word) for word in words}

    dispatcher = serve(dispatchers, tools)
    for name, arguments in [
        ("forecast", {"city": "Turin"}),
        ("totals", {"values": [1.5, 2]}),
        ("counts", {"words": ["type", "text"]}),
    ]:
        tool = tools.get(name)
        assert tool is not None and tool.output_schema is not None
        rendered = call_result(await dispatcher.call(name, arguments))
        structured = json.loads(encode(rendered["structuredContent"]))  # as it is sent
        assert compile_schema(tool.output_schema)(structured) == structured


def test_an_option_that_does_not_exist_is_a_type_error_where_it_is_written() -> None:
    tools = Tools()
    with pytest.raises(
        TypeError, match=r"Tools.tool\(\) got an unexpected keyword argument 'nmae'"
    ):
        tools.tool(nmae="x")  # type: ignore[call-overload]

    def fn() -> str:
        return "x"

    with pytest.raises(TypeError, match="unexpected keyword argument 'promise'"):
        tools.add(fn, promise=1.0)  # type: ignore[call-arg]
    assert len(tools) == 0
