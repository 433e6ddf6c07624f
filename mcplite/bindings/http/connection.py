"""One HTTP/1.1 connection: the I/O boundary between a socket and the endpoints.

:class:`HttpConnection` takes bytes, feeds h11 and takes its events: one
request at a time per connection (pipelined requests wait in h11's buffer and
are answered in order).  Each request's head is checked as it arrives (limits
here; route, method, media type, host and caller by
:mod:`mcplite.bindings.http.admission`); once its body is in, the
:class:`~mcplite.bindings.http.messages.Request` goes to its route's handler,
and the response it gives (whole, or an SSE event stream) is written back.

What is the connection's own: deadlines (one server-wide ticker), backpressure
(a connection whose client does not read what we sent takes no further request
until it does, so its memory stays bounded however many requests it
pipelines), and the *lingering* close after an error answered before the
request was read to its end (:meth:`HttpConnection._linger`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from http import HTTPStatus
from typing import TYPE_CHECKING, cast

import h11

from ...core.errors import ShuttingDown
from ...core.observe import CLIENT_GONE
from ...core.runner import EAGER_TASKS, start_task
from .admission import Refusal, Verification
from .framing import Connection, fast_head, header_fields, take_whole, unread
from .messages import EventStream, Request, Response, StreamingResponse
from .routes import Route
from .statuses import JSON, REASONS, error_body, retry_after

if TYPE_CHECKING:
    from .server import HttpServer

__all__ = ["HttpConnection"]

log = logging.getLogger("mcplite")

_NO_DEADLINE, _IDLE, _RECEIVING = 0, 1, 2
#: The status logged for a request whose client left before any answer (nginx's
#: "client closed request"; see HttpConnection._log_cut_off).
_CLIENT_CLOSED = 499
# Unsent output above which a connection takes no further request (and reads
# no more) until the client has read some: the bound of its memory.
_HIGH_WATER = 64 * 1024
# A body this long or longer is written apart from its head: one more send, and
# no copy of it made to put the head in front.
_APART = 64 * 1024
# A lingering close reads and drops at most this much, for at most this long
# (or the request timeout, if shorter).
_LINGER_BYTES = 4 * 1024 * 1024
_LINGER_SECONDS = 2.0
# At most this many connections refused for being too many linger at once
# (beyond: closed at once), so that a flood of them holds few sockets.
_LINGERING_REFUSALS = 64
#: What a handler gives: a response, or None when it answered itself (a refusal).
Answering = Awaitable[Response | StreamingResponse | None]


class HttpConnection(asyncio.Protocol):
    """One client connection, driven by callbacks.

    ``data_received`` feeds h11 and takes events until a request is complete,
    then hands it to its route's handler: at once for one that answers at once
    (the lists), else in a task; while that task runs, further bytes wait in
    h11's buffer (reading pauses), so pipelined requests are answered in order.

    On Python 3.12+ the first request of a loop turn starts its task eagerly:
    a tool that answers without suspending is answered before
    ``data_received`` returns, one loop trip less for a lone client.  The
    other requests of that turn (a loaded server) are scheduled: the loop then
    reads the heads of all the connections ready in the turn, then runs all
    their handlers (each ending its cycle itself, see ``_handle``), each
    phase's code and data still warm from the connection before.  Eager
    tasks for every request run each one start to end before the next; at 50
    connections that served 19% fewer requests a second (10,600 against
    13,000 on 3.12 with wrk), and scheduled tasks for every request served a
    lone client 5% fewer (7,000 against 7,400).  Python 3.11 has no eager
    tasks: its tasks are all scheduled.
    """

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.config = config = server.config
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        # See _on_request for how the head limit is applied.
        self.conn = Connection(
            h11.SERVER, max_incomplete_event_size=max(0, config.max_header_size - 1)
        )
        self.task: asyncio.Task[None] | None = None
        self.closed = False  # no more requests or output: closing, or lingering
        self._peer: tuple[str, int] | None = None
        # The request being received or answered, and its route.
        self._request: Request | None = None
        self._route: Route | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._refusal: Refusal | None = None  # answer this once the body is read
        self._verification: Verification | None = None  # a caller to verify first (auth)
        self._body = b""  # the body of the call in flight (to answer it at shutdown)
        self._t0 = 0.0
        self.status = 0
        # Deadlines, checked by the server's ticker.
        self._deadline = 0.0
        self._deadline_kind = _NO_DEADLINE
        self._paused_reading = False
        self._paused_writing = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._advancing = False
        self._streaming = False
        self._events: EventStream | None = None  # the event stream being answered
        self._gone = False  # the client went away (FIN under a stream, or a reset)
        # CORS headers of every answer to the request (CORS on, an allowed origin).
        self._cors: tuple[tuple[bytes, bytes], ...] = ()
        self._linger_left = 0
        self._linger_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: asyncio's own, or one of another loop's (uvloop's are
        # not asyncio.Transport subclasses) with the same methods.
        self.transport = transport = cast(asyncio.Transport, transport)
        server = self.server
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        if len(server.connections) >= self.config.max_connections or server.draining:
            message = "Too many connections" if not server.draining else "Server is shutting down"
            if server.metrics.on:
                server.metrics.refuse("http", "shutting_down" if server.draining else "overloaded")
            body = error_body(503, message)
            retry_name, retry_value = retry_after(self.config.retry_after)
            transport.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"%s: %s\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
                % (retry_name, retry_value, len(body), body)
            )
            if len(server.rejected) < _LINGERING_REFUSALS:
                server.rejected.add(self)
                self._linger()  # the client may have sent its request already
            else:
                self.abort()
            return
        server.connections.add(self)
        peer = transport.get_extra_info("peername")
        self._peer = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self._expect(_IDLE, self.config.keepalive_timeout)
        server.watch()

    def data_received(self, data: bytes) -> None:
        if self.closed:  # lingering after an early error: read and drop
            self._linger_left -= len(data)
            if self._linger_left < 0:
                self.abort()
            return
        self.conn.receive_data(data)
        if self._deadline_kind == _IDLE:
            self._expect(_RECEIVING, self.config.request_timeout)
        if self.task is None:
            self._advance()
        elif not self._paused_reading:
            # Pipelined bytes while we answer: h11 holds what it has; read no more.
            self._pause_reading()

    def eof_received(self) -> bool | None:
        if self.closed:
            return False  # lingering, and the client is done too: close now
        self.conn.receive_data(b"")
        if self.task is None:
            self._advance()
        elif self._streaming:
            # A stream's reader has gone: stop the tool now, not at the next heartbeat.
            self._gone = True
            self.task.cancel()
        return True  # keep our half open: a half-closing client still gets its answer

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self._gone = True  # not closed by us: the client closed or reset it
        self.closed = True
        server = self.server
        server.connections.discard(self)
        server.rejected.discard(self)
        if server.draining and not server.connections and not server.rejected:
            server.all_closed.set()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        if self.task is not None and not self.task.done():
            self.task.cancel()  # nobody to answer: stop the call (and its tool)
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.cancel()

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.task is None and not self.closed:
            # The client reads again: it is not idle, and its next pipelined
            # request may be taken (from the loop, not inside the transport's
            # write callback that calls us).
            kind = self._deadline_kind
            if kind == _RECEIVING:
                self._expect(kind, self.config.request_timeout)
            elif kind == _IDLE:
                self._expect(kind, self.config.keepalive_timeout)
            self.loop.call_soon(self._resume)

    def _resume(self) -> None:
        if self.task is None and not self.closed and not self._paused_writing:
            self._advance()

    def _pause_reading(self) -> None:
        if not self._paused_reading and self.transport is not None:
            self._paused_reading = True
            self.transport.pause_reading()

    # -- deadlines ----------------------------------------------------------

    def _expect(self, kind: int, seconds: float) -> None:
        self._deadline_kind = kind
        self._deadline = self.loop.time() + seconds

    def check_deadline(self, now: float) -> None:
        kind = self._deadline_kind
        if kind == _NO_DEADLINE or now < self._deadline or self.task is not None:
            return
        self._deadline_kind = _NO_DEADLINE
        if kind == _IDLE or self._paused_writing:
            # An idle keep-alive connection, or a client that has read nothing of
            # what we sent for that long: close quietly.
            self.abort()
        else:
            self.status = 408
            self._fail(408, "Request timeout: the request was not received in time")

    # -- receiving ----------------------------------------------------------

    def close_if_idle(self) -> None:
        if self.task is None and self._request is None:
            self.abort()

    def abort(self, *, hard: bool = False) -> None:
        """Close now (``hard``: without sending what is still unsent)."""
        self.closed = True
        if self.transport is not None:
            if hard:
                self.transport.abort()
            else:
                self.transport.close()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None

    def _linger(self) -> None:
        """Close after an early error response without losing the response.

        A socket closed with unread input makes the kernel send a reset, which
        can destroy the response before the client has read it (RFC 9112
        section 9.6): a client still sending a body we refused would get
        "connection reset" instead of our 413.  So: shut our side after the
        response (FIN), then read and drop whatever the client still sends,
        and close when it closes, or after ``_LINGER_BYTES`` or
        ``_LINGER_SECONDS`` (the request timeout if shorter), whichever is first.
        """
        if self.closed:
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            self.abort()
            return
        self.closed = True
        self._deadline_kind = _NO_DEADLINE  # the linger timer below ends it
        if transport.can_write_eof():
            transport.write_eof()  # after what is still buffered
        if self._paused_reading:
            self._paused_reading = False
            transport.resume_reading()
        self._linger_left = _LINGER_BYTES
        seconds = min(_LINGER_SECONDS, self.config.request_timeout)
        self._linger_timer = self.loop.call_later(seconds, self.abort)

    def _advance(self) -> None:
        """Take h11 events until a request is handed to a task or h11 needs data."""
        if self._advancing:
            return  # a request finished synchronously inside the loop below
        self._advancing = True
        conn = self.conn
        # What a Request event took out of h11's buffer is the exact size of its
        # head as sent (see _on_request).
        buffer = unread(conn)
        try:
            while self.task is None and not self.closed:
                if self._paused_writing:
                    # Backpressure: the client does not read our answers.  Take
                    # no further request and read no more until it does
                    # (resume_writing): its memory here stays bounded.
                    self._pause_reading()
                    return
                whole = take_whole(conn)
                if whole is not None:
                    if whole is h11.NEED_DATA:  # nothing buffered
                        self._need_data()
                        return
                    # A plain request: its head, and its body and end when all in.
                    event, body, head_size = whole  # type: ignore[misc]
                    self._on_request(event, head_size)
                    if body is None:
                        continue  # the body is still coming: h11's events
                    if body and not self.closed:
                        # A bytearray, as the data of h11's Data events is (typed bytes).
                        self._on_data(cast(bytes, body))
                    if not self.closed:
                        self._on_end()
                    continue
                before = len(buffer)
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as exc:
                    status = exc.error_status_hint
                    if status == 431:
                        message = self._head_too_large()
                    else:
                        message = f"{HTTPStatus(status).phrase}: {exc}"
                    self._fail(status, message)
                    return
                kind = type(event)
                if kind is h11.Data:
                    self._on_data(event.data)  # type: ignore[union-attr]
                elif event is h11.NEED_DATA:
                    self._need_data()
                    return
                elif kind is h11.Request:
                    self._on_request(event, before - len(buffer))  # type: ignore[arg-type]
                elif kind is h11.EndOfMessage:
                    self._on_end()
                else:  # ConnectionClosed, or PAUSED after a response we must close on
                    self.abort()
                    return
        finally:
            self._advancing = False

    def _need_data(self) -> None:
        if self._paused_reading and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()

    def _head_too_large(self) -> str:
        return f"Request header fields too large (max {self.config.max_header_size} bytes)"

    def _on_request(self, event: h11.Request, head_size: int) -> None:
        self._t0 = time.perf_counter()
        headers = header_fields(event)
        request = self._request = Request(event.method, event.target, headers, b"", self._peer)
        self._chunks = []
        self._size = 0
        self._refusal = None
        self._verification = None
        self.status = 200
        server = self.server
        route = self._route = server.routes.match(request.path)
        cors = server.cors
        if cors is not None:
            self._cors = cors.response_headers(headers.get(b"origin"))
        # The head limit: max_header_size bounds the request head as sent, from
        # the first byte of the request line through the blank line that ends
        # the head.  A head that arrives whole is measured here: head_size is
        # what h11 took out of its buffer for it.  One that arrives in pieces is
        # also bounded by h11 while it is incomplete (max_incomplete_event_size
        # = max_header_size - 1: an incomplete head of max_header_size bytes
        # still lacks its last byte).  So a head of exactly max_header_size
        # bytes passes and one more byte gets 431, however the bytes arrive.
        if head_size > self.config.max_header_size:
            self._fail(431, self._head_too_large())
            return
        if b"transfer-encoding" in headers and b"content-length" in headers:
            # Two framings: the shape of request smuggling.  RFC 9112 section
            # 6.1: the server MUST close the connection after responding; we
            # refuse it, as nginx does, and read none of its body as a request.
            self._fail(400, "Bad request: both Content-Length and Transfer-Encoding")
            return
        limit = self.config.max_body_size
        length = headers.get(b"content-length")
        if length is not None and int(length) > limit:
            self._fail(413, f"Request body too large (max {limit} bytes)")
            return
        admitted = server.admission.admit(request, route, self._cors)
        if admitted is not None:
            if isinstance(admitted, Verification):
                self._verification = admitted
            else:
                self._refusal = admitted
                if admitted.status == 204:  # a CORS preflight: its own CORS headers
                    self._cors = admitted.headers
        if self.conn.they_are_waiting_for_100_continue:
            refusal = self._refusal
            if refusal is not None and refusal.status != 204:
                # The client holds the body back for our word: refuse now, and close.
                self._fail(refusal.status, refusal.message, refusal.headers)
                return
            self._write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])))

    def _on_data(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self.config.max_body_size:
            self._fail(413, f"Request body too large (max {self.config.max_body_size} bytes)")
        elif self._refusal is None:
            self._chunks.append(data)

    def _on_end(self) -> None:
        self._deadline_kind = _NO_DEADLINE  # the request is in; the call may take its time
        refusal = self._refusal
        if refusal is not None:
            self.status = status = refusal.status
            if status == 204:
                self._answer_preflight()
            else:
                self._send_error(status, refusal.message, close=False, extra=refusal.headers)
            self._finish()
            return
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        request = self._request
        route = self._route
        assert request is not None and route is not None  # admitted: it has a route
        request.body = body
        answering: Answering
        if self._verification is not None:
            answering = self._answer_verified(request, route)
        elif route.answer is not None:  # answered at once: no task
            self._respond(route.answer(request))
            self._finish()
            return
        else:
            assert route.handle is not None
            answering = route.handle(request)
        # Eager only for the first request of a loop turn (see the class docstring).
        server = self.server
        if server.started_this_turn or not EAGER_TASKS:
            task = self.loop.create_task(self._handle(answering))
        else:
            server.started_this_turn = True
            self.loop.call_soon(_new_turn, server)
            task = start_task(self._handle(answering))
        if not task.done():
            self.task = task
            self._body = body

    async def _answer_verified(
        self, request: Request, route: Route
    ) -> Response | StreamingResponse | None:
        """Verify the caller first (a key fetch), then answer as usual."""
        verification, self._verification = self._verification, None
        assert verification is not None
        refusal = await self.server.admission.verify(request, verification)
        if refusal is not None:
            self.status = refusal.status
            self._send_error(refusal.status, refusal.message, close=False, extra=refusal.headers)
            return None
        if route.answer is not None:
            return route.answer(request)
        assert route.handle is not None
        return await route.handle(request)

    async def _handle(self, answering: Answering) -> None:
        """Answer, then end the cycle, in the request's task (no done callback)."""
        try:
            try:
                answer = await answering
                if isinstance(answer, Response):
                    self._respond(answer)
                elif answer is not None:
                    await self._stream_out(answer)
            finally:
                self.task = None
                self._body = b""
        except asyncio.CancelledError:
            # The client left (FIN or reset) or the server is closing: this
            # connection has nobody to answer; close it so it cannot linger.
            if self._request is not None:
                self._log_cut_off()
            self.abort()
            raise
        except Exception as exc:
            log.error("HTTP request failed", exc_info=exc)
            self.status = 500
            self._fail(500, "Internal server error")
            return
        self._finish()
        if not self._advancing:
            self._advance()  # pipelined requests waiting in h11's buffer

    def _log(self, outcome: str | None = None) -> None:
        request = self._request
        if request is not None:
            server = self.server
            draining = self.status == 503 and server.draining
            reason = "shutting_down" if draining else None
            server.record(request, self._route, self.status, self._t0, outcome, reason)

    def _log_cut_off(self) -> None:
        """The access line (and request count) of a request whose answer was cut
        off: its status as sent (499 if nothing was), and why, when the answer
        was not complete: ``client-gone``, or ``cancelled`` (the server's doing)."""
        state = self.conn.our_state
        outcome = None
        if state is not h11.DONE and state is not h11.MUST_CLOSE:
            outcome = CLIENT_GONE if self._gone else "cancelled"
            if state is h11.SEND_RESPONSE:
                self.status = _CLIENT_CLOSED
        self._log(outcome)
        self._request = None

    def _finish(self) -> None:
        """The response is out: log it, then start the next cycle or close."""
        self._log()
        self._request = None
        conn = self.conn
        if (
            conn.our_state is h11.DONE
            and conn.their_state is h11.DONE
            and not self.server.draining
            and not self.closed
        ):
            conn.start_next_cycle()
            if conn.trailing_data[0]:
                self._expect(_RECEIVING, self.config.request_timeout)
            else:
                self._expect(_IDLE, self.config.keepalive_timeout)
        else:
            self.abort()

    def _fail(self, status: int, message: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """Answer an error (when still possible), then close without losing it."""
        if self._request is not None or status != 408 or self.conn.our_state is h11.IDLE:
            self._send_error(status, message, close=True, extra=extra)
        if self._request is not None:
            self.status = status
            self._log()
            self._request = None
        self._linger()

    def cut_short(self) -> None:
        """The grace period is over: answer a call still running ``503`` now, and
        stop it.  An event stream, whose head is out, is told to end (an MCP-lite
        stream with an ``error`` event; see ToolEvents)."""
        task = self.task
        if self._events is not None:
            self._events.interrupt(ShuttingDown())
            return
        if task is None or task.done() or self._streaming or self.closed:
            return
        if self.conn.our_state is h11.SEND_RESPONSE:
            self.status = 503
            body = self.server.rpc.refusal(self._body, ShuttingDown())
            self._send(503, JSON, body)  # draining: with Connection: close
            self._log()
            self._request = None
        task.cancel()
        # Closed here, not only by the task: one cancelled before its first step
        # never runs _handle (whose CancelledError branch closes too).
        self.abort()

    # -- writing ------------------------------------------------------------

    def _respond(self, response: Response) -> None:
        self.status = response.status
        self._send(response.status, response.headers, response.body)

    async def _stream_out(self, response: StreamingResponse) -> None:
        """An event stream: its head, each frame as it comes (not taking the next
        until the client has read enough, see _write_event), then its end."""
        events = self._events = response.events
        self._streaming = True
        try:
            if self.conn.trailing_data[1]:
                # The client half-closed before the stream began (an MCP call that
                # had said nothing yet): gone, as eof_received decides under a
                # stream; else a held tool would stream to it until it ends.
                self._gone = True
                raise asyncio.CancelledError
            if self.server.streams_closing.is_set():  # started after the grace period ended
                events.interrupt(ShuttingDown())
            self.status = status = response.status
            headers = [*response.headers, *self._cors] if self._cors else response.headers
            head = h11.Response(status_code=status, headers=headers, reason=REASONS[status])
            self._write(self.conn.send(head))
            async for frame in events:
                await self._write_event(frame)
            self._write(self.conn.send(h11.EndOfMessage()))
        finally:
            self._streaming = False
            self._events = None
            await events.aclose(disconnected=self._gone)

    async def _write_event(self, frame: bytes) -> None:
        self._write(self.conn.send(h11.Data(data=frame)))
        if self._paused_writing and not self.closed:
            # Backpressure: do not take the next part until the client reads.
            self._drain_waiter = self.loop.create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None

    def _write(self, data: bytes | None) -> None:
        if data and self.transport is not None and not self.closed:
            self.transport.write(data)

    def _send(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        if self._cors:
            headers = [*headers, *self._cors]
        conn = self.conn
        request = self._request
        if not self.server.draining and request is not None and request.method == b"POST":
            # The common answer (a keep-alive HTTP/1.1 POST answered with a known
            # length): with the speed paths on, the bytes h11 would write, without
            # its event objects (see mcplite.bindings.http.accel.responses).
            head = fast_head(conn, status, headers, len(body))
            if head is not None:
                self._write_message(head, body)
                return
        headers = [*headers, (b"content-length", b"%d" % len(body))]
        if self.server.draining:
            headers.append((b"connection", b"close"))
        head = conn.send(h11.Response(status_code=status, headers=headers, reason=REASONS[status]))
        data = b""
        # RFC 9110 section 9.3.2: a HEAD response has the headers a GET would get
        # (its Content-Length too) and no body.
        if body and (request is None or request.method != b"HEAD"):
            # The body itself, not a copy (Content-Length framing adds nothing around it).
            data = b"".join(conn.send_with_data_passthrough(h11.Data(data=body)) or ())
        self._write_message(head or b"", data, conn.send(h11.EndOfMessage()) or b"")

    def _write_message(self, head: bytes, body: bytes, end: bytes = b"") -> None:
        """A response's head, body and end: one write when the body is short, else
        each apart, so that a long body is not copied to put its head in front."""
        if len(body) < _APART:
            self._write(head + body + end)
        else:
            self._write(head)
            self._write(body)
            self._write(end)

    def _send_error(
        self,
        status: int,
        message: str,
        *,
        close: bool,
        extra: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        """An HTTP-level error with its JSON-RPC error body (see statuses.error_body),
        and ``extra`` headers (a refusal's own)."""
        conn = self.conn
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE) or self.closed:
            return
        if self._request is None:
            self._cors = ()  # an error before a request's head: no origin to answer
        headers = [*JSON, *extra]
        if status == 503:
            headers.append(retry_after(self.config.retry_after))
        if close:
            # We answer before reading the whole request: the connection cannot be
            # reused.  (Otherwise the request is read to its end; an Upgrade or
            # CONNECT request is declined by this answer, and the connection goes on.)
            headers.append((b"connection", b"close"))
        try:
            self._send(status, headers, error_body(status, message))
        except h11.LocalProtocolError:
            self.abort()

    def _answer_preflight(self) -> None:
        """``204`` with the CORS headers admission chose (no body, so no
        Content-Length: RFC 9110 section 8.6)."""
        headers = list(self._cors)
        if self.server.draining:
            headers.append((b"connection", b"close"))
        conn = self.conn
        out = conn.send(h11.Response(status_code=204, headers=headers, reason=b"No Content"))
        out += conn.send(h11.EndOfMessage())
        self._write(out)


def _new_turn(server: HttpServer) -> None:
    server.started_this_turn = False
