"""What the core and the bindings report as requests and calls happen, and to whom.

The core counts nothing itself and writes no log line: a :class:`Dispatcher
<mcplite.core.dispatch.Dispatcher>` is given a :class:`Metrics` and an
:class:`AccessLog` (by default :data:`QUIET`, which takes nothing), and the
bindings report through the same two.  ``mcplite serve`` attaches the Prometheus
registry (:mod:`mcplite.ops.metrics`) and the access log (:mod:`mcplite.ops.logs`);
an embedding application may attach its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["CLIENT_GONE", "QUIET", "Access", "AccessLog", "Metrics", "Quiet"]

#: The outcome of a request or call whose client went away before its answer.
CLIENT_GONE = "client-gone"


class Metrics(Protocol):
    """Counts requests, refusals and calls; looked at only while ``on``."""

    on: bool

    def request(self, binding: str, status: int | str, reason: str | None = None) -> None:
        """A request answered with ``status`` (an HTTP status or a gRPC status
        name); ``reason`` names a refusal when the binding knows it better."""

    def refuse(self, binding: str, reason: str) -> None:
        """A request refused before it was read (too many connections, ...)."""

    def call(self, binding: str, tool: str, outcome: str, seconds: float) -> None:
        """A tool call that ended with ``outcome`` (a response type, ``disconnected``)."""

    def call_error(self, binding: str, tool: str, code: int, seconds: float) -> None:
        """A tool call that ended with the JSON-RPC error ``code``."""


@dataclass(slots=True)
class Access:
    """One request or call, as the access log records it."""

    binding: str
    method: str
    path: str
    tool: str | None
    #: An HTTP status, or a gRPC status name.
    status: int | str
    duration_ms: float
    peer: tuple[str, int] | None
    #: How one that did not end well ended (:data:`CLIENT_GONE`, ``cancelled``).
    outcome: str | None = None


class AccessLog(Protocol):
    """One line per request or call."""

    def write(self, entry: Access) -> None:
        """Record one request."""


class Quiet:
    """Metrics that are never on and an access log that writes nothing: every
    method of :class:`Metrics` and :class:`AccessLog`, taking anything."""

    on = False

    def _nothing(self, *args: object, **kwargs: object) -> None:
        return None

    request = refuse = call = call_error = write = _nothing


QUIET = Quiet()
