"""Where a call is refused: the one check every call passes before its tool runs.

:func:`authorize` is called by the core (:class:`mcplite.core.dispatch.Dispatcher`)
with the request context and the tool, after the tool is found and before its
arguments are validated or anything runs.  It raises an
:class:`~mcplite.core.errors.MCPLiteError` to refuse; today's policy (:class:`AllowAll`)
lets everything through.  A binding never decides this on its own.

:class:`Gate` is authentication as the protocols and bindings see it: who the
caller of a request is, and whether it may send it at all.
:class:`mcplite.auth.Auth` is the one there is; the core names only this shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from .context import Caller, RequestContext
from .errors import Forbidden
from .tools import Tool

__all__ = ["AllowAll", "Gate", "Policy"]


class Policy(Protocol):
    """Decides whether a caller may use a tool (raise to refuse, return to allow)."""

    def authorize(self, context: RequestContext, tool: Tool) -> None: ...

    def visible(self, context: RequestContext, tool: Tool) -> bool:
        """Whether discovery shows ``tool`` to this caller."""
        ...


class AllowAll:
    """Every caller may call every tool (no authentication configured)."""

    def authorize(self, context: RequestContext, tool: Tool) -> None:
        return None

    def visible(self, context: RequestContext, tool: Tool) -> bool:
        return True


class Gate(Protocol):
    """Authentication: set on a dispatcher only when it is required."""

    #: Discovery without credentials (calls never).
    open_discovery: bool
    #: RFC 9728 Protected Resource Metadata (OAuth), or None.
    resource_metadata: dict[str, Any] | None
    #: The public origin clients reach this server by, or None: each request's own.
    public_url: str | None
    #: Where 401 answers point clients for the resource metadata.
    metadata_path: str

    @property
    def required(self) -> bool: ...

    def policy(self) -> Policy:
        """The policy the core applies to each call with this gate on."""
        ...

    def authenticate(
        self, authorization: str | None
    ) -> Caller | Callable[[], Awaitable[Caller]] | None:
        """The caller of a request with this ``Authorization`` value (None: no
        credentials; a function: await what it returns).  Raises
        :class:`~mcplite.core.errors.Unauthenticated` for a refused one."""
        ...

    def admit(self, context: RequestContext, method: str) -> None:
        """Refuse (raise) an anonymous request unless it is open discovery."""

    def limit(self, caller: Caller | None, peer: tuple[str, int] | None) -> None:
        """Spend one request of this caller's rate (raises ``RateLimited``)."""

    def challenge(self, resource_url: str | None, error: Forbidden | None = None) -> str:
        """The ``WWW-Authenticate`` value of a 401 (or, with ``error``, a 403)."""
        ...
