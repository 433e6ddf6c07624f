"""The request context: who is calling, over what, from where.

Every binding builds one per request and hands it to the core with the call;
the core passes it to :func:`mcplite.core.authorize.authorize` before a tool runs.
Headers (HTTP) and metadata (gRPC) are kept as a read-only mapping with
lowercase names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["LOG_LEVELS", "Caller", "Notifier", "RequestContext"]

Notifier = Callable[[str, dict[str, Any]], None]
"""``notify(method, params)``: send a notification related to the request."""

#: Syslog severities as MCP names them, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller: its subject, the scopes it was granted, its claims."""

    subject: str
    scopes: frozenset[str] = frozenset()
    claims: Mapping[str, Any] = field(default_factory=dict)


def binding_of(caller: Caller | None) -> bytes:
    """What a promise token is bound to: the subject that created it (empty when
    anonymous).  :class:`~mcplite.core.tokens.TokenSealer` mixes it into the MAC, so a
    token redeemed by anyone else fails exactly as a forged one does."""
    return b"" if caller is None else caller.subject.encode("utf-8", "surrogateescape")


@dataclass(slots=True)
class RequestContext:
    """One request as the core sees it.

    ``binding`` names the wire (``"http"``, ``"grpc"``, ``"in-process"``; later
    ``"mcp"``, ``"stdio"``); ``peer`` is the remote ``(host, port)`` when there is
    one; ``caller`` is set by authentication (None: anonymous).
    """

    binding: str
    peer: tuple[str, int] | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS)
    caller: Caller | None = None
    #: Where a tool's notifications go while this request is answered (MCP:
    #: ``notifications/progress`` and ``notifications/message`` on the
    #: response's SSE stream): ``notify(method, params)``.  None: nowhere.
    notify: Notifier | None = None
    #: The client's progress token (MCP ``_meta.progressToken``), if it sent one.
    progress_token: str | int | None = None
    #: The lowest log level the client wants to hear (None: no log messages).
    log_level: str | None = None
    #: MCP's ``inputResponses`` of a repeated call (answers to input requests).
    input_responses: Mapping[str, Any] | None = None
    #: The ``requestState`` a tool asked to get back, verified (MCP).
    request_state: str | None = None
    #: What the client said it can do (MCP ``clientCapabilities``), when it said.
    client_capabilities: Mapping[str, Any] | None = None
    #: The request's MCP ``params._meta`` as sent (None: none, or not MCP): what
    #: a middleware may read beyond the fields above (a ``traceparent``).
    meta: Mapping[str, Any] | None = None


#: The context of calls made in-process (tests, embedding) when none is given.
IN_PROCESS = RequestContext("in-process")
