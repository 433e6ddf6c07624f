"""Titles, annotations and icons: declared once, checked at declaration, and listed
by every binding: MCP (both revisions, read by the official ``mcp`` client),
MCP-lite discovery (``http.client``) and gRPC ``GetTools``/``GetPrompts``
(grpcio built from our proto; one built from the spec's proto still works).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import WAIT
from grpc_support import protos
from registries_support import Served, serving
from test_mcp_client import ERAS, connected

from mcplite import Icon, Prompts, Resources, ToolAnnotations, Tools
from mcplite.client import Client

ICON: Icon = {
    "src": "https://example.com/trash.png",
    "mimeType": "image/png",
    "sizes": ["48x48", "96x96"],
    "theme": "light",
}
DARK: Icon = {"src": "data:image/svg+xml;base64,PHN2Zy8+", "sizes": ["any"], "theme": "dark"}
ANNOTATIONS: ToolAnnotations = {
    "title": "Delete",
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": True,
    "openWorldHint": False,
}


def registries() -> tuple[Tools, Prompts, Resources]:
    tools, prompts, resources = Tools(), Prompts(), Resources()

    @tools.tool(title="Delete a file", annotations=ANNOTATIONS, icons=[ICON, DARK])
    def delete(path: str) -> str:
        """Delete one file."""
        return f"deleted {path}"

    @tools.tool(annotations={"readOnlyHint": True})
    def peek(path: str) -> str:
        return path

    @tools.tool
    def plain(text: str) -> str:
        return text

    @prompts.prompt(title="Review some code", icons=[ICON])
    def review(code: str) -> str:
        """Ask for a review."""
        return f"Review: {code}"

    @resources.resource("docs://readme", title="The readme", icons=[DARK], mime_type="text/plain")
    def readme() -> str:
        return "read me"

    @resources.resource("docs://pages/{page}", title="A page", icons=[ICON])
    def page(page: str) -> str:
        return page

    return tools, prompts, resources


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving(*registries()) as running:
        yield running


@pytest.fixture(params=sorted(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# --- MCP, through the official client ------------------------------------------------------


async def test_the_official_client_reads_each_tools_title_annotations_and_icons(
    served: Served, era: str
) -> None:
    async with connected(served.port, era) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    delete = listed["delete"]
    assert delete.title == "Delete a file"
    assert delete.description == "Delete one file."
    assert delete.annotations is not None
    hints = delete.annotations
    assert (hints.title, hints.read_only_hint, hints.destructive_hint) == ("Delete", False, True)
    assert (hints.idempotent_hint, hints.open_world_hint) == (True, False)
    assert delete.icons is not None
    light, dark = delete.icons
    assert (light.src, light.mime_type, light.sizes, light.theme) == (
        "https://example.com/trash.png",
        "image/png",
        ["48x48", "96x96"],
        "light",
    )
    assert (dark.src, dark.mime_type, dark.sizes, dark.theme) == (
        DARK["src"],
        None,
        ["any"],
        "dark",
    )
    peek = listed["peek"].annotations
    assert peek is not None and peek.read_only_hint is True
    assert peek.destructive_hint is None  # not said: MCP's default applies
    plain = listed["plain"]
    assert (plain.title, plain.annotations, plain.icons) == (None, None, None)


async def test_the_official_client_reads_titles_and_icons_of_prompts_and_resources(
    served: Served, era: str
) -> None:
    async with connected(served.port, era) as client:
        (prompt,) = (await client.list_prompts()).prompts
        (resource,) = (await client.list_resources()).resources
        (template,) = (await client.list_resource_templates()).resource_templates
    assert prompt.title == "Review some code"
    assert prompt.icons is not None and [i.src for i in prompt.icons] == [ICON["src"]]
    assert resource.title == "The readme"
    assert resource.icons is not None and resource.icons[0].theme == "dark"
    assert template.title == "A page"
    assert template.icons is not None and template.icons[0].sizes == ["48x48", "96x96"]


def test_mcp_lists_the_same_fields_on_the_wire_in_both_revisions(served: Served) -> None:
    status, reply = served.modern("tools/list")
    assert status == 200
    modern = {tool["name"]: tool for tool in reply["result"]["tools"]}
    status, legacy_reply = served.legacy("tools/list")
    assert status == 200
    legacy = {tool["name"]: tool for tool in legacy_reply["result"]["tools"]}
    assert modern == legacy
    assert modern["delete"]["title"] == "Delete a file"
    assert modern["delete"]["annotations"] == ANNOTATIONS
    assert modern["delete"]["icons"] == [ICON, DARK]
    assert modern["peek"]["annotations"] == {"readOnlyHint": True}
    assert not {"title", "annotations", "icons"} & set(modern["plain"])


# --- MCP-lite discovery ---------------------------------------------------------------------


def test_mcp_lite_discovery_lists_title_annotations_and_icons(served: Served) -> None:
    status, body = served.lite("/listtools", {})
    assert status == 200
    tools = {tool["name"]: tool for tool in body["tools"]}
    assert tools["delete"] == {
        "name": "delete",
        "title": "Delete a file",
        "description": "Delete one file.",
        "inputSchema": tools["delete"]["inputSchema"],
        "annotations": ANNOTATIONS,
        "icons": [ICON, DARK],
    }
    assert set(tools["plain"]) == {"name", "description", "inputSchema"}
    assert "execution" not in tools["delete"]  # MCP's alone
    _, rpc = served.lite("/rpc", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert rpc["result"]["tools"] == body["tools"]
    _, prompts = served.lite("/prompts", {})
    assert prompts["prompts"][0]["icons"] == [ICON]


def test_a_listing_edited_by_its_reader_leaves_the_declaration_alone() -> None:
    tools, prompts, resources = registries()
    listed = tools.get("delete")
    assert listed is not None
    definition = listed.definition()
    definition["icons"][0]["sizes"].append("1x1")
    definition["annotations"]["readOnlyHint"] = True
    assert listed.definition()["icons"][0]["sizes"] == ["48x48", "96x96"]
    assert listed.definition()["annotations"] == ANNOTATIONS
    prompt = prompts.definitions()[0]
    prompt["icons"][0]["src"] = "https://elsewhere.example/x.png"
    assert prompts.definitions()[0]["icons"] == [ICON]
    resources.definitions()[0]["icons"].clear()
    assert resources.definitions()[0]["icons"] == [DARK]


# --- gRPC -------------------------------------------------------------------------------------


def test_get_tools_carries_title_annotations_and_icons_in_new_fields(served: Served) -> None:
    ours = protos()["ours"]
    listed = served.unary("GetTools", ours.cls("Empty")(), "ToolsList")
    tools = {tool.name: tool for tool in listed.tools}
    delete = tools["delete"]
    assert delete.title == "Delete a file"
    hints = delete.annotations
    assert hints.title == "Delete"
    assert (hints.read_only_hint, hints.destructive_hint) == (False, True)
    assert (hints.idempotent_hint, hints.open_world_hint) == (True, False)
    assert all(
        hints.HasField(f)
        for f in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")
    )
    assert [(i.src, i.mime_type, list(i.sizes), i.theme) for i in delete.icons] == [
        (ICON["src"], "image/png", ["48x48", "96x96"], "light"),
        (DARK["src"], "", ["any"], "dark"),
    ]
    peek = tools["peek"].annotations
    assert peek.HasField("read_only_hint") and peek.read_only_hint is True
    assert not peek.HasField("destructive_hint")  # unset, not false
    plain = tools["plain"]
    assert not plain.HasField("annotations")
    assert (plain.title, len(plain.icons)) == ("", 0)


def test_a_client_built_from_the_spec_proto_still_lists_the_tools(served: Served) -> None:
    spec = protos()["spec"]
    listed = served.unary("GetTools", spec.cls("Empty")(), "ToolsList", proto="spec")
    tools = {tool.name: tool for tool in listed.tools}
    assert {"delete", "peek", "plain", "redeem", "cancel"} <= set(tools)
    assert tools["delete"].description == "Delete one file."
    assert "title" not in spec.cls("Tool").DESCRIPTOR.fields_by_name  # the spec's own Tool


def test_get_prompts_carries_each_prompts_icons(served: Served) -> None:
    ours = protos()["ours"]
    (prompt,) = served.unary("GetPrompts", ours.cls("Empty")(), "PromptsList").prompts
    assert prompt.title == "Review some code"
    ((src, mime_type, sizes, theme),) = [
        (i.src, i.mime_type, list(i.sizes), i.theme) for i in prompt.icons
    ]
    assert (src, mime_type, sizes, theme) == (ICON["src"], "image/png", ["48x48", "96x96"], "light")


@pytest.mark.parametrize("kind", ["tools", "prompts"])
async def test_mcplites_client_reads_the_same_listing_over_http_and_grpc(
    served: Served, kind: str
) -> None:
    listings: list[list[dict[str, Any]]] = []
    for url in (
        f"http://127.0.0.1:{served.port}/mcp-lite/v1",
        f"grpc://127.0.0.1:{served.grpc.port}",
    ):
        async with Client(url, timeout=WAIT) as client:
            if kind == "tools":
                listings.append(await client.transport.list_tools(WAIT))
            else:
                listings.append(await client.list_prompts())
    over_http, over_grpc = listings
    assert over_grpc == over_http
    if kind == "tools":
        assert {t["name"]: t for t in over_grpc}["delete"]["icons"] == [ICON, DARK]


async def test_mcplites_client_tool_info_has_title_annotations_and_icons(served: Served) -> None:
    for url in (
        f"http://127.0.0.1:{served.port}/mcp-lite/v1",
        f"grpc://127.0.0.1:{served.grpc.port}",
    ):
        async with Client(url, timeout=WAIT) as client:
            infos = {info.name: info for info in await client.list_tools()}
        delete, plain = infos["delete"], infos["plain"]
        assert (delete.title, delete.annotations, delete.icons) == (
            "Delete a file",
            ANNOTATIONS,
            [ICON, DARK],
        ), url
        assert (plain.title, plain.annotations, plain.icons) == (None, {}, []), url


# --- declarations are checked when they are made ---------------------------------------------


def _fn(text: str) -> str:
    return text


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"title": 7}, TypeError, "title of tool 'fn' is a str"),
        ({"title": "  "}, ValueError, "title of tool 'fn' is empty"),
        ({"annotations": ["readOnlyHint"]}, TypeError, "ToolAnnotations dict"),
        ({"annotations": {"readOnly": True}}, ValueError, "unknown annotation 'readOnly'"),
        (
            {"annotations": {"readOnlyHint": "yes"}},
            TypeError,
            "readOnlyHint of tool 'fn' is a bool",
        ),
        ({"annotations": {"title": 1}}, TypeError, "title of tool 'fn' is a str"),
        ({"icons": ICON}, TypeError, "list of Icon dicts"),
        ({"icons": "https://example.com/a.png"}, TypeError, "list of Icon dicts"),
        ({"icons": [ICON["src"]]}, TypeError, "a dict with a 'src'"),
        ({"icons": [{"mimeType": "image/png"}]}, TypeError, "needs a 'src' string"),
        ({"icons": [{"src": "javascript:alert(1)"}]}, ValueError, "not an https:, http: or data:"),
        ({"icons": [{"src": "/relative.png"}]}, ValueError, "not an https:, http: or data:"),
        ({"icons": [{"src": "https://x.example/a.png", "size": "1x1"}]}, ValueError, "size"),
        ({"icons": [{"src": "https://x.example/a.png", "sizes": "48x48"}]}, TypeError, "sizes"),
        ({"icons": [{"src": "https://x.example/a.png", "sizes": ["48"]}]}, ValueError, "'48'"),
        ({"icons": [{"src": "https://x.example/a.png", "theme": "blue"}]}, ValueError, "theme"),
        ({"icons": [{"src": "https://x.example/a.png", "mimeType": "png"}]}, ValueError, "MIME"),
        ({"task_support": "sometimes"}, ValueError, "'forbidden', 'optional', 'required'"),
    ],
)
def test_a_bad_declaration_is_refused_when_the_tool_is_declared(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    tools = Tools()
    with pytest.raises(error, match=match):
        tools.tool(name="fn", **options)(_fn)
    assert "fn" not in tools  # nothing half-registered


def test_prompts_and_resources_check_their_titles_and_icons_too() -> None:
    prompts, resources = Prompts(), Resources()
    with pytest.raises(ValueError, match="prompt 'p'"):
        prompts.prompt(name="p", icons=[{"src": "ftp://example.com/a.png"}])(_fn)
    untyped: Any = b"bytes"
    with pytest.raises(TypeError, match="title of prompt 'p'"):
        prompts.prompt(name="p", title=untyped)(_fn)
    red: Any = {"src": "https://x.example/a", "theme": "red"}
    with pytest.raises(ValueError, match="resource 'docs://a'"):
        resources.resource("docs://a", icons=[red])(lambda: "a")
    assert len(prompts) == 0 and len(resources) == 0


def test_an_empty_annotations_dict_lists_no_annotations() -> None:
    tools = Tools()
    tool = tools.add(_fn, annotations={})
    assert tool.annotations is None
    assert "annotations" not in tool.definition()
