"""One HTTP/1.1 connection: h11 events in, responses out.

:class:`HttpConnection` is the I/O boundary: bytes in, h11 events, one request
at a time per connection (pipelined requests wait in h11's buffer and are
answered in order).  A connection whose client does not read what we sent
takes no further request until it does (backpressure), so its memory stays
bounded however many requests it pipelines.  An error answered before the
request was read to its end closes the connection *lingering*
(:meth:`HttpConnection._linger`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import h11

from ...core.context import Caller, RequestContext
from ...core.dispatch import ToolStream
from ...core.errors import (
    Forbidden,
    MCPLiteError,
    Overloaded,
    ParseError,
    RateLimited,
    ShuttingDown,
    Unauthenticated,
)
from ...core.observe import CLIENT_GONE
from ...core.outcomes import Partial, ProgressUpdate
from ...core.runner import EAGER_TASKS, abandon, start_task
from ...protocols.jsonrpc import JsonRpc, Reply, decode, encode
from ...protocols.mcp.server import McpReply
from . import sse
from .cors import CorsPolicy
from .framing import Connection, fast_response, header_fields, unread
from .statuses import JSON, REASONS, error_body, retry_after

if TYPE_CHECKING:
    from .server import HttpServer

__all__ = ["HttpConnection"]

log = logging.getLogger("mcplite")

_LIST, _CALL, _MCP, _PROMPTS, _WELL_KNOWN = 1, 2, 3, 4, 5
_NO_DEADLINE, _IDLE, _RECEIVING = 0, 1, 2
#: The status logged for a request whose client left before any answer (nginx's
#: "client closed request"; see HttpConnection._log_cut_off).
_CLIENT_CLOSED = 499
#: The methods a CORS preflight is told a path takes (MCP's GET and DELETE are
#: answered 405, which a browser shows the page only if the preflight let it ask).
_CORS_METHODS = {_MCP: b"GET, POST, DELETE", _WELL_KNOWN: b"GET, HEAD"}
_HEARTBEAT = sse.frame("heartbeat", "{}")
# Unsent output above which a connection takes no further request (and reads
# no more) until the client has read some: the bound of its memory.
_HIGH_WATER = 64 * 1024
# A lingering close reads and drops at most this much, for at most this long
# (or the request timeout, if shorter).
_LINGER_BYTES = 4 * 1024 * 1024
_LINGER_SECONDS = 2.0
# At most this many connections refused for being too many linger at once
# (beyond: closed at once), so that a flood of them holds few sockets.
_LINGERING_REFUSALS = 64


class HttpConnection(asyncio.Protocol):
    """One client connection, driven by callbacks.

    ``data_received`` feeds h11 and takes events until a request is complete,
    then hands it to a handler task; while that task runs, further bytes wait
    in h11's buffer (reading pauses), so pipelined requests are answered in
    order.

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
        # The request being received.
        self._request: h11.Request | None = None
        self._headers: dict[bytes, bytes] = {}
        self._route = 0
        self._chunks: list[bytes] = []
        self._size = 0
        self._rejection: tuple[int, str] | None = None  # answer this once the body is read
        # Authentication (auth on only): the caller, or how to verify it later.
        self._caller: Caller | None = None
        self._verify_later: Callable[[], Awaitable[Caller]] | None = None
        self._retry_after = 0.0  # of a 429
        self._scopes: tuple[str, ...] = ()  # a 403's needed scopes
        self._auth_refused = False  # the rejection is auth's (401, 403): say WWW-Authenticate
        self._body = b""  # the body of the call in flight (to answer it at shutdown)
        self._t0 = 0.0
        self.status = 0
        self.tool: str | None = None
        # Deadlines, checked by the server's ticker.
        self._deadline = 0.0
        self._deadline_kind = _NO_DEADLINE
        self._paused_reading = False
        self._paused_writing = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._advancing = False
        self._streaming = False
        self._stream: ToolStream | None = None  # the MCP-lite stream being answered
        self._gone = False  # the client went away (FIN under a stream, or a reset)
        # CORS headers of every answer to the request (CORS on, an allowed origin).
        self._cors: tuple[tuple[bytes, bytes], ...] = ()
        self._linger_left = 0
        self._linger_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
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

    def _context(self) -> RequestContext:
        """The request context the core gets for the request being answered."""
        return RequestContext("http", self._peer, _HeaderView(self._headers), self._caller)

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
                    if self._paused_reading and self.transport is not None:
                        self._paused_reading = False
                        self.transport.resume_reading()
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

    def _head_too_large(self) -> str:
        return f"Request header fields too large (max {self.config.max_header_size} bytes)"

    def _on_request(self, request: h11.Request, head_size: int) -> None:
        self._t0 = time.perf_counter()
        self._request = request
        self._headers = headers = header_fields(request)
        self._chunks = []
        self._size = 0
        self._rejection = None
        self.status, self.tool = 200, None
        path = request.target.split(b"?", 1)[0]
        route = self._route = self.server.routes.get(path, 0)
        cors = self.server.cors
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
        if route == 0:
            self._rejection = (404, f"Not found: {path.decode('latin-1')}")
        elif route == _MCP and not _host_checked(self.server, headers):
            # DNS rebinding: a page elsewhere must not reach a server on loopback.
            self._rejection = (403, "Forbidden: Host or Origin not allowed")
        elif self._cors and request.method == b"OPTIONS" and self._preflight(route, headers):
            pass  # a CORS preflight from an allowed origin: 204 once it is read (_on_end)
        elif route == _WELL_KNOWN:
            if request.method not in (b"GET", b"HEAD"):
                self._rejection = (405, "Method not allowed: use GET")
        elif request.method != b"POST":
            self._rejection = (405, "Method not allowed: use POST")
        elif length not in (None, b"0") or b"transfer-encoding" in headers:
            ctype = headers.get(b"content-type", b"").lower()
            if ctype.split(b";", 1)[0].strip() != b"application/json":
                self._rejection = (
                    415,
                    "Unsupported media type: send Content-Type: application/json",
                )
            elif ctype.find(b"charset") >= 0 and ctype.find(b"utf-8") < 0:
                self._rejection = (415, "Unsupported charset: the body must be UTF-8")
        self._caller = None
        self._auth_refused = False
        auth = self.server.auth
        if auth is not None and self._rejection is None and route != _WELL_KNOWN:
            self._authenticate(route, headers)
        if self.conn.they_are_waiting_for_100_continue:
            if self._rejection is not None and self._rejection[0] != 204:
                # The client holds the body back for our word: refuse now, and close.
                status, message = self._rejection
                self._fail(status, message)
                return
            self._write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])))

    def _preflight(self, route: int, headers: dict[bytes, bytes]) -> bool:
        """A CORS preflight from an allowed origin: answered ``204`` with its
        headers (no authentication: browsers send no credentials with one)."""
        cors = self.server.cors
        assert cors is not None
        answer = cors.preflight(headers, _CORS_METHODS.get(route, b"POST"))
        if answer is None:
            return False  # not a preflight: an OPTIONS request, answered 405
        self._cors = answer
        self._rejection = (204, "")
        return True

    def _authenticate(self, route: int, headers: dict[bytes, bytes]) -> None:
        """Who is calling (auth on): a refusal is answered once the body is read
        (and dropped unread); see :mod:`mcplite.auth`."""
        auth = self.server.auth
        assert auth is not None
        value = headers.get(b"authorization")
        try:
            found = auth.authenticate(None if value is None else value.decode("latin-1"))
            if found is None:
                # Anonymous: discovery only, and only when it is open.  The JSON-RPC
                # routes carry both, so their methods are checked one by one.
                if not auth.open_discovery:
                    raise Unauthenticated()
            elif isinstance(found, Caller):
                self._caller = found
            else:
                self._verify_later = found  # a verifier must fetch keys: in the task
                return
            auth.limit(self._caller, self._peer)
        except MCPLiteError as exc:
            self._refuse(exc)

    def _refuse(self, exc: MCPLiteError) -> None:
        self._auth_refused = not isinstance(exc, RateLimited)
        if isinstance(exc, RateLimited):
            self._retry_after = exc.retry_after
            self._rejection = (429, exc.message)
        elif isinstance(exc, Forbidden):
            self._scopes = exc.scopes
            self._rejection = (403, exc.message)
        else:
            self._rejection = (401, exc.message)

    async def _answer_verified(self, body: bytes) -> None:
        """Verify the caller first (a key fetch), then answer as usual."""
        verify, self._verify_later = self._verify_later, None
        assert verify is not None and self.server.auth is not None
        try:
            self._caller = await verify()
            self.server.auth.limit(self._caller, self._peer)
        except MCPLiteError as exc:
            self._refuse(exc)
            status, message = self._rejection or (401, exc.message)
            self.status = status
            self._send_error(status, message, close=False)
            return
        if self._route == _LIST or self._route == _PROMPTS:
            self._answer_list(body)
        elif self._route == _MCP:
            await self._answer_mcp(body)
        else:
            await self._answer_call(body)

    def _on_data(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self.config.max_body_size:
            self._fail(413, f"Request body too large (max {self.config.max_body_size} bytes)")
        elif self._rejection is None:
            self._chunks.append(data)

    def _on_end(self) -> None:
        self._deadline_kind = _NO_DEADLINE  # the request is in; the call may take its time
        if self._rejection is not None:
            status, message = self._rejection
            self.status = status
            if status == 204:
                self._answer_preflight()
            else:
                self._send_error(status, message, close=False)
            self._finish()
            return
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        if self._verify_later is not None:
            answering = self._answer_verified(body)
        elif self._route == _LIST or self._route == _PROMPTS or self._route == _WELL_KNOWN:
            self._answer_list(body)
            self._finish()
            return
        else:
            answering = (self._answer_mcp if self._route == _MCP else self._answer_call)(body)
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

    async def _handle(self, answering: Coroutine[Any, Any, None]) -> None:
        """Answer, then end the cycle, in the request's task (no done callback)."""
        try:
            try:
                await answering
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
        binding = "mcp" if self._route == _MCP else "http"
        metrics = self.server.metrics
        if request is not None and metrics.on:
            draining = self.status == 503 and self.server.draining
            metrics.request(binding, self.status, "shutting_down" if draining else None)
        if request is not None and self.config.access_log:
            self.server.access_log.write(
                binding,
                request.method.decode("latin-1"),
                request.target.split(b"?", 1)[0].decode("latin-1"),
                self.tool,
                self.status,
                (time.perf_counter() - self._t0) * 1000,
                self._peer,
                outcome,
            )

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

    def _fail(self, status: int, message: str) -> None:
        """Answer an error (when still possible), then close without losing it."""
        if self._request is not None or status != 408 or self.conn.our_state is h11.IDLE:
            self._send_error(status, message, close=True)
        if self._request is not None:
            self.status = status
            self._log()
            self._request = None
        self._linger()

    def cut_short(self) -> None:
        """The grace period is over: answer a call still running ``503`` now, and
        stop it.  An MCP-lite stream, whose head is out, ends with an ``error``
        event (see :meth:`_answer_stream`)."""
        task = self.task
        if self._stream is not None:
            self._stream.interrupt(ShuttingDown())
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

    # -- answering ----------------------------------------------------------

    def _answer_list(self, body: bytes) -> None:
        server = self.server
        if self._route == _WELL_KNOWN:
            self._send(200, JSON, server.resource_metadata(self._request_path(), self._headers))
            return
        if body.strip():
            try:
                decode(body)
            except ParseError as exc:
                self.status = 400
                self._send(400, JSON, JsonRpc.error_bytes(None, exc))
                return
        if self._route == _PROMPTS:
            self._send(200, JSON, server.prompts_body)
        elif server.auth is None:
            self._send(200, JSON, server.tools_body)  # the same for everyone: encoded once
        else:  # each caller sees the tools it may call
            tools = server.dispatcher.tool_definitions(self._context())
            self._send(200, JSON, encode({"tools": tools}))

    async def _answer_call(self, body: bytes) -> None:
        accept = self._headers.get(b"accept", b"")
        if accept.find(b"text/event-stream") >= 0:  # (find: see _answer_mcp)
            # A client that takes JSON too (every MCP client) gets JSON, unless
            # the tool streams by nature.
            await self._answer_stream(body, json_too=accept.find(b"application/json") >= 0)
            return
        self._reply(await self.server.rpc.handle(body, self._context()))

    async def _answer_mcp(self, body: bytes) -> None:
        """The MCP endpoint: JSON, or SSE once the call says something before its
        result (progress, log messages); see :mod:`mcplite.protocols.mcp.server`."""
        accept = self._headers.get(b"accept", b"*/*")
        # bytes.find, not "in": on bytes, "in" first tries its operand as an int
        # and builds (then drops) a TypeError, nearly twice the cost.
        sse_ok = accept.find(b"text/event-stream") >= 0
        json_ok = (
            accept.find(b"application/json") >= 0
            or accept.find(b"*/*") >= 0
            or accept.find(b"application/*") >= 0
        )
        if not (json_ok or sse_ok):
            self.status = 406
            self._send_error(406, "Not acceptable: accept application/json", close=False)
            return
        try:
            message = decode(body)
        except ParseError as exc:
            self.status = 400
            self._send(400, JSON, JsonRpc.error_bytes(None, exc))
            return
        mcp = self.server.mcp
        # The MCP checks read a few headers by name: decoded when read.
        headers = _HeaderView(self._headers)
        context = RequestContext("mcp", self._peer, headers, self._caller)
        self.tool = _mcp_target(message)
        if json_ok:  # the common call, answered as JSON, its checks in one pass
            reply = await mcp.call_tool(message, context, headers)
            if reply is not None:
                self._mcp_reply(reply)
                return
        modern = mcp.is_modern(message, headers)
        if not sse_ok and _method(message) == "subscriptions/listen":  # always a stream
            self.status = 406
            refusal = "Not acceptable: subscriptions/listen answers text/event-stream"
            self._send_error(406, refusal, close=False)
            return
        if not (sse_ok and (mcp.may_notify(message, headers, modern) or not json_ok)) or (
            self._caller is None
            and self.server.auth is not None
            and not self._admitted(context, message)
        ):
            # (An anonymous request that will be refused gets its 401 as JSON, not
            # as an event on a 200 stream: the status and challenge must show.)
            reply = await mcp.handle(message, context, headers, fresh=True, modern=modern)
            self._mcp_reply(reply)
            return
        await self._answer_mcp_stream(message, context, headers, json_ok, modern)

    async def _answer_mcp_stream(
        self,
        message: Any,
        context: RequestContext,
        headers: _HeaderView,
        json_ok: bool,
        modern: bool,
    ) -> None:
        """An MCP request that may say something before its result: JSON when it
        says nothing first (and the client takes JSON), else an SSE stream."""
        mcp = self.server.mcp
        pending: list[dict[str, Any]] = []
        wake = asyncio.Event()
        open_ = True  # False once the response is over: a task's later news goes nowhere
        loop = self.loop

        def send(message: dict[str, Any]) -> None:
            if open_:
                pending.append(message)
                wake.set()

        def send_any_thread(message: dict[str, Any]) -> None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # a sync tool, from its worker thread
                loop.call_soon_threadsafe(send, message)
            else:
                send(message)

        def notify(method: str, params: dict[str, Any]) -> None:
            send_any_thread({"jsonrpc": "2.0", "method": method, "params": params})

        call = self.loop.create_task(
            mcp.handle(message, context, headers, notify, send=send, fresh=True, modern=modern)
        )
        try:
            await asyncio.wait(
                (call, self.loop.create_task(wake.wait())), return_when="FIRST_COMPLETED"
            )
            if call.done() and not pending and json_ok:
                self._mcp_reply(call.result())  # it said nothing first: plain JSON
                return
            self._streaming = True
            self._start_sse()
            while True:
                while pending:
                    await self._write_event(sse.frame_json("message", pending.pop(0)))
                if call.done():
                    break
                wake.clear()
                waiter = self.loop.create_task(wake.wait())
                try:
                    done, _ = await asyncio.wait(
                        (call, waiter), timeout=self.config.heartbeat, return_when="FIRST_COMPLETED"
                    )
                finally:
                    waiter.cancel()
                if not done:  # a silent tool, or a client still answering: keep the stream alive
                    await self._write_event(b": ping\n\n")
            reply = call.result()
            if reply.body is not None:
                await self._write_event(sse.frame_json("message", reply.body))
            self._write(self.conn.send(h11.EndOfMessage()))
        finally:
            open_ = False
            pending.clear()
            self._streaming = False
            wake.set()  # ends the first waiter if it is still there
            abandon(call)  # the client left: stop the tool (and read how it ends)

    def _admitted(self, context: RequestContext, message: Any) -> bool:
        """Whether auth lets this anonymous request through."""
        auth = self.server.auth
        assert auth is not None
        try:
            auth.admit(context, str(_method(message)))
        except Unauthenticated:
            return False
        return True

    def _mcp_reply(self, reply: McpReply) -> None:
        self.status = reply.status
        if reply.body is None:
            self._send(202, [], b"")
            return
        if reply.status == 401 or reply.status == 403:
            data = reply.body.get("error", {}).get("data") or {}
            challenge = self._challenge(reply.status, tuple(data.get("scopes", ())))
            self._send(reply.status, [*JSON, challenge], encode(reply.body))
            return
        try:
            body = encode(reply.body)
        except (TypeError, ValueError) as exc:  # a result JSON cannot hold (NaN, bytes)
            error = self.server.dispatcher.not_json("(result encoding)", exc)
            body = JsonRpc.error_bytes(reply.body.get("id"), error)
        self._send(reply.status, JSON, body)

    def _reply(self, reply: Reply) -> None:
        """Send a JSON-RPC reply: 202 when there is none, 503 + Retry-After when it
        is an overload error (the one place an error class becomes a status)."""
        self.tool = reply.tool
        if reply.body is None:
            self.status = 202
            self._send(202, [], b"")
        elif isinstance(reply.error, Overloaded):
            self.status = 503
            self._send(503, [*JSON, retry_after(reply.error.retry_after)], reply.body)
        elif isinstance(reply.error, Unauthenticated | Forbidden):
            self.status = status = 401 if isinstance(reply.error, Unauthenticated) else 403
            scopes = reply.error.scopes if isinstance(reply.error, Forbidden) else ()
            self._send(status, [*JSON, self._challenge(status, scopes)], reply.body)
        else:
            self._send(200, JSON, reply.body)

    async def _answer_stream(self, body: bytes, *, json_too: bool = False) -> None:
        """A ``tools/call`` answered as SSE.  Anything that is not a single valid
        call with an id, and every error before the tool starts, is answered as
        plain JSON-RPC, by the same checks and with the same errors."""
        reply = await self.server.rpc.handle_stream(body, self._context(), json_too=json_too)
        if isinstance(reply, Reply):
            self._reply(reply)
            return
        self.tool = reply.tool
        stream = self._stream = reply.stream
        if self.server.streams_closing.is_set():  # started after the grace period ended
            stream.interrupt(ShuttingDown())
        self._streaming = True
        try:
            await self._pump(stream)
        finally:
            self._streaming = False
            self._stream = None
            await stream.aclose(disconnected=self._gone)

    async def _pump(self, stream: ToolStream) -> None:
        """The stream's items as SSE events: ``message`` (a part), ``progress``,
        ``heartbeat`` while the tool is silent, then ``done`` or ``error``."""
        self._start_sse()
        heartbeat = self.config.heartbeat
        while True:
            try:
                item = await stream.next(heartbeat)
            except StopAsyncIteration:
                break
            except MCPLiteError as exc:
                await self._write_event(sse.frame_json("error", exc.to_jsonrpc()))
                break
            if item is None:
                await self._write_event(_HEARTBEAT)
                continue
            if isinstance(item, ProgressUpdate):
                await self._write_event(sse.frame_json("progress", item.to_json()))
                continue
            is_part = isinstance(item, Partial)
            try:
                if isinstance(item, Partial):
                    frame = sse.frame_json("message", {"partial": item.value})
                else:
                    frame = sse.frame_json("done", item.to_json())
            except (TypeError, ValueError) as exc:
                what = "part" if is_part else "result"
                error = self.server.dispatcher.not_json(stream.tool.name, exc, what)
                frame = sse.frame_json("error", error.to_jsonrpc())
                is_part = False
            await self._write_event(frame)
            if not is_part:
                break
        self._write(self.conn.send(h11.EndOfMessage()))

    def _start_sse(self) -> None:
        """The head of an SSE answer (with the CORS headers of the request)."""
        headers = [*sse.HEADERS, *self._cors] if self._cors else sse.HEADERS
        self._write(self.conn.send(h11.Response(status_code=200, headers=headers, reason=b"OK")))

    async def _write_event(self, frame: bytes) -> None:
        self._write(self.conn.send(h11.Data(data=frame)))
        if self._paused_writing and not self.closed:
            # Backpressure: do not take the next part until the client reads.
            self._drain_waiter = self.loop.create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None

    # -- writing ------------------------------------------------------------

    def _write(self, data: bytes | None) -> None:
        if data and self.transport is not None and not self.closed:
            self.transport.write(data)

    def _send(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        head_only: bool = False,
    ) -> None:
        if self._cors:
            headers = [*headers, *self._cors]
        conn = self.conn
        request = self._request
        if not self.server.draining and request is not None and request.method == b"POST":
            # The common answer (a keep-alive HTTP/1.1 POST answered with a known
            # length): with the speed paths on, the bytes h11 would write, without
            # its event objects (see mcplite.bindings.http.accel.responses).
            out = fast_response(conn, status, headers, body)
            if out is not None:
                self._write(out)
                return
        headers = [*headers, (b"content-length", b"%d" % len(body))]
        if self.server.draining:
            headers.append((b"connection", b"close"))
        out = conn.send(h11.Response(status_code=status, headers=headers, reason=REASONS[status]))
        if body and not head_only:
            out += conn.send(h11.Data(data=body))
        out += conn.send(h11.EndOfMessage())
        self._write(out)

    def _send_error(self, status: int, message: str, *, close: bool) -> None:
        conn = self.conn
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE) or self.closed:
            return
        if self._request is None:
            self._cors = ()  # an error before a request's head: no origin to answer
        headers = [*JSON]
        if status == 405:
            headers.append((b"allow", b"GET, HEAD" if self._route == _WELL_KNOWN else b"POST"))
        elif status == 503:
            headers.append(retry_after(self.config.retry_after))
        elif status == 429:
            headers.append(retry_after(self._retry_after))
        elif self._auth_refused:
            headers.append(self._challenge(status, self._scopes))
        if close:
            # We answer before reading the whole request: the connection cannot be
            # reused.  (Otherwise the request is read to its end; an Upgrade or
            # CONNECT request is declined by this answer, and the connection goes on.)
            headers.append((b"connection", b"close"))
        request = self._request
        # RFC 9110 section 9.3.2: a HEAD response has the headers a GET would get
        # (its Content-Length too) and no body.
        head_only = request is not None and request.method == b"HEAD"
        try:
            self._send(status, headers, error_body(status, message), head_only=head_only)
        except h11.LocalProtocolError:
            self.abort()

    def _answer_preflight(self) -> None:
        """``204`` with the CORS headers :meth:`_preflight` chose (no body, so no
        Content-Length: RFC 9110 section 8.6)."""
        headers = list(self._cors)
        if self.server.draining:
            headers.append((b"connection", b"close"))
        conn = self.conn
        out = conn.send(h11.Response(status_code=204, headers=headers, reason=b"No Content"))
        out += conn.send(h11.EndOfMessage())
        self._write(out)

    def _challenge(self, status: int, scopes: tuple[str, ...]) -> tuple[bytes, bytes]:
        """``WWW-Authenticate`` of a 401 or 403: where the resource metadata is
        (OAuth), and for a 403 the scopes the request needed."""
        auth = self.server.auth
        assert auth is not None
        url = self.server.metadata_url(self._request_path(), self._headers)
        error = Forbidden(scopes=scopes) if status == 403 else None
        return (b"www-authenticate", auth.challenge(url, error).encode("latin-1"))

    def _request_path(self) -> str:
        request = self._request
        return request.target.split(b"?", 1)[0].decode("latin-1") if request else "/"


def _new_turn(server: HttpServer) -> None:
    server.started_this_turn = False


def _mcp_target(message: Any) -> str | None:
    """What an MCP request names, for the access log: the tool, or the method."""
    if not isinstance(message, dict):
        return None
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    if isinstance(name, str):
        return name
    method = message.get("method")
    return method if isinstance(method, str) else None


def _method(message: Any) -> Any:
    return message.get("method") if isinstance(message, dict) else None


def _host_name(value: str) -> str:
    """``name`` of ``name:port`` (``[v6]`` kept in brackets), lowercased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.split(":", 1)[0]


def _host_allowed(
    headers: Mapping[bytes, bytes], allowed: frozenset[str] | None, cors: CorsPolicy | None = None
) -> bool:
    """Whether Host, and Origin when sent, name this server (DNS rebinding); an
    Origin CORS allows passes too (the Host check is what stops a rebinding)."""
    if allowed is None:
        return True
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    if host not in allowed and _host_name(host) not in allowed:
        return False
    origin = headers.get(b"origin")
    if origin is None:
        return True
    if cors is not None and cors.allows(origin):
        return True
    parts = urlsplit(origin.decode("latin-1").strip().lower())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return name in allowed or parts.netloc in allowed


#: Host values whose check each HTTP server keeps (see _host_checked).
_HOSTS_KEPT = 64


def _host_checked(server: HttpServer, headers: Mapping[bytes, bytes]) -> bool:
    """:func:`_host_allowed` for ``server``, the answer for a Host sent without
    Origin kept: clients send the same one or two, and checking one decodes and
    splits it (a microsecond a request, 2% of an MCP call)."""
    allowed = server.allowed_hosts
    if allowed is None:
        return True
    if b"origin" in headers:
        return _host_allowed(headers, allowed, server.cors)
    key = (allowed, headers.get(b"host"))
    known = server.host_checks.get(key)
    if known is None:
        known = _host_allowed(headers, allowed)
        if len(server.host_checks) < _HOSTS_KEPT:
            server.host_checks[key] = known
    return known


#: Header names as asked for (``str``) to the keys h11 gives (lowercase bytes).
_HEADER_KEYS: dict[str, bytes] = {}


class _HeaderView(Mapping[str, str]):
    """A request's headers as the core sees them (lowercase ``str`` names and
    values), decoded only when asked for: most calls never look."""

    __slots__ = ("_raw",)

    def __init__(self, raw: dict[bytes, bytes]) -> None:
        self._raw = raw

    def __getitem__(self, name: str) -> str:
        return self._raw[name.lower().encode("latin-1")].decode("latin-1")

    def get(self, name: str, default: Any = None) -> Any:  # Mapping's, without a KeyError
        key = _HEADER_KEYS.get(name)
        if key is None:
            key = name.lower().encode("latin-1")
            if len(_HEADER_KEYS) < 64:  # the names code asks for: a few, asked every call
                _HEADER_KEYS[name] = key
        value = self._raw.get(key)
        return default if value is None else value.decode("latin-1")

    def __iter__(self) -> Iterator[str]:
        return (name.decode("latin-1") for name in self._raw)

    def __len__(self) -> int:
        return len(self._raw)
