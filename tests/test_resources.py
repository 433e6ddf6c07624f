"""Resources: fixed URIs and RFC 6570 level-1 templates, the contents a function's
return value renders as, and the errors of a read (mcplite.core.resources)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from mcplite import Failure, InvalidParams, ResourceNotFound, Resources
from mcplite.core.errors import InternalError


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def make() -> Resources:
    resources = Resources()

    @resources.resource("docs://readme", name="Readme", mime_type="text/markdown")
    def readme() -> str:
        """The readme."""
        return "# Hello"

    @resources.resource("docs://logo")
    def logo() -> bytes:
        return b"\x00\x01\xff"

    @resources.resource("docs://sections/{section}/lines/{line}", mime_type="text/plain")
    def section_line(section: str, line: str) -> str:
        """One line of a section."""
        if section == "missing":
            raise ResourceNotFound(f"docs://sections/{section}/lines/{line}")
        if section == "secret":
            raise Failure("that section is private")
        return f"{section}:{line}"

    return resources


def test_fixed_resources_and_templates_are_listed_apart_in_order() -> None:
    resources = make()
    assert resources.definitions() == [
        {
            "uri": "docs://readme",
            "name": "Readme",
            "description": "The readme.",
            "mimeType": "text/markdown",
        },
        {"uri": "docs://logo", "name": "logo"},
    ]
    assert resources.template_definitions() == [
        {
            "uriTemplate": "docs://sections/{section}/lines/{line}",
            "name": "section_line",
            "description": "One line of a section.",
            "mimeType": "text/plain",
        }
    ]
    assert len(resources) == 3


def test_text_is_read_as_text_and_bytes_as_a_base64_blob() -> None:
    resources = make()
    assert run(resources.read("docs://readme")) == [
        {"uri": "docs://readme", "mimeType": "text/markdown", "text": "# Hello"}
    ]
    assert run(resources.read("docs://logo")) == [
        {"uri": "docs://logo", "mimeType": "application/octet-stream", "blob": "AAH/"}
    ]


def test_a_template_fills_the_functions_parameters_from_the_uri_percent_decoded() -> None:
    resources = make()
    uri = "docs://sections/intro%20part/lines/7"
    assert run(resources.read(uri)) == [
        {"uri": uri, "mimeType": "text/plain", "text": "intro part:7"}
    ]


def test_a_variable_matches_one_path_segment_only() -> None:
    resources = make()
    with pytest.raises(ResourceNotFound):
        run(resources.read("docs://sections/a/b/lines/7"))
    with pytest.raises(ResourceNotFound):
        run(resources.read("docs://sections//lines/7"))


def test_an_unknown_uri_is_invalid_params_naming_the_uri() -> None:
    resources = make()
    with pytest.raises(ResourceNotFound) as found:
        run(resources.read("docs://nowhere"))
    assert found.value.jsonrpc_code == -32602
    assert found.value.data == {"uri": "docs://nowhere"}
    with pytest.raises(ResourceNotFound):  # raised by the function itself
        run(resources.read("docs://sections/missing/lines/1"))


def test_a_failure_names_the_uri_and_a_bad_return_is_an_internal_error() -> None:
    resources = make()
    with pytest.raises(InvalidParams, match="private") as failed:
        run(resources.read("docs://sections/secret/lines/1"))
    assert failed.value.data == {"uri": "docs://sections/secret/lines/1"}
    resources.add(lambda: 42, "docs://number", name="number")
    resources.add(lambda: [], "docs://empty", name="empty")
    with pytest.raises(InternalError):
        run(resources.read("docs://number"))
    with pytest.raises(InternalError):  # never an empty contents
        run(resources.read("docs://empty"))


def test_a_function_may_return_several_contents_with_their_own_uris() -> None:
    resources = Resources()

    @resources.resource("docs://pair", mime_type="text/plain")
    async def pair() -> list[Any]:
        return ["one", {"uri": "docs://pair#2", "blob": "AA=="}]

    assert run(resources.read("docs://pair")) == [
        {"uri": "docs://pair", "mimeType": "text/plain", "text": "one"},
        {"uri": "docs://pair#2", "blob": "AA==", "mimeType": "text/plain"},
    ]


def test_a_template_must_name_the_functions_parameters_and_only_level_1_is_accepted() -> None:
    resources = Resources()
    with pytest.raises(ValueError, match="has no parameter 'id'"):
        resources.add(lambda other: "", "x://{id}", name="a")
    with pytest.raises(ValueError, match="does not fill"):
        resources.add(lambda id, extra: "", "x://{id}", name="b")
    with pytest.raises(ValueError, match="level 1"):
        resources.add(lambda id: "", "x://{+id}", name="c")
    with pytest.raises(ValueError, match="needs arguments"):
        resources.add(lambda id: "", "x://fixed", name="d")
    resources.add(lambda: "", "x://fixed", name="e")
    with pytest.raises(ValueError, match="already registered"):
        resources.add(lambda: "", "x://fixed", name="f")


def test_a_literal_variable_completes_and_refuses_other_values() -> None:
    resources = Resources()

    @resources.resource("x://color/{color}")
    def color(color: Literal["red", "green"]) -> str:
        return color

    template = resources.template("x://color/{color}")
    assert template is not None and template.choices == {"color": ("red", "green")}
    assert run(resources.read("x://color/red"))[0]["text"] == "red"
    with pytest.raises(ResourceNotFound):
        run(resources.read("x://color/blue"))


def test_a_resource_option_that_does_not_exist_is_a_type_error_where_it_is_written() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'mimetype'"):
        Resources().resource("memo://a", mimetype="text/plain")  # type: ignore[call-arg]
