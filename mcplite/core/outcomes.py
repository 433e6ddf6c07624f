"""What a call ends as: typed outcomes, in no wire's shape.

A tool returns a plain value or one of the classes below; :func:`outcome_of`
turns whatever it returned into one :data:`Outcome`.  The core passes outcomes
around; each wire renders them its own way (MCP-lite JSON in
:mod:`mcplite.core.envelope`, protobuf in :mod:`mcplite.protocols.protobuf`), and ``_meta``
is built in one place (:func:`mcplite.core.envelope.meta`).

What a plain return value becomes (the ``content`` of an :class:`Answer`):

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
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias

from .content import text as text_block

__all__ = [
    "Answer",
    "Elicitation",
    "Failure",
    "InputRequired",
    "MoreResources",
    "Outcome",
    "Partial",
    "ProgressUpdate",
    "Promised",
    "ResponseType",
    "content_of",
    "outcome_of",
    "response_type_of",
]


class ResponseType(StrEnum):
    ANSWER = "answer"
    PROMISE = "promise"
    ELICITATION = "elicitation"
    FAILURE = "failure"
    MORE_RESOURCES = "request-for-more-resource"


@dataclass(slots=True)
class Answer:
    """An answer: ``content`` items, and optionally a structured value beside them.

    ``value`` is what the tool returned when it returned plain data (a dict,
    list, number, dataclass): MCP renders that as JSON text plus
    ``structuredContent``, MCP-lite as ``content`` items.
    """

    content: list[Any]
    structured: Any = None
    value: Any = None


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
class InputRequired:
    """The tool needs answers from the client before it can go on (MCP's
    ``input_required`` result).

    ``requests`` maps a key of the tool's choosing to a client request
    (``{"method": "elicitation/create" | "sampling/createMessage" | "roots/list",
    "params": {...}}``); the client calls again with the answers, which the tool
    reads as ``ctx.input_responses[key]``.  ``state`` comes back as
    ``ctx.request_state``, sealed by the server on the way so it cannot be forged.
    """

    requests: dict[str, dict[str, Any]]
    state: str | None = None
    message: str = "More input is needed"


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


@dataclass(slots=True)
class Promised:
    """The call goes on: redeem ``token`` for its outcome (made by the core, not by tools)."""

    token: str
    expires_at: float  # epoch seconds
    progress: dict[str, Any] | None = None  # the last ``progress``/``total``/``message``
    estimated_completion: float | None = None  # epoch seconds


@dataclass(slots=True)
class Partial:
    """One part of a streamed result."""

    value: Any


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """What a streamed call's tool said of its progress (``ctx.report_progress``):
    ``progress`` so far, out of ``total`` when known, and a ``message``."""

    progress: float
    total: float | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"progress", "total"?, "message"?}``: MCP's progress fields, and a
        promise's ``_meta.progress``."""
        out: dict[str, Any] = {"progress": self.progress}
        if self.total is not None:
            out["total"] = self.total
        if self.message is not None:
            out["message"] = self.message
        return out

    @classmethod
    def from_json(cls, data: Any) -> ProgressUpdate | None:
        """From :meth:`to_json`'s shape as received; None when it is not that."""
        if not isinstance(data, dict):
            return None
        progress, total, message = data.get("progress"), data.get("total"), data.get("message")
        if not isinstance(progress, int | float) or isinstance(progress, bool):
            return None
        if total is not None and (not isinstance(total, int | float) or isinstance(total, bool)):
            return None
        return cls(progress, total, message if isinstance(message, str) else None)


Outcome: TypeAlias = Answer | Failure | Elicitation | InputRequired | MoreResources | Promised

_RESPONSE_TYPES: dict[type, ResponseType] = {
    Answer: ResponseType.ANSWER,
    Failure: ResponseType.FAILURE,
    Elicitation: ResponseType.ELICITATION,
    InputRequired: ResponseType.ELICITATION,
    MoreResources: ResponseType.MORE_RESOURCES,
    Promised: ResponseType.PROMISE,
}

#: What a tool may return (or yield last) that is already an outcome.
OUTCOME_TYPES = (Answer, Failure, Elicitation, InputRequired, MoreResources)


def response_type_of(outcome: Outcome) -> ResponseType:
    """The ``_meta.response_type`` of an outcome."""
    kind = type(outcome)
    found = _RESPONSE_TYPES.get(kind)
    if found is not None:
        return found
    for base, response_type in _RESPONSE_TYPES.items():  # subclasses of ours
        if isinstance(outcome, base):
            return response_type
    raise TypeError(f"not an outcome: {kind.__name__}")


def content_of(value: Any) -> list[Any]:
    """Map a tool's plain return value to ``content`` items (table in module doc)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [text_block(value)]
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list | tuple):
        return [text_block(item) if isinstance(item, str) else item for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [dataclasses.asdict(value)]
    if isinstance(value, int | float):  # bool included
        return [text_block(json.dumps(value))]
    return [text_block(str(value))]


def outcome_of(value: Any) -> Outcome:
    """What a tool returned (or raised as :class:`Failure`), as an outcome."""
    kind = type(value)
    if kind is str:  # the common case first: one text item, no outcome checks
        return Answer([text_block(value)])
    if kind is dict or kind is list:
        return Answer(content_of(value), value=value)
    if isinstance(value, Answer | Failure | Elicitation | InputRequired | MoreResources | Promised):
        return value
    if value is None or isinstance(value, str):
        return Answer(content_of(value))
    return Answer(content_of(value), value=value)
