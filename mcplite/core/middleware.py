"""Code of your own around every tool call: a chain of middleware.

A middleware is an async callable ``(call, call_next) -> Result``.  It sees the
call (:class:`ToolCall`: the tool, its arguments once the schema accepted them,
the request context) before the tool runs, and the :class:`~mcplite.core.envelope.Result`
after: it may refuse (raise an :class:`~mcplite.core.errors.MCPLiteError`, such
as :class:`~mcplite.core.errors.Forbidden`), answer without running the tool
(return a Result of its own: a cache), change the arguments it passes on, time
the call, retry it, or replace the outcome::

    async def timed(call: ToolCall, call_next: CallNext) -> Result:
        t0 = time.perf_counter()
        try:
            return await call_next(call)
        finally:
            log.info("%s took %.1f ms", call.tool.name, (time.perf_counter() - t0) * 1000)

    dispatcher = Dispatcher(tools, middleware=[timed])

The chain runs in the core, so every binding (HTTP, MCP, gRPC, stdio, in
process) goes through it the same way, streamed calls included.  Order is
explicit: the first middleware given sees the call first and the result last.
What runs before the chain: finding the tool, the policy, the schema, the
concurrency limit (their errors reach no middleware).  A call that outlives its
promise deadline gives the chain its promise (``result.outcome`` is a
:class:`~mcplite.core.outcomes.Promised`); the tool goes on after the chain
returned.  For a streamed call, the parts go to the client as the tool yields
them and the chain gets the final result; calling ``call_next`` twice runs the
tool twice (its parts too).  The system tools ``redeem`` and ``cancel`` pass
through the chain as well (``call.tool.kind`` is ``Kind.SYSTEM``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .context import RequestContext
from .envelope import Result
from .tools import Tool

__all__ = ["CallNext", "Middleware", "ToolCall", "chain"]


@dataclass(slots=True)
class ToolCall:
    """One tool call, as a middleware sees it."""

    tool: Tool
    #: The arguments as the schema accepted them (defaults filled in); a
    #: middleware may pass others on, which the tool gets unchecked.
    arguments: dict[str, Any]
    #: Who calls, over which binding (``context.binding``: "http", "mcp", "grpc", ...).
    context: RequestContext


#: The rest of the chain: the middleware after this one, then the tool.
CallNext = Callable[[ToolCall], Awaitable[Result]]


class Middleware(Protocol):
    """Runs around every tool call (see the module docstring)."""

    def __call__(self, call: ToolCall, call_next: CallNext, /) -> Awaitable[Result]: ...


def chain(middleware: Sequence[Middleware], inner: CallNext) -> CallNext:
    """``inner`` with ``middleware`` around it, the first outermost."""
    handler = inner
    for outer in reversed(middleware):
        handler = functools.partial(_step, outer, handler)
    return handler


async def _step(middleware: Middleware, call_next: CallNext, call: ToolCall) -> Result:
    return await middleware(call, call_next)
