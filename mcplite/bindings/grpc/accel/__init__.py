"""The gate of the gRPC binding's speed paths (the modules beside this one).

They work on private internals of grpclib, h2 and hpack, so they are on only
for the versions in :data:`TESTED` (the gRPC tests pass on each, with and
without ``MCPLITE_ACCEL=0``) and unless ``MCPLITE_ACCEL=0`` is set.  Off, the
binding uses grpclib's public API alone (:mod:`..paths` says what differs).
"""

from __future__ import annotations

from ....core.accel import enabled

__all__ = ["TESTED", "on"]

#: The versions of each package the speed paths were tested with.
TESTED = {"grpclib": ("0.4.9",), "h2": ("4.4.1",), "hpack": ("4.2.0",)}


def on() -> bool:
    """Whether the speed paths are on (decided once a process; raises nothing)."""
    return enabled("grpc", TESTED)
