"""What MCP lists about a tool, prompt or resource besides its name: a ``title``,
``icons``, and for a tool its ``annotations`` and task support.

The shapes are MCP's (2025-11-25 and 2026-07-28), as TypedDicts, so a
declaration reads like the wire::

    @tools.tool(
        title="Delete a file",
        annotations={"destructiveHint": True, "idempotentHint": True},
        icons=[{"src": "https://example.com/trash.png", "sizes": ["48x48"]}],
        task_support="optional",
    )
    def delete(path: str) -> str: ...

Each declaration is checked when it is made (a ``TypeError`` for a value of the
wrong type, a ``ValueError`` for a wrong value), never when it is listed.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NotRequired, TypedDict, get_args

__all__ = ["Icon", "TaskSupport", "ToolAnnotations"]


class Icon(TypedDict):
    """MCP's ``Icon``: an image a client may show next to the name.

    ``src`` is an ``https:``, ``http:`` or ``data:`` URI; ``sizes`` as in HTML
    (``"48x48"``, ``"any"`` for a scalable image); ``theme`` the background it
    is drawn for (``"light"`` or ``"dark"``; absent: either).
    """

    src: str
    mimeType: NotRequired[str]
    sizes: NotRequired[list[str]]
    theme: NotRequired[Literal["light", "dark"]]


class ToolAnnotations(TypedDict, total=False):
    """MCP's ``ToolAnnotations``: hints about what a tool does, for a client
    deciding whether to ask the user first.  Hints, not guarantees; each absent
    one has MCP's default (``readOnlyHint`` false, ``destructiveHint`` true,
    ``idempotentHint`` false, ``openWorldHint`` true)."""

    title: str
    readOnlyHint: bool
    destructiveHint: bool
    idempotentHint: bool
    openWorldHint: bool


TaskSupport = Literal["forbidden", "optional", "required"]
"""MCP's ``execution.taskSupport``: whether a call of the tool may (``optional``),
must (``required``) or must not (``forbidden``) become a task."""

_TASK_SUPPORT: tuple[str, ...] = get_args(TaskSupport)
_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
_ICON_KEYS = frozenset(Icon.__annotations__)
_ICON_SCHEMES = ("https", "http", "data")
_SIZE = re.compile(r"any|[1-9][0-9]*x[1-9][0-9]*")
_THEMES = ("light", "dark")


def title_of(title: Any, what: str) -> str | None:
    """``title`` checked: None or a non-empty string."""
    if title is None:
        return None
    if not isinstance(title, str):
        raise TypeError(f"the title of {what} is a str, not {type(title).__name__}")
    if not title.strip():
        raise ValueError(f"the title of {what} is empty")
    return title


def icons_of(icons: Iterable[Icon] | None, what: str) -> list[Icon]:
    """``icons`` checked and copied (an empty list: none)."""
    if icons is None:
        return []
    if isinstance(icons, str | bytes | Mapping) or not isinstance(icons, Iterable):
        raise TypeError(f"the icons of {what} are a list of Icon dicts, not {icons!r}")
    return [_icon(icon, what) for icon in icons]


def _icon(icon: Any, what: str) -> Icon:
    if not isinstance(icon, Mapping):
        raise TypeError(f"an icon of {what} is a dict with a 'src', not {icon!r}")
    unknown = set(icon) - _ICON_KEYS
    if unknown:
        raise ValueError(
            f"an icon of {what} has unknown keys: {', '.join(sorted(map(str, unknown)))}"
        )
    src = icon.get("src")
    if not isinstance(src, str):
        raise TypeError(f"an icon of {what} needs a 'src' string, not {src!r}")
    scheme = urllib.parse.urlsplit(src).scheme.lower()
    if scheme not in _ICON_SCHEMES:
        raise ValueError(
            f"an icon of {what}: src {src[:60]!r} is not an https:, http: or data: URI"
        )
    out: Icon = {"src": src}
    mime_type = icon.get("mimeType")
    if mime_type is not None:
        if not isinstance(mime_type, str) or "/" not in mime_type:
            raise ValueError(f"an icon of {what}: mimeType {mime_type!r} is not a MIME type")
        out["mimeType"] = mime_type
    sizes = icon.get("sizes")
    if sizes is not None:
        if isinstance(sizes, str) or not isinstance(sizes, Iterable):
            raise TypeError(f"an icon of {what}: sizes is a list of strings, not {sizes!r}")
        sizes = list(sizes)
        for size in sizes:
            if not isinstance(size, str) or not _SIZE.fullmatch(size):
                raise ValueError(
                    f"an icon of {what}: size {size!r} is neither WIDTHxHEIGHT nor 'any'"
                )
        out["sizes"] = sizes
    theme = icon.get("theme")
    if theme is not None:
        if theme not in _THEMES:
            raise ValueError(f"an icon of {what}: theme {theme!r} is not 'light' or 'dark'")
        out["theme"] = theme
    return out


def annotations_of(annotations: Mapping[str, Any] | None, what: str) -> ToolAnnotations | None:
    """``annotations`` checked and copied (None when there are none)."""
    if annotations is None:
        return None
    if not isinstance(annotations, Mapping):
        raise TypeError(
            f"the annotations of {what} are a ToolAnnotations dict, not {annotations!r}"
        )
    out: ToolAnnotations = {}
    for key, value in annotations.items():
        if key == "title":
            title = title_of(value, what)
            if title is not None:
                out["title"] = title
        elif key in _HINTS:
            if not isinstance(value, bool):
                raise TypeError(f"the annotation {key} of {what} is a bool, not {value!r}")
            out[key] = value  # type: ignore[literal-required]
        else:
            raise ValueError(
                f"{what} has an unknown annotation {key!r}; MCP's are title, {', '.join(_HINTS)}"
            )
    return out or None


def task_support_of(task_support: Any, what: str) -> TaskSupport | None:
    """``task_support`` checked: None or one of MCP's three values."""
    if task_support is None or task_support in _TASK_SUPPORT:
        return task_support  # type: ignore[no-any-return]
    raise ValueError(
        f"the task_support of {what} is one of {', '.join(map(repr, _TASK_SUPPORT))}, "
        f"not {task_support!r}"
    )


def copy_icons(icons: list[Icon]) -> list[Icon]:
    """Copies of ``icons``: a listing edited by its reader leaves the declaration alone."""
    out: list[Icon] = []
    for icon in icons:
        copy: Icon = {**icon}
        if "sizes" in icon:
            copy["sizes"] = list(icon["sizes"])
        out.append(copy)
    return out
