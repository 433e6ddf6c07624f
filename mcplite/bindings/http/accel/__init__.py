"""The gate of the HTTP binding's speed paths (the modules beside this one).

They work on h11's private internals (its state machine, receive buffer,
readers, writers and ``Headers`` class), so they are on only for the h11
versions in :data:`TESTED` (the HTTP tests pass on each, with and without
``MCPLITE_ACCEL=0``) and unless ``MCPLITE_ACCEL=0`` is set.  Off, the binding
uses h11's public API alone (:mod:`mcplite.bindings.http.framing` picks one
or the other), and answers the same bytes.
"""

from __future__ import annotations

from ....core.accel import enabled

__all__ = ["TESTED", "on"]

#: The versions of each package the speed paths were tested with.
TESTED = {"h11": ("0.16.0",)}


def on() -> bool:
    """Whether the speed paths are on (decided once a process; raises nothing)."""
    return enabled("http", TESTED)
