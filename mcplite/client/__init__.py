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
  one long poll may last is the server's to say: the ``redeem`` tool's schema.
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
import ssl
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from ..core import wire
from ..core.outcomes import Partial, ProgressUpdate
from ..core.wire import DEFAULT_BASE_PATH

__all__ = [
    "AuthenticationError",
    "BaseClient",
    "Client",
    "ClientError",
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

#: Base path of an ``http://`` URL given without one.
DEFAULT_GRPC_PORT = 50051


# --- what a call gives back -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """One tool of :meth:`BaseClient.list_tools`."""

    name: str
    type: str | None
    description: str
    input_schema: dict[str, Any] = field(default_factory=dict)
    #: What a host shows: MCP's ``title``, ``annotations`` (``readOnlyHint``, ...)
    #: and ``icons`` (``{"src", "mimeType"?, "sizes"?, "theme"?}``), when declared.
    title: str | None = None
    annotations: dict[str, Any] = field(default_factory=dict)
    icons: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any]) -> ToolInfo:
        """From a discovery entry: ``{"name", "@type"?, "description", "inputSchema",
        "title"?, "annotations"?, "icons"?}``."""
        kind = definition.get("@type") or definition.get("type")
        schema = definition.get("inputSchema")
        title = definition.get("title")
        annotations = definition.get("annotations")
        icons = definition.get("icons")
        return cls(
            name=str(definition.get("name", "")),
            type=str(kind) if kind else None,
            description=str(definition.get("description") or ""),
            input_schema=dict(schema) if isinstance(schema, Mapping) else {},
            title=title if isinstance(title, str) else None,
            annotations=dict(annotations) if isinstance(annotations, Mapping) else {},
            icons=[dict(i) for i in icons if isinstance(i, Mapping)]
            if isinstance(icons, list)
            else [],
        )


@dataclass(frozen=True, slots=True)
class Response:
    """The result of a call, whatever its ``response_type``.

    ``raw`` is the whole result object as the HTTP binding sends it (``content``,
    ``isError``, ``failure``, ``elicitation``, ``resources``, ... and ``_meta``);
    over gRPC it is rebuilt in the same shape, timestamps as ISO 8601.
    """

    response_type: str
    content: list[Any]
    meta: dict[str, Any]
    raw: dict[str, Any]

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> Response:
        meta = result.get("_meta")
        meta = dict(meta) if isinstance(meta, Mapping) else {}
        content = result.get("content")
        return cls(
            response_type=str(meta.get("response_type", "answer")),
            content=list(content) if isinstance(content, list) else [],
            meta=meta,
            raw=dict(result),
        )

    @property
    def is_error(self) -> bool:
        """True for a ``failure`` (the result's ``isError``)."""
        return self.response_type == "failure" or self.raw.get("isError") is True

    @property
    def promise_token(self) -> str | None:
        """The token of a ``promise`` response (None for any other type)."""
        token = self.meta.get("promise_token")
        return token if isinstance(token, str) and token else None

    @property
    def text(self) -> str:
        """The text items of ``content``, joined by newlines."""
        return "\n".join(
            item["text"]
            for item in self.content
            if isinstance(item, Mapping)
            and item.get("type") == "text"
            and isinstance(item.get("text"), str)
        )


# --- errors ---------------------------------------------------------------------


class ClientError(Exception):
    """Base of every error the client raises."""


class TransportError(ClientError):
    """The server could not be reached or talked to: connection refused or broken,
    an HTTP status without a JSON-RPC body, a malformed reply."""


class RequestTimeout(TransportError, TimeoutError):
    """One request got no (complete) answer within its timeout."""


class PromiseTimeout(ClientError, TimeoutError):
    """A promise did not reach its outcome within the call's ``timeout``.

    ``token`` redeems it later (until it expires).
    """

    def __init__(self, message: str, token: str) -> None:
        super().__init__(message)
        self.token = token


class RPCError(ClientError):
    """A protocol error answered by the server, with its JSON-RPC ``code``,
    ``message`` and ``data``.  Over gRPC, ``code`` is the equivalent JSON-RPC code
    and ``grpc_status`` the status number received."""

    def __init__(
        self, code: int, message: str, data: Any = None, *, grpc_status: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.grpc_status = grpc_status

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, {self.data!r})"

    def _data(self, key: str) -> Any:
        return self.data.get(key) if isinstance(self.data, Mapping) else None


class ToolNotFoundError(RPCError):
    """No tool by that name (-32601, gRPC NOT_FOUND)."""

    @property
    def requested_tool(self) -> str | None:
        value = self._data("requested_tool")
        return value if isinstance(value, str) else None

    @property
    def available_tools(self) -> list[str]:
        value = self._data("available_tools")
        return [str(v) for v in value] if isinstance(value, list) else []

    @property
    def suggestion(self) -> str | None:
        """The server's hint, e.g. ``"Did you mean 'echo'?"``, when a name is close."""
        value = self._data("suggestion")
        return value if isinstance(value, str) else None


class InvalidArgumentsError(RPCError):
    """The arguments do not match the tool's schema (-32602, gRPC INVALID_ARGUMENT)."""

    @property
    def errors(self) -> list[dict[str, str]]:
        """Each offending field: ``{"field": "limit", "message": "..."}``."""
        value = self._data("errors")
        if not isinstance(value, list):
            return []
        return [
            {"field": str(e.get("field", "")), "message": str(e.get("message", ""))}
            for e in value
            if isinstance(e, Mapping)
        ]


class InvalidTokenError(RPCError):
    """A promise token that is invalid, expired or unknown to the server."""

    @property
    def reason(self) -> str | None:
        """``"invalid"``, ``"expired"`` or ``"unknown"``."""
        value = self._data("reason")
        return value if isinstance(value, str) else None


class OverloadedError(RPCError):
    """The server is at a limit (-32000, HTTP 503, gRPC RESOURCE_EXHAUSTED); retryable."""

    @property
    def retry_after(self) -> float | None:
        value = self._data("retry_after")
        return float(value) if isinstance(value, int | float) else None


class AuthenticationError(RPCError):
    """The server refused the request's credentials, or wanted some: no token, an
    unknown, expired or malformed one (-32041, HTTP 401, gRPC UNAUTHENTICATED).

    ``www_authenticate`` is the HTTP challenge (``Bearer resource_metadata=...``
    names where an OAuth server says how to get a token); None over gRPC.
    """

    www_authenticate: str | None = None


class PermissionDeniedError(RPCError):
    """The token is good but lacks a scope the tool needs (-32043, HTTP 403
    ``insufficient_scope``, gRPC PERMISSION_DENIED)."""

    www_authenticate: str | None = None

    @property
    def scopes(self) -> list[str]:
        """The scopes the request needed (every one the tool names)."""
        value = self._data("scopes")
        return [str(s) for s in value] if isinstance(value, list) else []


class InternalServerError(RPCError):
    """The tool raised (-32603, gRPC INTERNAL); ``error_id`` finds it in the server log."""

    @property
    def error_id(self) -> str | None:
        value = self._data("error_id")
        return value if isinstance(value, str) else None


_TOKEN_REASONS = frozenset({"invalid", "expired", "unknown"})


def rpc_error(
    code: int, message: str, data: Any = None, *, grpc_status: int | None = None
) -> RPCError:
    """The :class:`RPCError` subclass for a JSON-RPC error."""
    cls: type[RPCError] = RPCError
    if code == wire.METHOD_NOT_FOUND and isinstance(data, Mapping) and "requested_tool" in data:
        cls = ToolNotFoundError
    elif code == wire.INVALID_PARAMS:
        token_error = isinstance(data, Mapping) and data.get("reason") in _TOKEN_REASONS
        cls = InvalidTokenError if token_error else InvalidArgumentsError
    elif code == wire.INTERNAL_ERROR:
        cls = InternalServerError
    elif code == wire.SERVER_ERROR:
        cls = OverloadedError
    elif code == wire.UNAUTHENTICATED_ERROR:
        cls = AuthenticationError
    elif code == wire.FORBIDDEN_ERROR:
        cls = PermissionDeniedError
    return cls(code, message, data, grpc_status=grpc_status)


def error_from_object(error: Any) -> RPCError:
    """The :class:`RPCError` for a JSON-RPC ``error`` object ``{code, message, data?}``."""
    if not isinstance(error, Mapping):
        return RPCError(wire.INTERNAL_ERROR, f"malformed error object: {error!r}")
    code = error.get("code")
    message = error.get("message")
    return rpc_error(
        code if isinstance(code, int) and not isinstance(code, bool) else wire.INTERNAL_ERROR,
        message if isinstance(message, str) else "error",
        error.get("data"),
    )


# --- transports -------------------------------------------------------------------


class Transport(Protocol):
    """What a client needs of a wire.  Results are the HTTP binding's JSON shapes."""

    async def list_tools(self, timeout: float) -> list[dict[str, Any]]:
        """The discovery entries.  Raises RPCError, TransportError."""
        ...

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float, *, idempotent: bool = False
    ) -> dict[str, Any]:
        """One ``tools/call``: the result object (with ``_meta``).

        ``idempotent`` allows a retry after the server closed a reused connection
        without answering.  Raises RPCError, TransportError.
        """
        ...

    def stream(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> AsyncIterator[Partial | ProgressUpdate | dict[str, Any]]:
        """A streamed call: :class:`Partial` parts (and :class:`ProgressUpdate`
        reports among them, when the tool makes some), then the final result object.

        ``timeout`` bounds each wait for the next item.
        """
        ...

    async def aclose(self) -> None: ...


class PromptTransport(Protocol):
    """A transport that also carries prompts (MCP's JSON shapes)."""

    async def list_prompts(self, timeout: float) -> list[dict[str, Any]]: ...

    async def get_prompt(
        self, name: str, arguments: dict[str, str], timeout: float
    ) -> dict[str, Any]: ...


class ResourceTransport(Protocol):
    """A transport that also carries resources: any MCP-style JSON-RPC request."""

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One JSON-RPC request: its result object.  Raises RPCError, TransportError."""
        ...


# --- the client -------------------------------------------------------------------


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
        while response.response_type == "promise":
            token = response.promise_token
            if token is None:
                raise TransportError("the server answered a promise without a promise_token")
            if on_progress is not None:
                on_progress(response)
            remaining = end - loop.time()
            if remaining <= 0:
                raise PromiseTimeout(
                    f"no outcome of '{name}' within {total:g} s; "
                    f"redeem promise {token} later to get it",
                    token,
                )
            longest = await self._longest_redeem_wait()
            if longest > 0 and poll_wait is not None:
                longest = min(longest, poll_wait)
            if longest > 0:
                response = await self._long_poll(token, min(longest, remaining))
            else:  # a server whose redeem cannot wait: poll, backing off
                await asyncio.sleep(min(pause, remaining))
                pause = min(pause * 2, _LAST_POLL_PAUSE)
                response = await self.redeem(token)
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

    Raises ValueError for an unsupported URL, TLS options with a plaintext URL,
    TLS files that cannot be used, or a token a header cannot carry (the message
    never quotes the token).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        pool_size: int = 8,
        token: str | None = None,
        cafile: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.url = url
        security = _Security(token, cafile, certfile, keyfile, ssl_context)
        super().__init__(_transport_for(url, pool_size, security), timeout=timeout)

    async def __aenter__(self) -> Client:
        return self


@dataclass(frozen=True, slots=True)
class _Security:
    """The credentials and TLS options of a :class:`Client` (``repr`` hides the token)."""

    token: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    ssl_context: ssl.SSLContext | None = None

    def context(self, url: str, tls: bool, alpn: str) -> ssl.SSLContext | None:
        """The SSL context of a connection to ``url`` (None: plaintext)."""
        from ._tls import client_context

        files = self.cafile is not None or self.certfile is not None or self.keyfile is not None
        if not tls:
            if files or self.ssl_context is not None:
                raise ValueError(f"TLS options need an https:// or grpcs:// URL, not {url!r}")
            return None
        if self.ssl_context is not None:
            if files:
                raise ValueError("give either ssl_context or cafile/certfile/keyfile")
            if alpn == "h2":
                self.ssl_context.set_alpn_protocols(["h2"])
            return self.ssl_context
        return client_context(
            cafile=self.cafile, certfile=self.certfile, keyfile=self.keyfile, alpn=alpn
        )


def _transport_for(url: str, pool_size: int, security: _Security | None = None) -> Transport:
    from ._tls import authorization

    security = security or _Security()
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in URL {url!r}") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in URL {url!r}")
    if scheme in ("http", "https"):
        from ._http import HttpTransport

        tls = scheme == "https"
        base = parts.path if parts.path else DEFAULT_BASE_PATH
        return HttpTransport(
            host,
            port or (443 if tls else 80),
            base.rstrip("/"),
            tls=tls,
            ssl_context=security.context(url, tls, "http/1.1"),
            authorization=authorization(security.token),
            pool_size=pool_size,
        )
    if scheme in ("grpc", "grpcs"):
        from ._grpc import GrpcTransport

        if parts.path not in ("", "/"):
            raise ValueError(f"a {scheme}:// URL has no path: {url!r}")
        return GrpcTransport(
            host,
            port or DEFAULT_GRPC_PORT,
            ssl_context=security.context(url, scheme == "grpcs", "h2"),
            authorization=authorization(security.token),
        )
    raise ValueError(
        f"unsupported URL {url!r}: use http(s)://HOST:PORT/BASE or grpc(s)://HOST:PORT"
    )
