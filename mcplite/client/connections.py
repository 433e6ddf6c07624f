"""HTTP/1.1 connections of the client: h11 over an asyncio protocol, and their pool.

I/O.  :class:`HttpConnection` is the asyncio protocol of one connection: the
bytes it receives go straight into its h11 state machine, and it notes whatever
arrives while no exchange is in progress (bytes or EOF on an idle connection
mean the server closed it or is about to).  Received bytes nobody has read yet
beyond :data:`READ_LIMIT` stop the reading of the socket, so that a slow
consumer of a stream does not make the client buffer without bound.

Pool.  :class:`ConnectionPool` makes connections with a factory it is given
(a socket, or an in-memory transport for :mod:`mcplite.testing`).  A finished
exchange puts its connection back on an idle stack (at most ``size``; more are
closed); the most recently used idle connection is taken first.  Before a
request is written to it, a pooled connection is checked, and dropped for a new
one, when it is known dead: the server closed it or sent anything while it was
idle (seen by the protocol, or its socket is readable even if the event loop
has not read it yet); it went unused for ``idle_timeout``; or h11 says it
cannot carry another request.
"""

from __future__ import annotations

import asyncio
import os
import select
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

import h11

from ._tls import tls_reason
from .errors import TransportError

__all__ = ["CLOSE_WAIT", "READ_LIMIT", "ConnectionPool", "HttpConnection", "NoResponse", "reason"]

#: Received bytes not read yet beyond which the connection's socket is not read.
READ_LIMIT = 64 * 1024
#: Seconds :meth:`ConnectionPool.aclose` waits for the connections to end.
CLOSE_WAIT = 1.0


class NoResponse(TransportError):
    """The connection ended before any byte of the response: the request may be
    sent again only if it is idempotent (the server may have run it)."""

    def __init__(self) -> None:
        super().__init__("the server closed the connection without answering")


def reason(exc: BaseException) -> str:
    """What went wrong with a connection, in words (a TLS alert, ``Connection refused``)."""
    if isinstance(exc, ssl.SSLError):  # before errno, which is OpenSSL's here
        return tls_reason(exc)
    # asyncio words a refusal "Connect call failed ('127.0.0.1', 1)": say what it was.
    errno = getattr(exc, "errno", None)
    if isinstance(errno, int) and errno > 0:
        return os.strerror(errno)
    strerror = getattr(exc, "strerror", None)
    return strerror or str(exc) or type(exc).__name__  # e.g. a resolver's error


def _socket_readable(transport: asyncio.BaseTransport) -> bool:
    """Whether the socket under ``transport`` has something to read (bytes, EOF or an
    error) that the event loop has not delivered yet; a closed socket counts."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    fd = sock.fileno()
    if fd < 0:
        return True
    if hasattr(select, "poll"):  # no FD_SETSIZE limit
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))  # POLLHUP and POLLERR are reported unasked
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


class HttpConnection(asyncio.Protocol):
    """One HTTP/1.1 connection: an asyncio protocol feeding an h11 state machine.
    Make it in the running event loop."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = time.monotonic()
        self.busy = False  # an exchange is in progress
        self.stale = False  # something arrived while idle: do not reuse
        self.got_bytes = False  # of the current response
        self.eof = False
        self.lost = False
        self.error: Exception | None = None  # why the connection was lost
        #: Done once the connection has ended.
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._unread = 0  # bytes given to h11 since it last needed data
        self._reading_paused = False
        self._read_waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: asyncio's own, or one of another loop's (uvloop's are
        # not asyncio.Transport subclasses) with the same methods.
        self.transport = transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.stale = True  # e.g. a 408 before the server closes an idle connection
        self.got_bytes = True
        self.h11.receive_data(data)
        self._unread += len(data)
        if self._unread > READ_LIMIT and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()
        _wake(self._read_waiter)

    def eof_received(self) -> bool | None:
        self._end()
        return None  # nothing more to say once the server has closed: close

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self._end()
        _wake(self._drain_waiter)
        _wake(self.closed)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        _wake(self._drain_waiter)

    def _end(self) -> None:
        if not self.busy:
            self.stale = True
        if not self.eof:
            self.eof = True
            self.h11.receive_data(b"")
        _wake(self._read_waiter)

    # --- the pool's view --------------------------------------------------------------

    def usable(self, idle_timeout: float) -> bool:
        """Whether this idle connection can carry a request: known alive, not expired."""
        transport = self.transport
        return (
            transport is not None
            and not transport.is_closing()
            and not self.stale
            and not self.eof
            and self.h11.our_state is h11.IDLE
            and time.monotonic() - self.idle_since < idle_timeout
            and not _socket_readable(transport)
        )

    def finish(self) -> bool:
        """After a whole exchange: ready the next one; False if this one must close."""
        conn = self.h11
        self.busy = False
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE and not self.eof:
            conn.start_next_cycle()
            self.got_bytes = False
            self.idle_since = time.monotonic()
            # Bytes past the response, which we did not ask for: do not trust the rest.
            return not conn.trailing_data[0]
        return False

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # --- one exchange -----------------------------------------------------------------

    async def request(self, events: Iterable[h11.Event]) -> h11.Response:
        """Send a request's h11 ``events`` and read up to the response's head (a
        ``100 Continue`` is skipped).

        Raises h11.LocalProtocolError (before anything is sent) for a request
        h11 will not send; OSError if the connection is lost while writing;
        NoResponse when it ends before any byte of the response, TransportError
        when it ends or breaks in the middle of one.
        """
        data = b"".join(self.h11.send(event) or b"" for event in events)
        await self._send(data)
        while True:
            event = await self.next_event()
            if isinstance(event, h11.Response):
                return event

    async def _send(self, data: bytes) -> None:
        assert self.transport is not None
        self.busy = True
        self.transport.write(data)
        while self._writing_paused and not self.lost:
            self._drain_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None
        if self.lost and self.error is not None:
            raise self.error if isinstance(self.error, OSError) else OSError(str(self.error))

    async def next_event(self) -> Any:
        """The next h11 event of the response.

        Raises NoResponse when the connection ends before any byte of the
        response, TransportError when it ends or breaks in the middle of one.
        """
        conn = self.h11
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if self.eof:
                    raise self._ended() from None
                raise TransportError(f"malformed HTTP response: {exc}") from None
            if event is h11.NEED_DATA:
                if self.eof:  # h11 has had the EOF but waits for more: a broken connection
                    raise self._ended()
                await self._readable()
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise self._ended()
            return event

    async def _readable(self) -> None:
        self._unread = 0
        if self._reading_paused and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        self._read_waiter = asyncio.get_running_loop().create_future()
        try:
            await self._read_waiter
        finally:
            self._read_waiter = None

    def _ended(self) -> TransportError:
        if not self.got_bytes:
            return NoResponse()
        if self.error is not None:
            return TransportError(f"connection broken: {reason(self.error)}")
        return TransportError("the server closed the connection in the middle of a response")


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class ConnectionPool:
    """Keep-alive connections made by ``connect`` (see the module doc): at most
    ``size`` idle ones, each reused only within ``idle_timeout`` seconds of its
    last exchange.  ``connect`` raises what it likes (TransportError, say)."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[HttpConnection]],
        *,
        size: int,
        idle_timeout: float,
    ) -> None:
        if size < 0:
            raise ValueError("pool_size must not be negative")
        self.connect = connect
        self.size = size
        self.idle_timeout = idle_timeout
        #: Connections opened so far (for tests and the curious).
        self.connections_opened = 0
        self.closed = False
        self._idle: list[HttpConnection] = []
        self._busy: set[HttpConnection] = set()

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def acquire(self, *, fresh: bool = False) -> tuple[HttpConnection, bool]:
        """A connection (a new one if ``fresh``) and whether it was reused.

        A pooled connection that is known dead before anything is written to it
        (see :meth:`HttpConnection.usable`) is closed and the next one tried: that
        is the only point where a request may move to another connection freely.
        Raises TransportError once the pool is closed, and what ``connect`` raises.
        """
        if self.closed:
            raise TransportError("the client is closed")
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.usable(self.idle_timeout):
                self._busy.add(conn)
                return conn, True
            conn.close()
        conn = await self.connect()
        self.connections_opened += 1
        self._busy.add(conn)
        return conn, False

    def settle(self, conn: HttpConnection | None, done: bool) -> None:
        """After an exchange: ``conn`` back to the pool when it was ``done`` (and can
        carry another), else closed (what it still holds is unknown)."""
        if conn is None:
            return
        self._busy.discard(conn)
        if done and conn.finish() and not self.closed and len(self._idle) < self.size:
            self._idle.append(conn)
        else:
            conn.close()

    def discard(self, conn: HttpConnection) -> None:
        """Close ``conn``, which will not be used again."""
        self.settle(conn, False)

    async def aclose(self) -> None:
        """Close every connection and wait, at most :data:`CLOSE_WAIT` seconds in
        all, until they have ended.  Raises nothing."""
        self.closed = True
        conns = [*self._idle, *self._busy]
        self._idle.clear()
        self._busy.clear()
        for conn in conns:
            conn.close()
        if conns:
            await asyncio.wait([conn.closed for conn in conns], timeout=CLOSE_WAIT)
