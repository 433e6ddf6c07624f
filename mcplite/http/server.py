"""The HTTP/1.1 binding: our own asyncio server around h11.

Endpoints under the base path (default ``/mcp-lite/v1``), POST only:

- ``/listtools`` and its alias ``/tools``: ``{"tools": [...]}`` (spec 4.2.1, A.1);
- ``/calltools`` and its alias ``/rpc``: JSON-RPC 2.0 (spec 4.2.2, A.2), or an
  SSE stream when the request says ``Accept: text/event-stream`` (spec 4.3, A.4).

HTTP-level errors (404, 405, 408, 413, 415, 431, 503) carry a JSON-RPC error
object with ``id: null`` so that a JSON-RPC client can read every answer the
same way.  The I/O boundary is :class:`HttpConnection`: bytes in, h11 events,
one request at a time per connection (pipelined requests wait in h11's buffer
and are answered in order).
"""

from __future__ import annotations

import asyncio
import logging
import time
from http import HTTPStatus
from typing import Any

import h11

from ..config import Config
from ..dispatch import Dispatcher, ToolStream, start_task
from ..envelope import Partial, Result
from ..errors import (
    InternalError,
    InvalidRequest,
    MCPLiteError,
    Overloaded,
    ParseError,
    ShuttingDown,
)
from ..jsonrpc import JsonRpc, check_request, decode, encode, tool_call_params
from . import sse

__all__ = ["HttpServer"]

log = logging.getLogger("mcplite")
access_log = logging.getLogger("mcplite.access")

_LIST, _CALL = 1, 2
_NO_DEADLINE, _IDLE, _RECEIVING = 0, 1, 2
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_JSON = [(b"content-type", b"application/json")]


def _error_body(status: int, message: str) -> bytes:
    if status == 503:
        code = Overloaded.jsonrpc_code
    elif status >= 500:
        code = InternalError.jsonrpc_code
    else:
        code = InvalidRequest.jsonrpc_code
    error = {"code": code, "message": message, "data": {"http_status": status}}
    return encode({"jsonrpc": "2.0", "id": None, "error": error})


class HttpServer:
    """Serves a :class:`Dispatcher` over HTTP/1.1; start with :meth:`start`."""

    def __init__(self, dispatcher: Dispatcher, config: Config | None = None) -> None:
        self.dispatcher = dispatcher
        self.config = config = config or dispatcher.config
        self.rpc = JsonRpc(dispatcher)
        base = config.base_path.encode()
        self.routes = {
            base + b"/listtools": _LIST,
            base + b"/tools": _LIST,
            base + b"/calltools": _CALL,
            base + b"/rpc": _CALL,
        }
        self.tools_body = encode({"tools": dispatcher.tool_definitions()})
        self.connections: set[HttpConnection] = set()
        self.draining = False
        self.streams_closing = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.TimerHandle | None = None
        # One server-wide timer checks every connection's deadline, instead of a
        # timer set and cancelled per request: a deadline is then a float store.
        self._tick_every = min(
            1.0, max(0.02, min(config.request_timeout, config.keepalive_timeout) / 4)
        )

    def watch(self) -> None:
        """Make sure the deadline ticker runs while there are connections."""
        if self._ticker is None:
            loop = asyncio.get_running_loop()
            self._ticker = loop.call_later(self._tick_every, self._tick)

    def _tick(self) -> None:
        self._ticker = None
        if not self.connections:
            return
        now = asyncio.get_running_loop().time()
        for conn in list(self.connections):
            conn.check_deadline(now)
        self.watch()

    async def start(self, host: str, port: int) -> asyncio.Server:
        """Listen on ``host:port`` (port 0: an ephemeral one; see :attr:`port`)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpConnection(self), host, port, backlog=1024
        )
        return self._server

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def shutdown(self, grace: float | None = None) -> None:
        """Stop accepting; let in-flight requests finish within ``grace`` seconds.

        Idle keep-alive connections close at once.  Streams still open when the
        grace period ends get a final ``event: error`` saying the server is
        closing; anything still running after that is cancelled.
        """
        grace = self.config.grace if grace is None else grace
        self.draining = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close_if_idle()
        busy = [c.task for c in self.connections if c.task is not None and not c.task.done()]
        if busy:
            _, pending = await asyncio.wait(busy, timeout=grace)
            if pending:
                self.streams_closing.set()
                _, pending = await asyncio.wait(pending, timeout=1.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for conn in list(self.connections):
            conn.abort()
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self._server is not None:
            await self._server.wait_closed()


class HttpConnection(asyncio.Protocol):
    """One client connection, driven by callbacks.

    ``data_received`` feeds h11 and takes events until a request is complete,
    then hands it to a handler task; while that task runs, further bytes wait
    in h11's buffer (reading pauses), so pipelined requests are answered in
    order.  On Python 3.12+ the task starts eagerly: a tool that answers without
    suspending is answered before ``data_received`` returns, as cheaply as a
    bare h11 loop.
    """

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.config = server.config
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.conn = h11.Connection(
            h11.SERVER, max_incomplete_event_size=self.config.max_header_size
        )
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        # The request being received.
        self._request: h11.Request | None = None
        self._headers: dict[bytes, bytes] = {}
        self._route = 0
        self._chunks: list[bytes] = []
        self._size = 0
        self._rejection: tuple[int, str] | None = None  # answer this once the body is read
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

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        server = self.server
        if len(server.connections) >= self.config.max_connections or server.draining:
            message = "Too many connections" if not server.draining else "Server is shutting down"
            body = _error_body(503, message)
            transport.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"retry-after: %d\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
                % (max(1, round(self.config.retry_after)), len(body), body)
            )
            transport.close()
            self.closed = True
            return
        server.connections.add(self)
        transport.set_write_buffer_limits(high=64 * 1024)
        self._expect(_IDLE, self.config.keepalive_timeout)
        server.watch()

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)
        if self._deadline_kind == _IDLE:
            self._expect(_RECEIVING, self.config.request_timeout)
        if self.task is None:
            self._advance()
        elif not self._paused_reading and self.transport is not None:
            # Pipelined bytes while we answer: h11 holds what it has; read no more.
            self._paused_reading = True
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        self.conn.receive_data(b"")
        if self.task is None:
            self._advance()
        elif self._streaming:
            # A stream's reader has gone: stop the tool now, not at the next heartbeat.
            self.task.cancel()
        return True  # keep our half open: a half-closing client still gets its answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
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

    # -- deadlines ----------------------------------------------------------

    def _expect(self, kind: int, seconds: float) -> None:
        self._deadline_kind = kind
        self._deadline = self.loop.time() + seconds

    def check_deadline(self, now: float) -> None:
        kind = self._deadline_kind
        if kind == _NO_DEADLINE or now < self._deadline or self.task is not None:
            return
        self._deadline_kind = _NO_DEADLINE
        if kind == _IDLE:
            self.abort()  # an idle keep-alive connection: close quietly
        else:
            self.status = 408
            self._fail(408, "Request timeout: the request was not received in time")

    # -- receiving ----------------------------------------------------------

    def close_if_idle(self) -> None:
        if self.task is None and self._request is None:
            self.abort()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def _advance(self) -> None:
        """Take h11 events until a request is handed to a task or h11 needs data."""
        if self._advancing:
            return  # a request finished synchronously inside the loop below
        self._advancing = True
        conn = self.conn
        try:
            while self.task is None and not self.closed:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as exc:
                    self._fail(exc.error_status_hint, f"Bad request: {exc}")
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
                    self._on_request(event)  # type: ignore[arg-type]
                elif kind is h11.EndOfMessage:
                    self._on_end()
                else:  # ConnectionClosed, or PAUSED after a response we must close on
                    self.abort()
                    return
        finally:
            self._advancing = False

    def _on_request(self, request: h11.Request) -> None:
        self._t0 = time.perf_counter()
        self._request = request
        self._headers = headers = _headers(request.headers)
        self._chunks = []
        self._size = 0
        self._rejection = None
        self.status, self.tool = 200, None
        path = request.target.split(b"?", 1)[0]
        route = self._route = self.server.routes.get(path, 0)
        # h11 bounds a head that arrives in pieces; one that arrives whole is
        # measured here, so the limit does not depend on how the bytes came.
        head_size = len(request.target) + sum(len(n) + len(v) + 4 for n, v in request.headers)
        if head_size > self.config.max_header_size:
            self._fail(
                431, f"Request header fields too large (max {self.config.max_header_size} bytes)"
            )
            return
        limit = self.config.max_body_size
        length = headers.get(b"content-length")
        if length is not None and int(length) > limit:
            self._fail(413, f"Request body too large (max {limit} bytes)")
            return
        if route == 0:
            self._rejection = (404, f"Not found: {path.decode('latin-1')}")
        elif request.method != b"POST":
            self._rejection = (405, "Method not allowed: use POST")
        elif length not in (None, b"0") or b"transfer-encoding" in headers:
            ctype = headers.get(b"content-type", b"").lower()
            if ctype.split(b";", 1)[0].strip() != b"application/json":
                self._rejection = (
                    415,
                    "Unsupported media type: send Content-Type: application/json",
                )
            elif b"charset" in ctype and b"utf-8" not in ctype:
                self._rejection = (415, "Unsupported charset: the body must be UTF-8")
        if self.conn.they_are_waiting_for_100_continue:
            if self._rejection is not None:
                # The client holds the body back for our word: refuse now, and close.
                status, message = self._rejection
                self._fail(status, message)
                return
            self._write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])))

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
            self._send_error(status, message, close=False)
            self._finish()
            return
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        if self._route == _LIST:
            self._answer_list(body)
            self._finish()
            return
        task = start_task(self._answer_call(body))
        if task.done():
            self._task_done(task)
        else:
            self.task = task
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.task = None
        if task.cancelled():
            # The client left (FIN or reset) or the server is closing: this
            # connection has nobody to answer; close it so it cannot linger.
            self.abort()
            return
        exc = task.exception()
        if exc is not None:
            log.error("HTTP request failed", exc_info=exc)
            self.status = 500
            self._fail(500, "Internal server error")
            return
        self._finish()
        if not self._advancing:
            self._advance()  # pipelined requests waiting in h11's buffer

    def _finish(self) -> None:
        """The response is out: log it, then start the next cycle or close."""
        request = self._request
        if request is not None and self.config.access_log:
            access_log.info(
                "%s %s %s %d %.2fms",
                request.method.decode("latin-1"),
                request.target.split(b"?", 1)[0].decode("latin-1"),
                self.tool or "-",
                self.status,
                (time.perf_counter() - self._t0) * 1000,
            )
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
        """Answer an error (when still possible) and close the connection."""
        if self._request is not None or status != 408 or self.conn.our_state is h11.IDLE:
            self._send_error(status, message, close=True)
        if self.config.access_log and self._request is not None:
            self.status = status
            self._finish()
        self.abort()

    # -- answering ----------------------------------------------------------

    def _answer_list(self, body: bytes) -> None:
        if body.strip():
            try:
                decode(body)
            except ParseError as exc:
                self.status = 400
                self._send(400, _JSON, JsonRpc.error_bytes(None, exc))
                return
        self._send(200, _JSON, self.server.tools_body)

    async def _answer_call(self, body: bytes) -> None:
        if b"text/event-stream" in self._headers.get(b"accept", b""):
            await self._answer_stream(body)
            return
        reply = await self.server.rpc.handle(body)
        self.tool = reply.tool
        if reply.body is None:
            self.status = 202
            self._send(202, [], b"")
        elif reply.retry_after is not None:
            self.status = 503
            retry = b"%d" % max(1, round(reply.retry_after))
            self._send(503, [*_JSON, (b"retry-after", retry)], reply.body)
        else:
            self._send(200, _JSON, reply.body)

    async def _answer_stream(self, body: bytes) -> None:
        """A ``tools/call`` answered as SSE.  Errors before the tool starts are
        a plain JSON-RPC error; anything that is not a single call is answered
        as plain JSON-RPC."""
        try:
            message = decode(body)
        except ParseError as exc:
            self._send(200, _JSON, JsonRpc.error_bytes(None, exc))
            return
        if not (
            isinstance(message, dict) and message.get("method") == "tools/call" and "id" in message
        ):
            # Batches, other methods and notifications: plain JSON-RPC (202 for none).
            reply = await self.server.rpc.handle(body)
            self.tool = reply.tool
            if reply.body is None:
                self.status = 202
                self._send(202, [], b"")
            else:
                self._send(200, _JSON, reply.body)
            return
        request_id: Any = message.get("id")
        try:
            request_id, _, params = check_request(message)
            name, arguments = tool_call_params(params)
            self.tool = name
            stream = self.server.dispatcher.stream(name, arguments)
        except MCPLiteError as exc:
            rid = request_id if isinstance(request_id, str | int | float) else None
            headers = _JSON
            self.status = 200
            if isinstance(exc, Overloaded):
                self.status = 503
                headers = [*_JSON, (b"retry-after", b"%d" % max(1, round(exc.retry_after)))]
            self._send(self.status, headers, JsonRpc.error_bytes(rid, exc))
            return
        self._streaming = True
        try:
            await self._pump(stream)
        finally:
            self._streaming = False
            await stream.aclose()

    async def _pump(self, stream: ToolStream) -> None:
        conn = self.conn
        self._write(conn.send(h11.Response(status_code=200, headers=sse.HEADERS, reason=b"OK")))
        heartbeat = self.config.heartbeat
        closing_wait = self.loop.create_task(self.server.streams_closing.wait())
        next_item: asyncio.Task[Partial | Result | None] | None = None
        try:
            while True:
                next_item = self.loop.create_task(stream.next())
                while True:
                    done, _ = await asyncio.wait(
                        (next_item, closing_wait),
                        timeout=heartbeat,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if done:
                        break
                    await self._write_event(sse.frame("heartbeat", "{}"))
                if next_item not in done:
                    await self._write_event(sse.frame_json("error", ShuttingDown().to_jsonrpc()))
                    break
                try:
                    item = next_item.result()
                except StopAsyncIteration:
                    break
                except MCPLiteError as exc:
                    await self._write_event(sse.frame_json("error", exc.to_jsonrpc()))
                    break
                assert item is not None
                is_part = isinstance(item, Partial)
                try:
                    if isinstance(item, Partial):
                        frame = sse.frame_json("message", {"partial": item.value})
                    else:
                        frame = sse.frame_json("done", item.to_json())
                except (TypeError, ValueError) as exc:
                    error = self.server.dispatcher.internal_error(stream.tool.name, exc)
                    error.message = (
                        f"The tool's {'part' if is_part else 'result'} is not valid JSON: {exc}"
                    )
                    frame = sse.frame_json("error", error.to_jsonrpc())
                    is_part = False
                await self._write_event(frame)
                if not is_part:
                    break
        finally:
            closing_wait.cancel()
            if next_item is not None and not next_item.done():
                next_item.cancel()  # the client left or we are closing: leave no task behind
        self._write(conn.send(h11.EndOfMessage()))

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

    def _send(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        conn = self.conn
        headers = [*headers, (b"content-length", b"%d" % len(body))]
        if self.server.draining:
            headers.append((b"connection", b"close"))
        out = conn.send(h11.Response(status_code=status, headers=headers, reason=_REASONS[status]))
        if body:
            out += conn.send(h11.Data(data=body))
        out += conn.send(h11.EndOfMessage())
        self._write(out)

    def _send_error(self, status: int, message: str, *, close: bool) -> None:
        conn = self.conn
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE) or self.closed:
            return
        headers = [*_JSON]
        if status == 405:
            headers.append((b"allow", b"POST"))
        if status == 503:
            headers.append((b"retry-after", b"%d" % max(1, round(self.config.retry_after))))
        if close or conn.their_state is not h11.DONE:
            # We answer before reading the whole request: the connection cannot be reused.
            headers.append((b"connection", b"close"))
        try:
            self._send(status, headers, _error_body(status, message))
        except h11.LocalProtocolError:
            self.abort()


def _headers(raw: Any) -> dict[bytes, bytes]:
    # h11 lowercases names; a repeated header keeps its last value.
    return {name: value for name, value in raw}
