"""An in-memory connection: two asyncio transports joined back to back, no sockets.

:func:`transport_pair` joins a client protocol and a server protocol, as
``loop.create_connection`` and ``loop.create_server`` would after a TCP handshake,
and each side behaves as a socket transport of asyncio's selector loop does:

- **Delivery.**  What one side writes reaches the other on a later turn of the
  event loop (never inside ``write``), in reads of at most :data:`READ_SIZE` bytes,
  one read per side per turn; a ``BufferedProtocol`` is read into its own buffer.
- **Flow control.**  ``pause_reading`` stops delivery; what the peer writes then
  waits, first in a "socket buffer" of ``buffer_size`` bytes (the kernel's, which
  does not count as the writer's), then in the writer's own buffer, which is what
  ``get_write_buffer_size`` reports and what the writer's high and low water marks
  (``set_write_buffer_limits``, 64 KiB and a quarter of it by default) are
  compared with to call its protocol's ``pause_writing`` and ``resume_writing``.
- **Ends.**  ``write_eof`` half-closes: the peer's ``eof_received`` comes after
  every byte written before it; if it returns a false value the peer's transport
  closes, else the peer may still write.  ``close`` is ``write_eof`` and no more
  reading (what arrives afterwards is answered with a reset, as TCP does:
  the writer's protocol gets ``connection_lost(ConnectionResetError)``); its own
  protocol's ``connection_lost(None)`` comes once its unsent bytes are in the
  socket buffer.  ``abort`` drops what is unsent and resets the peer at once.

``get_extra_info`` knows ``peername`` and ``sockname`` (the addresses given to
:func:`transport_pair`) and has no ``socket``, so nothing tries socket options.
An exception raised by a protocol callback goes to the loop's exception handler
and aborts the connection, as asyncio does.
"""

from __future__ import annotations

import asyncio
import itertools

__all__ = ["READ_SIZE", "MemoryTransport", "transport_pair"]

#: Bytes delivered to a protocol by one read (asyncio reads sockets 256 KiB at a time).
READ_SIZE = 256 * 1024
#: Default size of each direction's socket buffer.
SOCKET_BUFFER = 64 * 1024
#: Client ports of the connections made without an address: each its own, as the
#: kernel gives them (from the start of the dynamic range, RFC 6335).
_client_ports = itertools.count()


class MemoryTransport(asyncio.Transport):
    """One side of an in-memory connection (see the module docstring).  Made by
    :func:`transport_pair`, not directly."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol: asyncio.BaseProtocol,
        *,
        sockname: tuple[str, int],
        peername: tuple[str, int],
        socket_buffer: int,
    ) -> None:
        super().__init__({"sockname": sockname, "peername": peername})
        self._loop = loop
        self._protocol = protocol
        self._peer: MemoryTransport = self  # set by transport_pair
        self._socket_buffer = socket_buffer
        self._inbox = bytearray()  # what the peer wrote that our protocol has not read
        self._peer_eof = False  # the peer wrote its EOF (after what is in the inbox)
        self._eof_delivered = False
        self._reading = True
        self._read_scheduled = False
        self._eof_written = False
        self._closing = False  # close() or abort(): no more writing nor reading
        self._lost = False  # connection_lost is called (or on its way)
        self._writing_paused = False  # our protocol was told pause_writing
        self._high_water = 64 * 1024
        self._low_water = 16 * 1024

    # --- asyncio.BaseTransport ------------------------------------------------------

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Write EOF after what is buffered, read no more; ``connection_lost(None)``
        once the unsent bytes are in the peer's socket buffer."""
        if self._closing:
            return
        self._closing = True
        self._inbox.clear()
        self._send_eof()
        self._lose_when_sent()

    # --- asyncio.ReadTransport ------------------------------------------------------

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            self._schedule_read()

    # --- asyncio.WriteTransport -----------------------------------------------------

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """As asyncio's: ``high`` defaults to 64 KiB (or 4 * ``low``), ``low`` to
        ``high // 4``.  Raises ValueError unless ``high >= low >= 0``."""
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high_water, self._low_water = high, low
        self._maybe_pause_writing()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low_water, self._high_water

    def get_write_buffer_size(self) -> int:
        """Bytes written that the peer's socket buffer could not take yet."""
        peer = self._peer
        if peer._closing:
            return 0
        return max(0, len(peer._inbox) - self._socket_buffer)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` (delivered on a later loop turn).  Raises RuntimeError after
        :meth:`write_eof`; after :meth:`close` or a reset, ``data`` is dropped."""
        if self._eof_written and not self._closing:
            raise RuntimeError("Cannot call write() after write_eof()")
        if not data or self._closing:
            return
        peer = self._peer
        if peer._closing:
            # The peer closed its socket: TCP answers data with a reset.
            self._loop.call_soon(self._reset, ConnectionResetError("Connection reset by peer"))
            return
        peer._inbox += data
        peer._schedule_read()
        self._maybe_pause_writing()

    def write_eof(self) -> None:
        """Half-close: the peer gets ``eof_received`` after what was written."""
        if self._closing or self._eof_written:
            return
        self._send_eof()

    def can_write_eof(self) -> bool:
        return True

    def abort(self) -> None:
        """Close at once: drop what is unsent; the peer gets a reset."""
        if self._lost:
            return
        peer = self._peer
        if not peer._lost:
            peer._inbox.clear()  # our unsent bytes go nowhere
            peer._reset(ConnectionResetError("Connection reset by peer"))
        self._closing = True
        self._inbox.clear()
        self._lose(None)

    # --- inside -----------------------------------------------------------------------

    def _send_eof(self) -> None:
        self._eof_written = True
        peer = self._peer
        peer._peer_eof = True
        peer._schedule_read()

    def _schedule_read(self) -> None:
        if not self._read_scheduled and not self._lost:
            self._read_scheduled = True
            self._loop.call_soon(self._read)

    def _read(self) -> None:
        """One read: up to READ_SIZE bytes to the protocol, or the peer's EOF."""
        self._read_scheduled = False
        if self._closing or not self._reading:
            return
        inbox = self._inbox
        if inbox:
            data = bytes(inbox[:READ_SIZE])
            del inbox[:READ_SIZE]
            try:
                self._feed(data)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal(exc, "protocol.data_received() call failed")
                return
            self._peer._sent_out()
            if inbox or self._peer_eof:
                self._schedule_read()  # the rest on the next turn, as a socket gives it
            return
        if self._peer_eof and not self._eof_delivered:
            self._eof_delivered = True
            eof_received = getattr(self._protocol, "eof_received", None)
            try:
                keep_open = eof_received() if eof_received is not None else False
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal(exc, "protocol.eof_received() call failed")
                return
            if not keep_open:
                self.close()

    def _feed(self, data: bytes) -> None:
        protocol = self._protocol
        if isinstance(protocol, asyncio.BufferedProtocol):
            view = memoryview(data)
            while view:
                buffer = memoryview(protocol.get_buffer(-1))
                size = min(len(buffer), len(view))
                if size == 0:
                    raise RuntimeError("get_buffer() returned an empty buffer")
                buffer[:size] = view[:size]
                protocol.buffer_updated(size)
                view = view[size:]
        elif isinstance(protocol, asyncio.Protocol):
            protocol.data_received(data)

    def _sent_out(self) -> None:
        """Our peer read some of what we wrote: resume our writer, finish a close."""
        if self._writing_paused and self.get_write_buffer_size() <= self._low_water:
            self._writing_paused = False
            self._call("resume_writing")
        if self._closing:
            self._lose_when_sent()

    def _maybe_pause_writing(self) -> None:
        if not self._writing_paused and self.get_write_buffer_size() > self._high_water:
            self._writing_paused = True
            self._call("pause_writing")

    def _call(self, method: str) -> None:
        try:
            getattr(self._protocol, method)()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler(
                {
                    "message": f"protocol.{method}() failed",
                    "exception": exc,
                    "transport": self,
                    "protocol": self._protocol,
                }
            )

    def _lose_when_sent(self) -> None:
        if not self._lost and self.get_write_buffer_size() == 0:
            self._lose(None)

    def _reset(self, exc: Exception) -> None:
        if not self._lost:
            self._closing = True
            self._inbox.clear()
            self._lose(exc)

    def _lose(self, exc: Exception | None) -> None:
        self._lost = True
        self._loop.call_soon(self._protocol.connection_lost, exc)

    def _fatal(self, exc: BaseException, message: str) -> None:
        self._loop.call_exception_handler(
            {
                "message": f"Fatal error: {message}.",
                "exception": exc,
                "transport": self,
                "protocol": self._protocol,
            }
        )
        self.abort()


def transport_pair(
    client: asyncio.BaseProtocol,
    server: asyncio.BaseProtocol,
    *,
    client_address: tuple[str, int] | None = None,
    server_address: tuple[str, int] = ("127.0.0.1", 80),
    socket_buffer: int = SOCKET_BUFFER,
) -> tuple[MemoryTransport, MemoryTransport]:
    """Connect ``client`` and ``server`` in memory and return their transports
    (client's first), after calling ``connection_made`` on each, the client first.

    ``client_address`` defaults to 127.0.0.1 and a port of its own per connection.
    ``socket_buffer`` is how many bytes each direction holds beyond the writer's
    own buffer (see the module docstring); a small one makes backpressure come
    soon.  Call it in the running event loop.  Raises TypeError for a protocol
    that is neither an ``asyncio.Protocol`` nor an ``asyncio.BufferedProtocol``,
    ValueError for a negative ``socket_buffer``.
    """
    for protocol in (client, server):
        if not isinstance(protocol, asyncio.Protocol | asyncio.BufferedProtocol):
            raise TypeError(f"not a stream protocol: {protocol!r}")
    if socket_buffer < 0:
        raise ValueError(f"socket_buffer must not be negative, got {socket_buffer!r}")
    loop = asyncio.get_running_loop()
    if client_address is None:
        client_address = ("127.0.0.1", 49152 + next(_client_ports) % 16384)
    near = MemoryTransport(
        loop, client, sockname=client_address, peername=server_address, socket_buffer=socket_buffer
    )
    far = MemoryTransport(
        loop, server, sockname=server_address, peername=client_address, socket_buffer=socket_buffer
    )
    near._peer, far._peer = far, near
    client.connection_made(near)
    server.connection_made(far)
    return near, far
