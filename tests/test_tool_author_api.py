"""What a tool author uses, by its public name, over real sockets: a tool reading
its progress token; a served module adding and removing tools (``Tools.add``,
``Tools.remove``) with every list following; ``task_support``; the shape of
``ctx.input_responses`` and of an ``InputRequired`` request; JSON Schema extras
on ``Field``; ``InternalError``; prompts that take a ``Context``.
"""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Iterator
from typing import Annotated, Any

import mcp_types as types
import pytest
from conftest import WAIT, make_config
from grpc_support import protos
from mcp.client.session import ClientRequestContext
from registries_support import Served, serving
from sse_client import Event, RawHttp, connect, request_bytes
from test_mcp_client import ERAS, connected
from test_mcp_http import TASKS, WITH_TASKS, modern_headers, modern_message

from mcplite import (
    ALWAYS,
    Context,
    Dispatcher,
    Field,
    InputRequired,
    InternalError,
    Prompts,
    RequestContext,
    Tools,
)

ASK_OK: dict[str, Any] = {
    "method": "elicitation/create",
    "params": {
        "message": "Delete notes.txt?",
        "requestedSchema": {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
        },
    },
}


def _echo(text: str) -> str:
    return text


def registries() -> tuple[Tools, Prompts]:
    tools, prompts = Tools(), Prompts()

    @tools.tool
    async def token(ctx: Context) -> dict[str, Any]:
        """Say which progress token the client sent."""
        return {"token": ctx.progress_token}

    @tools.tool
    async def grow(name: str) -> str:
        """Serve a new tool from now on."""
        tools.add(_echo, name=name)
        return f"added {name}"

    @tools.tool
    async def shrink(name: str) -> str:
        """Stop serving a tool."""
        tools.remove(name)
        return f"removed {name}"

    for support in ("optional", "required", "forbidden"):
        tools.add(_done, name=support, task_support=support, promise_after=ALWAYS)
    tools.add(_done, name="undeclared", promise_after=ALWAYS)

    @tools.tool
    def regional(
        region: Annotated[str, Field(min_length=2, json_schema_extra={"x-mcp-header": "Region"})],
    ) -> str:
        return f"served from {region}"

    @tools.tool
    def unavailable() -> str:
        raise InternalError("the index is being rebuilt; try again in a minute")

    @tools.tool
    async def delete(path: str, ctx: Context) -> str | InputRequired:
        answer = ctx.input_responses.get("confirm")
        if answer is None:
            return InputRequired({"confirm": ASK_OK}, state=path)
        # An answer is the client's result for that request: here an ElicitResult.
        if answer["action"] == "accept" and answer["content"]["ok"] is True:
            return f"deleted {ctx.request_state}"
        return f"kept {ctx.request_state}"

    @prompts.prompt
    def greeting(ctx: Context) -> str | InputRequired:
        """Greets the user by the name it asks for."""
        answer = ctx.input_responses.get("who")
        if answer is None:
            return InputRequired(
                {
                    "who": {
                        "method": "elicitation/create",
                        "params": {
                            "message": "Your name?",
                            "requestedSchema": {
                                "type": "object",
                                "properties": {"name": {"type": "string"}},
                            },
                        },
                    }
                }
            )
        caller = "anonymous" if ctx.caller is None else ctx.caller.subject
        return f"Hello, {answer['content']['name']} ({caller})!"

    return tools, prompts


async def _done() -> str:
    return "done"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    tools, prompts = registries()
    with serving(tools, prompts) as running:
        yield running


@pytest.fixture(params=sorted(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# --- the progress token ----------------------------------------------------------------------


def test_a_tool_reads_the_progress_token_the_client_sent(served: Served) -> None:
    status, reply = served.modern("tools/call", {"name": "token"}, progressToken="tok-7")
    assert status == 200
    assert reply["result"]["structuredContent"] == {"token": "tok-7"}
    _, reply = served.modern("tools/call", {"name": "token"})
    assert reply["result"]["structuredContent"] == {"token": None}
    _, legacy = served.legacy("tools/call", {"name": "token", "_meta": {"progressToken": 12}})
    assert legacy["result"]["structuredContent"] == {"token": 12}


async def test_the_official_client_sends_a_token_only_with_a_progress_callback(
    served: Served, era: str
) -> None:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    async with connected(served.port, era) as client:
        with_callback = await client.call_tool("token", {}, progress_callback=on_progress)
        without = await client.call_tool("token", {})
    assert with_callback.structured_content is not None
    assert with_callback.structured_content["token"] is not None
    assert without.structured_content == {"token": None}


# --- adding and removing tools while serving ---------------------------------------------------


class Listening:
    """One 2026 ``subscriptions/listen`` for tool list changes, read event by event."""

    def __init__(self, port: int) -> None:
        message = modern_message(
            "subscriptions/listen", {"notifications": {"toolsListChanged": True}}
        )
        self.sock = connect(port, WAIT)
        self.sock.sendall(request_bytes("/mcp", message, headers=modern_headers(message)))
        reader = RawHttp(self.sock)
        self.events: Iterator[Event] = reader.events(reader.read_head())

    def next_method(self) -> str:
        method: str = next(self.events).json()["method"]  # each read bounded by WAIT
        return method


def _names(served: Served) -> tuple[set[str], set[str], set[str]]:
    """The tools listed on MCP, on MCP-lite and on gRPC."""
    _, reply = served.modern("tools/list")
    _, lite = served.lite("/listtools", {})
    ours = protos()["ours"]
    listed = served.unary("GetTools", ours.cls("Empty")(), "ToolsList")
    return (
        {t["name"] for t in reply["result"]["tools"]},
        {t["name"] for t in lite["tools"]},
        {t.name for t in listed.tools},
    )


def test_a_served_module_adds_and_removes_tools_and_every_list_follows() -> None:
    tools, prompts = registries()
    with serving(tools, prompts) as served:
        listening = Listening(served.port)
        try:
            assert next(listening.events).json()["method"].endswith("acknowledged")
            _, added = served.modern("tools/call", {"name": "grow", "arguments": {"name": "say"}})
            assert added["result"]["content"][0]["text"] == "added say"
            assert listening.next_method() == "notifications/tools/list_changed"
            assert all("say" in names for names in _names(served))
            _, said = served.modern("tools/call", {"name": "say", "arguments": {"text": "hi"}})
            assert said["result"]["content"] == [{"type": "text", "text": "hi"}]

            served.modern("tools/call", {"name": "shrink", "arguments": {"name": "say"}})
            assert listening.next_method() == "notifications/tools/list_changed"
            assert not any("say" in names for names in _names(served))
            status, gone = served.modern("tools/call", {"name": "say", "arguments": {"text": "x"}})
            assert (status, gone["error"]["code"]) == (400, -32602)
            status, lite = served.lite(
                "/rpc",
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "say", "arguments": {}},
                },
            )
            assert lite["error"]["code"] == -32601
        finally:
            listening.sock.close()
    assert "say" not in tools


def test_removing_a_tool_that_is_not_there_is_a_key_error() -> None:
    tools = Tools()
    with pytest.raises(KeyError):
        tools.remove("nothing")


def test_change_listeners_hear_every_add_and_remove_until_they_stop() -> None:
    tools = Tools()
    heard: list[int] = []
    stop = tools.on_change(lambda: heard.append(len(tools)))
    tools.add(_echo, name="a")
    tools.add(_echo, name="b")
    tools.remove("a")
    stop()
    tools.add(_echo, name="c")
    assert heard == [1, 2, 1]


async def test_a_dispatcher_follows_its_registry_only_while_it_lives() -> None:
    tools = Tools()
    tools.add(_echo, name="first")
    dispatcher = Dispatcher(tools, make_config())
    tools.add(_echo, name="second")
    assert "second" in {t.name for t in dispatcher.tools()}
    assert dispatcher.version == 1
    await dispatcher.close()
    gone = weakref.ref(dispatcher)
    del dispatcher
    gc.collect()
    assert gone() is None
    assert len(tools._listeners) == 0  # its listener went with it
    tools.add(_echo, name="third")  # and nothing breaks


async def test_a_tool_the_dispatcher_removed_stays_away_when_the_registry_changes() -> None:
    tools = Tools()
    tools.add(_echo, name="kept")
    tools.add(_echo, name="dropped")
    dispatcher = Dispatcher(tools, make_config())
    try:
        dispatcher.remove_tool("dropped")
        tools.add(_echo, name="new")
        names = {t.name for t in dispatcher.tools()}
        assert {"kept", "new"} <= names and "dropped" not in names
    finally:
        await dispatcher.close()


async def test_a_registry_tool_named_like_a_system_tool_is_not_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tools = Tools()
    dispatcher = Dispatcher(tools, make_config())
    try:
        with caplog.at_level(logging.ERROR, logger="mcplite"):
            tools.add(_echo, name="redeem")
        redeem = dispatcher.tool("redeem")
        assert redeem.fn is not _echo  # still the system tool
        assert "'redeem' is not served" in caplog.text
    finally:
        await dispatcher.close()


# --- task support --------------------------------------------------------------------------------


def test_task_support_is_listed_as_execution_task_support(served: Served) -> None:
    _, reply = served.modern("tools/list")
    listed = {t["name"]: t for t in reply["result"]["tools"]}
    for support in ("optional", "required", "forbidden"):
        assert listed[support]["execution"] == {"taskSupport": support}
    assert "execution" not in listed["undeclared"]


async def test_the_official_client_reads_task_support_on_2025(served: Served) -> None:
    async with connected(served.port, "2025") as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    execution = listed["required"].execution
    assert execution is not None and execution.task_support == "required"
    assert listed["undeclared"].execution is None


def test_a_tool_that_requires_tasks_refuses_a_client_without_the_extension(
    served: Served,
) -> None:
    status, reply = served.modern("tools/call", {"name": "required"})
    assert (status, reply["error"]["code"]) == (400, -32021)
    assert reply["error"]["data"]["requiredCapabilities"] == {"extensions": {TASKS: {}}}
    _, reply = served.modern("tools/call", {"name": "required"}, capabilities=WITH_TASKS)
    assert reply["result"]["resultType"] == "task"


@pytest.mark.parametrize(
    ("tool", "with_tasks", "answered_as"),
    [
        ("optional", True, "task"),
        ("optional", False, "complete"),
        ("undeclared", True, "task"),
        ("forbidden", True, "complete"),  # never a task: it completes on its own request
        ("forbidden", False, "complete"),
    ],
)
def test_a_promised_call_becomes_a_task_only_when_the_tool_allows_it(
    served: Served, tool: str, with_tasks: bool, answered_as: str
) -> None:
    capabilities = WITH_TASKS if with_tasks else {}
    status, reply = served.modern("tools/call", {"name": tool}, capabilities=capabilities)
    assert status == 200, reply
    assert reply["result"]["resultType"] == answered_as
    if answered_as == "complete":
        assert reply["result"]["content"] == [{"type": "text", "text": "done"}]


def test_on_2025_where_there_are_no_tasks_every_call_completes(served: Served) -> None:
    for tool in ("optional", "required", "forbidden"):
        _, reply = served.legacy("tools/call", {"name": tool})
        assert reply["result"]["content"] == [{"type": "text", "text": "done"}], tool


# --- input requests and ctx.input_responses ---------------------------------------------------


def test_an_input_request_comes_back_as_the_clients_answer_in_input_responses(
    served: Served,
) -> None:
    _, first = served.modern(
        "tools/call",
        {"name": "delete", "arguments": {"path": "notes.txt"}},
        capabilities={"elicitation": {}},
    )
    asked = first["result"]
    assert asked["resultType"] == "input_required"
    assert asked["inputRequests"] == {"confirm": ASK_OK}
    answers = {"confirm": {"action": "accept", "content": {"ok": True}}}
    _, second = served.modern(
        "tools/call",
        {
            "name": "delete",
            "arguments": {"path": "notes.txt"},
            "inputResponses": answers,
            "requestState": asked["requestState"],
        },
        capabilities={"elicitation": {}},
    )
    assert second["result"]["content"] == [{"type": "text", "text": "deleted notes.txt"}]


async def test_the_official_client_answers_a_tools_input_request_in_both_revisions(
    served: Served, era: str
) -> None:
    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"ok": False})

    async with connected(served.port, era, elicitation_callback=elicit) as client:
        result = await client.call_tool("delete", {"path": "notes.txt"})
    assert [block.text for block in result.content if isinstance(block, types.TextContent)] == [
        "kept notes.txt"
    ]


async def test_a_prompt_takes_a_context_and_asks_through_it(served: Served, era: str) -> None:
    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with connected(served.port, era, elicitation_callback=elicit) as client:
        got = await client.get_prompt("greeting")
    (message,) = got.messages
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "Hello, Ada (anonymous)!"


# --- JSON Schema extras on Field --------------------------------------------------------------


def test_a_field_extra_is_listed_in_the_schema_and_x_mcp_header_is_enforced(
    served: Served,
) -> None:
    _, reply = served.modern("tools/list")
    (regional,) = [t for t in reply["result"]["tools"] if t["name"] == "regional"]
    assert regional["inputSchema"]["properties"]["region"] == {
        "type": "string",
        "minLength": 2,
        "x-mcp-header": "Region",
    }
    call = {"name": "regional", "arguments": {"region": "eu"}}
    status, refused = served.modern("tools/call", call)
    assert (status, refused["error"]["code"]) == (400, -32020)
    status, answered = served.modern("tools/call", call, headers={"Mcp-Param-Region": "eu"})
    assert answered["result"]["content"] == [{"type": "text", "text": "served from eu"}]


@pytest.mark.parametrize(
    "extra", [["x-mcp-header"], {1: "one"}, {"examples": {1, 2}}, {"default": float("nan")}]
)
def test_a_field_extra_that_is_not_a_json_object_is_a_type_error(extra: Any) -> None:
    with pytest.raises(TypeError, match="json_schema_extra"):
        Field(json_schema_extra=extra)


def test_a_field_with_extras_is_still_usable_in_a_union() -> None:
    tools = Tools()

    @tools.tool
    def tagged(
        tag: Annotated[str, Field(json_schema_extra={"examples": ["a"]})] | None = None,
    ) -> str:
        return str(tag)

    tool = tools.get("tagged")
    assert tool is not None
    assert tool.input_schema["properties"]["tag"]["anyOf"][0]["examples"] == ["a"]


# --- InternalError --------------------------------------------------------------------------------


def test_a_tool_raising_internal_error_is_minus_32603_on_mcp_lite_and_is_error_on_mcp(
    served: Served,
) -> None:
    message = "the index is being rebuilt; try again in a minute"
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "unavailable"}}
    _, lite = served.lite("/rpc", call)
    assert lite["error"] == {"code": -32603, "message": message}
    _, mcp = served.modern("tools/call", {"name": "unavailable"})
    assert mcp["result"]["isError"] is True
    assert message in mcp["result"]["content"][0]["text"]


async def test_internal_error_is_the_public_name_of_the_error() -> None:
    context = RequestContext("in-process")
    tools, _ = registries()
    dispatcher = Dispatcher(tools, make_config())
    try:
        with pytest.raises(InternalError) as caught:
            await dispatcher.call("unavailable", {}, context)
    finally:
        await dispatcher.close()
    assert caught.value.jsonrpc_code == -32603


def test_the_names_a_tool_author_needs_are_public() -> None:
    import mcplite

    for name in (
        "Context",
        "Field",
        "Icon",
        "InputRequired",
        "InternalError",
        "TaskSupport",
        "ToolAnnotations",
        "Tools",
    ):
        assert name in mcplite.__all__, name
        assert getattr(mcplite, name) is not None
    assert isinstance(Context.progress_token, property)
    assert callable(Tools.remove) and callable(Tools.on_change)
