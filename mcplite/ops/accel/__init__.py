"""The listening sockets' speed path: accepts bounded per turn, and an accept
loop that ends at the first "out of file descriptors".

asyncio (3.11-3.13) keeps its listening sockets in ``asyncio.Server._sockets``
and calls their ``accept()`` up to ``backlog`` times in one turn: each an open
file descriptor before any connection cap can refuse it.  On EMFILE it pauses
the listener for a second but goes on calling accept() in the same turn,
logging the error and scheduling one more resume each time; the resumes then
multiply into a storm of log lines and wasted turns.  :func:`guard_listeners`
makes those sockets :class:`Listener` ones, whose accept() raises
BlockingIOError after ``per_turn`` connections and after one such failure,
which ends that loop.  :func:`mcplite.ops.serve.guard_accept` calls it only
while :func:`mcplite.core.accel.enabled` says so, and only on asyncio's own
servers (not uvloop's, which accept in libuv).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import weakref
from collections.abc import Collection
from typing import Any

__all__ = ["Listener", "guard_listeners"]

#: Listening sockets whose accept() just failed for lack of resources.
_failed: weakref.WeakSet[socket.socket] = weakref.WeakSet()
_accepted: weakref.WeakKeyDictionary[socket.socket, int] = weakref.WeakKeyDictionary()
_limits: weakref.WeakKeyDictionary[socket.socket, tuple[int, Collection[int]]] = (
    weakref.WeakKeyDictionary()
)


class Listener(socket.socket):
    """A listening socket that accepts at most its ``per_turn`` connections a turn
    of the event loop, and none more in a turn where one failed for lack of
    resources."""

    __slots__ = ()

    def accept(self) -> tuple[socket.socket, Any]:
        per_turn, out_of_resources = _limits[self]
        if self in _failed:
            _failed.discard(self)
            raise BlockingIOError(errno.EAGAIN, "accepting paused")
        taken = _accepted.get(self, 0)
        if taken >= per_turn:
            raise BlockingIOError(errno.EAGAIN, "the rest in the next turn")
        if not taken:  # the count starts again in the next turn
            asyncio.get_running_loop().call_soon(_accepted.pop, self, None)
        _accepted[self] = taken + 1
        try:
            return super().accept()
        except OSError as exc:
            if exc.errno in out_of_resources:
                _failed.add(self)
            raise


def guard_listeners(
    server: asyncio.AbstractServer, per_turn: int, out_of_resources: Collection[int]
) -> None:
    """Make the listening sockets of ``server`` :class:`Listener` ones."""
    for sock in getattr(server, "_sockets", None) or ():  # asyncio.Server's own sockets
        if type(sock) is socket.socket:
            _limits[sock] = (per_turn, out_of_resources)
            sock.__class__ = Listener
