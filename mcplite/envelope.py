"""The response envelope: the ONE place where ``_meta`` and ``response_type`` are built.

A tool returns a plain value or one of the outcome classes below; :func:`to_result`
turns it into a :class:`Result`, which each binding renders on its own wire.

What a plain return value becomes in ``content``:

==========================  ==============================================
returned                    ``content``
==========================  ==============================================
``None``                    ``[]``
``str``                     ``[{"type": "text", "text": s}]``
``dict``                    ``[d]`` (one structured item, as in spec A.2)
``list`` / ``tuple``        the items themselves (str items become text items)
dataclass instance          ``[dataclasses.asdict(obj)]``
``int`` / ``float`` / bool  ``[{"type": "text", "text": json.dumps(v)}]``
anything else               ``[{"type": "text", "text": str(v)}]``
==========================  ==============================================
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from . import __version__

__all__ = [
    "Answer",
    "Elicitation",
    "Failure",
    "MoreResources",
    "Partial",
    "ResponseType",
    "Result",
    "content_of",
    "iso_timestamp",
    "to_result",
]


class ResponseType(StrEnum):
    ANSWER = "answer"
    PROMISE = "promise"
    ELICITATION = "elicitation"
    FAILURE = "failure"
    MORE_RESOURCES = "request-for-more-resource"


_second_cache: tuple[int, str] = (-1, "")


def iso_timestamp(epoch: float) -> str:
    """ISO 8601 UTC with milliseconds, e.g. ``2024-01-01T12:00:00.123Z``.

    The date part is formatted once per second: this runs on every call.
    """
    global _second_cache
    # Round to the microsecond first, as datetime does: 0.123 is 0.12299999...
    second, micros = divmod(round(epoch * 1_000_000), 1_000_000)
    cached_second, prefix = _second_cache
    if second != cached_second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_cache = (second, prefix)
    return f"{prefix}.{micros // 1000:03d}Z"


@dataclass(slots=True)
class Result:
    """One outcome of a call, in transport-free form.

    ``body`` is every field of the result except ``_meta``; ``extra_meta`` holds
    the ``_meta`` fields beyond the four that every result has.
    """

    response_type: ResponseType
    body: dict[str, Any]
    timestamp: float
    processing_time_ms: float
    extra_meta: dict[str, Any] = field(default_factory=dict)

    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "response_type": self.response_type.value,
            "timestamp": iso_timestamp(self.timestamp),
            "processing_time_ms": round(self.processing_time_ms, 3),
            "server_version": __version__,
        }
        if self.extra_meta:
            meta.update(self.extra_meta)
        return meta

    def to_json(self) -> dict[str, Any]:
        result = dict(self.body)
        result["_meta"] = self.meta()
        return result


@dataclass(slots=True)
class Partial:
    """One part of a streamed result."""

    value: Any


@dataclass(slots=True)
class Answer:
    """An answer with explicit ``content`` items (when the default mapping won't do)."""

    content: list[Any]
    structured: Any = None


class Failure(Exception):
    """A business failure: the call was understood but could not be done.

    Return it or raise it from a tool.  It is a *result* with ``isError: true``
    and ``response_type: failure``, not a protocol error.  ``reason`` is a short
    machine-readable code; ``retryable`` tells a client whether trying again may help.
    """

    def __init__(self, message: str, *, reason: str | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.retryable = retryable


@dataclass(slots=True)
class Elicitation:
    """The tool needs more information from the user before it can answer.

    Modelled on MCP's ``elicitation/create`` (``message``, ``requestedSchema``): the
    client asks the user, then calls the tool again with the extra arguments.
    """

    message: str
    requested_schema: dict[str, Any]


@dataclass(slots=True)
class MoreResources:
    """The tool could answer given more resources than this call was allowed.

    ``time_seconds``, ``quota`` and ``budget`` say what more is needed; each is
    optional, ``message`` is for the human.
    """

    message: str
    time_seconds: float | None = None
    quota: int | None = None
    budget: float | None = None


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def content_of(value: Any) -> list[Any]:
    """Map a tool's plain return value to ``content`` items (table in module doc)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [_text(value)]
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list | tuple):
        return [_text(item) if isinstance(item, str) else item for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [dataclasses.asdict(value)]
    if isinstance(value, int | float):  # bool included
        return [_text(json.dumps(value))]
    return [_text(str(value))]


def to_result(value: Any, started: float, elapsed_ms: float) -> Result:
    """Wrap what a tool returned (or raised as :class:`Failure`) into a :class:`Result`."""
    kind = type(value)
    if kind is str:  # the common case first: one text item, no outcome checks
        return Result(ResponseType.ANSWER, {"content": [_text(value)]}, started, elapsed_ms)
    if kind is dict or kind is list:
        return Result(ResponseType.ANSWER, {"content": content_of(value)}, started, elapsed_ms)
    if isinstance(value, Failure):
        failure: dict[str, Any] = {"message": value.message, "retryable": value.retryable}
        if value.reason is not None:
            failure["reason"] = value.reason
        body = {"content": [_text(value.message)], "isError": True, "failure": failure}
        return Result(ResponseType.FAILURE, body, started, elapsed_ms)
    if isinstance(value, Answer):
        body = {"content": list(value.content)}
        if value.structured is not None:
            body["structuredContent"] = value.structured
        return Result(ResponseType.ANSWER, body, started, elapsed_ms)
    if isinstance(value, Elicitation):
        body = {
            "content": [_text(value.message)],
            "elicitation": {"message": value.message, "requestedSchema": value.requested_schema},
        }
        return Result(ResponseType.ELICITATION, body, started, elapsed_ms)
    if isinstance(value, MoreResources):
        wanted: dict[str, Any] = {"message": value.message}
        if value.time_seconds is not None:
            wanted["time_seconds"] = value.time_seconds
        if value.quota is not None:
            wanted["quota"] = value.quota
        if value.budget is not None:
            wanted["budget"] = value.budget
        body = {"content": [_text(value.message)], "resources": wanted}
        return Result(ResponseType.MORE_RESOURCES, body, started, elapsed_ms)
    return Result(ResponseType.ANSWER, {"content": content_of(value)}, started, elapsed_ms)
