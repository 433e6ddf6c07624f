"""Where a call is refused: the one check every call passes before its tool runs.

:func:`authorize` is called by the core (:class:`mcplite.core.dispatch.Dispatcher`)
with the request context and the tool, after the tool is found and before its
arguments are validated or anything runs.  It raises an
:class:`~mcplite.core.errors.MCPLiteError` to refuse; today's policy (:class:`AllowAll`)
lets everything through.  A binding never decides this on its own.
"""

from __future__ import annotations

from typing import Protocol

from .context import RequestContext
from .tools import Tool

__all__ = ["AllowAll", "Policy"]


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
