"""The one method table (mcplite.protocols.methods): which methods each profile
(MCP-lite, MCP 2026, MCP 2025) may call, what the framing reads of each, and
one handler answering every profile."""

from __future__ import annotations

from typing import Any

import pytest

from mcplite import InvalidParams, Prompts, Resources, Tools
from mcplite.auth import DISCOVERY_METHODS
from mcplite.core.context import RequestContext
from mcplite.core.dispatch import Dispatcher
from mcplite.core.errors import MethodNotFound
from mcplite.protocols.mcp.protocol import NAME_PARAMS
from mcplite.protocols.mcp.server import McpServer
from mcplite.protocols.methods import call_method, mcplite_methods, prompt_methods
from mcplite.protocols.requests import NO_ID, Profile, Request

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def registries() -> tuple[Tools, Prompts, Resources]:
    tools, prompts, resources = Tools(), Prompts(), Resources()

    @tools.tool
    def echo(text: str) -> str:
        return text

    @prompts.prompt
    def greet(name: str) -> str:
        """Greet someone."""
        return f"Hello, {name}!"

    @resources.resource("docs://readme")
    def readme() -> str:
        return "# Hello"

    return tools, prompts, resources


@pytest.fixture
def mcp() -> McpServer:
    tools, prompts, resources = registries()
    return McpServer(Dispatcher(tools), prompts=prompts, resources=resources)


def test_each_profile_sees_the_methods_of_its_protocol(mcp: McpServer) -> None:
    shared = {
        "tools/call",
        "tools/list",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
    table = mcp.methods
    assert set(table.view(Profile.LITE)) == shared | {"ping"}
    assert set(table.view(Profile.MCP_2026)) == shared | {
        "completion/complete",
        "server/discover",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "subscriptions/listen",
    }
    assert set(table.view(Profile.MCP_2025)) == shared | {
        "completion/complete",
        "ping",
        "initialize",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
    }


def test_the_mcp_lite_table_is_the_lite_view_of_the_same_methods() -> None:
    tools, prompts, resources = registries()
    methods = mcplite_methods(Dispatcher(tools), prompts=prompts, resources=resources)
    mcp = McpServer(Dispatcher(tools), prompts=prompts, resources=resources)
    assert set(methods) == set(mcp.methods.view(Profile.LITE))
    assert set(mcplite_methods(Dispatcher(tools))) == {"tools/call", "tools/list", "ping"}


def test_discovery_is_what_auth_lets_an_anonymous_caller_do_under_open_discovery(
    mcp: McpServer,
) -> None:
    discovery = {name for name, method in mcp.methods.methods.items() if method.discovery}
    # notifications/initialized is a notification: no method answers it.
    assert discovery == DISCOVERY_METHODS - {"notifications/initialized"}


def test_the_name_param_is_the_one_the_mcp_name_header_repeats(mcp: McpServer) -> None:
    for name, method in mcp.methods.methods.items():
        assert method.name_param == NAME_PARAMS.get(name), name
    assert {n for n, m in mcp.methods.methods.items() if m.name_param} <= set(NAME_PARAMS)


def test_only_mcp_lite_tools_call_answers_as_a_stream(mcp: McpServer) -> None:
    streaming = {name for name, method in mcp.methods.methods.items() if method.stream}
    assert streaming == {"tools/call"}


def request(profile: Profile, method: str, params: Any) -> Request:
    return Request(1, method, params, profile, RequestContext("in-process"))


async def test_one_prompts_get_handler_answers_every_profile_alike(mcp: McpServer) -> None:
    get = mcp.methods.methods["prompts/get"].handler
    params = {"name": "greet", "arguments": {"name": "Ada"}}
    lite = await get(request(Profile.LITE, "prompts/get", params))
    modern = await get(request(Profile.MCP_2026, "prompts/get", {**params, "_meta": META}))
    legacy = await get(request(Profile.MCP_2025, "prompts/get", params))
    assert lite == modern == legacy
    assert modern["messages"][0]["content"]["text"] == "Hello, Ada!"
    with pytest.raises(InvalidParams, match="Unknown prompt: nope"):
        await get(request(Profile.LITE, "prompts/get", {"name": "nope"}))
    with pytest.raises(InvalidParams, match="Unknown prompt: nope"):
        await get(request(Profile.MCP_2026, "prompts/get", {"name": "nope", "_meta": META}))


async def test_a_list_is_one_answer_for_mcp_lite_and_a_page_with_hints_for_2026(
    mcp: McpServer,
) -> None:
    listing = mcp.methods.methods["resources/list"].handler
    lite = await listing(request(Profile.LITE, "resources/list", None))
    modern = await listing(request(Profile.MCP_2026, "resources/list", {"_meta": META}))
    legacy = await listing(request(Profile.MCP_2025, "resources/list", {}))
    assert lite == legacy == {"resources": modern["resources"]}
    assert (modern["ttlMs"], modern["cacheScope"]) == (0, "public")


async def test_call_method_answers_as_the_mcp_lite_endpoint_does() -> None:
    tools, prompts, _ = registries()
    methods = mcplite_methods(Dispatcher(tools), prompts=prompts)
    context = RequestContext("grpc")
    listed = await call_method(methods, "prompts/list", None, context)
    assert [p["name"] for p in listed["prompts"]] == ["greet"]
    with pytest.raises(MethodNotFound):
        await call_method(methods, "server/discover", {}, context)
    # The alias the gRPC binding holds: a handler taking (params, context).
    got = await prompt_methods(prompts)["prompts/get"].handler(
        {"name": "greet", "arguments": {"name": "Bo"}}, context
    )
    assert got == await call_method(
        methods, "prompts/get", {"name": "greet", "arguments": {"name": "Bo"}}, context
    )


def test_a_request_says_which_profile_asks_and_starts_with_no_mcp_extras() -> None:
    made = Request(NO_ID, "ping", None, Profile.LITE, RequestContext("stdio"))
    assert made.headers is None and made.send is None and dict(made.capabilities) == {}
    assert "ping" in repr(made) and "LITE" in repr(made)
