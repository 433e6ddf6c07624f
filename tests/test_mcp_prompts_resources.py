"""Prompts, resources and completion on the MCP endpoint and on stdio.

The official ``mcp`` client lists and gets prompts, lists and reads resources and
completes arguments over HTTP in both revisions and over stdio (where ``mcplite
stdio MODULE`` picks up the module's ``prompts`` and ``resources``); raw requests
pin what the client does not show: the caching hints, the error codes and HTTP
statuses, and that a server without prompts or resources offers neither.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import mcp_types as types
import pytest
from conftest import WAIT, RunningServer, ServeProcess, serve_process, start_server
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from test_conformance import CONFORMANCE
from test_mcp_client import connected
from test_mcp_http import assert_error, legacy_result, modern_headers, modern_message, post
from test_stdio import official_client

from mcplite import Context, Field, InputRequired, Prompts, Resources, Tools, content
from mcplite.protocols.mcp.protocol import NAME_PARAMS
from mcplite.protocols.mcp.server import McpServer

PNG = b"\x89PNG\r\n\x1a\n"
ASK_NAME = {
    "method": "elicitation/create",
    "params": {
        "message": "Who is asking?",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}


def make_prompts() -> Prompts:
    prompts = Prompts()

    @prompts.prompt
    def summarize(
        text: Annotated[str, Field(description="What to summarize")],
        style: Literal["short", "bullet points"] = "short",
    ) -> str:
        """Summarize a text."""
        return f"Summarize ({style}): {text}"

    @prompts.prompt
    def with_picture() -> list[Any]:
        """A picture and a question."""
        return [content.image(PNG, "image/png"), "What is in this picture?"]

    @prompts.prompt
    def personal(ctx: Context) -> str | InputRequired:
        """Asks who is asking first."""
        answer = ctx.input_responses.get("who")
        if not isinstance(answer, dict) or answer.get("action") != "accept":
            return InputRequired({"who": ASK_NAME})
        return f"Hello, {answer['content']['name']}!"

    return prompts


def make_resources() -> Resources:
    resources = Resources()

    @resources.resource("notes://today", name="Today", mime_type="text/plain")
    def today() -> str:
        """Today's note."""
        return "Buy milk."

    @resources.resource("notes://logo", name="Logo", mime_type="image/png")
    def logo() -> bytes:
        return PNG

    @resources.resource(
        "notes://days/{day}",
        name="Day",
        mime_type="text/plain",
        complete={"day": lambda value: [d for d in ("monday", "tuesday") if d.startswith(value)]},
    )
    def day(day: str) -> str:
        """The note of a day."""
        return f"Note for {day}"

    return resources


def exchange(server: RunningServer, message: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST a 2026 ``message`` with the headers a client sends (``Mcp-Name`` for every
    method that has one); the status and the JSON reply."""
    headers = modern_headers(message)
    name_param = NAME_PARAMS.get(message["method"])
    if name_param is not None:
        headers["Mcp-Name"] = str(message["params"][name_param])
    status, _, body = post(server, message, headers)
    reply: dict[str, Any] = json.loads(body)
    return status, reply


def modern(
    server: RunningServer,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    capabilities: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A 2026 request that must succeed: its ``result``."""
    status, reply = exchange(server, modern_message(method, params, capabilities=capabilities))
    assert status == 200, reply
    result: dict[str, Any] = reply["result"]
    return result


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    running = start_server(Tools())
    # What `serve` does with a module's prompts and resources (HttpServer(..., prompts=...)).
    running.http.mcp = McpServer(
        running.dispatcher, prompts=make_prompts(), resources=make_resources()
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(params=["2026", "2025"])
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# --- the official client over HTTP, both revisions ------------------------------------


async def test_the_client_sees_the_capabilities_and_lists_the_prompts(
    server: RunningServer, era: str
) -> None:
    async with connected(server.port, era) as client:
        capabilities = client.server_capabilities
        assert capabilities.prompts is not None
        assert capabilities.resources is not None
        assert capabilities.completions is not None
        listed = await client.list_prompts()
    assert [p.name for p in listed.prompts] == ["summarize", "with_picture", "personal"]
    summarize = listed.prompts[0]
    assert summarize.description == "Summarize a text."
    assert summarize.arguments is not None
    assert [(a.name, a.description, a.required) for a in summarize.arguments] == [
        ("text", "What to summarize", True),
        ("style", None, False),
    ]


async def test_the_client_gets_a_prompt_filled_with_its_arguments(
    server: RunningServer, era: str
) -> None:
    async with connected(server.port, era) as client:
        got = await client.get_prompt("summarize", {"text": "a long story", "style": "short"})
        picture = await client.get_prompt("with_picture")
    assert got.description == "Summarize a text."
    assert len(got.messages) == 1
    message = got.messages[0]
    assert message.role == "user"
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "Summarize (short): a long story"
    first, second = picture.messages
    assert isinstance(first.content, types.ImageContent)
    assert base64.b64decode(first.content.data) == PNG
    assert first.content.mime_type == "image/png"
    assert isinstance(second.content, types.TextContent)


async def test_a_missing_argument_or_an_unknown_prompt_is_invalid_params(
    server: RunningServer, era: str
) -> None:
    async with connected(server.port, era) as client:
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("summarize", {"style": "short"})
        with pytest.raises(MCPError) as unknown:
            await client.get_prompt("nope")
    assert missing.value.code == -32602
    assert "text" in missing.value.message
    assert unknown.value.code == -32602


async def test_the_client_lists_and_reads_text_binary_and_templated_resources(
    server: RunningServer, era: str
) -> None:
    async with connected(server.port, era) as client:
        listed = await client.list_resources()
        templates = await client.list_resource_templates()
        text = await client.read_resource("notes://today")
        blob = await client.read_resource("notes://logo")
        templated = await client.read_resource("notes://days/monday")
    assert [(str(r.uri), r.name, r.mime_type) for r in listed.resources] == [
        ("notes://today", "Today", "text/plain"),
        ("notes://logo", "Logo", "image/png"),
    ]
    assert [(t.uri_template, t.name) for t in templates.resource_templates] == [
        ("notes://days/{day}", "Day")
    ]
    (only,) = text.contents
    assert isinstance(only, types.TextResourceContents) and only.text == "Buy milk."
    (image,) = blob.contents
    assert isinstance(image, types.BlobResourceContents)
    assert base64.b64decode(image.blob) == PNG and image.mime_type == "image/png"
    (day,) = templated.contents
    assert isinstance(day, types.TextResourceContents) and day.text == "Note for monday"


async def test_an_unknown_resource_is_invalid_params_naming_the_uri(
    server: RunningServer, era: str
) -> None:
    async with connected(server.port, era) as client:
        with pytest.raises(MCPError) as caught:
            await client.read_resource("notes://nowhere")
    assert caught.value.code == -32602
    assert caught.value.data == {"uri": "notes://nowhere"}


async def test_the_client_completes_a_literal_argument_and_a_template_variable(
    server: RunningServer, era: str
) -> None:
    async with connected(server.port, era) as client:
        style = await client.complete(
            types.PromptReference(type="ref/prompt", name="summarize"),
            {"name": "style", "value": "b"},
        )
        day = await client.complete(
            types.ResourceTemplateReference(type="ref/resource", uri="notes://days/{day}"),
            {"name": "day", "value": "tu"},
        )
        nothing = await client.complete(
            types.PromptReference(type="ref/prompt", name="summarize"),
            {"name": "text", "value": "x"},
        )
    assert style.completion.values == ["bullet points"]
    assert day.completion.values == ["tuesday"]
    assert nothing.completion.values == [] and nothing.completion.has_more is False


def test_a_2026_prompt_asks_for_input_and_completes_with_the_answer(
    server: RunningServer,
) -> None:
    round1 = modern(server, "prompts/get", {"name": "personal"}, capabilities={"elicitation": {}})
    assert round1["resultType"] == "input_required"
    assert round1["inputRequests"] == {"who": ASK_NAME}
    answer = {"who": {"action": "accept", "content": {"name": "Ada"}}}
    round2 = modern(
        server,
        "prompts/get",
        {"name": "personal", "inputResponses": answer, "requestState": round1["requestState"]},
        capabilities={"elicitation": {}},
    )
    assert round2["resultType"] == "complete"
    assert round2["messages"][0]["content"]["text"] == "Hello, Ada!"


async def test_a_prompt_that_asks_for_input_gets_it_through_the_clients_callback(
    server: RunningServer, era: str
) -> None:
    # 2026: an input_required result the client answers by asking again; 2025: an
    # elicitation/create request on the response's stream, answered by a POST.
    asked: list[str] = []

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with connected(server.port, era, elicitation_callback=elicit) as client:
        got = await client.get_prompt("personal")
    assert asked == ["Who is asking?"]
    (message,) = got.messages
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "Hello, Ada!"


# --- raw requests: hints, errors, and what is not offered -----------------------------


def test_lists_and_reads_carry_the_2026_caching_hints(server: RunningServer) -> None:
    for method, params in (
        ("prompts/list", {}),
        ("resources/list", {}),
        ("resources/templates/list", {}),
        ("resources/read", {"uri": "notes://today"}),
    ):
        result = modern(server, method, params)
        assert result["resultType"] == "complete", method
        assert result["ttlMs"] == 0, method
        assert result["cacheScope"] in ("public", "private"), method
    assert modern(server, "prompts/get", {"name": "with_picture"}).keys() >= {"messages"}
    assert "ttlMs" not in modern(server, "prompts/get", {"name": "with_picture"})


def test_an_unknown_resource_is_a_400_with_the_uri_and_never_empty_contents(
    server: RunningServer,
) -> None:
    uri = "test://nonexistent-resource-for-conformance-testing"
    status, reply = exchange(server, modern_message("resources/read", {"uri": uri}, 7))
    error = assert_error(status, reply, 400, -32602, 7)
    assert error["data"] == {"uri": uri}


def test_a_prompt_that_needs_input_refuses_a_client_that_cannot_elicit(
    server: RunningServer,
) -> None:
    message = modern_message("prompts/get", {"name": "personal"}, 8)
    status, reply = exchange(server, message)
    error = assert_error(status, reply, 400, -32021, 8)
    assert error["data"] == {"requiredCapabilities": {"elicitation": {}}}


def test_2025_subscribe_and_unsubscribe_are_acknowledged_and_2026_has_neither(
    server: RunningServer,
) -> None:
    for method in ("resources/subscribe", "resources/unsubscribe"):
        assert legacy_result(server, method, {"uri": "notes://today"}) == {}
        status, reply = exchange(server, modern_message(method, {"uri": "notes://today"}, 9))
        assert_error(status, reply, 404, -32601, 9)


def test_a_server_without_prompts_or_resources_offers_neither() -> None:
    bare = start_server(Tools())
    try:
        capabilities = modern(bare, "server/discover")["capabilities"]
        assert not {"prompts", "resources", "completions"} & set(capabilities)
        for method in ("prompts/list", "resources/list", "completion/complete"):
            status, reply = exchange(bare, modern_message(method, {}, 3))
            assert_error(status, reply, 404, -32601, 3)
    finally:
        bare.stop()


# --- stdio: `mcplite stdio MODULE` serves the module's prompts and resources ----------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_official_client_gets_prompts_and_reads_resources_over_stdio(
    tmp_path: Path, mode: str
) -> None:
    client, errlog = official_client(tmp_path, "server", mode=mode, extra_path=CONFORMANCE)
    with errlog:
        async with asyncio.timeout(WAIT), client:
            prompts = await client.list_prompts()
            got = await client.get_prompt(
                "test_prompt_with_arguments", {"arg1": "testValue1", "arg2": "testValue2"}
            )
            resources = await client.list_resources()
            read = await client.read_resource("test://template/123/data")
    assert prompts.prompts[0].name == "test_simple_prompt"
    message = got.messages[0].content
    assert isinstance(message, types.TextContent)
    assert "testValue1" in message.text and "testValue2" in message.text
    assert str(resources.resources[0].uri) == "test://static-text"
    (contents,) = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert contents.text == '{"id":"123","templateTest":true,"data":"Data for ID: 123"}'


# --- the demo: `mcplite serve mcplite.demo` serves its prompts and resources ----------


@pytest.fixture(scope="module")
def demo() -> Iterator[ServeProcess]:
    with serve_process(
        "mcplite.demo", "--http", "127.0.0.1:0", "--no-grpc", "--no-access-log"
    ) as process:
        yield process


async def test_the_demo_serves_a_resource_per_corpus_section_and_a_template_by_id(
    demo: ServeProcess,
) -> None:
    assert demo.http_port is not None
    async with connected(demo.http_port, "2026") as client:
        listed = await client.list_resources()
        templates = await client.list_resource_templates()
        uri = str(listed.resources[0].uri)
        fixed = await client.read_resource(uri)
        by_id = await client.read_resource("mcplite-demo://corpus/doc_error_handling")
        completed = await client.complete(
            types.ResourceTemplateReference(
                type="ref/resource", uri="mcplite-demo://corpus/{document_id}"
            ),
            {"name": "document_id", "value": "doc_p"},
        )
    assert len(listed.resources) == 11
    assert uri == "mcplite-demo://corpus/doc_mcp_protocol_overview"
    assert listed.resources[0].title == "MCP Protocol Overview"
    assert [t.uri_template for t in templates.resource_templates] == [
        "mcplite-demo://corpus/{document_id}"
    ]
    (text,) = fixed.contents
    assert isinstance(text, types.TextResourceContents)
    assert text.text.startswith("## MCP Protocol Overview")
    (section,) = by_id.contents
    assert isinstance(section, types.TextResourceContents)
    assert section.text.startswith("## Error Handling") and "-32700" in section.text
    assert completed.completion.values == ["doc_promises_and_the_redeem_tool"]


async def test_the_demo_prompts_embed_a_section_and_ask_to_search(
    demo: ServeProcess, era: str
) -> None:
    assert demo.http_port is not None
    async with connected(demo.http_port, era) as client:
        listed = await client.list_prompts()
        explained = await client.get_prompt(
            "explain_section", {"document_id": "doc_tool_discovery", "audience": "expert"}
        )
        asked = await client.get_prompt("ask_the_corpus", {"question": "What is a promise?"})
        with pytest.raises(MCPError) as unknown:
            await client.get_prompt("explain_section", {"document_id": "doc_nope"})
    assert [p.name for p in listed.prompts] == ["explain_section", "ask_the_corpus"]
    embedded, instruction = explained.messages
    assert isinstance(embedded.content, types.EmbeddedResource)
    assert str(embedded.content.resource.uri) == "mcplite-demo://corpus/doc_tool_discovery"
    assert isinstance(instruction.content, types.TextContent)
    assert "an expert" in instruction.content.text
    (question,) = asked.messages
    assert isinstance(question.content, types.TextContent)
    assert "search_documents" in question.content.text
    assert unknown.value.code == -32602
