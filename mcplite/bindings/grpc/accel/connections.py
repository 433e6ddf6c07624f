"""gRPC connections: a cap, an idle timeout, a GOAWAY on close, and no rapid-reset leak.

grpclib 0.4's ``Server`` has none of these.  :class:`LimitedServer` adds them at
the one seam grpclib offers, ``Server._protocol_factory`` (called for each
accepted connection), with subclasses of grpclib's ``Handler`` and ``H2Protocol``:

* **Cap.**  A connection beyond ``max_connections`` is closed at once, before any
  HTTP/2 (no grpclib objects are made for it), and the server says so in its log
  once a minute.  Not a GOAWAY: grpcio takes a connection that sent SETTINGS as
  good and retries the refused call on a new one at once, again and again until
  its deadline (hundreds of connections a second); a connection closed before
  SETTINGS is a failed connect, which fails the call with UNAVAILABLE at once
  (unless it waits for ready) and reconnects with backoff.
* **Idle timeout.**  A connection with no open stream for ``idle_timeout`` seconds
  (one that never sent a preface, too) gets a GOAWAY (``NO_ERROR``, so clients
  reconnect on their next call) and is closed.  One server-wide timer checks every
  connection, reading grpclib's own counters: nothing is added per call.
* **Close.**  :meth:`LimitedServer.close` also closes the clients' connections with
  a GOAWAY; grpclib 0.4 leaves them open (grpclib issue #107), which keeps sockets
  alive after a shutdown and, from Python 3.12 on, keeps ``wait_closed`` waiting.
* **Rapid reset.**  grpclib registers each new stream in its ``EventsProcessor.streams``
  and starts a task for it whose ``finally`` removes it again.  A client that sends
  HEADERS and at once RST_STREAM gets that task cancelled before its first step,
  so the ``finally`` never runs and the stream (its buffer, queue and events,
  about 7.5 KiB) stays in ``streams`` until the connection closes: one
  connection could grow the server without bound.  :meth:`_Handler.cancel`
  removes such a stream itself (the fix for grpclib itself:
  ``docs/patches/grpclib-rapid-reset-stream-leak.patch``).  And h2 remembers how
  each closed stream ended, up to 65,536 of them (about 10 MiB) per connection;
  we keep :data:`CLOSED_STREAMS_KEPT`.
* **Unknown methods.**  grpclib answers a path it does not serve with a bare
  ``:status 200`` and ``grpc-status 12``, without ``content-type``: Go clients
  (grpcurl, ghz, Kubernetes' gRPC probe) then read ``Unknown`` ("malformed header:
  missing HTTP content-type") instead of ``Unimplemented``.  The method table
  handed to each connection (:class:`_Methods`) answers such a path with a
  handler that raises ``UNIMPLEMENTED``, which grpclib then sends as any status,
  with ``content-type``.  The fix for grpclib itself is
  ``docs/patches/grpclib-unimplemented-content-type.patch``.

Three costs of a call are also cut here, below grpclib:

* **HPACK.**  Each connection's h2 gets hpack's decoder and encoder with memory
  (:mod:`.headercache`): the header blocks a client repeats and the headers and
  trailers every answer repeats are worked out once per HPACK table state.
* **Reads.**  asyncio reads a plain ``Protocol`` with ``sock.recv(256 KiB)``, a
  new 256 KiB object per read, which glibc serves on this path with ``mmap``,
  ``mremap`` and ``munmap`` (and a page fault) for a read of a few hundred
  bytes.  Our connections are ``BufferedProtocol`` objects reading into one buffer of
  their server's, copied out before the loop reads the next socket (a server's
  connections all run on its loop's one thread).  Together with the HPACK
  memory, unary calls went from 0.95x to 1.11-1.18x grpcio's (CHANGELOG.md).
  uvloop reads a protocol that is also an ``asyncio.Protocol`` (grpclib's is)
  with ``data_received``, never ``buffer_updated``; it needs neither: it reads
  into one buffer of its loop's and copies out only the bytes read.
* **Frames.**  Each connection's h2 writes a response's plain HEADERS and DATA
  frames itself (:mod:`.framing`), without building and serializing frame
  objects: 1.17x as many unary calls again.

Used only when the gate (:mod:`.`) is on; without it the binding serves with
grpclib's own ``Server`` and has none of the above (docs/grpc.md says what that
costs).  grpclib internals used (grpclib 0.4.9; tests/test_grpc_hardening.py
covers each): ``Server._mapping`` (which :class:`_Methods` wraps: grpclib's
``request_handler`` only calls its ``get``; tests/test_grpc_reflection.py),
``_codec``, ``_status_details_codec``, ``_handlers``, ``_config``, ``_h2_config``
and ``__dispatch__`` (to build a connection as ``Server._protocol_factory``
does), ``Server._server`` (the asyncio server, for :func:`listening`),
``Handler._tasks`` and ``_cancelled``, ``EventsProcessor.streams``,
``Connection._connection`` (the h2 connection, to send a GOAWAY), and h2's
``H2Connection._closed_streams`` (a ``SizeLimitDict``).  h2's public
``H2Connection.decoder`` and ``encoder`` are replaced on ``connection_made``,
before any header block (tests/test_grpc_headercache.py), and its class made
:class:`~.framing.LeanH2Connection` (tests/test_grpc_framing.py).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from grpclib.const import Cardinality, Status
from grpclib.const import Handler as Method
from grpclib.exceptions import GRPCError
from grpclib.protocol import EventsProcessor, H2Protocol
from grpclib.protocol import Stream as H2Stream
from grpclib.server import Handler, Server, Stream

from ....core.observe import QUIET, Metrics
from .framing import LeanH2Connection
from .headercache import CachingDecoder, CachingEncoder

__all__ = ["CLOSED_STREAMS_KEPT", "LimitedServer", "connection_count", "listening"]

log = logging.getLogger("mcplite.bindings.grpc")

#: Closed streams whose end h2 remembers per connection (to ignore frames still in
#: flight on them; later ones get RST_STREAM).  h2's own bound is 65,536, about
#: 10 MiB a connection that rapid resets fill.
CLOSED_STREAMS_KEPT = 1024
#: Seconds between two log lines saying connections are refused.
REFUSAL_LOG_EVERY = 60.0
#: Bytes one socket read may take (asyncio's own limit for a plain ``Protocol``).
READ_SIZE = 256 * 1024


class _Methods(dict[str, Method]):
    """A server's method table that answers every path it lacks with
    :func:`_unimplemented` (see the module docstring)."""

    def get(self, path: str, default: Any = None) -> Method:
        method = super().get(path)
        if method is not None:
            return method
        return Method(_unimplemented(path), Cardinality.UNARY_UNARY, object, object)


def _unimplemented(path: str) -> Callable[[Stream[Any, Any]], Awaitable[None]]:
    message = f"Method not found: {path[:256]}"

    async def refuse(stream: Stream[Any, Any]) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, message)

    return refuse


class _Refused(asyncio.Protocol):
    """A connection over the cap: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Handler(Handler):
    """grpclib's per-connection ``Handler`` that does not leak streams reset early."""

    processor: EventsProcessor | None = None  # set by _Connection.connection_made

    def __init__(self, count_call: Callable[[], None], *args: Any) -> None:
        super().__init__(*args)
        self._count_call = count_call

    def accept(
        self, stream: H2Stream, headers: list[tuple[str, str]], release_stream: Callable[[], Any]
    ) -> None:
        self._count_call()
        super().accept(stream, headers, release_stream)

    def cancel(self, stream: H2Stream) -> None:
        task = self._tasks.get(stream)
        super().cancel(stream)
        if task is None:
            return
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            # Reset before its handler ran: grpclib's request_handler would have
            # released the stream in a `finally` it will now never enter.  Nor is
            # there anything to wait for on close; the task ends on its next step.
            self._release(stream)
            self._cancelled.discard(task)

    def _release(self, stream: H2Stream) -> None:
        """What grpclib's ``release_stream`` (EventsProcessor.register) does."""
        processor = self.processor
        if processor is None or processor.streams.get(stream.id or 0) is not stream:
            return
        assert stream.id is not None
        del processor.streams[stream.id]
        connection = processor.connection
        connection.stream_close_waiter.set()
        if not connection.is_closing():
            connection.ack(stream.id, stream.buffer.unacked_size())

    def close(self) -> None:
        super().close()
        self.processor = None  # no cycle with the processor left to collect


class _CoalescingTransport(asyncio.Transport):
    """A transport whose writes within one event loop iteration leave as one.

    grpclib writes h2's output after every step: a unary call's response
    headers, its message and its trailers are three ``send`` system calls, and
    a burst of calls on one connection three each.  Gathering what is written
    until the loop's next turn sends all of it at once (in order, never later
    than that turn), which is most of a pure-Python gRPC server's time spent
    outside Python.  :meth:`write_now` sends what is gathered at once (a unary
    answer, :mod:`.answers`).  Everything but ``write`` and ``close`` is the
    real transport's.
    """

    def __init__(self, transport: asyncio.Transport, quiet: Callable[[], bool]) -> None:
        super().__init__()
        self._quiet = quiet
        self._real = transport
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def write_now(self, data: bytes) -> None:
        """Write ``data``, a unary call's answer: at once, after what is pending,
        when the server is quiet (:meth:`LimitedServer.quiet`: at most one call
        started in the loop's last turn); else as :meth:`write`.

        At once, the client has its answer before the handler's bookkeeping (its
        metrics, its access line) and the loop's next turn: a quarter more calls
        a second from a client calling one at a time.  Under load that would
        cost: clients answered one by one send again one by one, and the loop
        serves fewer calls a turn for its overhead (a tenth fewer a second at 50
        connections), so the answers wait for the turn's end together."""
        if not self._quiet():
            self.write(data)
            return
        self._pending.append(data)
        self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._real.is_closing():
            self._real.write(b"".join(pending))

    def close(self) -> None:
        self._flush()
        self._real.close()

    def abort(self) -> None:
        self._pending = []
        self._real.abort()

    def is_closing(self) -> bool:
        return self._real.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._real.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._real.get_write_buffer_size() + sum(map(len, self._pending))

    def pause_reading(self) -> None:
        self._real.pause_reading()

    def resume_reading(self) -> None:
        self._real.resume_reading()


class _Connection(H2Protocol, asyncio.BufferedProtocol):
    """One client connection of a :class:`LimitedServer`, which watches it go idle.

    A ``BufferedProtocol``: its socket is read into the server's ``read_into``
    (see the module docstring), and the bytes go on to grpclib's ``data_received``.
    """

    def __init__(self, server: LimitedServer, handler: _Handler, *args: Any) -> None:
        super().__init__(handler, *args)
        self.server = server
        self.active_at = asyncio.get_running_loop().time()
        self._streams_seen = 0
        self.read_into = server.read_into

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.read_into

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.read_into[:nbytes].tobytes())

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's own stream transport, or another loop's (uvloop's are not
        # asyncio.Transport subclasses) with the same methods.
        real = cast(asyncio.Transport, transport)
        super().connection_made(_CoalescingTransport(real, self.server.quiet))
        assert isinstance(self.handler, _Handler)
        self.handler.processor = self.processor
        h2_connection = self.connection._connection
        LeanH2Connection.adopt(h2_connection)  # grpclib's own H2Connection: leaner frames
        closed = getattr(h2_connection, "_closed_streams", None)
        if isinstance(getattr(closed, "_size_limit", None), int):
            closed._size_limit = CLOSED_STREAMS_KEPT  # type: ignore[union-attr]
        # No header block has been through them yet: HPACK that remembers blocks.
        decoder = h2_connection.decoder
        h2_connection.decoder = CachingDecoder(
            decoder.max_header_list_size, decoder.max_allowed_table_size
        )
        h2_connection.encoder = CachingEncoder()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.server.connections.discard(self)
        if hasattr(self, "processor"):
            super().connection_lost(exc)

    def check_idle(self, now: float, timeout: float) -> None:
        """Close the connection if it has had no open stream for ``timeout`` seconds."""
        processor = getattr(self, "processor", None)  # None until connection_made
        if processor is not None:
            started = processor.connection.streams_started
            if processor.streams or started != self._streams_seen:
                self._streams_seen = started
                self.active_at = now
                return
        if now - self.active_at >= timeout:
            log.debug("closing a gRPC connection idle for %.1fs", now - self.active_at)
            self.close("the connection was idle")

    def close(self, reason: str) -> None:
        """Send a GOAWAY (NO_ERROR: streams not started may be retried), then close."""
        connection = getattr(self, "connection", None)  # set on connection_made
        if connection is None:
            self.server.connections.discard(self)
            return
        if not connection.is_closing():
            try:
                connection._connection.close_connection()  # h2: GOAWAY
                connection.flush()
            except Exception:  # a connection in a state h2 refuses GOAWAY in
                log.debug("no GOAWAY sent on closing a gRPC connection", exc_info=True)
        self.processor.close(reason)


class LimitedServer(Server):
    """grpclib's ``Server`` with a connection cap, an idle timeout, a GOAWAY to every
    client on :meth:`close`, and no rapid-reset leak (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        idle_timeout: float,
        max_connections: int,
        metrics: Metrics = QUIET,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._mapping = _Methods(self._mapping)
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.metrics = metrics
        #: The connections being served (refused ones are never in it).
        self.connections: set[_Connection] = set()
        #: What its connections' sockets are read into (see the module docstring).
        self.read_into = memoryview(bytearray(READ_SIZE))
        #: Calls its connections started in this turn of the loop, and in the last.
        self._calls = self._calls_before = 0
        self._tick_every = min(1.0, max(0.02, idle_timeout / 4))
        self._ticker: asyncio.TimerHandle | None = None
        self._refusal_logged_at: float | None = None

    def _protocol_factory(self) -> asyncio.Protocol:  # type: ignore[override]
        if len(self.connections) >= self.max_connections:
            self._log_refusal()
            if self.metrics.on:
                self.metrics.refuse("grpc", "overloaded")
            return _Refused()
        # As grpclib's own factory, with our Handler and protocol.
        self.__gc_step__()
        handler = _Handler(
            self.count_call,
            self._mapping,
            self._codec,
            self._status_details_codec,
            self.__dispatch__,
        )
        self._handlers.add(handler)
        protocol = _Connection(self, handler, self._config, self._h2_config)
        self.connections.add(protocol)
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().call_later(self._tick_every, self._tick)
        return protocol

    def count_call(self) -> None:
        """Count one call started (its request's headers read) in this turn of the loop."""
        if not self._calls:  # the turn's first: its count is taken at the next
            asyncio.get_running_loop().call_soon(self._turn)
        self._calls += 1

    def _turn(self) -> None:
        # Scheduled by a turn's first call, so run at the next turn's start,
        # before the steps of the calls that turn started.
        self._calls_before, self._calls = self._calls, 0

    def quiet(self) -> bool:
        """Whether at most one call started in the loop's last turn (on any
        connection): no other is about to be answered with the one at hand."""
        return self._calls_before <= 1

    def _log_refusal(self) -> None:
        now = asyncio.get_running_loop().time()
        if self._refusal_logged_at is None or now - self._refusal_logged_at >= REFUSAL_LOG_EVERY:
            self._refusal_logged_at = now
            log.warning(
                "gRPC connection cap reached (%d): closing new connections until some end",
                self.max_connections,
            )

    def _tick(self) -> None:
        self._ticker = None
        if not self.connections:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for protocol in list(self.connections):
            protocol.check_idle(now, self.idle_timeout)
        if self.connections:
            self._ticker = loop.call_later(self._tick_every, self._tick)

    def close(self) -> None:
        super().close()  # stop listening; cancel the calls in flight
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for protocol in list(self.connections):
            protocol.close("the server is closing")


def listening(server: Server) -> asyncio.AbstractServer:
    """The asyncio server a started grpclib ``server`` listens with (``Server._server``;
    uvloop's servers have its methods without being asyncio.AbstractServer subclasses)."""
    found = server._server
    assert found is not None, "not started"
    return found


def connection_count(server: Server) -> int:
    """How many connections a :class:`LimitedServer` serves now."""
    assert isinstance(server, LimitedServer)
    return len(server.connections)
