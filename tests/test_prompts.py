"""Prompts: the registry, the arguments a signature declares, and what a function's
return value renders as (mcplite.core.prompts), plus completion of their arguments."""

from __future__ import annotations

import asyncio
import enum
from typing import Annotated, Any, Literal

import pytest

from mcplite import Context, Failure, Field, InputRequired, InvalidParams, Message, Prompts, content
from mcplite.core.completion import complete, completion_result
from mcplite.core.context import RequestContext
from mcplite.core.errors import InternalError


class Tone(enum.Enum):
    FORMAL = "formal"
    CASUAL = "casual"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_prompt_lists_its_arguments_required_unless_defaulted_and_described() -> None:
    prompts = Prompts()

    @prompts.prompt
    def review(
        code: Annotated[str, Field(description="The code to review")],
        language: str = "python",
    ) -> str:
        """Ask for a code review."""
        return code

    assert prompts.definitions() == [
        {
            "name": "review",
            "description": "Ask for a code review.",
            "arguments": [
                {"name": "code", "description": "The code to review", "required": True},
                {"name": "language", "required": False},
            ],
        }
    ]
    assert "review" in prompts and len(prompts) == 1


def test_the_decorator_takes_a_name_title_and_description_and_returns_the_function() -> None:
    prompts = Prompts()

    def greet() -> str:
        return "hi"

    assert prompts.prompt(name="hello", title="Hello", description="Says hello")(greet) is greet
    assert prompts.definitions() == [
        {"name": "hello", "title": "Hello", "description": "Says hello", "arguments": []}
    ]


def test_a_duplicate_name_or_a_completer_for_no_argument_is_refused() -> None:
    prompts = Prompts()
    prompts.add(lambda: "a", name="one")
    with pytest.raises(ValueError, match="already registered"):
        prompts.add(lambda: "b", name="one")
    with pytest.raises(ValueError, match="no argument 'nope'"):
        prompts.add(lambda x: x, name="two", complete={"nope": lambda v: []})


def test_a_string_is_one_user_text_message() -> None:
    prompts = Prompts()
    prompts.add(lambda who: f"Hello, {who}!", name="greet")
    rendered = run(prompts.get("greet").render({"who": "Ada"}))  # type: ignore[union-attr]
    assert rendered == {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Hello, Ada!"}}]
    }


def test_a_list_mixes_strings_messages_role_dicts_and_content_blocks() -> None:
    prompts = Prompts()

    @prompts.prompt
    def chat() -> list[Any]:
        return [
            "Look at this:",
            content.image(b"\x89PNG", "image/png"),
            content.embedded("docs://a", text="A", mime_type="text/plain"),
            Message("assistant", "I see it."),
            {"role": "user", "content": "And now?"},
        ]

    messages = run(prompts.get("chat").render(None))["messages"]  # type: ignore[union-attr]
    assert [m["role"] for m in messages] == ["user", "user", "user", "assistant", "user"]
    assert messages[0]["content"] == {"type": "text", "text": "Look at this:"}
    assert messages[1]["content"] == {"type": "image", "data": "iVBORw==", "mimeType": "image/png"}
    assert messages[2]["content"]["resource"] == {
        "uri": "docs://a",
        "mimeType": "text/plain",
        "text": "A",
    }
    assert messages[3]["content"]["text"] == "I see it."


def test_an_async_prompt_is_awaited() -> None:
    prompts = Prompts()

    @prompts.prompt
    async def later(topic: str) -> str:
        await asyncio.sleep(0)
        return f"About {topic}"

    rendered = run(prompts.get("later").render({"topic": "tea"}))  # type: ignore[union-attr]
    assert rendered["messages"][0]["content"]["text"] == "About tea"


def test_a_missing_required_argument_or_a_non_string_value_is_invalid_params() -> None:
    prompts = Prompts()
    prompts.add(lambda a, b="x": a + b, name="p")
    prompt = prompts.get("p")
    assert prompt is not None
    with pytest.raises(InvalidParams, match="Missing required argument 'a'") as missing:
        run(prompt.render({"b": "y"}))
    assert missing.value.data == {"argument": "a"}
    with pytest.raises(InvalidParams, match="expected a string"):
        run(prompt.render({"a": 3}))
    assert run(prompt.render({"a": "1", "unknown": "ignored"}))["messages"][0]["content"] == {
        "type": "text",
        "text": "1x",
    }


def test_enum_and_literal_arguments_are_checked_and_an_enum_arrives_as_its_member() -> None:
    prompts = Prompts()
    seen: list[Any] = []

    @prompts.prompt
    def write(tone: Tone, length: Literal["short", "long"] = "short") -> str:
        seen.append((tone, length))
        return "ok"

    prompt = prompts.get("write")
    assert prompt is not None
    run(prompt.render({"tone": "casual", "length": "long"}))
    assert seen == [(Tone.CASUAL, "long")]
    with pytest.raises(InvalidParams, match="expected one of formal, casual"):
        run(prompt.render({"tone": "rude"}))
    with pytest.raises(InvalidParams, match="expected one of short, long"):
        run(prompt.render({"tone": "formal", "length": "epic"}))


def test_a_failure_is_invalid_params_and_a_crash_or_a_bad_return_is_an_internal_error() -> None:
    prompts = Prompts()

    def refuses() -> str:
        raise Failure("no such topic")

    def crashes() -> str:
        raise RuntimeError("boom")

    prompts.add(refuses)
    prompts.add(crashes)
    prompts.add(lambda: 42, name="number")
    with pytest.raises(InvalidParams, match="no such topic"):
        run(prompts.get("refuses").render(None))  # type: ignore[union-attr]
    with pytest.raises(InternalError, match="prompt 'crashes' failed"):
        run(prompts.get("crashes").render(None))  # type: ignore[union-attr]
    with pytest.raises(InternalError, match="prompt 'number' failed"):
        run(prompts.get("number").render(None))  # type: ignore[union-attr]


def test_a_prompt_may_ask_for_input_and_reads_the_answers_from_its_context() -> None:
    prompts = Prompts()

    @prompts.prompt
    def personal(ctx: Context) -> str | InputRequired:
        answer = ctx.input_responses.get("name")
        if answer is None:
            return InputRequired({"name": {"method": "elicitation/create", "params": {}}})
        return f"Hello, {answer['content']['name']}"

    prompt = prompts.get("personal")
    assert prompt is not None
    assert prompt.arguments == []  # the context is not an argument
    assert isinstance(run(prompt.render(None)), InputRequired)
    answered = RequestContext("mcp", input_responses={"name": {"content": {"name": "Ada"}}})
    assert run(prompt.render(None, answered))["messages"][0]["content"]["text"] == "Hello, Ada"


def test_literal_and_enum_arguments_complete_by_prefix_and_a_declared_completer_wins() -> None:
    prompts = Prompts()

    def cities(value: str, arguments: dict[str, str]) -> list[str]:
        return [c for c in ("Paris", "Prague", "Oslo") if c.startswith(value)] + [
            arguments.get("country", "")
        ]

    @prompts.prompt(complete={"city": cities})
    def trip(city: str, tone: Tone, country: str = "") -> str:
        return city

    prompt = prompts.get("trip")
    assert prompt is not None
    assert run(complete(None, prompt.choices.get("tone"), "F", {})) == ["formal"]
    found = run(complete(prompt.completers["city"], None, "P", {"country": "FR"}))
    assert found == ["Paris", "Prague", "FR"]
    assert run(complete(None, None, "x", {})) == []


def test_a_completion_answer_holds_at_most_100_values_and_says_so() -> None:
    assert completion_result([]) == {"completion": {"values": [], "total": 0, "hasMore": False}}
    many = completion_result([str(i) for i in range(150)])["completion"]
    assert len(many["values"]) == 100
    assert many["total"] == 150 and many["hasMore"] is True


def test_a_prompt_option_that_does_not_exist_is_a_type_error_where_it_is_written() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'titel'"):
        Prompts().prompt(titel="Greeting")  # type: ignore[call-overload]
