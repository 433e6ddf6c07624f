"""The lifecycle every binding shares, so that ``serve`` runs them all alike.

A binding is started on a host and port, or on a socket that is already bound
(a supervisor's, inherited by its workers), with ``reuse_port`` where the OS has
it; on shutdown it is first drained (no new work, in-flight calls get ``grace``
seconds, then a clear "shutting down" answer), then closed.
"""

from __future__ import annotations

import abc
import asyncio
import socket
import sys
from typing import Any

__all__ = ["Binding", "listen_socket", "loop_name"]


class Binding(abc.ABC):
    """What every binding is to ``serve``: started, drained, closed."""

    #: What the logs call it: "HTTP", "gRPC".
    name: str

    async def start(
        self,
        host: str | None = None,
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        reuse_port: bool = False,
    ) -> asyncio.AbstractServer | None:
        """Listen on ``host:port`` (port 0: an ephemeral one; see :attr:`port`), or on
        an already-bound ``sock``; return the listening asyncio server (None where
        the binding's server does not tell it).

        Raises OSError when the address cannot be bound, ValueError for a setting
        the binding cannot serve with.
        """
        if sock is None:  # bound here, so that its port is known whatever serves it
            sock = listen_socket(host, port, reuse_port)
        else:
            host = sock.getsockname()[0]
        try:
            return await self.listen(sock, host or "0.0.0.0")
        except BaseException:
            sock.close()
            raise

    @abc.abstractmethod
    async def listen(self, sock: socket.socket, host: str) -> asyncio.AbstractServer | None:
        """Serve on the bound, listening ``sock`` (``host``: the address it was asked
        for, for :meth:`url`)."""

    @property
    @abc.abstractmethod
    def port(self) -> int:
        """The port listened on."""

    @abc.abstractmethod
    def url(self) -> str:
        """Where clients reach it, e.g. ``http://127.0.0.1:8080/mcp-lite/v1``."""

    @abc.abstractmethod
    async def drain(self, grace: float) -> None:
        """Stop accepting; let in-flight calls finish within ``grace`` seconds; answer
        what is left with a shutting-down error.  Returns within ``grace`` + 1 s."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every connection and the listener."""


def listen_socket(host: str | None, port: int, reuse_port: bool = False) -> socket.socket:
    """A TCP socket listening on ``host:port`` as asyncio's ``create_server`` makes one
    (``SO_REUSEADDR``, IPv6 only on an IPv6 address, ``IPPROTO_TCP`` so that
    connections get ``TCP_NODELAY``), on every interface for None or ``""`` (IPv6
    too, where one socket takes both), else on the first address ``host`` resolves
    to.  Raises OSError when it cannot be bound."""
    dual = not host and socket.has_dualstack_ipv6()
    address: tuple[Any, ...]
    if dual:
        family, address = socket.AF_INET6, ("::", port)
    else:
        found = socket.getaddrinfo(
            host or "0.0.0.0", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, _, _, _, address = found[0]
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual else 1)
        sock.bind(address)
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    return sock


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """What ``loop`` is, as the start-up log lines say it: ``asyncio`` for the
    standard library's loops, else the package that made it and its version
    (``uvloop 0.23.0``)."""
    package = type(loop).__module__.partition(".")[0]
    if package == "asyncio":
        return "asyncio"
    version = getattr(sys.modules.get(package), "__version__", None)
    return f"{package} {version}" if isinstance(version, str) else package
