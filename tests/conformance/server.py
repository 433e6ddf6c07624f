"""The tools, prompts and resources the official MCP conformance suite uses, written
with mcplite's public API.

Served by ``tests/test_conformance.py`` as ``python -m mcplite serve server`` (cwd:
this folder); the names, arguments and texts are the ones the suite's scenarios
expect (``@modelcontextprotocol/conformance``, ``src/scenarios/server/**``).

One tool answers both revisions: a tool that needs something from the client
returns :class:`~mcplite.core.outcomes.InputRequired`, and reads the answers in
``ctx.input_responses`` on the call that brings them.  On 2026-07-28 that is an
``input_required`` result the client answers by calling again (or, in a task,
with ``tasks/update``); on 2025-11-25 the server asks the client itself, on the
call's SSE stream, and calls the tool again with the answers.

``serve server`` serves the module's ``prompts`` and ``resources`` beside its
``tools``; ``completion/complete`` answers from them (no completer here: the suite
only needs an empty answer).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from mcplite import (
    ALWAYS,
    NEVER,
    Context,
    Dispatcher,
    Failure,
    InternalError,
    Message,
    Prompts,
    Resources,
    Tools,
    content,
)
from mcplite.core.outcomes import InputRequired

tools = Tools()
prompts = Prompts()
resources = Resources()

TASKS = "io.modelcontextprotocol/tasks"
#: A 1x1 PNG and a silent WAV, base64 (the suite's own test data).
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5E"
    "rkJggg=="
)
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="


def elicit(message: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An ``elicitation/create`` input request."""
    schema = {"type": "object", "properties": properties, "required": required}
    return {
        "method": "elicitation/create",
        "params": {"message": message, "requestedSchema": schema},
    }


def sample(text: str, max_tokens: int) -> dict[str, Any]:
    """A ``sampling/createMessage`` input request."""
    message = {"role": "user", "content": {"type": "text", "text": text}}
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [message], "maxTokens": max_tokens},
    }


LIST_ROOTS: dict[str, Any] = {"method": "roots/list", "params": {}}


def accepted(answer: Any) -> dict[str, Any] | None:
    """The content of an accepted elicitation answer (None: not one)."""
    if isinstance(answer, dict) and answer.get("action") == "accept":
        found = answer.get("content")
        return found if isinstance(found, dict) else {}
    return None


def sampled_text(answer: Any) -> str | None:
    """The text of a ``sampling/createMessage`` answer (None: not one)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("content"), dict):
        return None
    text = answer["content"].get("text")
    return text if isinstance(text, str) else None


def roots_of(answer: Any) -> list[Any] | None:
    """The roots of a ``roots/list`` answer (None: not one)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("roots"), list):
        return None
    roots: list[Any] = answer["roots"]
    return roots


# -- content ------------------------------------------------------------------------
# test_simple_text comes first: http-header-validation calls tools[0] with {}.


@tools.tool
def test_simple_text() -> str:
    """Returns a simple text response."""
    return "This is a simple text response for testing."


@tools.tool
def test_image_content() -> list[dict[str, Any]]:
    """Returns an image."""
    return [content.image(PNG, "image/png")]


@tools.tool
def test_audio_content() -> list[dict[str, Any]]:
    """Returns audio."""
    return [content.audio(WAV, "audio/wav")]


@tools.tool
def test_embedded_resource() -> list[dict[str, Any]]:
    """Returns an embedded resource."""
    text = "This is an embedded resource content."
    return [content.embedded("test://embedded-resource", text=text, mime_type="text/plain")]


@tools.tool
def test_multiple_content_types() -> list[dict[str, Any]]:
    """Returns text, an image and an embedded resource."""
    data = json.dumps({"test": "data", "value": 123}, separators=(",", ":"))
    return [
        content.text("Multiple content types test:"),
        content.image(PNG, "image/png"),
        content.embedded("test://mixed-content-resource", text=data, mime_type="application/json"),
    ]


@tools.tool
def test_error_handling() -> str:
    """Always fails (a result with isError, not a protocol error)."""
    raise Failure("This tool intentionally returns an error for testing")


# -- notifications ----------------------------------------------------------------------


@tools.tool
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress three times before its result."""
    for step in (0, 50, 100):
        ctx.report_progress(step, 100, f"Completed step {step} of 100")
        await asyncio.sleep(0.05)
    return f"Progress test completed for {ctx.tool}"


@tools.tool
async def test_tool_with_logging(ctx: Context) -> str:
    """Logs three messages before its result."""
    for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        ctx.log("info", text)
        await asyncio.sleep(0.05)
    return "Logging test completed"


@tools.tool
async def test_logging_tool(ctx: Context) -> str:
    """Logs only when the client asked for log messages."""
    ctx.log("info", "Diagnostic trace logging activated")
    return "Logging evaluated"


@tools.tool
async def test_streaming_elicitation(ctx: Context) -> str:
    """Says something before its result, and never asks the client on the stream."""
    ctx.report_progress(50, 100)
    return "Streaming complete"


REGION = {
    "type": "string",
    "default": "<none>",
    "description": "Mirrored into the Mcp-Param-Region header",
    "x-mcp-header": "Region",
}


@tools.tool(schema={"type": "object", "properties": {"region": REGION}})
def test_x_mcp_header(region: str = "<none>") -> str:
    """Its argument is mirrored into the Mcp-Param-Region header."""
    return f"region={region}"


#: The suite's schema, verbatim (scenario json-schema-2020-12): tools/list must show
#: it unchanged, $defs, $anchor, allOf/anyOf and if/then/else included.
JSON_SCHEMA_2020_12: dict[str, Any] = {
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


@tools.tool(schema=JSON_SCHEMA_2020_12, description="Tool with JSON Schema 2020-12 features")
def json_schema_2020_12_tool(**arguments: Any) -> str:
    return "ok"


# -- asking the client: sampling, elicitation, roots ----------------------------------


@tools.tool
async def test_sampling(prompt: str, ctx: Context) -> str | InputRequired:
    """Asks the client's LLM to answer ``prompt``."""
    text = sampled_text(ctx.input_responses.get("llm"))
    if text is None:
        return InputRequired({"llm": sample(prompt, 100)})
    return f"LLM response: {text}"


@tools.tool
async def test_elicitation(message: str, ctx: Context) -> str | InputRequired:
    """Asks the user for a username and an email."""
    answer = ctx.input_responses.get("user")
    if not isinstance(answer, dict):
        properties = {"username": {"type": "string"}, "email": {"type": "string"}}
        return InputRequired({"user": elicit(message, properties, ["username", "email"])})
    return f"User response: action={answer.get('action')}, content={answer.get('content')}"


@tools.tool
async def test_elicitation_sep1034_defaults(ctx: Context) -> str | InputRequired:
    """Asks for values whose schema has defaults (SEP-1034)."""
    answer = ctx.input_responses.get("defaults")
    if not isinstance(answer, dict):
        properties = {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {
                "type": "string",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "default": True},
        }
        return InputRequired({"defaults": elicit("Please review your details", properties, [])})
    return f"Elicitation completed: action={answer.get('action')}, content={answer.get('content')}"


@tools.tool
async def test_elicitation_sep1330_enums(ctx: Context) -> str | InputRequired:
    """Asks for values from every kind of enum (SEP-1330)."""
    answer = ctx.input_responses.get("enums")
    if not isinstance(answer, dict):
        options = ["option1", "option2", "option3"]
        titled = [{"const": v, "title": v.title()} for v in ("value1", "value2", "value3")]
        properties = {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {"type": "string", "oneOf": titled},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {"type": "array", "items": {"anyOf": titled}},
        }
        return InputRequired({"enums": elicit("Pick your options", properties, [])})
    return f"Elicitation completed: action={answer.get('action')}, content={answer.get('content')}"


@tools.tool(requires={"sampling": {}})
async def test_missing_capability() -> str:
    """Needs a client that declared sampling."""
    return "Success"


NAME = elicit("What is your name?", {"name": {"type": "string"}}, ["name"])


@tools.tool
async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequired:
    """Asks the user's name, then greets them."""
    answer = accepted(ctx.input_responses.get("user_name"))
    if answer is None:
        return InputRequired({"user_name": NAME})
    return f"Hello, {answer.get('name', 'unknown')}!"


@tools.tool
async def test_input_required_result_sampling(ctx: Context) -> str | InputRequired:
    """Asks the client's LLM a question."""
    text = sampled_text(ctx.input_responses.get("capital_question"))
    if text is None:
        return InputRequired({"capital_question": sample("What is the capital of France?", 100)})
    return f"Sampling result: {text}"


@tools.tool
async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequired:
    """Asks the client for its roots."""
    roots = roots_of(ctx.input_responses.get("client_roots"))
    if roots is None:
        return InputRequired({"client_roots": LIST_ROOTS})
    return f"Found {len(roots)} root(s)"


CONFIRM = elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])


@tools.tool
async def test_input_required_result_request_state(ctx: Context) -> str | InputRequired:
    """Asks for a confirmation and carries state to the call that answers it."""
    answer = accepted(ctx.input_responses.get("confirm"))
    if ctx.request_state == "request-state" and answer is not None:
        return "state-ok: requestState validated"
    return InputRequired({"confirm": CONFIRM}, state="request-state")


@tools.tool
async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequired:
    """Like the request-state tool: a changed requestState never reaches it."""
    if ctx.request_state == "tamper-test" and accepted(ctx.input_responses.get("confirm")):
        return "integrity-ok: state verified"
    return InputRequired({"confirm": CONFIRM}, state="tamper-test")


@tools.tool
async def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequired:
    """Asks three things at once: an elicitation, a sampling and the roots."""
    answers = ctx.input_responses
    name = accepted(answers.get("user_name"))
    greeting = sampled_text(answers.get("greeting"))
    roots = roots_of(answers.get("client_roots"))
    if ctx.request_state == "multiple-inputs" and None not in (name, greeting, roots):
        assert name is not None and roots is not None
        return f"Name: {name.get('name')}; Greeting: {greeting}; Roots: {len(roots)}"
    requests = {
        "user_name": NAME,
        "greeting": sample("Generate a greeting", 50),
        "client_roots": LIST_ROOTS,
    }
    return InputRequired(requests, state="multiple-inputs")


STEP1 = elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])
STEP2 = elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])


@tools.tool
async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequired:
    """Two rounds of questions; the state says which round the answers belong to."""
    state = json.loads(ctx.request_state) if ctx.request_state else {}
    if state.get("round") == 1 and (step1 := accepted(ctx.input_responses.get("step1"))):
        next_state = {"round": 2, "name": step1.get("name")}
        return InputRequired({"step2": STEP2}, state=json.dumps(next_state))
    if state.get("round") == 2 and (step2 := accepted(ctx.input_responses.get("step2"))):
        return f"Multi-round complete for {state.get('name')} who likes {step2.get('color')}"
    return InputRequired({"step1": STEP1}, state=json.dumps({"round": 1}))


@tools.tool
async def test_input_required_result_capabilities(ctx: Context) -> str | InputRequired:
    """Asks only for what the client declared it can do."""
    if ctx.input_responses:
        return f"capabilities-ok: received {','.join(ctx.input_responses)}"
    requests = {}
    if "elicitation" in ctx.client_capabilities:
        requests["elicit_input"] = elicit(
            "Elicitation input", {"value": {"type": "string"}}, ["value"]
        )
    if "sampling" in ctx.client_capabilities:
        requests["sample_input"] = sample("Sample request", 50)
    if not requests:
        return "No supported capabilities declared"
    return InputRequired(requests, state="capabilities-test")


@tools.tool
async def test_trigger_tool_change() -> str:
    """The suite calls it to make the tool list change: the last tool is removed and
    added back (the list ends as it was; subscribers hear two changes)."""
    name = list(tools)[-1].name
    for dispatcher in Dispatcher.serving(tools):
        dispatcher.add_tool(dispatcher.remove_tool(name))
    return f"Tool {name} re-registered"


@tools.tool
async def test_trigger_prompt_change() -> str:
    """The suite calls it to make the prompt list change: the last prompt is removed
    and added back."""
    prompt = list(prompts)[-1]
    prompts.remove(prompt.name)
    prompts.add(
        prompt.fn,
        name=prompt.name,
        title=prompt.title,
        description=prompt.description,
        complete=prompt.completers,
    )
    return f"Prompt {prompt.name} re-registered"


# -- tasks (extension io.modelcontextprotocol/tasks) ------------------------------------


@tools.tool(promise_after=NEVER)
def greet(name: str) -> str:
    """Answers at once, never as a task."""
    return f"Hello, {name}!"


@tools.tool(promise_after=ALWAYS)
async def slow_compute(seconds: int, label: str = "") -> str:
    """Works for ``seconds``: a task for a client that takes tasks."""
    await asyncio.sleep(seconds)
    return f"Computed {label or 'result'} in {seconds}s"


@tools.tool(promise_after=ALWAYS, requires={"extensions": {TASKS: {}}})
async def failing_job() -> str:
    """Only runs as a task, which ends in a tool error."""
    await asyncio.sleep(1)
    raise Failure("The job failed")


@tools.tool(promise_after=ALWAYS)
async def protocol_error_job() -> str:
    """A task that ends in a protocol error rather than a result."""
    await asyncio.sleep(0.2)
    raise InternalError("The job hit a protocol error")


@tools.tool(promise_after=ALWAYS)
async def confirm_delete(filename: str, ctx: Context) -> str | InputRequired:
    """Asks for a confirmation before it deletes ``filename``."""
    answer = accepted(ctx.input_responses.get("confirm"))
    if answer is None:
        question = elicit(f"Delete {filename}?", {"confirm": {"type": "boolean"}}, ["confirm"])
        return InputRequired({"confirm": question})
    return f"Deleted {filename}" if answer.get("confirm") else f"Kept {filename}"


@tools.tool(promise_after=ALWAYS)
async def multi_input(ctx: Context) -> str | InputRequired:
    """Asks two questions at once, and finishes when both are answered."""
    keys = ("first", "second")
    answers = {key: accepted(ctx.input_responses.get(key)) for key in keys}
    missing = {
        key: elicit(f"The {key} name?", {"name": {"type": "string"}}, ["name"])
        for key, answer in answers.items()
        if answer is None
    }
    if missing:
        return InputRequired(missing)
    return "Names: " + ", ".join(str(answer.get("name")) for answer in answers.values() if answer)


@tools.tool(promise_after=0.2, requires={"extensions": {TASKS: {}}})
async def test_tool_with_task(ctx: Context) -> str | InputRequired:
    """Asks a name at once, then works on it as a task."""
    answer = accepted(ctx.input_responses.get("user_name"))
    if answer is None:
        return InputRequired({"user_name": NAME})
    await asyncio.sleep(0.5)
    return f"Hello, {answer.get('name')}! (from a task)"


# -- prompts ------------------------------------------------------------------------------


@prompts.prompt
def test_simple_prompt() -> str:
    """A simple prompt without arguments."""
    return "This is a simple prompt for testing."


@prompts.prompt
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with two required arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@prompts.prompt
def test_prompt_with_embedded_resource(resourceUri: str) -> list[Any]:
    """A prompt that embeds a resource."""
    text = "Embedded resource content for testing."
    return [
        content.embedded(resourceUri, text=text, mime_type="text/plain"),
        "Please process the embedded resource above.",
    ]


@prompts.prompt
def test_prompt_with_image() -> list[Any]:
    """A prompt with an image."""
    return [content.image(PNG, "image/png"), Message("user", "Please analyze the image above.")]


@prompts.prompt
def test_input_required_result_prompt(ctx: Context) -> str | InputRequired:
    """Asks the user for context before it is filled in (2026 input_required)."""
    answer = accepted(ctx.input_responses.get("user_context"))
    if answer is None:
        question = elicit(
            "What context should the prompt use?", {"context": {"type": "string"}}, ["context"]
        )
        return InputRequired({"user_context": question})
    return f"Prompt with user context: {answer.get('context', '')}"


# -- resources ----------------------------------------------------------------------------
# test://static-text comes first: the caching scenario reads resources[0].


@resources.resource("test://static-text", name="Static Text Resource", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@resources.resource("test://static-binary", name="Static Binary Resource", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource (a PNG)."""
    return base64.b64decode(PNG)


@resources.resource("test://watched-resource", name="Watched Resource", mime_type="text/plain")
def watched_resource() -> str:
    """The resource the 2025 suite subscribes to."""
    return "Watched resource content"


@resources.resource(
    "test://template/{id}/data", name="Resource Template", mime_type="application/json"
)
def template_data(id: str) -> str:
    """Data for any id."""
    data = {"id": id, "templateTest": True, "data": f"Data for ID: {id}"}
    return json.dumps(data, separators=(",", ":"))
