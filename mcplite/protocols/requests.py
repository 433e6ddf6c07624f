"""One JSON-RPC request as every method handler takes it, whatever the protocol.

The framing (:mod:`.jsonrpc` for MCP-lite, :mod:`.mcp.server` for MCP over HTTP
and stdio) checks a message and builds a :class:`Request`; the handler of its
method (:mod:`.methods`) reads what differs between the protocols from
``request.profile``: the same method answers MCP-lite, MCP 2026-07-28 and MCP
2025-11-25, its differences written as data or a branch on the profile, never
as a second handler.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from ..core.context import RequestContext

__all__ = ["EVERY", "LITE", "MCP", "MCP_2025", "MCP_2026", "NO_ID", "Profile", "Request", "Sender"]

#: The id of a notification (a request without ``id``): never answered.
NO_ID: Any = object()


class Profile(enum.Flag):
    """Who is asking: which protocol, and which revision of it."""

    #: MCP-lite's JSON-RPC endpoint (``/calltools``, ``/rpc``): MCP's method names,
    #: the MCP-lite envelope for calls, one answer per list.
    LITE = enum.auto()
    #: MCP 2026-07-28: stateless, ``params._meta`` on every request, caching
    #: hints, ``input_required`` results, tasks.
    MCP_2026 = enum.auto()
    #: MCP 2025-11-25 (and 2025-06-18, 2025-03-26): ``initialize`` first; the
    #: server asks the client on the call's stream.
    MCP_2025 = enum.auto()


#: The profiles as module constants, for the code every request runs: a member
#: read off its Enum class goes through the metaclass (about 90 ns on 3.11).
LITE: Final = Profile.LITE
MCP_2026: Final = Profile.MCP_2026
MCP_2025: Final = Profile.MCP_2025
#: Both MCP revisions, and every profile (a method's ``profiles``).
MCP: Final = MCP_2026 | MCP_2025
EVERY: Final = LITE | MCP

Sender = Callable[[dict[str, Any]], None]
"""``send(message)``: put a whole JSON-RPC message on the response's stream."""

_NOTHING: Mapping[str, Any] = MappingProxyType({})


class Request:
    """A checked JSON-RPC request and what its handler may need of the exchange.

    ``id``: the request's id (:data:`NO_ID` for a notification).  ``params``: for
    MCP always an object; for MCP-lite as sent (an object, an array or None),
    each method saying what it refuses.  The MCP framing sets the rest:
    ``headers``, the request's headers (lowercase names) over HTTP on the MCP
    endpoint (None on stdio and on MCP-lite's endpoint); ``capabilities``, the
    client's (2026: from ``_meta``; otherwise none); ``send``, where a message
    to the client goes while this request is answered (an SSE stream, stdio;
    None: nowhere, a plain JSON answer).
    """

    __slots__ = ("capabilities", "context", "headers", "id", "method", "params", "profile", "send")

    # Five parameters, the rest set to constants: parameters with defaults cost
    # more than the stores (this is built once per request).
    def __init__(
        self, id: Any, method: str, params: Any, profile: Profile, context: RequestContext
    ) -> None:
        self.id = id
        self.method = method
        self.params = params
        self.profile = profile
        self.context = context
        self.headers: Mapping[str, str] | None = None
        self.capabilities: Mapping[str, Any] = _NOTHING
        self.send: Sender | None = None

    def __repr__(self) -> str:
        return f"Request({self.method!r}, id={self.id!r}, {self.profile.name})"
