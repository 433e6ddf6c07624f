"""Change listeners: who hears that a registry (tools, prompts, resources) changed.

Tools, prompts and resources may be added and removed while they are served; a
dispatcher follows its registry, and MCP tells subscribed clients that a list
changed.  Each registry keeps one :class:`Listeners` and calls :meth:`notify`
after every change.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Listeners", "Registry"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., object])

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


class Registry(Generic[T]):
    """Entries by name, in the order they were added, and the listeners told of
    each change: what :class:`~mcplite.core.tools.Tools` and
    :class:`~mcplite.core.prompts.Prompts` share."""

    def __init__(self) -> None:
        self._entries: dict[str, T] = {}
        self._listeners = Listeners()

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every entry added or removed; returns the
        function that stops it."""
        return self._listeners.add(listener)

    def remove(self, name: str) -> T:
        """Stop serving the entry called ``name`` and return it (calls already
        running finish); KeyError if none."""
        entry = self._entries.pop(name)
        self._listeners.notify()
        return entry

    def replace(self, other: Registry[T]) -> None:
        """Serve exactly what ``other`` holds from now on, in its order, and say so
        to the listeners once (a reloaded module's registry: ``mcplite dev``)."""
        self._entries = dict(other._entries)
        self._listeners.notify()

    def _keep(self, name: str, entry: T) -> T:
        """Serve ``entry`` as ``name`` from now on, and say so to the listeners."""
        self._entries[name] = entry
        self._listeners.notify()
        return entry

    @staticmethod
    def _decorate(fn: F | None, add: Callable[[F], object]) -> F | Callable[[F], F]:
        """``fn`` given to ``add`` and returned as it is (a bare decorator), or,
        with no ``fn``, the decorator that does that."""

        def register(f: F) -> F:
            add(f)
            return f

        return register(fn) if fn is not None else register

    def get(self, name: str) -> T | None:
        return self._entries.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[T]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
