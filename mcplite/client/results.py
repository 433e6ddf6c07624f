"""What a call gives back: :class:`Response`, and :class:`ToolInfo` for discovery."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Response", "ToolInfo"]


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """One tool of :meth:`BaseClient.list_tools`."""

    name: str
    type: str | None
    description: str
    input_schema: dict[str, Any] = field(default_factory=dict)
    #: What a host shows: MCP's ``title``, ``annotations`` (``readOnlyHint``, ...)
    #: and ``icons`` (``{"src", "mimeType"?, "sizes"?, "theme"?}``), when declared.
    title: str | None = None
    annotations: dict[str, Any] = field(default_factory=dict)
    icons: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any]) -> ToolInfo:
        """From a discovery entry: ``{"name", "@type"?, "description", "inputSchema",
        "title"?, "annotations"?, "icons"?}``."""
        kind = definition.get("@type") or definition.get("type")
        schema = definition.get("inputSchema")
        title = definition.get("title")
        annotations = definition.get("annotations")
        icons = definition.get("icons")
        return cls(
            name=str(definition.get("name", "")),
            type=str(kind) if kind else None,
            description=str(definition.get("description") or ""),
            input_schema=dict(schema) if isinstance(schema, Mapping) else {},
            title=title if isinstance(title, str) else None,
            annotations=dict(annotations) if isinstance(annotations, Mapping) else {},
            icons=[dict(i) for i in icons if isinstance(i, Mapping)]
            if isinstance(icons, list)
            else [],
        )


@dataclass(frozen=True, slots=True)
class Response:
    """The result of a call, whatever its ``response_type``.

    ``raw`` is the whole result object as the HTTP binding sends it (``content``,
    ``isError``, ``failure``, ``elicitation``, ``resources``, ... and ``_meta``);
    over gRPC it is rebuilt in the same shape, timestamps as ISO 8601.
    """

    response_type: str
    content: list[Any]
    meta: dict[str, Any]
    raw: dict[str, Any]

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> Response:
        meta = result.get("_meta")
        meta = dict(meta) if isinstance(meta, Mapping) else {}
        content = result.get("content")
        return cls(
            response_type=str(meta.get("response_type", "answer")),
            content=list(content) if isinstance(content, list) else [],
            meta=meta,
            raw=dict(result),
        )

    @property
    def is_error(self) -> bool:
        """True for a ``failure`` (the result's ``isError``)."""
        return self.response_type == "failure" or self.raw.get("isError") is True

    @property
    def promise_token(self) -> str | None:
        """The token of a ``promise`` response (None for any other type)."""
        token = self.meta.get("promise_token")
        return token if isinstance(token, str) and token else None

    @property
    def text(self) -> str:
        """The text items of ``content``, joined by newlines."""
        return "\n".join(
            item["text"]
            for item in self.content
            if isinstance(item, Mapping)
            and item.get("type") == "text"
            and isinstance(item.get("text"), str)
        )
