"""Outcomes as MCP results: content blocks, ``structuredContent``, ``isError``.

The same outcome the MCP-lite envelope renders (:mod:`mcplite.core.envelope`)
becomes here a ``CallToolResult``:

- a tool that returned plain data (a dict, list, number, dataclass) gets one
  text block holding its JSON and the data as ``structuredContent``: on
  2026-07-28 the value itself, on 2025 an object (anything else wrapped as
  ``{"result": ...}``); a tool whose return annotation fixes that value's shape
  lists it as ``outputSchema`` (:meth:`mcplite.core.tools.Tool.output_schema_for`,
  which relies on this rule);
- otherwise the content items that are MCP content blocks pass as they are, a
  string is a text block, any other value a text block of its JSON;
- a failure is ``isError: true`` with its message as text;
- a request for more resources is ``isError: true`` too, saying what is needed;
- ``_meta["mcplite/response_type"]`` says which of MCP-lite's response types it was.

A promise is not rendered here, nor (where the client can be asked) an
elicitation or an input request: the MCP endpoint turns them into tasks,
``input_required`` results, or (2025) requests on the call's stream
(:mod:`mcplite.protocols.tools`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...core.content import BLOCK_TYPES, is_block
from ...core.content import text as text_block
from ...core.envelope import Result
from ...core.outcomes import (
    Answer,
    Elicitation,
    Failure,
    InputRequired,
    MoreResources,
    ResponseType,
)
from ..jsoncodec import encode_text
from ..shapes import CallToolResult

__all__ = ["call_result"]


_ANSWER = ResponseType.ANSWER.value


def _block(item: Any) -> dict[str, Any]:
    if is_block(item):
        block: dict[str, Any] = item
        return block
    if isinstance(item, str):
        return text_block(item)
    return text_block(encode_text(item))


def _plain(value: Any) -> Any:
    """A dataclass as its dict (what the MCP-lite content held); anything else as is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def call_result(result: Result, modern: bool = False) -> CallToolResult:
    """The ``CallToolResult`` of a finished call (no ``resultType``: the era adds it).

    ``modern`` (2026-07-28): ``structuredContent`` is the data itself, whatever
    JSON value it is; before, it is always an object (``{"result": value}``
    around anything else)."""
    outcome = result.outcome
    out: CallToolResult
    if isinstance(outcome, Answer):
        items = outcome.content
        structured = outcome.structured
        value = outcome.value
        if value is not None and not any(is_block(item) for item in items):
            # Plain data: one JSON text block, and the data itself as structuredContent.
            out = {"content": [text_block(encode_text(_plain(value)))]}
            if structured is None:
                structured = _plain(value)
        else:  # blocks as they are (checked inline: the common case), anything else made one
            out = {
                "content": [
                    item if type(item) is dict and item.get("type") in BLOCK_TYPES else _block(item)
                    for item in items
                ]
            }
        if structured is not None:
            out["structuredContent"] = (
                structured if modern or isinstance(structured, dict) else {"result": structured}
            )
        out["isError"] = False
        out["_meta"] = {"mcplite/response_type": _ANSWER}  # the common case, said directly
        return out
    if isinstance(outcome, Failure):
        out = {"content": [text_block(outcome.message)], "isError": True}
    elif isinstance(outcome, MoreResources):
        body = result.body
        out = {
            "content": [text_block(outcome.message)],
            "structuredContent": {"resources": body["resources"]},
            "isError": True,
        }
    elif isinstance(outcome, Elicitation):
        # Only reached where the client cannot be asked (a 2025 call answered as
        # JSON, with no stream to ask on): say what is needed.
        out = {
            "content": [text_block(outcome.message)],
            "structuredContent": {"elicitation": result.body["elicitation"]},
            "isError": True,
        }
    elif isinstance(outcome, InputRequired):
        out = {
            "content": [text_block(outcome.message)],
            "structuredContent": {"inputRequests": outcome.requests},
            "isError": True,
        }
    else:  # a promise: never rendered as a call result
        raise TypeError("a promise is answered as a task or waited for, not rendered")
    # The MCP-lite envelope's one field a client acts on; timing stays in MCP-lite.
    out["_meta"] = {"mcplite/response_type": result.response_type.value}
    return out
