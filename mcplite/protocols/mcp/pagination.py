"""Pages of MCP's lists: ``params.cursor`` in, ``nextCursor`` out.

With a page size (``Config.page_size``, ``--page-size N``; off by default)
``tools/list``, ``prompts/list``, ``resources/list`` and
``resources/templates/list`` answer at most N entries, and a ``nextCursor``
while more remain.  Without one the whole list is one page, as before.

A cursor is opaque to the client: base64url (unpadded) of the JSON
``[method, offset, key]``, the list it was issued for, where the next page
starts and the key (name or URI) of the entry before it.  The key keeps a
client on track when the list changes between two pages: the next page starts
after that entry wherever it is now, so an entry added or removed before it
neither repeats nor skips one; if that entry itself is gone, the page starts
where it was (a repeat is better than a skip).  Any cursor this
module did not make, or made for another list, is -32602 (MCP: "invalid
cursors should result in an error with code -32602").

:func:`listed` answers a list method for any profile: MCP-lite's endpoint gets
the whole list (its discovery stays one answer), MCP a page, and 2026 the
caching hints too (:func:`cacheable`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ...core.errors import InvalidParams
from ..requests import LITE, MCP_2026, Request

__all__ = ["cacheable", "listed", "page"]

#: An entry of a list: a tool, prompt, resource or template definition.
Entry = TypeVar("Entry", bound=Mapping[str, Any])

#: Longer cursors are refused before they are decoded (ours are far shorter).
_MAX_CURSOR = 4096


def page(
    entries: Sequence[Entry], cursor: Any, method: str, key: str, size: int | None
) -> tuple[list[Entry], str | None]:
    """The page of ``entries`` that ``cursor`` (None: the first) asks for, and the
    cursor of the next page (None: this is the last).  ``key`` names each entry
    (``"name"``, ``"uri"``); ``size`` None: no limit.  Raises :class:`InvalidParams`
    for a cursor that is not one of ours for ``method``."""
    start = 0 if cursor is None else _start(entries, _open(cursor, method), key)
    stop = len(entries) if size is None else min(start + size, len(entries))
    if stop >= len(entries):
        return list(entries[start:]), None
    return list(entries[start:stop]), _seal(method, stop, entries[stop - 1].get(key))


def listed(
    request: Request,
    field: str,
    entries: Sequence[Mapping[str, Any]],
    key: str,
    size: int | None,
    scope: str = "public",
) -> dict[str, Any]:
    """``{field: entries}`` as ``request``'s profile wants it: all of them for
    MCP-lite; for MCP the page ``params.cursor`` asks for (see :func:`page`),
    with ``nextCursor`` while more remain, and 2026's caching hints."""
    if request.profile is LITE:
        return {field: entries}
    shown, next_cursor = page(entries, request.params.get("cursor"), request.method, key, size)
    out: dict[str, Any] = {field: shown}
    if next_cursor is not None:
        out["nextCursor"] = next_cursor
    return cacheable(out, request, scope)


def cacheable(result: dict[str, Any], request: Request, scope: str) -> dict[str, Any]:
    """``result`` with 2026's caching hints (none before): not to be reused
    without asking again (``ttlMs: 0``), by everyone (``"public"``) or this
    caller only (``"private"``)."""
    if request.profile is MCP_2026:
        result["ttlMs"] = 0
        result["cacheScope"] = scope
    return result


def _seal(method: str, offset: int, last: Any) -> str:
    text = json.dumps([method, offset, last], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode("ascii")


def _open(cursor: Any, method: str) -> tuple[int, Any]:
    """``(offset, key)`` of one of our cursors for ``method``; raises InvalidParams."""
    bad = InvalidParams(f"Invalid params: cursor is not a {method} cursor of this server")
    if not isinstance(cursor, str) or not cursor or len(cursor) > _MAX_CURSOR:
        raise bad
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        opened = json.loads(raw)
    except (binascii.Error, ValueError):  # not base64, not UTF-8, not JSON
        raise bad from None
    if (
        not isinstance(opened, list)
        or len(opened) != 3
        or opened[0] != method
        or type(opened[1]) is not int
        or opened[1] < 0
    ):
        raise bad
    return opened[1], opened[2]


def _start(entries: Sequence[Mapping[str, Any]], opened: tuple[int, Any], key: str) -> int:
    offset, last = opened
    if 0 < offset <= len(entries) and entries[offset - 1].get(key) == last:
        return offset  # the list did not move
    for i, entry in enumerate(entries):
        if entry.get(key) == last:
            return i + 1
    return min(max(offset - 1, 0), len(entries))  # it is gone: start where it was
