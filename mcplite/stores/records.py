"""Promise records as JSON, for the stores that keep them outside the process.

A :class:`~mcplite.core.promises.PromiseRecord` holds Python objects: a
:class:`~mcplite.core.envelope.Result` (an outcome, when it was made, how long it
took) and a protocol error.  :func:`dump_result` / :func:`load_result` and
:func:`dump_error` / :func:`load_error` turn them into JSON text and back, so
that the SQLite and Redis stores keep plain strings.

Errors are kept as their class name, code, message and ``data``, and rebuilt as
the :mod:`mcplite.core.errors` class of that name (the nearest one in the class's
ancestry for a subclass defined elsewhere); a class no longer known comes back
as an :class:`~mcplite.core.errors.MCPLiteError` with the same JSON-RPC code and gRPC
status.  A tool's ``Answer.value`` is kept when it is JSON data (a dataclass as
its fields, a tuple as a list, anything else as its ``str``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..core import errors
from ..core.envelope import Result
from ..core.errors import MCPLiteError
from ..core.outcomes import Answer, Elicitation, Failure, InputRequired, MoreResources, Outcome

__all__ = [
    "dump_error",
    "dump_progress",
    "dump_result",
    "load_error",
    "load_progress",
    "load_result",
]

_ERRORS: dict[str, type[MCPLiteError]] = {
    name: cls
    for name in errors.__all__
    if isinstance(cls := getattr(errors, name), type) and issubclass(cls, MCPLiteError)
}


def _plain(value: Any) -> Any:
    """``json.dumps``'s fallback for what a tool may return besides JSON data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return str(value)


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), default=_plain, allow_nan=True)


#: Each outcome a record may hold: its stored ``type`` and the attributes kept, in
#: order (the class is rebuilt from them by keyword).  A promise's outcome is never
#: a Promised: that is what redeem answers while it runs.
_OUTCOMES: dict[str, tuple[type[Any], tuple[str, ...]]] = {
    "answer": (Answer, ("content", "structured", "value")),
    "failure": (Failure, ("message", "reason", "retryable")),
    "elicitation": (Elicitation, ("message", "requested_schema")),
    "input_required": (InputRequired, ("requests", "state", "message")),
    "more_resources": (MoreResources, ("message", "time_seconds", "quota", "budget")),
}


def _outcome_data(outcome: Outcome) -> dict[str, Any]:
    for kind, (cls, names) in _OUTCOMES.items():
        if isinstance(outcome, cls):
            return {"type": kind, **{name: getattr(outcome, name) for name in names}}
    raise TypeError(f"cannot store an outcome of type {type(outcome).__name__}")


def _outcome(data: dict[str, Any]) -> Outcome:
    kind = data["type"]
    if kind not in _OUTCOMES:
        raise ValueError(f"unknown stored outcome type {kind!r}")
    cls, names = _OUTCOMES[kind]
    outcome: Outcome = cls(**{name: data[name] for name in names})
    return outcome


def dump_result(result: Result) -> str:
    """A :class:`Result` as JSON text."""
    return _dumps(
        {
            "outcome": _outcome_data(result.outcome),
            "timestamp": result.timestamp,
            "processing_time_ms": result.processing_time_ms,
        }
    )


def load_result(text: str) -> Result:
    """The :class:`Result` that :func:`dump_result` wrote."""
    data = json.loads(text)
    return Result(_outcome(data["outcome"]), data["timestamp"], data["processing_time_ms"])


def dump_error(error: MCPLiteError) -> str:
    """A protocol error as JSON text: its class, codes, message and data."""
    known = next((c.__name__ for c in type(error).__mro__ if c in _ERRORS.values()), None)
    return _dumps(
        {
            "class": known,
            "jsonrpc_code": error.jsonrpc_code,
            "grpc_status": error.grpc_status,
            "message": error.message,
            "data": error.data,
        }
    )


def load_error(text: str) -> MCPLiteError:
    """The error that :func:`dump_error` wrote, as its :mod:`mcplite.core.errors` class."""
    data = json.loads(text)
    cls = _ERRORS.get(data.get("class") or "", MCPLiteError)
    code, status = data["jsonrpc_code"], data["grpc_status"]
    if (cls.jsonrpc_code, cls.grpc_status) != (code, status):
        # A class of its own kept the codes of its own: keep them.
        cls = type(cls.__name__, (cls,), {"jsonrpc_code": code, "grpc_status": status})
    # Bypass the constructors (ToolNotFound, Overloaded take other arguments): the
    # message and data are already the finished ones.
    error = cls.__new__(cls)
    MCPLiteError.__init__(error, data["message"], data["data"])
    if isinstance(error, errors.Overloaded):
        error.retry_after = (data["data"] or {}).get("retry_after", 1.0)
    if isinstance(error, errors.ToolNotFound):
        error.name = (data["data"] or {}).get("requested_tool", "")
    return error


def dump_progress(progress: dict[str, Any]) -> str:
    return _dumps(progress)


def load_progress(text: str | None) -> dict[str, Any] | None:
    return None if text is None else dict(json.loads(text))
