"""Content blocks a tool can return: text, images, audio, links and embedded resources.

Each function gives the MCP content block as a plain dict, which is also what
MCP-lite puts in ``content``, so a tool returns the same thing to every wire::

    from mcplite import content

    @tools.tool
    def chart(region: str) -> list[dict]:
        return [content.text(f"Sales in {region}"), content.image(png_bytes, "image/png")]
"""

from __future__ import annotations

import base64
from typing import Any

__all__ = ["BLOCK_TYPES", "audio", "embedded", "image", "is_block", "resource_link", "text"]

#: The ``type`` of each MCP content block.
BLOCK_TYPES = frozenset({"text", "image", "audio", "resource_link", "resource"})


def text(value: str) -> dict[str, Any]:
    """A text block: what a ``str`` result becomes, and every message's text on the wire."""
    return {"type": "text", "text": value}


def _b64(data: bytes | str) -> str:
    return data if isinstance(data, str) else base64.b64encode(data).decode("ascii")


def image(data: bytes | str, mime_type: str) -> dict[str, Any]:
    """An image; ``data`` as bytes, or already base64 as str."""
    return {"type": "image", "data": _b64(data), "mimeType": mime_type}


def audio(data: bytes | str, mime_type: str) -> dict[str, Any]:
    """Audio; ``data`` as bytes, or already base64 as str."""
    return {"type": "audio", "data": _b64(data), "mimeType": mime_type}


def resource_link(
    uri: str, name: str, *, description: str | None = None, mime_type: str | None = None
) -> dict[str, Any]:
    """A link to a resource the client may read."""
    out: dict[str, Any] = {"type": "resource_link", "uri": uri, "name": name}
    if description is not None:
        out["description"] = description
    if mime_type is not None:
        out["mimeType"] = mime_type
    return out


def embedded(
    uri: str,
    *,
    text: str | None = None,
    blob: bytes | str | None = None,
    mime_type: str | None = None,
) -> dict[str, Any]:
    """A resource embedded in the result: exactly one of ``text`` or ``blob``."""
    if (text is None) == (blob is None):
        raise ValueError("an embedded resource has exactly one of text or blob")
    resource: dict[str, Any] = {"uri": uri}
    if mime_type is not None:
        resource["mimeType"] = mime_type
    if text is not None:
        resource["text"] = text
    else:
        assert blob is not None
        resource["blob"] = _b64(blob)
    return {"type": "resource", "resource": resource}


def is_block(item: Any) -> bool:
    """Whether ``item`` is already an MCP content block."""
    return isinstance(item, dict) and item.get("type") in BLOCK_TYPES
