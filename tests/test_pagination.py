"""Pages of MCP's lists: with ``page_size`` (``--page-size N``) ``tools/list``,
``prompts/list``, ``resources/list`` and ``resources/templates/list`` answer N
entries at a time with a ``nextCursor``; the official ``mcp`` client pages
through them in both revisions; a cursor that is not ours is -32602; MCP-lite
discovery stays one answer.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import make_config, serve_process
from mcp.shared.exceptions import MCPError
from registries_support import Served, serving
from test_mcp_client import DEMO_TOOLS, ERAS, connected
from test_stdio import request, stdio_process

from mcplite import InvalidParams, Prompts, Resources, Tools
from mcplite.protocols.mcp.pagination import page

TOOLS = [f"tool_{n}" for n in range(7)]
PROMPTS = [f"prompt_{n}" for n in range(5)]
RESOURCES = [f"docs://fixed/{n}" for n in range(4)]
TEMPLATES = [f"docs://t{n}/{{id}}" for n in range(3)]
SIZE = 3


def _text() -> str:
    return "text"


def registries() -> tuple[Tools, Prompts, Resources]:
    tools, prompts, resources = Tools(), Prompts(), Resources()
    for name in TOOLS:
        tools.add(_text, name=name)
    for name in PROMPTS:
        prompts.add(_text, name=name)
    for uri in RESOURCES:
        resources.add(_text, uri)
    for uri in TEMPLATES:
        resources.add(lambda id: id, uri, name="template")
    return tools, prompts, resources


@pytest.fixture(scope="module")
def paged() -> Iterator[Served]:
    with serving(*registries(), config=make_config(page_size=SIZE)) as running:
        yield running


@pytest.fixture(params=sorted(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def _pages(served: Served, method: str, field: str, key: str) -> list[list[str]]:
    """Every page of a list, following nextCursor over raw 2026 requests."""
    pages: list[list[str]] = []
    params: dict[str, Any] = {}
    for _ in range(20):  # bounded: the lists here have a few pages
        status, reply = served.modern(method, params)
        assert status == 200, reply
        result = reply["result"]
        pages.append([entry[key] for entry in result[field]])
        if "nextCursor" not in result:
            return pages
        params = {"cursor": result["nextCursor"]}
    raise AssertionError("the pages never ended")


# --- the official client pages through every list ------------------------------------------


async def test_the_official_client_pages_through_tools_with_next_cursor(
    paged: Served, era: str
) -> None:
    pages: list[list[str]] = []
    cursor: str | None = None
    async with connected(paged.port, era) as client:
        for _ in range(10):
            listed = await client.list_tools(cursor=cursor, cache_mode="refresh")
            pages.append([tool.name for tool in listed.tools])
            cursor = listed.next_cursor
            if cursor is None:
                break
    assert pages == [TOOLS[0:3], TOOLS[3:6], TOOLS[6:]]


async def test_the_official_client_pages_through_prompts_resources_and_templates(
    paged: Served, era: str
) -> None:
    async with connected(paged.port, era) as client:
        first = await client.list_prompts(cache_mode="refresh")
        assert first.next_cursor is not None
        rest = await client.list_prompts(cursor=first.next_cursor, cache_mode="refresh")
        assert rest.next_cursor is None
        resources = await client.list_resources(cache_mode="refresh")
        assert resources.next_cursor is not None
        last = await client.list_resources(cursor=resources.next_cursor, cache_mode="refresh")
        templates = await client.list_resource_templates(cache_mode="refresh")
    assert [p.name for p in first.prompts + rest.prompts] == PROMPTS
    assert [r.uri for r in resources.resources] == RESOURCES[:3]
    assert ([r.uri for r in last.resources], last.next_cursor) == (RESOURCES[3:], None)
    assert [t.uri_template for t in templates.resource_templates] == TEMPLATES
    assert templates.next_cursor is None  # exactly one page: no cursor to an empty one


async def test_a_cursor_that_is_not_ours_is_invalid_params_to_the_official_client(
    paged: Served, era: str
) -> None:
    async with connected(paged.port, era) as client:
        with pytest.raises(MCPError) as caught:
            await client.list_tools(cursor="not-a-cursor!", cache_mode="refresh")
    assert caught.value.code == -32602
    assert "cursor" in caught.value.message


def test_each_list_pages_on_the_wire(paged: Served) -> None:
    assert _pages(paged, "tools/list", "tools", "name") == [TOOLS[0:3], TOOLS[3:6], TOOLS[6:]]
    assert _pages(paged, "prompts/list", "prompts", "name") == [PROMPTS[:3], PROMPTS[3:]]
    assert _pages(paged, "resources/list", "resources", "uri") == [RESOURCES[:3], RESOURCES[3:]]
    templates = _pages(paged, "resources/templates/list", "resourceTemplates", "uriTemplate")
    assert templates == [TEMPLATES]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _cursor(value: Any) -> str:
    return _b64(json.dumps(value).encode())


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "!!!",
        "bm90IGpzb24",  # base64 of "not json"
        _b64(b"\xff\xfe"),  # not UTF-8
        _cursor([]),
        _cursor({"offset": 3}),
        _cursor(["tools/list", -1, "tool_0"]),
        _cursor(["tools/list", True, "tool_0"]),
        _cursor(["tools/list", 1.5, "tool_0"]),
        _cursor(["prompts/list", 3, "prompt_2"]),  # made for another list
        "A" * 5000,
        7,
        ["tools/list"],
        None,  # a JSON null is no cursor at all: the first page (below)
    ],
)
def test_a_bad_cursor_is_invalid_params_never_a_server_error(paged: Served, cursor: Any) -> None:
    status, reply = paged.modern("tools/list", {"cursor": cursor})
    if cursor is None:
        assert status == 200 and len(reply["result"]["tools"]) == SIZE
        return
    assert status == 400, reply
    assert reply["error"]["code"] == -32602
    status, legacy = paged.legacy("tools/list", {"cursor": cursor})
    assert (status, legacy["error"]["code"]) == (200, -32602)


def test_a_tools_cursor_is_refused_by_the_other_lists(paged: Served) -> None:
    status, reply = paged.modern("tools/list")
    cursor = reply["result"]["nextCursor"]
    for method in ("prompts/list", "resources/list", "resources/templates/list"):
        status, reply = paged.modern(method, {"cursor": cursor})
        assert (status, reply["error"]["code"]) == (400, -32602), method


def test_mcp_lite_discovery_stays_one_answer(paged: Served) -> None:
    status, body = paged.lite("/listtools", {})
    assert status == 200
    assert [t["name"] for t in body["tools"]] == ["redeem", "cancel", *TOOLS]
    assert "nextCursor" not in body
    _, rpc = paged.lite("/rpc", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert len(rpc["result"]["tools"]) == len(TOOLS) + 2
    _, prompts = paged.lite("/rpc", {"jsonrpc": "2.0", "id": 2, "method": "prompts/list"})
    assert [p["name"] for p in prompts["result"]["prompts"]] == PROMPTS


def test_without_a_page_size_every_list_is_one_page() -> None:
    with serving(*registries()) as running:
        assert _pages(running, "tools/list", "tools", "name") == [TOOLS]
        assert _pages(running, "resources/list", "resources", "uri") == [RESOURCES]


def test_a_page_size_is_a_positive_number() -> None:
    with pytest.raises(ValueError, match="page_size"):
        make_config(page_size=0)


# --- a list that changes between pages --------------------------------------------------------


def test_a_tool_removed_before_the_cursor_neither_repeats_nor_skips_one() -> None:
    tools, prompts, resources = registries()
    with serving(tools, prompts, resources, make_config(page_size=SIZE)) as running:
        _, reply = running.modern("tools/list")
        cursor = reply["result"]["nextCursor"]
        running.running.call_soon(lambda: tools.remove("tool_0"))
        _, reply = running.modern("tools/list", {"cursor": cursor})
    assert [t["name"] for t in reply["result"]["tools"]] == TOOLS[3:6]


def _entries(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": name} for name in names]


def test_a_cursor_follows_its_entry_and_starts_where_a_removed_one_was() -> None:
    names = ["a", "b", "c", "d", "e", "f"]
    first, cursor = page(_entries(names), None, "tools/list", "name", 2)
    assert ([e["name"] for e in first], cursor is not None) == (["a", "b"], True)
    # "x" added at the front: the next page still starts after "b".
    moved, _ = page(_entries(["x", *names]), cursor, "tools/list", "name", 2)
    assert [e["name"] for e in moved] == ["c", "d"]
    # "b" itself removed: start where it was, repeating rather than skipping.
    gone, _ = page(_entries(["a", "c", "d", "e"]), cursor, "tools/list", "name", 2)
    assert [e["name"] for e in gone] == ["c", "d"]
    # Everything removed: an empty last page, not an error.
    assert page([], cursor, "tools/list", "name", 2) == ([], None)


def test_a_page_without_a_size_is_the_rest_of_the_list() -> None:
    names = ["a", "b", "c"]
    _, cursor = page(_entries(names), None, "tools/list", "name", 1)
    rest, after = page(_entries(names), cursor, "tools/list", "name", None)
    assert ([e["name"] for e in rest], after) == (["b", "c"], None)
    with pytest.raises(InvalidParams):
        page(_entries(names), cursor, "prompts/list", "name", None)


# --- the commands -------------------------------------------------------------------------------


async def test_serve_with_page_size_pages_the_demo_for_the_official_client() -> None:
    args = ("mcplite.demo", "--http", "127.0.0.1:0", "--no-grpc", "--page-size", "3")
    with serve_process(*args) as process:
        async with connected(process.http_port, "2026") as client:
            first = await client.list_tools(cache_mode="refresh")
            rest = await client.list_tools(cursor=first.next_cursor, cache_mode="refresh")
    assert [t.name for t in first.tools] == DEMO_TOOLS[:3]
    assert ([t.name for t in rest.tools], rest.next_cursor) == (DEMO_TOOLS[3:], None)


def test_stdio_with_page_size_pages_its_lists() -> None:
    with stdio_process("mcplite.demo", "--page-size", "1") as server:
        server.send(request("tools/list"))
        first = server.receive()["result"]
        server.send(request("tools/list", {"cursor": first["nextCursor"]}, request_id=2))
        second = server.receive()["result"]
        server.send(request("tools/list", {"cursor": "nope"}, request_id=3))
        refused = server.receive()
    assert [t["name"] for t in first["tools"] + second["tools"]] == DEMO_TOOLS[:2]
    assert refused["error"]["code"] == -32602


def test_page_size_is_a_positive_integer_on_the_command_line() -> None:
    from mcplite.ops.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve", "m", "--page-size", "25"]).page_size == 25
    assert parser.parse_args(["stdio", "m"]).page_size is None
    with pytest.raises(SystemExit):
        parser.parse_args(["stdio", "m", "--page-size", "0"])
