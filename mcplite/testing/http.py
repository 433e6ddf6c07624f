"""HTTP/1.1 over in-memory connections: a small client on h11's public API.

:class:`HttpSession` sends requests to a server-side protocol factory (such as
:meth:`mcplite.bindings.http.HttpServer.connection`) over
:func:`~mcplite.testing.transports.transport_pair` connections, keeping finished
ones alive for the next request (a new connection when none is idle, so that
requests in parallel each get their own, as a browser would).  Responses come
back whole (:meth:`HttpSession.request`, an :class:`HttpResponse`) or as they
arrive (:meth:`HttpSession.open`, for SSE streams).

:class:`LiteTransport` is the :class:`mcplite.client.Transport` of the MCP-lite
HTTP endpoints on top of it, so :class:`mcplite.client.BaseClient` (its results,
its exceptions, its promise redemption) runs over the real HTTP binding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import h11

from .._version import __version__
from ..client import (
    AuthenticationError,
    Partial,
    PermissionDeniedError,
    ProgressUpdate,
    RequestTimeout,
    RPCError,
    TransportError,
    error_from_object,
)
from ..client.connections import ConnectionPool, HttpConnection, reason
from ..client.http import PromptsOverRpc, SseParser, sse_item
from ..client.options import check_options
from .transports import transport_pair

__all__ = ["HttpResponse", "HttpSession", "LiteTransport", "Message", "StreamingResponse"]

Headers = Mapping[str, str] | Iterable[tuple[str, str]]


class Message(TypedDict, total=False):
    """What a request carries besides its method and path: ``headers`` (default
    none) and ``body`` (default empty)."""

    headers: Headers
    body: bytes


#: Methods whose requests say their body's length even when it is empty (as
#: http.client does), so that a server need not guess.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A whole response: ``headers`` in the order sent, names in lower case."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` (any case), or None."""
        return _header(self.headers, name)

    def json(self) -> Any:
        """The body as JSON.  Raises ValueError if it is not JSON."""
        return json.loads(self.body)

    def events(self) -> list[tuple[str, str]]:
        """The body as server-sent events: ``(event, data)`` pairs.  Raises
        TransportError if it is not UTF-8."""
        return SseParser().feed(self.body + b"\n\n")


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    name = name.lower()
    found = None
    for key, value in headers:
        if key == name:
            found = value
    return found


class StreamingResponse:
    """A response whose head has arrived; read its body with :meth:`chunks`,
    :meth:`read` or :meth:`events` (once)."""

    def __init__(self, conn: HttpConnection, head: h11.Response, timeout: float) -> None:
        self.status: int = head.status_code
        self.reason: str = head.reason.decode("latin-1")
        self.headers: list[tuple[str, str]] = [
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers
        ]
        self.complete = False
        self._conn = conn
        self._timeout = timeout

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` (any case), or None."""
        return _header(self.headers, name)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as it arrives.  Each wait is bounded by the
        session's timeout: RequestTimeout; a broken connection: TransportError."""
        while not self.complete:
            try:
                async with asyncio.timeout(self._timeout):
                    event = await self._conn.next_event()
            except TimeoutError:
                raise RequestTimeout(f"nothing received for {self._timeout:g} s") from None
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self.complete = True

    async def read(self) -> bytes:
        """The rest of the body."""
        return b"".join([chunk async for chunk in self.chunks()])

    async def events(self) -> AsyncIterator[tuple[str, str]]:
        """The body as server-sent events, ``(event, data)``, each once it is whole."""
        parser = SseParser()
        async for chunk in self.chunks():
            for event in parser.feed(chunk):
                yield event


class HttpSession:
    """HTTP/1.1 requests to the protocols ``connection()`` makes, in memory.

    ``host`` is the ``Host`` header of every request; ``timeout`` bounds each
    wait (connecting, sending, each piece of an answer) in seconds;
    ``socket_buffer`` is given to :func:`~mcplite.testing.transports.transport_pair`.
    """

    def __init__(
        self,
        connection: Callable[[], asyncio.BaseProtocol],
        *,
        host: str = "127.0.0.1",
        timeout: float = 30.0,
        socket_buffer: int = 64 * 1024,
    ) -> None:
        self.connection = connection
        self.host = host
        self.timeout = timeout
        self.socket_buffer = socket_buffer
        # Every finished connection is kept, however long idle, as a browser keeps them.
        self.pool = ConnectionPool(self._connect, size=sys.maxsize, idle_timeout=math.inf)

    @property
    def connections_opened(self) -> int:
        """Connections opened so far."""
        return self.pool.connections_opened

    async def _connect(self) -> HttpConnection:
        conn = HttpConnection()
        transport_pair(conn, self.connection(), socket_buffer=self.socket_buffer)
        return conn

    @contextlib.asynccontextmanager
    async def open(
        self, method: str, path: str, **message: Unpack[Message]
    ) -> AsyncIterator[StreamingResponse]:
        """Send a request; yield its response once the head has arrived.  The
        connection is kept for the next request if the body was read to its end.

        ``headers`` go after ``Host``, and ``Content-Length`` after them unless they
        frame the body themselves (when there is a body, or the method is one that
        takes one: POST, PUT, PATCH).  Raises
        RequestTimeout, TransportError (a connection that ends first, or a
        request h11 refuses to send)."""
        check_options(message, Message, "open")
        headers = message.get("headers", ())
        body = message.get("body", b"")
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        names = {name.lower() for name, _ in pairs}
        if "host" not in names:
            pairs.insert(0, ("Host", self.host))
        framed = names & {"content-length", "transfer-encoding"}
        if (body or method in _BODY_METHODS) and not framed:
            pairs.append(("Content-Length", str(len(body))))
        conn: HttpConnection | None = None
        response: StreamingResponse | None = None
        try:
            try:
                events: list[h11.Event] = [h11.Request(method=method, target=path, headers=pairs)]
                if body:
                    events.append(h11.Data(data=body))
                events.append(h11.EndOfMessage())
                async with asyncio.timeout(self.timeout):
                    conn, _ = await self.pool.acquire()
                    head = await conn.request(events)
            except h11.LocalProtocolError as exc:
                raise TransportError(f"h11 will not send this request: {exc}") from None
            except TimeoutError:
                raise RequestTimeout(
                    f"no answer to {method} {path} within {self.timeout:g} s"
                ) from None
            except OSError as exc:
                raise TransportError(f"connection broken: {reason(exc)}") from None
            response = StreamingResponse(conn, head, self.timeout)
            yield response
        finally:
            self.pool.settle(conn, response is not None and response.complete)

    async def request(self, method: str, path: str, **message: Unpack[Message]) -> HttpResponse:
        """Send a request and read its whole response (see :meth:`open`)."""
        async with self.open(method, path, **message) as response:
            data = await response.read()
        return HttpResponse(response.status, response.reason, response.headers, data)

    async def aclose(self) -> None:
        """Close every connection, waiting (boundedly) for each to end."""
        await self.pool.aclose()


_USER_AGENT = f"mcplite-testing/{__version__}"


class LiteTransport(PromptsOverRpc):
    """The MCP-lite HTTP endpoints under ``base_path`` as a
    :class:`mcplite.client.Transport` (with prompts and any JSON-RPC request), over
    ``session``."""

    origin = "the server"  # what its errors call the server (there is no address)

    def __init__(
        self, session: HttpSession, base_path: str, *, authorization: str | None = None
    ) -> None:
        self.session = session
        self.base_path = base_path
        self._headers = [("User-Agent", _USER_AGENT), ("Content-Type", "application/json")]
        if authorization is not None:
            self._headers.append(("Authorization", authorization))
        self._ids = 0

    def _rpc(self, method: str, params: dict[str, Any]) -> bytes:
        self._ids += 1
        message = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        try:
            return json.dumps(message, ensure_ascii=False, allow_nan=False).encode()
        except UnicodeEncodeError:  # a lone surrogate: JSON's \u escape carries it
            return json.dumps(message, allow_nan=False).encode()
        except ValueError as exc:  # NaN or infinity: JSON has no such number
            raise TransportError(f"arguments JSON cannot carry: {exc}") from None

    async def _post(self, path: str, body: bytes, timeout: float) -> dict[str, Any]:
        headers = [*self._headers, ("Accept", "application/json")]
        async with asyncio.timeout(timeout):
            response = await self.session.request(
                "POST", self.base_path + path, headers=headers, body=body
            )
        return _reply(path, response.status, response.headers, response.body)

    async def list_tools(self, timeout: float) -> list[dict[str, Any]]:
        tools = (await self._post("/tools", b"{}", timeout)).get("tools")
        if not isinstance(tools, list):
            raise TransportError("the server answered no list of tools")
        return [tool for tool in tools if isinstance(tool, dict)]

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float, *, idempotent: bool = False
    ) -> dict[str, Any]:
        body = self._rpc("tools/call", {"name": name, "arguments": arguments})
        return _result(await self._post("/rpc", body, timeout))

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One JSON-RPC request to ``/rpc``: its result.  Raises RPCError, TransportError."""
        return _result(await self._post("/rpc", self._rpc(method, params), timeout))

    async def stream(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> AsyncIterator[Partial | ProgressUpdate | dict[str, Any]]:
        body = self._rpc("tools/call", {"name": name, "arguments": arguments})
        headers = [*self._headers, ("Accept", "text/event-stream")]
        session = self.session
        async with session.open("POST", self.base_path + "/rpc", headers=headers, body=body) as r:
            if not (r.header("content-type") or "").startswith("text/event-stream"):
                # Refused before the tool started: a JSON-RPC answer.
                yield _result(_reply("/rpc", r.status, r.headers, await r.read()))
                return
            final: dict[str, Any] | None = None
            async for kind, data in r.events():
                item = sse_item(kind, data)
                if isinstance(item, Partial | ProgressUpdate):
                    yield item
                elif item is not None:
                    final = item
        if final is None:
            raise TransportError("the stream ended without its final result")
        yield final

    async def aclose(self) -> None:
        await self.session.aclose()


def _reply(path: str, status: int, headers: list[tuple[str, str]], body: bytes) -> dict[str, Any]:
    """The JSON object answered; a JSON-RPC error raises its RPCError."""
    try:
        message = json.loads(body) if body else None
    except ValueError:
        message = None
    if isinstance(message, dict) and isinstance(message.get("error"), dict):
        error: RPCError = error_from_object(message["error"])
        if isinstance(error, AuthenticationError | PermissionDeniedError):
            error.www_authenticate = _header(headers, "www-authenticate")
        raise error
    if status != 200 or not isinstance(message, dict):
        raise TransportError(f"{path} answered HTTP {status}: {body[:200]!r}")
    return message


def _result(reply: dict[str, Any]) -> dict[str, Any]:
    result = reply.get("result")
    if not isinstance(result, dict):
        raise TransportError("a JSON-RPC reply without a result")
    return result
