"""The lifecycle every binding shares, so that ``serve`` runs them all alike.

A binding is started on a host and port, or on a socket that is already bound
(a supervisor's, inherited by its workers), with ``reuse_port`` where the OS has
it; on shutdown it is first drained (no new work, in-flight calls get ``grace``
seconds, then a clear "shutting down" answer), then closed.
"""

from __future__ import annotations

import socket
from typing import Protocol

__all__ = ["Binding"]


class Binding(Protocol):
    #: What the logs call it: "HTTP", "gRPC".
    name: str

    async def start(
        self,
        host: str | None = None,
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        reuse_port: bool = False,
    ) -> object:
        """Listen on ``host:port`` (port 0: an ephemeral one), or on ``sock``.

        Raises OSError when the address cannot be bound.
        """
        ...

    @property
    def port(self) -> int:
        """The port listened on."""
        ...

    def url(self) -> str:
        """Where clients reach it, e.g. ``http://127.0.0.1:8080/mcp-lite/v1``."""
        ...

    async def drain(self, grace: float) -> None:
        """Stop accepting; let in-flight calls finish within ``grace`` seconds; answer
        what is left with a shutting-down error.  Returns within ``grace`` + 1 s."""
        ...

    async def close(self) -> None:
        """Close every connection and the listener."""
        ...
