"""The MCP requests in flight over HTTP, for ``notifications/cancelled``.

Over HTTP the notification comes on a POST of its own, and there is no session:
a request is named by its id and its caller (the auth subject, with auth on).
Two requests of one caller with the same id in flight at once (two anonymous
clients, each counting from 0) cannot be told apart: a cancel naming them stops
neither, since MCP lets a cancellation go unheeded.  (stdio cancels its
requests itself: it knows its one client.)
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from ...core.context import Caller

__all__ = ["InFlight"]

log = logging.getLogger("mcplite")

_Key = tuple[str, str | int]


class InFlight:
    """The tasks answering requests now, by (caller's subject, request id)."""

    def __init__(self) -> None:
        # One task per key, the usual case; a list while two share it.
        self._running: dict[_Key, asyncio.Task[Any] | list[asyncio.Task[Any]]] = {}
        self._cancelled: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    @staticmethod
    def key(caller: Caller | None, request_id: str | int) -> _Key:
        return ("" if caller is None else caller.subject, request_id)

    def add(self, key: _Key, task: asyncio.Task[Any]) -> None:
        """``task`` answers the request ``key`` names, from now on."""
        held = self._running.setdefault(key, task)
        if isinstance(held, list):
            held.append(task)
        elif held is not task:
            self._running[key] = [held, task]

    def discard(self, key: _Key, task: asyncio.Task[Any]) -> None:
        """``task`` is done answering (however it ended)."""
        held = self._running.get(key)
        if held is task:
            del self._running[key]
        elif isinstance(held, list):
            held.remove(task)
            if len(held) == 1:  # the one left can be told apart again
                self._running[key] = held[0]

    def cancel(self, key: _Key) -> None:
        """``notifications/cancelled``: stop the one task answering ``key``, if any."""
        task = self._running.get(key)
        if task is None or isinstance(task, list):
            return
        if task not in self._cancelled:
            log.debug("request %r cancelled by the client", key[1])
            self._cancelled.add(task)
            task.cancel()

    def stopped(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task``, now raising CancelledError, was stopped by :meth:`cancel`
        (then it is uncancelled, to answer nothing); else the cancel is another's."""
        if task not in self._cancelled:
            return False
        self._cancelled.discard(task)
        task.uncancel()
        return True
