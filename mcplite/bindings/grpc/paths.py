"""The gRPC binding's two paths, chosen once a process by the gate in :mod:`.accel`.

With the gate on (the default, on the versions of grpclib, h2 and hpack it lists)
the binding takes its speed paths, which work on those packages' internals; off
(``MCPLITE_ACCEL=0``, or a version it does not list) it uses grpclib's public API
alone.  What differs, and nothing else (speed paths, then plain path):

* the server: :class:`.accel.connections.LimitedServer` (a connection cap, an
  idle timeout, a GOAWAY on close, no rapid-reset leak, UNIMPLEMENTED with a
  ``content-type``, HPACK with memory, one read buffer, lean HEADERS and DATA
  frames); grpclib's ``Server`` as it is.
* a request message over the size limit: refused by its length prefix; refused
  once grpclib has read it.
* a status message with a space at either end: the space sent as ``%20``; the
  message sent trimmed.
* a unary call's answer: its headers, message and trailers sent in one step
  (:mod:`.accel.answers`); grpclib's ``send_message``, then its trailers.
* open connections: counted (the ``mcplite_connections_open`` gauge); not.
* the listening asyncio server: known (``serve`` guards its accept loop); not.

Only :func:`chosen` imports :mod:`.accel`'s modules, and only with the gate on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

from grpclib.config import Configuration
from grpclib.encoding.base import StatusDetailsCodecBase
from grpclib.server import Server, Stream

from ...core.observe import Metrics
from . import accel
from .messages import RawMessage, read_message
from .status import SendSpaced, send_trimmed

__all__ = ["MakeServer", "PathParts", "ReadMessage", "SendAnswer", "chosen"]

#: Reads a request message under a size limit (see :mod:`.messages`).
ReadMessage = Callable[[Stream[Any, Any], int], Awaitable[bytes | None]]
#: Ends a unary call with its one response message (serialized) and status OK.
SendAnswer = Callable[[Stream[Any, Any], bytes], Awaitable[None]]


class MakeServer(Protocol):
    """Makes the grpclib server of a path (the plain one ignores the limits and metrics)."""

    def __call__(
        self,
        handlers: Collection[Any],
        *,
        status_details_codec: StatusDetailsCodecBase | None,
        config: Configuration | None,
        idle_timeout: float,
        max_connections: int,
        metrics: Metrics,
    ) -> Server: ...


@dataclasses.dataclass(frozen=True)
class PathParts:
    """What the binding uses on one path."""

    #: Whether these are the speed paths.
    accel: bool
    make_server: MakeServer
    read_message: ReadMessage
    send_answer: SendAnswer
    #: Ends a call whose status message has a space at either end.
    send_spaced: SendSpaced
    #: The asyncio server a started server listens with; None: not known.
    listening: Callable[[Server], asyncio.AbstractServer] | None = None
    #: How many connections a server serves now; None: not counted.
    connection_count: Callable[[Server], int] | None = None


@functools.cache
def chosen() -> PathParts:
    """The path this process takes (the gate decides once)."""
    if accel.on():
        from .accel.answers import send_answer
        from .accel.connections import LimitedServer, connection_count, listening
        from .accel.messages import read_message as read_by_prefix
        from .accel.trailers import send_trailers

        return PathParts(
            accel=True,
            make_server=LimitedServer,
            read_message=read_by_prefix,
            send_answer=send_answer,
            send_spaced=send_trailers,
            listening=listening,
            connection_count=connection_count,
        )
    # grpclib's public API: its own server, which tells neither its listener nor its connections.
    return PathParts(False, _grpclib_server, read_message, _send_answer, send_trimmed)


async def _send_answer(stream: Stream[Any, Any], data: bytes) -> None:
    # The trailers follow when the handler returns (grpclib's Stream.__aexit__).
    await stream.send_message(RawMessage(data))


def _grpclib_server(
    handlers: Collection[Any],
    *,
    status_details_codec: StatusDetailsCodecBase | None,
    config: Configuration | None,
    **limits: object,
) -> Server:
    # grpclib's Server has neither limit (idle_timeout, max_connections), so
    # refuses nothing to count (metrics): docs/grpc.md.
    return Server(handlers, status_details_codec=status_details_codec, config=config)
