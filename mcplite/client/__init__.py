"""A client for MCP-lite servers: one interface over HTTP and gRPC.

The URL picks the transport::

    from mcplite.client import Client

    async with Client("http://127.0.0.1:8080/mcp-lite/v1") as client:  # or "grpc://127.0.0.1:50051"
        tools = await client.list_tools()
        response = await client.call("search_documents", {"query": "MCP", "limit": 3})
        print(response.response_type, response.content)
        async for item in client.stream("generate_report", {"topic": "Q3"}, on_progress=print):
            ...  # Partial(value) for each part, then the final Response
        prompts = await client.list_prompts()  # MCP's Prompt objects
        result = await client.get_prompt("explain_section", {"document_id": "doc_123"})
        contents = await client.read_resource("mcplite-demo://corpus/doc_123")  # HTTP only

- An ``http://`` URL without a path means the default base path ``/mcp-lite/v1``.
- :meth:`BaseClient.call` redeems promises by itself (long-polling ``redeem``) until
  the outcome or its ``timeout``; ``wait=False`` hands back the promise.  How long
  one long poll may last is the server's to say: the ``redeem`` tool's schema.  A
  redeem refused as :class:`OverloadedError` meanwhile (the server at a limit, or
  its promise store down for a moment: the promise lives on) is asked again
  after the ``retry_after`` it says.
- Protocol errors raise :class:`RPCError` subclasses that keep the JSON-RPC
  ``code``, ``message`` and ``data``; gRPC statuses are mapped to the same classes
  (and the same codes).  Business outcomes (failure, elicitation, ...) are
  :class:`Response` objects, never exceptions.
- :class:`TransportError` means the server could not be reached or talked to
  (a TLS handshake that fails, say a certificate that does not verify, included).
- Security: ``https://`` and ``grpcs://`` URLs use TLS, verifying the server
  against the system's CAs or ``cafile``; ``certfile``/``keyfile`` present a
  client certificate (mutual TLS); or give a ready ``ssl_context``.  ``token`` is
  sent on every request (``Authorization: Bearer ...`` over HTTP, ``authorization``
  metadata over gRPC).  A refused token raises :class:`AuthenticationError`
  (HTTP 401, gRPC UNAUTHENTICATED), a token without the scope a tool needs
  :class:`PermissionDeniedError` (403, PERMISSION_DENIED), a caller over its rate
  :class:`OverloadedError` with ``retry_after`` (429, RESOURCE_EXHAUSTED).
- Prompts and resources (when the server has them) come in MCP's JSON shapes:
  :meth:`BaseClient.list_prompts`, :meth:`~BaseClient.get_prompt` (HTTP JSON-RPC
  ``prompts/*``, or gRPC ``GetPrompts``/``GetPrompt``), and over HTTP only
  :meth:`~BaseClient.list_resources`, :meth:`~BaseClient.list_resource_templates`
  and :meth:`~BaseClient.read_resource` (gRPC has no resources: ClientError).  An
  unknown prompt or resource, or a missing argument, is :class:`InvalidArgumentsError`
  (-32602); a server without prompts or resources answers :class:`RPCError` -32601.

:class:`mcplite.client.sync.SyncClient` wraps this for scripts;
:class:`mcplite.testing.InMemoryClient` is the same interface over a
:class:`~mcplite.Dispatcher`, without sockets.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, Callable, Mapping
from types import TracebackType
from typing import Any, Unpack

from ..core.outcomes import Partial, ProgressUpdate
from .errors import (
    AuthenticationError,
    ClientError,
    InternalServerError,
    InvalidArgumentsError,
    InvalidTokenError,
    OverloadedError,
    PermissionDeniedError,
    PromiseTimeout,
    RequestTimeout,
    RPCError,
    ToolNotFoundError,
    TransportError,
    rpc_error,
)
from .errors import error_from_object as error_from_object
from .options import ClientOptions, check_options
from .results import Response, ToolInfo
from .transports import PromptTransport, ResourceTransport, Security, Transport, transport_for

__all__ = [
    "AuthenticationError",
    "BaseClient",
    "Client",
    "ClientError",
    "ClientOptions",
    "InternalServerError",
    "InvalidArgumentsError",
    "InvalidTokenError",
    "OverloadedError",
    "Partial",
    "PermissionDeniedError",
    "ProgressUpdate",
    "PromiseTimeout",
    "PromptTransport",
    "RPCError",
    "RequestTimeout",
    "ResourceTransport",
    "Response",
    "ToolInfo",
    "ToolNotFoundError",
    "Transport",
    "TransportError",
    "rpc_error",
]


class BaseClient:
    """The client's methods over any :class:`Transport` (see :class:`Client`).

    ``timeout`` (seconds) bounds each request, and is the default total time of
    :meth:`call` (promise redemption included).
    """

    def __init__(self, transport: Transport, *, timeout: float = 30.0) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        self.transport = transport
        self.timeout = timeout
        self._redeem_wait: float | None = None  # see _longest_redeem_wait

    async def __aenter__(self) -> BaseClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the transport's connections."""
        await self.transport.aclose()

    async def list_tools(self) -> list[ToolInfo]:
        """Every tool the server offers, system tools (``redeem``, ``cancel``) included.

        Raises :class:`RPCError`, :class:`TransportError`.
        """
        definitions = await self.transport.list_tools(self.timeout)
        return [ToolInfo.from_definition(d) for d in definitions]

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        wait: bool = True,
        timeout: float | None = None,
        on_progress: Callable[[Response], object] | None = None,
        poll_wait: float | None = None,
    ) -> Response:
        """Call tool ``name`` and return its outcome.

        With ``wait`` (the default) a promise is redeemed with long polls until its
        outcome, at most ``timeout`` seconds in all (default: the client's timeout);
        then :class:`PromiseTimeout` (a ``TimeoutError``) says the token.  With
        ``wait=False`` a promise is returned as it is.

        While waiting, ``on_progress`` is called with the promise and with every
        redeem that answers it again (its token, and the server's latest
        ``progress`` and ``estimated_completion`` in ``meta``).  ``poll_wait`` caps
        each long poll, in seconds (``1``: hear progress about once a second);
        by default a poll waits as long as the server allows.

        A redeem refused meanwhile as :class:`OverloadedError` (retryable) is
        asked again after its ``retry_after``.

        Raises :class:`ToolNotFoundError`, :class:`InvalidArgumentsError`,
        :class:`OverloadedError`, :class:`InternalServerError` (and other
        :class:`RPCError`), :class:`TransportError`, :class:`PromiseTimeout`.
        """
        total = self.timeout if timeout is None else timeout
        if not total > 0:
            raise ValueError("timeout must be positive")
        if poll_wait is not None and not poll_wait > 0:
            raise ValueError("poll_wait must be positive")
        loop = asyncio.get_running_loop()
        end = loop.time() + total
        response = Response.from_result(
            await self.transport.call(name, dict(arguments or {}), total)
        )
        if not wait:
            return response
        pause = _FIRST_POLL_PAUSE
        told = None
        while response.response_type == "promise":
            token = response.promise_token
            if token is None:
                raise TransportError("the server answered a promise without a promise_token")
            if on_progress is not None and response is not told:
                on_progress(response)
                told = response
            remaining = end - loop.time()
            if remaining <= 0:
                raise PromiseTimeout(
                    f"no outcome of '{name}' within {total:g} s; "
                    f"redeem promise {token} later to get it",
                    token,
                )
            try:
                longest = await self._longest_redeem_wait()
                if longest > 0 and poll_wait is not None:
                    longest = min(longest, poll_wait)
                if longest > 0:
                    response = await self._long_poll(token, min(longest, remaining))
                else:  # a server whose redeem cannot wait: poll, backing off
                    await asyncio.sleep(min(pause, remaining))
                    pause = min(pause * 2, _LAST_POLL_PAUSE)
                    response = await self.redeem(token)
            except OverloadedError as exc:
                # At a limit, or its promise store down for a moment: the promise
                # lives on.  Ask again when the server says (within the timeout).
                retry = exc.retry_after if exc.retry_after is not None else _OVERLOAD_PAUSE
                await asyncio.sleep(min(max(retry, 0.0), max(end - loop.time(), 0.0)))
        return response

    async def _long_poll(self, token: str, wait: float) -> Response:
        """``redeem(token, wait)``; once more with the server's new bound if the
        server refuses ``wait`` (it was restarted with a shorter one, say)."""
        try:
            return await self.redeem(token, wait=wait)
        except InvalidArgumentsError as exc:
            if not any(e["field"] == "wait" for e in exc.errors):
                raise
        self._redeem_wait = None
        longest = await self._longest_redeem_wait()
        return await self.redeem(token, wait=min(longest, wait))

    async def _longest_redeem_wait(self) -> float:
        """The longest ``wait`` the server's ``redeem`` accepts, in seconds.

        The server says it in discovery: the ``redeem`` tool's
        ``inputSchema.properties.wait.maximum`` (``Config.max_redeem_wait`` on an
        mcplite server).  The client repeats no server limit: it asks once, on its
        first promise, and keeps the answer.  A ``wait`` without a maximum is
        unbounded; a server without discovery, or whose ``redeem`` has no ``wait``,
        gets 0 (redeem is then polled with backoff).
        """
        if self._redeem_wait is None:
            try:
                tools = await self.list_tools()
            except (AuthenticationError, PermissionDeniedError):
                raise  # the redeem would be refused too: say so now, and ask again later
            except RPCError:
                tools = []
            self._redeem_wait = next(
                (_wait_bound(t.input_schema) for t in tools if t.name == "redeem"), 0.0
            )
        return self._redeem_wait

    async def redeem(self, token: str, wait: float = 0) -> Response:
        """Redeem a promise: its outcome, or the promise again (with progress) while
        it runs.  ``wait`` long-polls for the outcome, up to the server's bound (the
        ``maximum`` in the ``redeem`` tool's schema; 30 s by default).

        Raises :class:`InvalidTokenError` for a bad, expired or unknown token, and
        :class:`InvalidArgumentsError` for a ``wait`` beyond the server's bound.
        """
        arguments: dict[str, Any] = {"promise": token}
        if wait:
            arguments["wait"] = wait
        raw = await self.transport.call("redeem", arguments, wait + self.timeout, idempotent=True)
        return Response.from_result(raw)

    async def cancel(self, token: str) -> Response:
        """Cancel the operation behind a promise; the answer's text is ``cancelled``
        or ``already finished``.  Raises :class:`InvalidTokenError`."""
        raw = await self.transport.call("cancel", {"promise": token}, self.timeout, idempotent=True)
        return Response.from_result(raw)

    async def stream(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_progress: Callable[[ProgressUpdate], object] | None = None,
    ) -> AsyncGenerator[Partial | Response, None]:
        """A streamed call: yields :class:`Partial` for each part as it arrives, then
        the final :class:`Response` (the aggregate of the parts, or the tool's outcome).

        ``on_progress`` is called with each :class:`ProgressUpdate` the tool reports
        (``ctx.report_progress``: ``progress``, ``total``, ``message``) as it
        arrives, in order with the parts (without it they are dropped).
        Errors found before the tool starts raise on the first iteration; a tool
        that fails mid-stream raises :class:`InternalServerError` there.  Leaving
        the loop early (and ``aclose()``, or ``contextlib.aclosing``) stops the
        tool.  The client's timeout bounds each wait for
        the next item (HTTP servers send heartbeats while a tool is quiet).
        """
        items = self.transport.stream(name, dict(arguments or {}), self.timeout)
        try:
            async for item in items:
                if isinstance(item, Partial):
                    yield item
                elif isinstance(item, ProgressUpdate):
                    if on_progress is not None:
                        on_progress(item)
                else:
                    yield Response.from_result(item)
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()

    # --- prompts and resources (MCP's shapes) --------------------------------------

    def _prompt_transport(self) -> PromptTransport:
        transport: Any = self.transport
        if not callable(getattr(transport, "get_prompt", None)):
            raise ClientError(f"{type(transport).__name__} carries no prompts")
        prompt_transport: PromptTransport = transport
        return prompt_transport

    def _resource_transport(self) -> ResourceTransport:
        transport: Any = self.transport
        if not callable(getattr(transport, "request", None)):
            raise ClientError(
                f"{type(transport).__name__} carries no resources (use an http:// URL)"
            )
        resource_transport: ResourceTransport = transport
        return resource_transport

    async def list_prompts(self) -> list[dict[str, Any]]:
        """The server's prompts: MCP ``Prompt`` objects (``name``, ``description``,
        ``arguments`` of ``{name, description, required}``).  Raises :class:`RPCError`
        (-32601 when the server has no prompts), :class:`TransportError`."""
        return await self._prompt_transport().list_prompts(self.timeout)

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Prompt ``name`` filled in: MCP's ``GetPromptResult`` (``description``,
        ``messages`` of ``{role, content}``).  An unknown prompt or a missing or
        invalid argument raises :class:`InvalidArgumentsError`."""
        args = {str(k): str(v) for k, v in (arguments or {}).items()}
        return await self._prompt_transport().get_prompt(name, args, self.timeout)

    async def list_resources(self) -> list[dict[str, Any]]:
        """The server's resources: MCP ``Resource`` objects (``uri``, ``name``, ...)."""
        result = await self._resource_transport().request("resources/list", {}, self.timeout)
        return _list_of(result, "resources")

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        """The server's resource templates: MCP ``ResourceTemplate`` objects."""
        result = await self._resource_transport().request(
            "resources/templates/list", {}, self.timeout
        )
        return _list_of(result, "resourceTemplates")

    async def read_resource(self, uri: str) -> list[dict[str, Any]]:
        """The contents of ``uri``: MCP ``ResourceContents`` (``uri``, ``mimeType``,
        ``text`` or base64 ``blob``).  An unknown URI raises :class:`InvalidArgumentsError`."""
        result = await self._resource_transport().request(
            "resources/read", {"uri": uri}, self.timeout
        )
        return _list_of(result, "contents")


def _list_of(result: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    items = result.get(key)
    if not isinstance(items, list):
        raise TransportError(f"the server answered no list of {key}")
    return [item for item in items if isinstance(item, dict)]


# Pauses between polls of a server whose redeem cannot long-poll, in seconds.
_FIRST_POLL_PAUSE = 0.05
_LAST_POLL_PAUSE = 1.0
#: Seconds before a redeem refused as overloaded is asked again, when the server
#: does not say (mcplite's own default ``retry_after``).
_OVERLOAD_PAUSE = 1.0


def _wait_bound(schema: Mapping[str, Any]) -> float:
    """The longest ``wait`` a ``redeem`` input schema allows (see _longest_redeem_wait)."""
    properties = schema.get("properties")
    wait = properties.get("wait") if isinstance(properties, Mapping) else None
    if not isinstance(wait, Mapping):
        return 0.0
    maximum = wait.get("maximum")
    if isinstance(maximum, int | float) and not isinstance(maximum, bool):
        return max(0.0, float(maximum))
    return math.inf


class Client(BaseClient):
    """A client for the server at ``url``: ``http://HOST:PORT/BASE`` or
    ``https://HOST:PORT/BASE`` (HTTP/1.1, keep-alive connection pool of at most
    ``pool_size`` idle connections), ``grpc://HOST:PORT`` or ``grpcs://HOST:PORT``
    (HTTP/2).  Use it as an async context manager, or call :meth:`aclose`.

    ``token`` is a bearer token sent with every request.  TLS (``https://``,
    ``grpcs://`` only): the server's certificate is verified against the system's
    CAs, or only against ``cafile`` when given (PEM); ``certfile`` and ``keyfile``
    (PEM; the key may be in ``certfile``) are the client certificate for mutual
    TLS.  Instead of those, ``ssl_context`` is used as it is, except that over
    gRPC its ALPN protocols are set to ``h2`` (which HTTP/2 over TLS needs).

    The options (:class:`~mcplite.client.options.ClientOptions`): ``timeout``
    (seconds, default 30), ``pool_size`` (default 8), ``token``, ``cafile``,
    ``certfile``, ``keyfile``, ``ssl_context`` (default None each).

    Raises ValueError for an unsupported URL, TLS options with a plaintext URL,
    TLS files that cannot be used, or a token a header cannot carry (the message
    never quotes the token); TypeError for an option of another name.
    """

    def __init__(self, url: str, **options: Unpack[ClientOptions]) -> None:
        check_options(options, ClientOptions, "Client")
        self.url = url
        security = Security(
            options.get("token"),
            options.get("cafile"),
            options.get("certfile"),
            options.get("keyfile"),
            options.get("ssl_context"),
        )
        transport = transport_for(url, options.get("pool_size", 8), security)
        super().__init__(transport, timeout=options.get("timeout", 30.0))

    async def __aenter__(self) -> Client:
        return self
