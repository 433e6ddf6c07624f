"""``CallToolStream``'s answer: a tool's parts, its progress and its result, in order.

Each :class:`~mcplite.core.envelope.Partial` becomes a ``ToolResponse`` with
``result = {"partial": value}`` and NO ``meta`` (spec A.4); the final ``Result`` is
the one message with ``meta``.  What the tool reports of its progress
(``ctx.report_progress``) comes between them as a message without ``meta`` too,
``result = {"progress": p, "total": t, "message": m}`` (no ``partial`` key; spec
5.3's "server-pushed updates").  An error ends the stream with its status after
the parts sent.  A client that leaves mid-stream stops the tool; the call is
logged ``CANCELLED ... client-gone`` and counted as ``disconnected``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

from grpclib.server import Stream

from ...core.context import RequestContext
from ...core.dispatch import ToolStream
from ...core.envelope import Result
from ...core.errors import MCPLiteError
from ...core.outcomes import Partial, ProgressUpdate
from ...protocols.protobuf import encode_tool_response
from .messages import RawMessage, response_meta
from .status import StatusSender

__all__ = ["Closing", "StreamingDispatcher", "deadline_passed", "send_stream"]


class StreamingDispatcher(Protocol):
    """What streaming needs of :class:`mcplite.core.dispatch.Dispatcher`."""

    def stream(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        context: RequestContext = ...,
        *,
        progress: bool = ...,
    ) -> AsyncIterator[Partial | Result]: ...


class Closing(Protocol):
    #: Whether the server is cancelling its calls (its grace period is over).
    closing: bool


async def send_stream(
    stream: Stream[RawMessage, RawMessage],
    dispatcher: StreamingDispatcher,
    name: str,
    arguments: dict[str, Any] | None,
    context: RequestContext,
    statuses: StatusSender,
    server: Closing,
) -> None:
    """Run tool ``name`` as a stream and send each item as a message; end with the
    status of an error.

    A stream cancelled while ``server.closing`` is not the client's doing.  The
    tool is stopped whenever the stream ends early.  Raises CancelledError when
    the call is cancelled.
    """
    parts: AsyncIterator[Partial | Result] | None = None
    gone = False
    try:
        parts = dispatcher.stream(name, arguments, context, progress=True)
        while True:
            try:
                item = await _next_item(parts)
            except StopAsyncIteration:
                break
            if isinstance(item, Partial):
                message = encode_tool_response({"partial": item.value}, None)
            elif isinstance(item, ProgressUpdate):
                message = encode_tool_response(item.to_json(), None)
            else:
                message = encode_tool_response(item.body, response_meta(item))
            await stream.send_message(RawMessage(message))
    except MCPLiteError as err:
        await statuses.error(stream, err)
    except asyncio.CancelledError:
        gone = not server.closing and not deadline_passed(stream)
        raise
    except Exception:
        await statuses.unexpected(stream, "CallToolStream")
    finally:
        # Stop the tool when we stop early (error, cancellation, client gone).
        if isinstance(parts, ToolStream):
            await parts.aclose(disconnected=gone)
        else:
            aclose = getattr(parts, "aclose", None)
            if aclose is not None:
                await aclose()


async def _next_item(parts: AsyncIterator[Partial | Result]) -> Partial | ProgressUpdate | Result:
    """A stream's next item, progress reports included (a ToolStream's ``next``
    gives them; iterating it skips them).  Raises StopAsyncIteration at the end."""
    if isinstance(parts, ToolStream):
        item = await parts.next()
        assert item is not None
        return item
    return await anext(parts)


def deadline_passed(stream: Stream[Any, Any]) -> bool:
    """Whether the client's ``grpc-timeout`` has run out (grpclib then cancels the
    handler, as it does when the client cancels or goes away)."""
    deadline = stream.deadline
    return deadline is not None and deadline.time_remaining() <= 0
