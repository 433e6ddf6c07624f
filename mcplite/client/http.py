"""The HTTP/1.1 transport: MCP-lite requests over a pool of h11 connections.

Connections and their pool are :mod:`.connections`' (an idle one is reused
only within ``idle_timeout``, shorter than the server's 15 s keep-alive).

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
import itertools
import json
import re
import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any

import h11

from .._version import __version__
from ..core import wire
from ..core.outcomes import Partial, ProgressUpdate
from .connections import ConnectionPool, HttpConnection, NoResponse, reason
from .errors import (
    AuthenticationError,
    OverloadedError,
    PermissionDeniedError,
    RequestTimeout,
    RPCError,
    TransportError,
    error_from_object,
)

__all__ = ["HttpTransport", "PromptsOverRpc", "SseParser", "sse_item"]

_USER_AGENT = f"mcplite-client/{__version__}"


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
        self.host = host
        self.port = port
        self.base_path = base_path
        self.tls = tls = tls or ssl_context is not None
        self._ssl: ssl.SSLContext | None = None
        if tls:
            self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()
        self._authorization = authorization
        authority = f"[{host}]" if ":" in host else host
        self.origin = f"{'https' if tls else 'http'}://{authority}:{port}"
        default_port = 443 if tls else 80
        self._host_header = authority if port == default_port else f"{authority}:{port}"
        #: The keep-alive connections (raises ValueError for a negative ``pool_size``).
        self.pool = ConnectionPool(self._connect, size=pool_size, idle_timeout=idle_timeout)
        self._ids = itertools.count(1)

    @property
    def connections_opened(self) -> int:
        """Connections opened so far (for tests and the curious)."""
        return self.pool.connections_opened

    @property
    def idle_connections(self) -> int:
        return self.pool.idle_connections

    async def _connect(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                HttpConnection, self.host, self.port, ssl=self._ssl
            )
        except OSError as exc:  # ssl.SSLError included
            raise TransportError(f"cannot connect to {self.origin}: {reason(exc)}") from None
        return conn

    async def aclose(self) -> None:
        await self.pool.aclose()

    # --- one exchange -----------------------------------------------------------------

    def _request(self, path: str, body: bytes, accept: str) -> list[h11.Event]:
        headers = [
            ("Host", self._host_header),
            ("User-Agent", _USER_AGENT),
            ("Content-Type", "application/json"),
            ("Accept", accept),
            ("Content-Length", str(len(body))),
        ]
        if self._authorization is not None:
            headers.append(("Authorization", self._authorization))
        request = h11.Request(method="POST", target=path, headers=headers)
        return [request, h11.Data(data=body), h11.EndOfMessage()]

    async def _start(
        self, path: str, body: bytes, accept: str, idempotent: bool
    ) -> tuple[HttpConnection, h11.Response]:
        """Send a request and read the response head (see the module doc on retry)."""
        for attempt in (1, 2):
            conn, reused = await self.pool.acquire(fresh=attempt == 2)
            try:
                try:
                    return conn, await conn.request(self._request(path, body, accept))
                except (NoResponse, OSError) as exc:
                    # The request may have reached the server (and the tool run):
                    # only an idempotent one may go again.
                    if reused and idempotent and attempt == 1:
                        self.pool.discard(conn)
                        continue
                    if isinstance(exc, OSError):
                        raise TransportError(
                            f"connection to {self.origin} broken: {reason(exc)}"
                        ) from None
                    if conn.error is not None:  # e.g. a TLS alert: no client certificate
                        raise TransportError(
                            f"{self.origin} closed the connection without answering: "
                            f"{reason(conn.error)}"
                        ) from None
                    raise TransportError(
                        f"{self.origin} closed the connection without answering"
                    ) from None
            except BaseException:
                self.pool.discard(conn)
                raise
        raise AssertionError("unreachable")

    async def _read_body(self, conn: HttpConnection) -> bytes:
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
        conn: HttpConnection | None = None
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
            self.pool.settle(conn, done)
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
        conn: HttpConnection | None = None
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
            self.pool.settle(conn, done)
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
