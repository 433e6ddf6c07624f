"""One HTTP request over ASGI: the I/O boundary between an ASGI server and the
endpoints of an :class:`~mcplite.bindings.http.site.HttpSite`.

The ASGI server owns the connection: framing, keep-alive, ``100 Continue``,
header limits and timeouts are its own.  What our own server does per request
(:mod:`mcplite.bindings.http.connection`) is done here in the same order, with
the same answers: a body over ``max_body_size`` gets ``413``; the head is
admitted (404, 405 with ``Allow``, the Host check, CORS, 415,
authentication); a refusal is answered once the body is read and dropped (at
once, closing, to a client waiting for ``100 Continue``); then the route's
handler answers, whole or as an SSE stream.

Our own server answers ``413`` before the body arrives, then reads and drops
what the client still sends (a *lingering* close: a socket closed with unread
input is reset, which can destroy the answer before the client reads it).
An ASGI application cannot read after its answer, so it reads and drops
first, up to ``_DROP_AT_MOST`` bytes past the limit, then answers ``413``
with ``Connection: close`` (at once for a larger declared body, or a client
waiting for ``100 Continue``).

While a handler waits for something (a tool that suspends, a stream), a task
waits on ``receive`` for ``http.disconnect``: a client that leaves cancels the
call (a stream is closed, which stops its
tool), as a closed socket does on our own server.  The request is then logged
``client-gone`` (with status 499 when nothing was sent) and the application
returns normally: the client's leaving is no error of the server's.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ...core.observe import CLIENT_GONE
from ..http.admission import Refusal, Verification
from ..http.messages import Request, Response, StreamingResponse, header_dict
from ..http.routes import Route
from ..http.site import HttpSite
from ..http.statuses import JSON, error_body
from .types import Receive, Scope, Send

__all__ = ["HttpExchange", "request_of", "route_path"]

log = logging.getLogger("mcplite")

#: The status logged for a request whose client left before any answer (nginx's
#: "client closed request"), as our own server logs it.
_CLIENT_CLOSED = 499
_CLOSE = (b"connection", b"close")
#: How much of a body over the limit is read and dropped before the 413 (our own
#: server's lingering close reads as much).
_DROP_AT_MOST = 4 * 1024 * 1024
#: Methods as the Request holds them (bytes), for the usual ones without an encode.
_METHODS = {m: m.encode() for m in ("POST", "GET", "HEAD", "OPTIONS", "PUT", "DELETE")}


def route_path(scope: Scope) -> str:
    """The path the routes see: ``path`` less ``root_path``.

    ASGI puts the whole path in ``path`` and the mount point in ``root_path``
    (uvicorn's ``--root-path``, recent Starlette's ``Mount``); older Starlette
    took the mount point out of ``path`` itself.  So ``root_path`` is taken
    off only when ``path`` starts with it, up to a ``/`` or its end.
    """
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        rest = path[len(root) :]
        if not rest or rest[0] == "/":
            return rest
    return path


def request_of(scope: Scope) -> Request:
    """The :class:`Request` (no body yet) of an ``http`` scope: its path less the
    mount point, its query kept in the target, its peer."""
    path = route_path(scope).encode()
    query: bytes = scope.get("query_string", b"")
    target = path + b"?" + query if query else path
    method: str = scope["method"]
    client = scope.get("client")
    peer = (str(client[0]), int(client[1])) if client else None
    # ASGI header names are lowercase bytes already; a repeated one's values are joined.
    headers = header_dict(scope["headers"])
    request = Request(_METHODS.get(method) or method.encode("latin-1"), target, headers, b"", peer)
    request.path = path  # ASGI's path is percent-decoded: it may hold a "?" of its own
    return request


class HttpExchange:
    """One request and its answer, driven by :meth:`run`."""

    __slots__ = (
        "cors",
        "done",
        "gone",
        "receive",
        "request",
        "route",
        "send",
        "site",
        "started",
        "status",
        "t0",
        "watcher",
    )

    def __init__(self, site: HttpSite, request: Request, receive: Receive, send: Send) -> None:
        self.t0 = time.perf_counter()
        self.site = site
        self.request = request
        self.receive = receive
        self.send = send
        self.route: Route | None = None
        # CORS headers of every answer to the request (CORS on, an allowed origin).
        self.cors: tuple[tuple[bytes, bytes], ...] = ()
        self.status = 200
        self.started = False  # the response's head is sent
        self.done = False  # its last part is being sent: a disconnect now is the server's
        self.gone = False  # the client left before the end
        self.watcher: asyncio.Task[None] | None = None  # waits for the client to leave

    async def run(self) -> None:
        """Answer the request (see the module docstring)."""
        site = self.site
        request = self.request
        headers = request.headers
        route = self.route = site.routes.match(request.path)
        cors = site.cors
        if cors is not None:
            self.cors = cors.response_headers(headers.get(b"origin"))
        limit = site.config.max_body_size
        length = headers.get(b"content-length")
        if length is not None and _longer(length, limit):
            if self.waits_for_continue() or _longer(length, limit + _DROP_AT_MOST):
                await self.too_large()
            else:
                await self.read_body(keep=False)  # answers 413 once it is read
            return
        admitted = site.admission.admit(request, route, self.cors)
        verification = None
        if isinstance(admitted, Refusal):
            await self.refuse(admitted)
            return
        if admitted is not None:
            verification = admitted
        body = await self.read_body()
        if body is None:
            return
        request.body = body
        assert route is not None  # admitted: it has a route
        if verification is None and route.answer is not None:  # answered at once
            await self.respond(route.answer(request))
            self.record()
            return
        await self.answer(route, verification)

    # -- the request's body -------------------------------------------------

    async def read_body(self, *, keep: bool = True) -> bytes | None:
        """The whole body (``keep`` False: read and dropped), or None when the
        request is over already: its client gone, or answered 413 (past the
        limit, after dropping up to ``_DROP_AT_MOST`` more bytes)."""
        limit = self.site.config.max_body_size
        receive = self.receive
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # http.disconnect
                self.gone = True
                self.record_cut_off()
                return None
            chunk: bytes = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    keep = False
                    if size > limit + _DROP_AT_MOST:
                        break
                elif keep:
                    chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if size > limit:
            await self.too_large()
            return None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def waits_for_continue(self) -> bool:
        """Whether the client holds its body back for our word (``Expect: 100-continue``)."""
        return self.request.headers.get(b"expect", b"").lower() == b"100-continue"

    async def refuse(self, refusal: Refusal) -> None:
        """Answer what the head decided: after reading the body to its end, so
        that the connection can go on; at once, closing, to a client that holds
        its body back for our word (``Expect: 100-continue``)."""
        status = refusal.status
        if status == 204:  # a CORS preflight: its own CORS headers
            self.cors = refusal.headers
        elif self.waits_for_continue():
            await self.fail(status, refusal.message, refusal.headers)
            return
        if await self.read_body(keep=False) is None:
            return
        if status == 204:
            self.status = 204
            await self._start(204, list(self.cors))
            await self._end(b"")
        else:
            await self.error(status, refusal.message, refusal.headers)
        self.record()

    # -- the answer ---------------------------------------------------------

    async def answer(self, route: Route, verification: Verification | None) -> None:
        """Run the route's handler and send what it gives, cancelled if the
        client leaves meanwhile."""
        task = asyncio.current_task()
        assert task is not None
        # The watch starts only if the answer waits for something: most calls are
        # answered before the loop runs again, and then no task is made for it.
        watching = asyncio.get_running_loop().call_soon(self._start_watch, task)
        try:
            try:
                reply = await self._reply(route, verification)
                if isinstance(reply, Response):
                    await self.respond(reply)
                elif reply is not None:
                    await self.stream(reply)
            finally:
                watching.cancel()
                if self.watcher is not None:
                    self.watcher.cancel()
        except asyncio.CancelledError:
            self.record_cut_off()
            # Our own doing when the client left: over, not an error.  Anything
            # else (the ASGI server stopping us) goes on up.
            if not self.gone or task.uncancel() > 0:
                raise
            return
        except Exception as exc:
            self.status = 500
            if self.started:  # too late for a 500: the server closes the connection
                self.record()
                raise
            log.error("HTTP request failed", exc_info=exc)
            await self.fail(500, "Internal server error")
            return
        self.record()

    async def _reply(
        self, route: Route, verification: Verification | None
    ) -> Response | StreamingResponse | None:
        request = self.request
        if verification is not None:  # a key fetch first (auth)
            refusal = await self.site.admission.verify(request, verification)
            if refusal is not None:
                await self.error(refusal.status, refusal.message, refusal.headers)
                return None
        if route.answer is not None:
            return route.answer(request)
        assert route.handle is not None
        return await route.handle(request)

    def _start_watch(self, task: asyncio.Task[None]) -> None:
        self.watcher = asyncio.get_running_loop().create_task(self._watch(task))

    async def _watch(self, task: asyncio.Task[None]) -> None:
        """Wait for the client to leave; then stop ``task`` unless it is answered."""
        receive = self.receive
        # The body is in: what comes now is the end (servers send nothing else).
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.done:
            self.gone = True
            task.cancel()

    async def respond(self, response: Response) -> None:
        """A whole answer, with its length (a HEAD request gets no body)."""
        self.status = status = response.status
        body = response.body
        headers = [*response.headers, *self.cors, (b"content-length", b"%d" % len(body))]
        await self._start(status, headers)
        await self._end(b"" if self.request.method == b"HEAD" else body)

    async def stream(self, response: StreamingResponse) -> None:
        """An event stream: its head, each frame as it comes (the server's ``send``
        waits while the client reads nothing), then its end."""
        events = response.events
        try:
            self.status = response.status
            await self._start(response.status, [*response.headers, *self.cors])
            send = self.send
            async for frame in events:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await self._end(b"")
        finally:
            await events.aclose(disconnected=self.gone)

    async def error(
        self,
        status: int,
        message: str,
        extra: tuple[tuple[bytes, bytes], ...] = (),
        *,
        close: bool = False,
    ) -> None:
        """An HTTP-level error with its JSON-RPC error body (see statuses.error_body),
        ``extra`` headers (a refusal's own), and ``Connection: close`` when the
        request was not read to its end."""
        headers = [*JSON, *extra]
        if close:
            headers.append(_CLOSE)
        await self.respond(Response(status, headers, error_body(status, message)))

    async def fail(
        self, status: int, message: str, extra: tuple[tuple[bytes, bytes], ...] = ()
    ) -> None:
        """Answer an error before the body is read (or after a failure), closing."""
        await self.error(status, message, extra, close=True)
        self.record()

    async def too_large(self) -> None:
        limit = self.site.config.max_body_size
        await self.fail(413, f"Request body too large (max {limit} bytes)")

    async def _start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def _end(self, body: bytes) -> None:
        self.done = True
        await self.send({"type": "http.response.body", "body": body})

    # -- the log ------------------------------------------------------------

    def record(self, outcome: str | None = None) -> None:
        self.site.record(self.request, self.route, self.status, self.t0, outcome)

    def record_cut_off(self) -> None:
        """The access line of a request whose answer was cut off: its status as
        sent (499 if nothing was), and why: ``client-gone``, or ``cancelled``
        (the server's doing)."""
        outcome = None
        if not self.done:
            outcome = CLIENT_GONE if self.gone else "cancelled"
            if not self.started:
                self.status = _CLIENT_CLOSED
        self.record(outcome)


def _longer(length: bytes, limit: int) -> bool:
    """Whether a ``Content-Length`` says more than ``limit`` bytes (a malformed
    one is the ASGI server's to refuse)."""
    try:
        return int(length) > limit
    except ValueError:
        return False
