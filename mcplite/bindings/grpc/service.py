"""The gRPC binding: spec section 5's ``mcplite.MCPLite`` service on grpclib.

It only translates between the wire and the :class:`Dispatcher` (the one dispatch
path of every binding); it decides nothing about tools.

Messages.  ``CallTool`` and ``CallToolStream`` requests and responses are read and
written by :mod:`mcplite.protocols.protobuf` (the hot path); grpclib only frames bytes: the handlers
declare :class:`RawMessage` as their message type, which passes grpclib's default
``ProtoCodec`` untouched.  ``GetTools`` answers with ``ToolsList`` bytes encoded
once per list of tool definitions.

Streaming.  ``CallToolStream`` sends a tool's parts, its progress and its final
result (:mod:`.streaming`).

Prompts.  With a :class:`~mcplite.core.prompts.Prompts` registry (``prompts=``) the
service also answers ``GetPrompts`` (``PromptsList``: MCP's ``Prompt`` objects,
spec 8.1) and ``GetPrompt`` (``GetPromptResponse``: the description and each MCP
``PromptMessage`` as a ``Struct``), through betterproto's generated classes: off
the hot path.  An unknown prompt is ``NOT_FOUND`` (data ``{"name": ...}``), a
missing or invalid argument ``INVALID_ARGUMENT``, as ``prompts/get`` answers -32602
on JSON-RPC (whose handler this reuses).  Without prompts both are
``UNIMPLEMENTED``.

Errors.  An :class:`~mcplite.core.errors.MCPLiteError` becomes its ``grpc_status``
with its message and its data in the trailing metadata; an unexpected exception
``INTERNAL`` with an error id (:mod:`.status`).

Limits.  A request message over ``max_message_size`` (default 4 MiB, as grpcio's)
is ``RESOURCE_EXHAUSTED`` (refused from its 5-byte length prefix, before its body
is read, on the speed paths), a malformed one ``INVALID_ARGUMENT``, a compressed
one ``UNIMPLEMENTED`` (:mod:`.messages`).  When the client's ``grpc-timeout``
passes before a result, grpclib cancels the handler (and so the dispatcher's
call, which cancels the tool) and answers ``DEADLINE_EXCEEDED``.

Serving.  :class:`GrpcServer` is what the CLI runs: ``start(host, port)``, ``port``,
and a graceful ``shutdown(grace)``: new calls are refused with ``UNAVAILABLE``
(which clients retry), calls in flight get ``grace`` seconds, then the rest are
cancelled and (on the speed paths) the connections closed with a GOAWAY; its health service says
``NOT_SERVING`` from the start of that drain.  :func:`create_server` gives a
bare grpclib ``Server`` for embedding.  Both serve, beside ``mcplite.MCPLite``,
``grpc.health.v1.Health`` (:mod:`.health`) and server reflection (:mod:`.reflection`).

Both serve with the grpclib server of the path :mod:`.paths` chose: on the speed
paths a :class:`~.accel.connections.LimitedServer` (a connection cap, an idle
timeout, a GOAWAY on close, no rapid-reset leak), else grpclib's own ``Server``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

import betterproto.lib.google.protobuf as wkt
from grpclib.config import Configuration
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream

from ...core.authorize import Gate
from ...core.config import Config
from ...core.context import Caller, RequestContext
from ...core.envelope import Result
from ...core.errors import MCPLiteError, ShuttingDown
from ...core.observe import CLIENT_GONE, QUIET, Access, AccessLog, Metrics
from ...core.prompts import Prompts
from ...core.wire import DEFAULT_MAX_MESSAGE_SIZE, ERROR_DATA_KEY
from ...protocols.generated import mcplite as generated
from ...protocols.methods import prompt_methods
from ...protocols.protobuf import (
    CodecError,
    decode_tool_request,
    encode_struct,
    encode_tool_response,
    encode_tools_list,
    icon_message,
)
from ..base import Binding, listen_socket
from .health import HealthService
from .messages import RawMessage, response_meta
from .paths import PathParts, chosen
from .reflection import SERVICE_NAMES as REFLECTION_NAMES
from .reflection import ReflectionService
from .status import ERROR_DATA_LIMIT, ErrorDetailsCodec, StatusSender
from .streaming import StreamingDispatcher, deadline_passed, send_stream

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ERROR_DATA_KEY",
    "ERROR_DATA_LIMIT",
    "DispatcherLike",
    "ErrorDetailsCodec",
    "GrpcServer",
    "MCPLiteService",
    "RawMessage",
    "create_server",
    "listen_socket",
    "response_meta",
    "services",
]

log = logging.getLogger("mcplite.bindings.grpc")

#: Seconds a connection may go without an open stream (as HTTP's keep-alive timeout).
DEFAULT_IDLE_TIMEOUT = 15.0
#: Connections served at once (as HTTP's).
DEFAULT_MAX_CONNECTIONS = 1024

_SERVICE = "/mcplite.MCPLite/"
#: The RPC of each method name the auth checks know it by.
_RPC_NAMES = {
    "tools/list": "GetTools",
    "tools/call": "CallTool",
    "tools/call/stream": "CallToolStream",
    "prompts/list": "GetPrompts",
    "prompts/get": "GetPrompt",
}

_Handler = Callable[[Stream[Any, Any]], Awaitable[None]]
_ContextHandler = Callable[[Stream[Any, Any], RequestContext], Awaitable[None]]


class DispatcherLike(StreamingDispatcher, Protocol):
    """What the service needs of :class:`mcplite.core.dispatch.Dispatcher`."""

    auth: Gate | None
    metrics: Metrics
    access_log: AccessLog

    def tool_definitions(self, context: RequestContext = ...) -> list[dict[str, Any]]: ...

    async def call(
        self, name: str, arguments: dict[str, Any] | None, context: RequestContext = ...
    ) -> Result: ...


class MCPLiteService:
    """The ``mcplite.MCPLite`` service over a dispatcher, for ``grpclib.server.Server``.

    ``max_message_size`` bounds a request message in bytes (RESOURCE_EXHAUSTED above).
    ``error_details``: the server encodes status details with :class:`ErrorDetailsCodec`
    (as :func:`create_server`'s does), so errors carry ``grpc-status-details-bin``.
    Raises ValueError for a negative ``max_message_size``.
    """

    def __init__(
        self,
        dispatcher: DispatcherLike,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        prompts: Prompts | None = None,
        access_log: bool = False,
        error_details: bool = False,
    ) -> None:
        if max_message_size < 0:
            raise ValueError("max_message_size must not be negative")
        path = chosen()
        self._read_message = path.read_message
        self._send_answer = path.send_answer
        self._statuses = StatusSender(error_details=error_details, send_spaced=path.send_spaced)
        self._dispatcher = dispatcher
        self._access_log = access_log
        self._prompts = prompts
        self._prompt_get = None if prompts is None else prompt_methods(prompts)["prompts/get"]
        self._max_message_size = max_message_size
        self._tool_definitions: list[dict[str, Any]] | None = None
        self._tools_list = b""
        self._active: set[asyncio.Task[Any]] = set()
        self.draining = False
        #: The grace period is over: the calls still running are being cancelled.
        self.closing = False

    def __mapping__(self) -> dict[str, Handler]:
        mapping = {
            _SERVICE + "GetTools": Handler(
                self._tracked(self._get_tools, "tools/list"),
                Cardinality.UNARY_UNARY,
                RawMessage,
                RawMessage,
            ),
            _SERVICE + "CallTool": Handler(
                self._tracked(self._call_tool, "tools/call"),
                Cardinality.UNARY_UNARY,
                RawMessage,
                RawMessage,
            ),
            _SERVICE + "CallToolStream": Handler(
                self._tracked(self._call_tool_stream, "tools/call/stream"),
                Cardinality.UNARY_STREAM,
                RawMessage,
                RawMessage,
            ),
        }
        if self._prompts is not None:
            mapping[_SERVICE + "GetPrompts"] = Handler(
                self._tracked(self._get_prompts, "prompts/list"),
                Cardinality.UNARY_UNARY,
                RawMessage,
                RawMessage,
            )
            mapping[_SERVICE + "GetPrompt"] = Handler(
                self._tracked(self._get_prompt, "prompts/get"),
                Cardinality.UNARY_UNARY,
                RawMessage,
                RawMessage,
            )
        return mapping

    async def drain(self, grace: float) -> bool:
        """Refuse new calls (UNAVAILABLE, which clients retry) and wait up to ``grace``
        seconds for the calls in flight; True if none is left."""
        self.draining = True
        if self._active:
            await asyncio.wait(set(self._active), timeout=grace)
        if self._active:
            # Grace is over: end each call with UNAVAILABLE "Server is shutting
            # down" (a stream's final word) rather than a bare reset.
            self.closing = True
            for task in self._active:
                task.cancel()
            await asyncio.wait(set(self._active), timeout=1.0)
        return not self._active

    def _tracked(self, handler: _ContextHandler, method: str) -> _Handler:
        """``handler`` refusing calls while draining, counted while it runs, and
        given the request's context (with its caller, once authenticated)."""

        path = _SERVICE + _RPC_NAMES[method]

        async def run(stream: Stream[RawMessage, RawMessage]) -> None:
            t0 = time.perf_counter()
            if self.draining:
                self._observe(stream, path, "UNAVAILABLE", "shutting_down", t0)
                raise GRPCError(Status.UNAVAILABLE, "the server is shutting down")
            task = asyncio.current_task()
            assert task is not None
            self._active.add(task)
            status, reason, outcome = "OK", None, None
            try:
                context = _context(stream)
                auth = self._dispatcher.auth
                if auth is not None:
                    try:
                        context = await _authenticated(auth, context, method)
                    except MCPLiteError as err:
                        await self._statuses.error(stream, err)
                        return
                await handler(stream, context)
            except GRPCError as exc:
                status = exc.status.name
                if exc.status is Status.RESOURCE_EXHAUSTED:  # only a message over the limit
                    reason = "too_large"
                raise
            except asyncio.CancelledError:
                status = "CANCELLED"
                if not self.closing:
                    if deadline_passed(stream):
                        status = "DEADLINE_EXCEEDED"  # what grpclib answers then
                    else:
                        outcome = CLIENT_GONE
                    raise
                task.uncancel()
                await self._statuses.error(stream, ShuttingDown())
            finally:
                self._active.discard(task)
                status = getattr(stream, "_mcplite_status", status)
                reason = getattr(stream, "_mcplite_reason", reason)
                self._observe(stream, path, status, reason, t0, outcome)

        return run

    def _observe(
        self,
        stream: Stream[Any, Any],
        path: str,
        status: str,
        reason: str | None,
        t0: float,
        outcome: str | None = None,
    ) -> None:
        """The metrics and the access line of an RPC (``outcome``: ``client-gone``
        when the client cancelled it or went away)."""
        metrics = self._dispatcher.metrics
        if metrics.on:
            metrics.request("grpc", status, reason)
        if self._access_log:
            peer = stream.peer.addr()
            tool = getattr(stream, "_mcplite_tool", None)
            elapsed = (time.perf_counter() - t0) * 1000
            entry = Access("grpc", "POST", path, tool, status, elapsed, peer, outcome)
            self._dispatcher.access_log.write(entry)

    # --- handlers ---------------------------------------------------------------

    async def _get_tools(
        self, stream: Stream[RawMessage, RawMessage], context: RequestContext
    ) -> None:
        await self._recv_request(stream)  # Empty: nothing to read in it

        async def listed() -> bytes:
            definitions = self._dispatcher.tool_definitions(context)
            # The dispatcher caches its list; encode again only when it is a new one.
            if definitions is not self._tool_definitions:
                self._tools_list = encode_tools_list(definitions)
                self._tool_definitions = definitions
            return self._tools_list

        await self._answer(stream, "GetTools", listed)

    async def _call_tool(
        self, stream: Stream[RawMessage, RawMessage], context: RequestContext
    ) -> None:
        name, arguments = _decode_request(await self._recv_request(stream))
        stream._mcplite_tool = name  # type: ignore[attr-defined]  # for the access log
        try:
            result = await self._dispatcher.call(name, arguments, context)
            response = encode_tool_response(result.body, response_meta(result))
        except MCPLiteError as err:
            await self._statuses.error(stream, err)
            return
        except Exception:
            await self._statuses.unexpected(stream, "CallTool")
            return
        await self._send_answer(stream, response)

    async def _call_tool_stream(
        self, stream: Stream[RawMessage, RawMessage], context: RequestContext
    ) -> None:
        name, arguments = _decode_request(await self._recv_request(stream))
        stream._mcplite_tool = name  # type: ignore[attr-defined]  # for the access log
        await send_stream(stream, self._dispatcher, name, arguments, context, self._statuses, self)

    async def _get_prompts(self, stream: Stream[RawMessage, RawMessage], _: RequestContext) -> None:
        await self._recv_request(stream)  # Empty
        prompts = self._prompts
        assert prompts is not None

        async def listed() -> bytes:
            definitions = prompts.definitions()
            return bytes(generated.PromptsList(prompts=[_prompt_message(p) for p in definitions]))

        await self._answer(stream, "GetPrompts", listed)

    async def _get_prompt(
        self, stream: Stream[RawMessage, RawMessage], context: RequestContext
    ) -> None:
        data = await self._recv_request(stream)
        prompt_get = self._prompt_get
        assert self._prompts is not None and prompt_get is not None
        try:
            request = generated.GetPromptRequest().parse(data)
        except Exception:
            raise GRPCError(Status.INVALID_ARGUMENT, "malformed GetPromptRequest") from None
        if self._prompts.get(request.name) is None:
            name = request.name
            data_ = {"name": name}
            await self._statuses.status(
                stream, Status.NOT_FOUND, f"Unknown prompt: {name}", "PROMPT_NOT_FOUND", data_
            )
            return

        async def rendered() -> bytes:
            params = {"name": request.name, "arguments": dict(request.arguments)}
            result = await prompt_get.handler(params, context)
            messages = [wkt.Struct().parse(encode_struct(m)) for m in result.get("messages", [])]
            description = result.get("description") or ""
            return bytes(generated.GetPromptResponse(description=description, messages=messages))

        await self._answer(stream, "GetPrompt", rendered)

    async def _answer(
        self,
        stream: Stream[RawMessage, RawMessage],
        method: str,
        build: Callable[[], Awaitable[bytes]],
    ) -> None:
        """Send the response ``build`` makes, or end the call with the status of
        what it raised (an unexpected exception: logged, INTERNAL with its id).
        ``_call_tool`` does the same inline: it is the hot path."""
        try:
            response = await build()
        except MCPLiteError as err:
            await self._statuses.error(stream, err)
            return
        except Exception:
            await self._statuses.unexpected(stream, method)
            return
        await self._send_answer(stream, response)

    # --- helpers ----------------------------------------------------------------

    async def _recv_request(self, stream: Stream[RawMessage, RawMessage]) -> bytes:
        """Read the one request message, refusing an oversized one by its prefix
        (:func:`~.messages.read_message`).  Raises GRPCError."""
        data = await self._read_message(stream, self._max_message_size)
        if data is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "missing request message")
        return data


def _context(stream: Stream[Any, Any]) -> RequestContext:
    """The request context of a call: its peer and its (text) metadata."""
    peer = stream.peer.addr()
    metadata: Mapping[str, Any] = stream.metadata or {}
    headers = MappingProxyType({k.lower(): v for k, v in metadata.items() if isinstance(v, str)})
    return RequestContext("grpc", peer if isinstance(peer, tuple) else None, headers)


async def _authenticated(auth: Gate, context: RequestContext, method: str) -> RequestContext:
    """``context`` with its caller, from the ``authorization`` metadata; raises
    Unauthenticated (UNAUTHENTICATED) or RateLimited (RESOURCE_EXHAUSTED)."""
    found = auth.authenticate(context.headers.get("authorization"))
    caller = found if found is None or isinstance(found, Caller) else await found()
    context = dataclasses.replace(context, caller=caller)
    auth.admit(context, method)
    auth.limit(caller, context.peer)
    return context


def _prompt_message(definition: Mapping[str, Any]) -> generated.Prompt:
    """An MCP ``Prompt`` object as the proto's ``Prompt``."""
    return generated.Prompt(
        name=definition["name"],
        description=definition.get("description") or "",
        title=definition.get("title") or "",
        arguments=[
            generated.PromptArgument(
                name=a["name"],
                description=a.get("description") or "",
                required=bool(a.get("required", False)),
                title=a.get("title") or "",
            )
            for a in definition.get("arguments", [])
        ],
        icons=[icon_message(icon) for icon in definition.get("icons", ())],
    )


def _decode_request(data: bytes) -> tuple[str, dict[str, Any]]:
    """``ToolRequest`` bytes to ``(name, arguments)``; GRPCError INVALID_ARGUMENT if malformed."""
    try:
        return decode_tool_request(data)
    except CodecError as err:
        raise GRPCError(Status.INVALID_ARGUMENT, str(err)) from None


class GrpcServer(Binding):
    """The gRPC binding as the CLI runs it: listen, tell the port, shut down gracefully.

    Uses ``config.grpc_max_message_size``, ``grpc_idle_timeout``,
    ``grpc_max_connections`` (these two on the speed paths only: :mod:`.paths`) and
    ``grace``.  grpclib keeps h2's default of 100 concurrent streams per connection.
    """

    name = "gRPC"

    def __init__(
        self,
        dispatcher: DispatcherLike,
        config: Config | None = None,
        *,
        prompts: Prompts | None = None,
    ) -> None:
        self.config = config or Config()
        self.dispatcher = dispatcher
        self.service = MCPLiteService(
            dispatcher,
            max_message_size=self.config.grpc_max_message_size,
            prompts=prompts,
            access_log=self.config.access_log,
            error_details=True,
        )
        self.health, self._served = _assemble(self.service, self.config.grpc_max_message_size)
        self._path = chosen()
        #: How many connections are open now; None on the plain path, which cannot tell.
        self.connection_count = self._connections if self._path.connection_count else None
        self._server: Server | None = None
        self._sock: socket.socket | None = None
        self._host = "127.0.0.1"
        self._tls: ssl.SSLContext | None = None

    async def listen(self, sock: socket.socket, host: str) -> asyncio.AbstractServer | None:
        """Serve on ``sock`` (see :meth:`Binding.start`); the asyncio server is None on
        the plain path, where grpclib does not tell it.  Raises ValueError for a
        ``grpc_idle_timeout`` or ``grpc_max_connections`` out of range."""
        server = self._new_server()
        self._tls = tls = self.config.server_ssl_context(alpn=("h2",))
        self._host = host
        # The listen queue of HTTP's: a burst waits there (serve.ACCEPTS_PER_TURN a
        # turn are taken) instead of its SYNs being dropped and retried a second later.
        await server.start(sock=sock, ssl=tls, backlog=1024)
        self._server, self._sock = server, sock
        return self._path.listening(server) if self._path.listening else None

    def _new_server(self) -> Server:
        return _make_server(
            self._path,
            self._served,
            config=None,
            idle_timeout=self.config.grpc_idle_timeout,
            max_connections=self.config.grpc_max_connections,
            metrics=self.dispatcher.metrics,
        )

    def connection(self) -> asyncio.Protocol:
        """The server side of one new connection, as :meth:`start` makes one for each
        socket it accepts: for a transport made elsewhere, such as the in-memory pairs
        of :mod:`mcplite.testing`.  Before :meth:`start`, each such connection gets a
        server of its own with no listener, which ends with it (close the transport
        to end it).  Call it in the running event loop."""
        from .accel.inmemory import connection_protocol  # grpclib has no public way

        return connection_protocol(self._server or self._new_server())

    def _connections(self) -> int:
        count = self._path.connection_count
        return count(self._server) if count is not None and self._server is not None else 0

    def url(self) -> str:
        scheme = "grpcs" if self._tls is not None else "grpc"
        return f"{scheme}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The port listened on."""
        assert self._server is not None and self._sock is not None, "not started"
        port: int = self._sock.getsockname()[1]
        return port

    async def shutdown(self, grace: float | None = None) -> None:
        """:meth:`drain` within ``grace`` seconds (default ``config.grace``), then :meth:`close`."""
        await self.drain(self.config.grace if grace is None else grace)
        await self.close()

    async def drain(self, grace: float) -> None:
        """Refuse new calls (UNAVAILABLE), let calls in flight finish within ``grace``
        seconds; open streams then get UNAVAILABLE "Server is shutting down".  The
        health service says NOT_SERVING from the start of the drain."""
        self.health.drain()
        if self._server is not None:
            await self.service.drain(grace)

    async def close(self) -> None:
        """Close the listener, cancel what is left and (on the speed paths) close every
        connection with a GOAWAY; grpclib's own server leaves them to the clients."""
        if self._server is None:
            return
        await self.health.close()  # health watches end with UNAVAILABLE
        self._server.close()
        # grpclib waits for the cancelled handlers; a tool deaf to cancellation
        # must not hold the shutdown forever.
        try:
            await asyncio.wait_for(self._server.wait_closed(), timeout=1.0)
        except TimeoutError:
            if self._path.accel:
                log.warning("gRPC calls still running after shutdown; abandoning them")
            else:  # from Python 3.12 on, asyncio's wait_closed waits for every connection
                log.warning(
                    "gRPC calls still running or clients still connected after shutdown "
                    "(grpclib's own server leaves connections to their clients); "
                    "not waiting for them"
                )
        self._server = None


def create_server(
    dispatcher: DispatcherLike,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    config: Configuration | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    prompts: Prompts | None = None,
) -> Server:
    """A grpclib Server with the MCPLite service (and the health and reflection services,
    :func:`_assemble`) and :class:`ErrorDetailsCodec`.  On the speed paths it is a
    :class:`~.accel.connections.LimitedServer`, with a connection cap and an idle
    timeout, whose ``close()`` also closes the clients' connections; on the plain
    path grpclib's own (:mod:`.paths`).

    Call it inside the running event loop; then
    ``await server.start(sock=listen_socket(host, port))`` (the socket tells the
    port).  For a graceful shutdown use :class:`GrpcServer`.  Raises ValueError
    for an ``idle_timeout`` or ``max_connections`` out of range.
    """
    service = MCPLiteService(
        dispatcher, max_message_size=max_message_size, prompts=prompts, error_details=True
    )
    served = _assemble(service, max_message_size)[1]
    return _make_server(
        chosen(), served, config=config, idle_timeout=idle_timeout, max_connections=max_connections
    )


def _make_server(
    path: PathParts,
    served: list[Any],
    *,
    config: Configuration | None,
    idle_timeout: float,
    max_connections: int,
    metrics: Metrics = QUIET,
) -> Server:
    if not idle_timeout > 0:
        raise ValueError(f"idle_timeout must be a positive number, got {idle_timeout!r}")
    if max_connections < 1:
        raise ValueError(f"max_connections must be at least 1, got {max_connections!r}")
    return path.make_server(
        served,
        status_details_codec=ErrorDetailsCodec(),
        config=config,
        idle_timeout=idle_timeout,
        max_connections=max_connections,
        metrics=metrics,
    )


def services(
    dispatcher: DispatcherLike,
    *,
    prompts: Prompts | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    error_details: bool = False,
) -> list[Any]:
    """mcplite's gRPC services for a ``grpclib.server.Server`` of your own: the
    ``mcplite.MCPLite`` service over ``dispatcher``, the standard health service
    (``""`` and ``mcplite.MCPLite`` SERVING) and server reflection (v1 and v1alpha,
    which list these three)::

        server = grpclib.server.Server([*your_services, *services(dispatcher)])

    ``error_details``: errors carry ``grpc-status-details-bin`` (``google.rpc.Status``
    with ``ErrorInfo``); give the server ``status_details_codec=ErrorDetailsCodec()``
    then, since only that codec encodes them.  The speed paths of
    :class:`GrpcServer` (connection cap, idle timeout, GOAWAY on close) are the
    server's to have or not: yours is grpclib's.  Raises ValueError for a negative
    ``max_message_size``."""
    service = MCPLiteService(
        dispatcher, max_message_size=max_message_size, prompts=prompts, error_details=error_details
    )
    return _assemble(service, max_message_size)[1]


def _assemble(service: MCPLiteService, max_message_size: int) -> tuple[HealthService, list[Any]]:
    """What a server serves: ``service`` and, beside it, the standard health service
    (for ``""`` and ``service``'s name; returned too, for the lifecycle to drive)
    and server reflection, which lists all three."""
    names = _service_names(service)
    health = HealthService(names, max_message_size=max_message_size)
    listed = names | _service_names(health) | set(REFLECTION_NAMES)
    reflection = ReflectionService(listed, max_message_size=max_message_size)
    return health, [service, health, reflection]


def _service_names(service: Any) -> set[str]:
    """``{"mcplite.MCPLite"}`` of a service whose methods are ``/mcplite.MCPLite/...``."""
    return {path.split("/")[1] for path in service.__mapping__()}
