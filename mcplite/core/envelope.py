"""The result envelope: the ONE place where ``_meta`` is built, and the MCP-lite body.

A :class:`Result` is an :class:`~mcplite.core.outcomes.Outcome` with the time it was
made and how long it took.  :func:`meta` gives its ``_meta`` (every wire uses
it: the gRPC binding turns it into ``ResponseMeta``); :meth:`Result.body` and
:meth:`Result.to_json` give the MCP-lite JSON form of spec section 3::

    {"content": [...], "_meta": {"response_type": ..., "timestamp": ...,
                                 "processing_time_ms": ..., "server_version": ...}}

Other wires render the same outcome their own way (MCP content blocks, protobuf).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._version import __version__
from .content import text as text_block
from .outcomes import (
    Answer,
    Elicitation,
    Failure,
    InputRequired,
    MoreResources,
    Outcome,
    Promised,
    ResponseType,
    outcome_of,
    response_type_of,
)
from .wire import iso_timestamp, set_present

__all__ = ["Result", "meta", "to_result"]


@dataclass(slots=True)
class Result:
    """One outcome of a call, with when it was made and how long it took."""

    outcome: Outcome
    timestamp: float  # epoch seconds
    processing_time_ms: float

    @property
    def response_type(self) -> ResponseType:
        return response_type_of(self.outcome)

    @property
    def extra_meta(self) -> dict[str, Any]:
        """The ``_meta`` fields beyond the four every result has (a promise's)."""
        outcome = self.outcome
        if type(outcome) is not Promised:
            return {}
        extra: dict[str, Any] = {
            "promise_token": outcome.token,
            "expires_at": iso_timestamp(outcome.expires_at),
        }
        if outcome.progress:
            extra["progress"] = outcome.progress
        if outcome.estimated_completion is not None:
            extra["estimated_completion"] = iso_timestamp(outcome.estimated_completion)
        return extra

    def meta(self) -> dict[str, Any]:
        return meta(self)

    @property
    def body(self) -> dict[str, Any]:
        """The MCP-lite JSON result without ``_meta``."""
        return _body(self.outcome)

    def to_json(self) -> dict[str, Any]:
        """The MCP-lite JSON result: its body and ``_meta``."""
        result = _body(self.outcome)
        result["_meta"] = meta(self)
        return result


def meta(result: Result) -> dict[str, Any]:
    """The ``_meta`` of a result: ``response_type``, ``timestamp``,
    ``processing_time_ms``, ``server_version``, and a promise's token and expiry."""
    out: dict[str, Any] = {
        "response_type": result.response_type.value,
        "timestamp": iso_timestamp(result.timestamp),
        "processing_time_ms": round(result.processing_time_ms, 3),
        "server_version": __version__,
    }
    if type(result.outcome) is Promised:
        out.update(result.extra_meta)
    return out


def _body(outcome: Outcome) -> dict[str, Any]:
    if type(outcome) is Answer:  # the common case first
        if outcome.structured is None:
            return {"content": outcome.content}
        return {"content": list(outcome.content), "structuredContent": outcome.structured}
    if isinstance(outcome, Answer):
        return _body(Answer(outcome.content, outcome.structured))
    if isinstance(outcome, Failure):
        failure: dict[str, Any] = {"message": outcome.message, "retryable": outcome.retryable}
        if outcome.reason is not None:
            failure["reason"] = outcome.reason
        return {"content": [text_block(outcome.message)], "isError": True, "failure": failure}
    if isinstance(outcome, Elicitation):
        return {
            "content": [text_block(outcome.message)],
            "elicitation": {
                "message": outcome.message,
                "requestedSchema": outcome.requested_schema,
            },
        }
    if isinstance(outcome, InputRequired):
        asked: dict[str, Any] = {"message": outcome.message, "inputRequests": outcome.requests}
        if outcome.state is not None:
            asked["requestState"] = outcome.state
        return {"content": [text_block(outcome.message)], "elicitation": asked}
    if isinstance(outcome, MoreResources):
        wanted = set_present(
            {"message": outcome.message},
            time_seconds=outcome.time_seconds,
            quota=outcome.quota,
            budget=outcome.budget,
        )
        return {"content": [text_block(outcome.message)], "resources": wanted}
    return {"content": []}  # Promised: the token is in _meta


def to_result(value: Any, started: float, elapsed_ms: float) -> Result:
    """Wrap what a tool returned (or raised as :class:`Failure`) into a :class:`Result`."""
    return Result(outcome_of(value), started, elapsed_ms)
