"""The HTTP/1.1 transport: h11 over an asyncio protocol, with a keep-alive pool.

I/O.  :class:`_Connection` is the asyncio protocol of one connection: the bytes it
receives go straight into its h11 state machine, and it notes whatever arrives
while no exchange is in progress (bytes or EOF on an idle connection mean the
server closed it or is about to).

Pool.  A finished exchange puts its connection back on an idle stack (at most
``pool_size``; more are closed).  The most recently used idle connection is taken
first.  Before a request is written to it, a pooled connection is checked, and
dropped for a new one, when it is known dead: the server closed it or sent
anything while it was idle (seen by the protocol, or its socket is readable even
if the event loop has not read it yet); it went unused for ``idle_timeout``
(shorter than the server's 15 s keep-alive); or h11 says it cannot carry another
request.

Retry.  No byte of a request is ever sent twice, except that an idempotent
request (discovery, ``redeem``, ``cancel``) sent on a reused connection is sent
once more, on a new connection, when the server closed that connection without
any byte of an answer (it closed it as idle while the request was on its way).
A ``tools/call`` is never resent once any of its bytes may have left: a
connection that fails after that raises :class:`TransportError`, since the server
may have run the call.  The check before writing makes the stale keep-alive case
(a server that closed an idle connection) a transparent reconnect; what remains
is the race where the server closes the connection in the instant the request is
written, and that one is reported, not guessed at.  An answer, a refusal such as
401 (bad token) or 429 (rate limit) included, is never sent again.

TLS and credentials: an ``https://`` transport wraps each connection in its SSL
context; the ``Authorization`` header (a bearer token) goes on every request.
401, 403 and 429 map to AuthenticationError, PermissionDeniedError and
OverloadedError, by the JSON-RPC code of the body or, without one, the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import select
import ssl
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import h11

from .._version import __version__
from ..core import wire
from ..core.outcomes import Partial, ProgressUpdate
from ._tls import tls_reason
from .errors import (
    AuthenticationError,
    OverloadedError,
    PermissionDeniedError,
    RequestTimeout,
    RPCError,
    TransportError,
    error_from_object,
)

__all__ = ["HttpTransport", "SseParser"]

_USER_AGENT = f"mcplite-client/{__version__}"
# Received bytes that nobody has read yet, beyond which the socket is not read
# (a slow consumer of a stream must not make the client buffer without bound).
_READ_LIMIT = 64 * 1024


class _NoResponse(Exception):
    """The connection ended before any byte of the response."""


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


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: an asyncio protocol feeding an h11 state machine."""

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
        self._unread = 0  # bytes given to h11 since it last needed data
        self._reading_paused = False
        self._read_waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._closed = asyncio.get_running_loop().create_future()

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.stale = True  # e.g. a 408 before the server closes an idle connection
        self.got_bytes = True
        self.h11.receive_data(data)
        self._unread += len(data)
        if self._unread > _READ_LIMIT and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool | None:
        self._end()
        return None  # nothing more to say once the server has closed: close

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self._end()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _end(self) -> None:
        if not self.busy:
            self.stale = True
        if not self.eof:
            self.eof = True
            self.h11.receive_data(b"")
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter = self._read_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

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

    # --- one exchange -----------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        """Write ``data``; raises OSError if the connection is lost meanwhile."""
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

        Raises _NoResponse when the connection ends before any byte of the
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

    def _ended(self) -> Exception:
        if not self.got_bytes:
            return _NoResponse()
        if self.error is not None:
            return TransportError(f"connection broken: {_reason(self.error)}")
        return TransportError("the server closed the connection in the middle of a response")

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

    async def wait_closed(self) -> None:
        await self._closed


class PromptsOverRpc:
    """``list_prompts`` and ``get_prompt`` of a transport whose ``request`` sends
    any JSON-RPC request (the MCP-lite HTTP binding's ``/rpc``)."""

    origin: str

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One JSON-RPC request: its result object.  Raises RPCError, TransportError."""
        raise NotImplementedError

    async def list_prompts(self, timeout: float) -> list[dict[str, Any]]:
        """The server's prompts.  Raises RPCError, TransportError."""
        prompts = (await self.request("prompts/list", {}, timeout)).get("prompts")
        if not isinstance(prompts, list):
            raise TransportError(f"{self.origin} answered no list of prompts")
        return [p for p in prompts if isinstance(p, dict)]

    async def get_prompt(
        self, name: str, arguments: dict[str, str], timeout: float
    ) -> dict[str, Any]:
        """Prompt ``name`` filled in.  Raises RPCError, TransportError."""
        return await self.request("prompts/get", {"name": name, "arguments": arguments}, timeout)


class HttpTransport(PromptsOverRpc):
    """The MCP-lite HTTP binding from the client side (see the module doc).

    With ``tls``, connections use ``ssl_context`` (default: the system's CAs).
    ``authorization`` is the ``Authorization`` header of every request.
    """

    def __init__(
        self,
        host: str,
        port: int,
        base_path: str,
        *,
        tls: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        authorization: str | None = None,
        pool_size: int = 8,
        idle_timeout: float = 10.0,
    ) -> None:
        if pool_size < 0:
            raise ValueError("pool_size must not be negative")
        self.host = host
        self.port = port
        self.base_path = base_path
        self.tls = tls = tls or ssl_context is not None
        self._ssl: ssl.SSLContext | None = None
        if tls:
            self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()
        self._authorization = authorization
        self.pool_size = pool_size
        self.idle_timeout = idle_timeout
        authority = f"[{host}]" if ":" in host else host
        self.origin = f"{'https' if tls else 'http'}://{authority}:{port}"
        default_port = 443 if tls else 80
        self._host_header = authority if port == default_port else f"{authority}:{port}"
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._ids = itertools.count(1)
        self._closed = False
        #: Connections opened so far (for tests and the curious).
        self.connections_opened = 0

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    # --- the pool ---------------------------------------------------------------------

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl)
        except OSError as exc:  # ssl.SSLError included
            raise TransportError(f"cannot connect to {self.origin}: {_reason(exc)}") from None
        self.connections_opened += 1
        return conn

    async def _acquire(self, fresh: bool) -> tuple[_Connection, bool]:
        """A connection and whether it was reused from the pool.

        A pooled connection that is known dead before anything is written to it
        (see :meth:`_Connection.usable`) is closed and the next one tried: that is
        the only point where a request may move to another connection freely.
        """
        if self._closed:
            raise TransportError("the client is closed")
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.usable(self.idle_timeout):
                self._busy.add(conn)
                return conn, True
            conn.close()
        conn = await self._connect()
        self._busy.add(conn)
        return conn, False

    def _release(self, conn: _Connection) -> None:
        self._busy.discard(conn)
        if conn.finish() and not self._closed and len(self._idle) < self.pool_size:
            self._idle.append(conn)
        else:
            conn.close()

    def _settle(self, conn: _Connection | None, done: bool) -> None:
        """After an exchange: ``conn`` back to the pool when it was ``done``, else
        dropped (what it still holds is unknown)."""
        if conn is None:
            return
        if done:
            self._release(conn)
        else:
            self._discard(conn)

    def _discard(self, conn: _Connection) -> None:
        self._busy.discard(conn)
        conn.close()

    async def aclose(self) -> None:
        self._closed = True
        conns = [*self._idle, *self._busy]
        self._idle.clear()
        self._busy.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(conn.wait_closed(), 1.0)

    # --- one exchange -----------------------------------------------------------------

    def _request_bytes(self, conn: _Connection, path: str, body: bytes, accept: str) -> bytes:
        headers = [
            ("Host", self._host_header),
            ("User-Agent", _USER_AGENT),
            ("Content-Type", "application/json"),
            ("Accept", accept),
            ("Content-Length", str(len(body))),
        ]
        if self._authorization is not None:
            headers.append(("Authorization", self._authorization))
        out = conn.h11.send(h11.Request(method="POST", target=path, headers=headers))
        out = (out or b"") + (conn.h11.send(h11.Data(data=body)) or b"")
        return out + (conn.h11.send(h11.EndOfMessage()) or b"")

    async def _start(
        self, path: str, body: bytes, accept: str, idempotent: bool
    ) -> tuple[_Connection, h11.Response]:
        """Send a request and read the response head (see the module doc on retry)."""
        for attempt in (1, 2):
            conn, reused = await self._acquire(fresh=attempt == 2)
            try:
                try:
                    await conn.send(self._request_bytes(conn, path, body, accept))
                    while True:
                        event = await conn.next_event()
                        if isinstance(event, h11.Response):
                            return conn, event
                        # InformationalResponse (100 Continue): the final one follows.
                except (_NoResponse, OSError) as exc:
                    # The request may have reached the server (and the tool run):
                    # only an idempotent one may go again.
                    if reused and idempotent and attempt == 1:
                        self._discard(conn)
                        continue
                    if isinstance(exc, OSError):
                        raise TransportError(
                            f"connection to {self.origin} broken: {_reason(exc)}"
                        ) from None
                    if conn.error is not None:  # e.g. a TLS alert: no client certificate
                        raise TransportError(
                            f"{self.origin} closed the connection without answering: "
                            f"{_reason(conn.error)}"
                        ) from None
                    raise TransportError(
                        f"{self.origin} closed the connection without answering"
                    ) from None
            except BaseException:
                self._discard(conn)
                raise
        raise AssertionError("unreachable")

    async def _read_body(self, conn: _Connection) -> bytes:
        chunks = []
        while True:
            event = await conn.next_event()
            if isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)

    async def _post(
        self, path: str, body: bytes, timeout: float, idempotent: bool
    ) -> tuple[h11.Response, bytes]:
        conn: _Connection | None = None
        done = False
        try:
            async with asyncio.timeout(timeout):
                conn, head = await self._start(path, body, "application/json", idempotent)
                data = await self._read_body(conn)
            done = True
        except TimeoutError:
            raise RequestTimeout(
                f"no answer from {self.origin}{path} within {timeout:g} s"
            ) from None
        finally:
            self._settle(conn, done)
        return head, data

    # --- the binding ------------------------------------------------------------------

    def _reply(self, path: str, head: h11.Response, body: bytes) -> dict[str, Any]:
        """The JSON object answered; a JSON-RPC error raises its RPCError.

        401, 403 and 429 (or 503) without a JSON-RPC body (a proxy's, say) raise
        the errors their codes would; a Retry-After header fills ``retry_after``.
        """
        status = head.status_code
        try:
            message = json.loads(body) if body else None
        except ValueError:
            message = None
        error: RPCError | None = None
        if isinstance(message, dict) and isinstance(message.get("error"), dict):
            error = error_from_object(message["error"])
        elif status in _STATUS_ERRORS:
            code, what = _STATUS_ERRORS[status]
            error = error_from_object({"code": code, "message": f"HTTP {status}: {what}"})
        if error is not None:
            raise _with_headers(error, head.headers)
        if status != 200 or not isinstance(message, dict):
            snippet = body[:200].decode("utf-8", "replace").strip()
            what = f"HTTP {status}" if status != 200 else "a reply that is not a JSON object"
            raise TransportError(
                f"{self.origin}{path} answered {what}" + (f": {snippet}" if snippet else "")
            )
        return message

    def _rpc_body(self, name: str, arguments: dict[str, Any], method: str = "tools/call") -> bytes:
        params = {"name": name, "arguments": arguments} if method == "tools/call" else arguments
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        try:
            return text.encode()
        except UnicodeEncodeError:
            # A lone surrogate (a Python str can hold one, UTF-8 cannot): JSON's
            # \uXXXX escape carries it, as the server does in its replies.
            return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()

    async def list_tools(self, timeout: float) -> list[dict[str, Any]]:
        path = self.base_path + "/tools"
        head, body = await self._post(path, b"{}", timeout, idempotent=True)
        tools = self._reply(path, head, body).get("tools")
        if not isinstance(tools, list):
            raise TransportError(f"{self.origin}{path} answered no list of tools")
        return [t for t in tools if isinstance(t, dict)]

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float, *, idempotent: bool = False
    ) -> dict[str, Any]:
        path = self.base_path + "/rpc"
        head, body = await self._post(path, self._rpc_body(name, arguments), timeout, idempotent)
        result = self._reply(path, head, body).get("result")
        if not isinstance(result, dict):
            raise TransportError(f"{self.origin}{path} answered a JSON-RPC reply without a result")
        return result

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One JSON-RPC request of a method that only reads (prompts, resources):
        its result object.  Raises RPCError, TransportError."""
        path = self.base_path + "/rpc"
        body = self._rpc_body("", params, method)
        head, data = await self._post(path, body, timeout, idempotent=True)
        result = self._reply(path, head, data).get("result")
        if not isinstance(result, dict):
            raise TransportError(f"{self.origin}{path} answered a JSON-RPC reply without a result")
        return result

    async def stream(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> AsyncIterator[Partial | ProgressUpdate | dict[str, Any]]:
        path = self.base_path + "/rpc"
        body = self._rpc_body(name, arguments)
        conn: _Connection | None = None
        final: dict[str, Any] | None = None
        done = False
        try:
            try:
                async with asyncio.timeout(timeout):
                    conn, head = await self._start(path, body, "text/event-stream", False)
                content_type = dict(head.headers).get(b"content-type", b"")
                if not content_type.startswith(b"text/event-stream"):
                    # An error before the tool started (or a server that does not stream).
                    async with asyncio.timeout(timeout):
                        data = await self._read_body(conn)
                    result = self._reply(path, head, data).get("result")
                    if not isinstance(result, dict):
                        raise TransportError(f"{self.origin}{path} answered no result")
                    final = result
                else:
                    parser = SseParser()
                    while True:
                        async with asyncio.timeout(timeout):
                            event = await conn.next_event()
                        if isinstance(event, h11.EndOfMessage):
                            break
                        if not isinstance(event, h11.Data):
                            continue
                        for kind, payload in parser.feed(bytes(event.data)):
                            item = sse_item(kind, payload)
                            if isinstance(item, Partial | ProgressUpdate):
                                yield item
                            elif item is not None:
                                final = item
            except TimeoutError:
                raise RequestTimeout(
                    f"nothing from {self.origin}{path} for {timeout:g} s during a stream"
                ) from None
            done = True
        finally:
            self._settle(conn, done)
        if final is None:
            raise TransportError("the stream ended without its final result")
        yield final


# Statuses that mean a protocol error even without a JSON-RPC body.
_STATUS_ERRORS = {
    401: (wire.UNAUTHENTICATED_ERROR, "authentication required"),
    403: (wire.FORBIDDEN_ERROR, "forbidden"),
    429: (wire.SERVER_ERROR, "too many requests"),
}


def _with_headers(error: RPCError, headers: Iterable[tuple[bytes, bytes]]) -> RPCError:
    """``error`` with what the response's headers add: the challenge of a 401 or
    403, the Retry-After of a refusal the body does not time."""
    fields = dict(headers)
    if isinstance(error, AuthenticationError | PermissionDeniedError):
        challenge = fields.get(b"www-authenticate")
        if challenge is not None:
            error.www_authenticate = challenge.decode("latin-1")
    elif isinstance(error, OverloadedError) and error.retry_after is None:
        retry = fields.get(b"retry-after", b"").strip()
        if retry.isdigit():
            data = error.data if isinstance(error.data, dict) else {}
            error.data = {**data, "retry_after": int(retry)}
    return error


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):  # before errno, which is OpenSSL's here
        return tls_reason(exc)
    # asyncio words a refusal "Connect call failed ('127.0.0.1', 1)": say what it was.
    errno = getattr(exc, "errno", None)
    if isinstance(errno, int) and errno > 0:
        return os.strerror(errno)
    strerror = getattr(exc, "strerror", None)
    return strerror or str(exc) or type(exc).__name__  # e.g. a resolver's error


def sse_item(kind: str, payload: str) -> Partial | ProgressUpdate | dict[str, Any] | None:
    """One SSE event: a Partial, the tool's progress, the final result, or None
    (heartbeat, unknown, a progress event not in its shape)."""
    if kind not in ("message", "done", "error", "progress"):
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        raise TransportError(f"malformed SSE {kind} event: {payload[:200]!r}") from None
    if not isinstance(data, dict):
        raise TransportError(f"malformed SSE {kind} event: {payload[:200]!r}")
    if kind == "message":
        return Partial(data.get("partial"))
    if kind == "progress":
        return ProgressUpdate.from_json(data)
    if kind == "error":
        raise error_from_object(data)
    return data


_LINE_END = re.compile(rb"\r\n|\r|\n")


class SseParser:
    """Server-Sent Events (WHATWG HTML 9.2.6): feed bytes, get ``(event, data)`` pairs.

    Lines end with CRLF, LF or CR; the ``data`` lines of an event are joined with
    ``\\n``; a blank line dispatches; a line starting with ``:`` is a comment.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        self._buffer += data
        events = []
        while True:
            match = _LINE_END.search(self._buffer)
            if match is None:
                break
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break  # maybe the first half of a CRLF split between reads
            try:
                line = self._buffer[: match.start()].decode("utf-8")
            except UnicodeDecodeError:
                raise TransportError("SSE stream is not valid UTF-8") from None
            self._buffer = self._buffer[match.end() :]
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> tuple[str, str] | None:
        if not line:
            event = None
            if self._data:
                event = (self._event or "message", "\n".join(self._data))
            self._event = ""
            self._data = []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None
