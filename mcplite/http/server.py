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
from ..dispatch import Dispatcher, ToolStream
from ..envelope import Partial
from ..errors import InvalidParams, InvalidRequest, MCPLiteError, Overloaded, ParseError
from ..jsonrpc import JsonRpc, check_request, decode, encode, tool_call_params
from . import sse

__all__ = ["HttpServer"]

log = logging.getLogger("mcplite")
access_log = logging.getLogger("mcplite.access")

_LIST, _CALL = 1, 2
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_JSON = [(b"content-type", b"application/json")]


class _Abort(Exception):
    """Stop handling this connection; ``status`` is sent first when not None."""

    def __init__(self, status: int | None, message: str = "", close: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close


def _error_body(status: int, message: str) -> bytes:
    code = Overloaded.jsonrpc_code if status == 503 else InvalidRequest.jsonrpc_code
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
        if self._server is not None:
            await self._server.wait_closed()


class HttpConnection(asyncio.Protocol):
    """One client connection: feeds bytes to h11, answers requests in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.config = server.config
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.conn = h11.Connection(
            h11.SERVER, max_incomplete_event_size=self.config.max_header_size
        )
        self.task: asyncio.Task[None] | None = None
        self._data_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timed_out = False
        self._paused_reading = False
        self._paused_writing = False
        self._busy = False  # handling a request (not waiting for one)
        self._cycle_started = False  # bytes of the next request have arrived
        self.closed = False

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
        self._set_timer(self.config.keepalive_timeout, self._on_idle_timeout)
        self.task = self.loop.create_task(self._serve())

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)
        if not self._cycle_started:
            self._cycle_started = True
            self._set_timer(self.config.request_timeout, self._on_request_timeout)
        if self._busy and not self._paused_reading:
            # Pipelined bytes while we answer: let h11 hold what it has, read no more.
            self._paused_reading = True
            assert self.transport is not None
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self.conn.receive_data(b"")
        self._wake()
        return True  # keep our half open: a half-closing client still gets its answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self._cancel_timer()
        if self.task is not None and not self.task.done():
            self.task.cancel()  # nobody to answer: stop the call (and its tool)
        for waiter in (self._data_waiter, self._drain_waiter):
            if waiter is not None and not waiter.done():
                waiter.cancel()

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- timers -------------------------------------------------------------

    def _set_timer(self, delay: float, callback: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_idle_timeout(self) -> None:
        self._timer = None
        if not self._busy and not self._cycle_started:
            self.abort()

    def _on_request_timeout(self) -> None:
        self._timer = None
        if not self._busy:
            self._timed_out = True
            self._wake()

    def _wake(self) -> None:
        waiter = self._data_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the request loop ---------------------------------------------------

    def close_if_idle(self) -> None:
        if not self._busy and not self._cycle_started:
            self.abort()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    async def _next_event(self) -> Any:
        conn = self.conn
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            if self._timed_out:
                raise _Abort(408, "Request timeout: the request was not received in time")
            if self._paused_reading:
                self._paused_reading = False
                assert self.transport is not None
                self.transport.resume_reading()
            self._data_waiter = self.loop.create_future()
            try:
                await self._data_waiter
            finally:
                self._data_waiter = None

    async def _serve(self) -> None:
        conn = self.conn
        try:
            while True:
                event = await self._next_event()
                if isinstance(event, h11.Request):
                    self._busy = True
                    await self._handle(event)
                elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    break
                if conn.our_state is h11.MUST_CLOSE or self.server.draining or self.closed:
                    break
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
                    self._busy = False
                    self._cycle_started = bool(conn.trailing_data[0])
                    if self._cycle_started:
                        self._set_timer(self.config.request_timeout, self._on_request_timeout)
                    else:
                        self._set_timer(self.config.keepalive_timeout, self._on_idle_timeout)
                else:
                    break
        except h11.RemoteProtocolError as exc:
            self._send_error(exc.error_status_hint, f"Bad request: {exc}", close=True)
        except _Abort as exc:
            if exc.status is not None:
                self._send_error(exc.status, exc.message, close=True)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("HTTP connection failed")
            self._send_error(500, "Internal server error", close=True)
        finally:
            self._cancel_timer()
            self.abort()

    # -- one request --------------------------------------------------------

    async def _handle(self, request: h11.Request) -> None:
        t0 = time.perf_counter()
        path = request.target.split(b"?", 1)[0]
        route = self.server.routes.get(path)
        status, tool = 200, None
        headers = _headers(request.headers)
        try:
            if route is None:
                status = 404
                raise _Abort(404, f"Not found: {path.decode('latin-1')}", close=False)
            if request.method != b"POST":
                status = 405
                raise _Abort(405, "Method not allowed: use POST", close=False)
            body = await self._read_body(headers)
            if route == _LIST:
                status = self._answer_list(headers, body)
            elif b"text/event-stream" in headers.get(b"accept", b""):
                status, tool = await self._answer_stream(body)
            else:
                reply = await self.server.rpc.handle(body)
                tool = reply.tool
                if reply.body is None:
                    status = 202
                    self._send(202, [], b"")
                elif reply.retry_after is not None:
                    status = 503
                    retry = b"%d" % max(1, round(reply.retry_after))
                    self._send(503, [*_JSON, (b"retry-after", retry)], reply.body)
                else:
                    self._send(200, _JSON, reply.body)
        except _Abort as exc:
            status = exc.status or 499  # 499: the client went away
            if exc.status is None or exc.close:
                raise
            await self._discard_body(headers)
            self._send_error(exc.status, exc.message, close=False)
        finally:
            if self.config.access_log:
                access_log.info(
                    "%s %s %s %d %.2fms",
                    request.method.decode("latin-1"),
                    path.decode("latin-1"),
                    tool or "-",
                    status,
                    (time.perf_counter() - t0) * 1000,
                )

    async def _read_body(self, headers: dict[bytes, bytes]) -> bytes:
        limit = self.config.max_body_size
        length = headers.get(b"content-length")
        if length is not None and int(length) > limit:
            raise _Abort(413, f"Request body too large (max {limit} bytes)")
        if length not in (None, b"0"):
            ctype = headers.get(b"content-type", b"")
            if ctype.split(b";", 1)[0].strip().lower() != b"application/json":
                raise _Abort(415, "Unsupported media type: send Content-Type: application/json")
            if b"charset" in ctype.lower() and b"utf-8" not in ctype.lower():
                raise _Abort(415, "Unsupported charset: the body must be UTF-8")
        if self.conn.they_are_waiting_for_100_continue:
            self._write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise _Abort(413, f"Request body too large (max {limit} bytes)")
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            else:  # ConnectionClosed mid-body
                raise _Abort(None)
        self._cancel_timer()  # the request is in; the call may take its time
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _discard_body(self, headers: dict[bytes, bytes]) -> None:
        """Read and drop a small unread body so the connection can be reused."""
        conn = self.conn
        length = headers.get(b"content-length")
        if length is None and b"transfer-encoding" not in headers:
            length = b"0"  # no body at all, as in a GET
        if (
            conn.their_state is not h11.SEND_BODY
            or conn.they_are_waiting_for_100_continue
            or length is None
            or int(length) > self.config.max_body_size
        ):
            return
        while not isinstance(await self._next_event(), h11.EndOfMessage | h11.ConnectionClosed):
            pass

    def _answer_list(self, headers: dict[bytes, bytes], body: bytes) -> int:
        if body.strip():
            try:
                decode(body)
            except ParseError as exc:
                self._send(400, _JSON, JsonRpc.error_bytes(None, exc))
                return 400
        self._send(200, _JSON, self.server.tools_body)
        return 200

    async def _answer_stream(self, body: bytes) -> tuple[int, str | None]:
        """A ``tools/call`` answered as SSE.  Errors before the tool starts are
        a plain JSON-RPC error; anything that is not a single call is answered
        as plain JSON-RPC."""
        rpc = self.server.rpc
        try:
            message = decode(body)
        except ParseError as exc:
            self._send(200, _JSON, JsonRpc.error_bytes(None, exc))
            return 200, None
        if not (isinstance(message, dict) and message.get("method") == "tools/call"):
            reply = await rpc.handle(body)
            self._send(202, [], b"") if reply.body is None else self._send(200, _JSON, reply.body)
            return (202 if reply.body is None else 200), reply.tool
        request_id: Any = message.get("id")
        try:
            request_id, _, params = check_request(message)
            name, arguments = tool_call_params(params)
            stream = self.server.dispatcher.stream(name, arguments)
        except (InvalidRequest, InvalidParams, MCPLiteError) as exc:
            rid = request_id if isinstance(request_id, str | int | float) else None
            status = 503 if isinstance(exc, Overloaded) else 200
            self._send(status, _JSON, JsonRpc.error_bytes(rid, exc))
            return status, None
        try:
            await self._pump(stream)
        finally:
            await stream.aclose()
        return 200, name

    async def _pump(self, stream: ToolStream) -> None:
        conn = self.conn
        self._write(conn.send(h11.Response(status_code=200, headers=sse.HEADERS, reason=b"OK")))
        heartbeat = self.config.heartbeat
        closing = self.server.streams_closing
        closing_wait = self.loop.create_task(closing.wait())
        try:
            while True:
                next_item = self.loop.create_task(stream.next())
                while True:
                    done, _ = await asyncio.wait(
                        (next_item, closing_wait),
                        timeout=heartbeat,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if next_item in done or closing_wait in done:
                        break
                    await self._write_event(sse.frame("heartbeat", "{}"))
                if next_item not in done:
                    next_item.cancel()
                    await self._write_event(
                        sse.frame_json(
                            "error",
                            {"code": Overloaded.jsonrpc_code, "message": "Server is shutting down"},
                        )
                    )
                    break
                try:
                    item = next_item.result()
                except StopAsyncIteration:
                    break
                except MCPLiteError as exc:
                    await self._write_event(sse.frame_json("error", exc.to_jsonrpc()))
                    break
                if isinstance(item, Partial):
                    await self._write_event(sse.frame_json("message", {"partial": item.value}))
                    continue
                assert item is not None
                await self._write_event(sse.frame_json("done", item.to_json()))
                break
        finally:
            closing_wait.cancel()
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
