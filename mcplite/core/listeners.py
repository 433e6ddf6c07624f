"""Change listeners: who hears that a registry (tools, prompts, resources) changed.

Tools, prompts and resources may be added and removed while they are served; a
dispatcher follows its registry, and MCP tells subscribed clients that a list
changed.  Each registry keeps one :class:`Listeners` and calls :meth:`notify`
after every change.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

__all__ = ["Listeners"]

log = logging.getLogger("mcplite")


class Listeners:
    """Who wants to hear that a registry changed: functions called with no
    argument after each change, in the order they were added (a listener that
    raises is logged, and the others still hear)."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def add(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every change; returns the function that stops it."""
        self._listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def notify(self) -> None:
        """Call every listener; one that raises is logged, and the rest still hear."""
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("a change listener failed")

    def __len__(self) -> int:
        return len(self._listeners)
