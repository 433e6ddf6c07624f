"""The gate of the client's speed path (the module beside this one).

:mod:`.channels` works on private internals of grpclib, so the gRPC transport
takes it only for the versions in :data:`TESTED` (the client's gRPC and TLS
tests pass on each, with and without ``MCPLITE_ACCEL=0``) and unless
``MCPLITE_ACCEL=0`` is set.  Off, the transport uses grpclib's public
``Channel`` alone (see :meth:`mcplite.client.grpc.GrpcTransport.aclose` for
what differs).  :mod:`mcplite.testing` takes :mod:`.channels` for its in-memory
channels whatever the gate says: a test tool, not a speed path.
"""

from __future__ import annotations

from ...core.accel import enabled

__all__ = ["TESTED", "on"]

#: The versions of each package the speed path was tested with.
TESTED = {"grpclib": ("0.4.9",)}


def on() -> bool:
    """Whether the speed path is on (decided once a process; raises nothing)."""
    return enabled("client", TESTED)
