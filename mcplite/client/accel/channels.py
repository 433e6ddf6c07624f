"""grpclib's ``Channel``, keeping its connections so that closing can wait for them.

grpclib has no public way to learn when a channel's connection has ended, nor
to connect a channel otherwise than over a socket.  :class:`TrackingChannel`
uses its two hooks (grpclib 0.4.9; ``grpclib.testing.ChannelFor`` uses the
same):

* ``Channel._protocol_factory`` (the protocol a connection is made with),
  wrapped so that each connection's protocol says when it has ended
  (:class:`TrackedProtocol`), and
* ``Channel._create_connection`` (the one place a channel connects), replaced
  when a ``connect`` hook is given: it joins the protocol to a transport made
  elsewhere (the in-memory connections of :mod:`mcplite.testing`).

Closing a TLS connection takes a close_notify exchange on the event loop; a
loop that ends before it leaks the socket, so :meth:`TrackingChannel.aclose`
waits (boundedly) for every connection to end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from grpclib.client import Channel
from grpclib.protocol import H2Protocol

__all__ = ["CLOSE_WAIT", "Connect", "TrackedProtocol", "TrackingChannel"]

#: Seconds :meth:`TrackingChannel.aclose` waits for the connections to end:
#: a peer that never answers close_notify is not waited out.
CLOSE_WAIT = 1.0

#: Joins a new connection's protocol to a transport (``transport_pair``, say).
Connect = Callable[[H2Protocol], object]


class TrackedProtocol(H2Protocol):
    """grpclib's client protocol, with :attr:`closed` done once its connection has ended."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        if not self.closed.done():
            self.closed.set_result(None)


class TrackingChannel(Channel):
    """A grpclib ``Channel`` (same arguments) whose :meth:`aclose` waits until its
    connections have ended.  With ``connect``, a connection is not a socket to
    ``host`` and ``port`` (which then only name the server in ``:authority``) but
    whatever ``connect`` joins the new protocol to.  Make it in the running event
    loop."""

    def __init__(self, *args: Any, connect: Connect | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connect = connect
        self.protocols: list[TrackedProtocol] = []

    def _protocol_factory(self) -> H2Protocol:
        made = super()._protocol_factory()
        protocol = TrackedProtocol(made.handler, made.config, made.h2_config)
        self.protocols = [p for p in self.protocols if not p.closed.done()]
        self.protocols.append(protocol)
        return protocol

    async def _create_connection(self) -> H2Protocol:
        if self.connect is None:
            return await super()._create_connection()
        protocol = self._protocol_factory()
        self.connect(protocol)
        return protocol

    async def aclose(self) -> None:
        """Close the connection and wait, at most :data:`CLOSE_WAIT` seconds, until
        every connection has ended.  Raises nothing."""
        self.close()
        closing = [p.closed for p in self.protocols if not p.closed.done()]
        if closing:
            await asyncio.wait(closing, timeout=CLOSE_WAIT)
