"""A grpclib server's per-connection protocol, for a transport made elsewhere.

grpclib has no public way to get the protocol its server makes for each
accepted socket; its own ``grpclib.testing.ChannelFor`` calls the private
``Server._protocol_factory`` too.  :meth:`GrpcServer.connection
<mcplite.bindings.grpc.service.GrpcServer.connection>` uses this for the
in-memory transports of :mod:`mcplite.testing` only, whether the speed paths
are on or off: serving sockets never imports it.
"""

from __future__ import annotations

import asyncio

from grpclib.server import Server

__all__ = ["connection_protocol"]


def connection_protocol(server: Server) -> asyncio.Protocol:
    """The protocol ``server`` would serve one newly accepted connection with."""
    protocol: asyncio.Protocol = server._protocol_factory()
    return protocol
