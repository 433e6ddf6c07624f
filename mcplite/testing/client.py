"""The test client: the real bindings of a server, reached in memory (see the package doc)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Unpack

from grpclib.client import Channel
from grpclib.encoding.base import CodecBase

from ..bindings.grpc.service import GrpcServer
from ..bindings.http import HttpServer
from ..client import BaseClient, RPCError, Transport, TransportError, error_from_object
from ..core.config import Config
from ..core.dispatch import Dispatcher
from ..core.prompts import Prompts
from ..core.resources import Resources
from ..core.tools import Tool, Tools
from ..protocols.mcp.protocol import CAPABILITIES_KEY, MODERN_VERSION, NAME_PARAMS, VERSION_KEY
from .grpc import GrpcLiteTransport, MemoryChannel
from .http import Headers, HttpResponse, HttpSession, LiteTransport, Message, StreamingResponse

__all__ = ["InMemoryClient", "connect"]

Binding = Literal["http", "grpc"]


class InMemoryClient(BaseClient):
    """:class:`mcplite.client.BaseClient` (``call``, ``stream``, ``list_tools``,
    ``redeem``, prompts, resources: the same results and exceptions as
    :class:`mcplite.client.Client`) over the server's real ``binding`` ("http", or
    "grpc"), in memory; plus raw HTTP (:meth:`request`, :meth:`post`, :meth:`open`),
    MCP at ``/mcp`` (:meth:`mcp`) and grpclib channels (:meth:`grpc_channel`).

    ``tools_or_dispatcher``: a :class:`~mcplite.Tools` registry (or tools), for
    which a dispatcher is made with ``config`` (default: a random promise secret,
    no access log) and closed with the client; or a :class:`~mcplite.Dispatcher`
    (with its auth, metrics, store), used as it is and left open.  ``prompts``
    and ``resources`` are served as ``mcplite serve`` serves them.  ``token`` is
    sent as a bearer token by the MCP-lite calls.  ``timeout`` bounds each wait.
    ``socket_buffer``: see :func:`~mcplite.testing.transports.transport_pair`.

    Raises ValueError for a ``config`` beside a given dispatcher, or an unknown
    ``binding``.
    """

    def __init__(
        self,
        tools_or_dispatcher: Tools | Iterable[Tool] | Dispatcher,
        config: Config | None = None,
        *,
        binding: Binding = "http",
        prompts: Prompts | None = None,
        resources: Resources | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        socket_buffer: int = 64 * 1024,
    ) -> None:
        if binding not in ("http", "grpc"):
            raise ValueError(f"binding must be 'http' or 'grpc', got {binding!r}")
        if isinstance(tools_or_dispatcher, Dispatcher):
            if config is not None:
                raise ValueError("config is for a dispatcher made here, not a given one")
            dispatcher = tools_or_dispatcher
            self._owns_dispatcher = False
        else:
            if config is None:
                config = Config(secret=secrets.token_bytes(32), access_log=False)
            dispatcher = Dispatcher(tools_or_dispatcher, config)
            self._owns_dispatcher = True
        self.dispatcher = dispatcher
        self.config = config = dispatcher.config
        self.binding = binding
        self.socket_buffer = socket_buffer
        #: The HTTP binding, as ``mcplite serve`` runs it (without a listener).
        self.http_server = HttpServer(dispatcher, config, prompts=prompts, resources=resources)
        #: Raw HTTP/1.1 to :attr:`http_server`.
        self.session = HttpSession(
            self.http_server.connection, timeout=timeout, socket_buffer=socket_buffer
        )
        self._prompts = prompts
        self._grpc_server: GrpcServer | None = None
        self._channels: list[MemoryChannel] = []
        self._mcp_ids = 0
        authorization = f"Bearer {token}" if token is not None else None
        transport: Transport
        if binding == "http":
            transport = LiteTransport(self.session, config.base_path, authorization=authorization)
        else:
            transport = GrpcLiteTransport(
                self._grpc_connection, authorization=authorization, socket_buffer=socket_buffer
            )
        super().__init__(transport, timeout=timeout)

    async def __aenter__(self) -> InMemoryClient:
        return self

    # --- gRPC -------------------------------------------------------------------------

    @property
    def grpc_server(self) -> GrpcServer:
        """The gRPC binding, as ``mcplite serve`` runs it (made on first use)."""
        if self._grpc_server is None:
            self._grpc_server = GrpcServer(self.dispatcher, self.config, prompts=self._prompts)
        return self._grpc_server

    def _grpc_connection(self) -> Any:
        return self.grpc_server.connection()

    def grpc_channel(self, *, codec: CodecBase | None = None) -> Channel:
        """A new grpclib channel to :attr:`grpc_server`, closed with the client:
        give it to any stub (``codec``: grpclib's, default protobuf).  Call it in
        the running event loop."""
        channel = MemoryChannel(
            self._grpc_connection, codec=codec, socket_buffer=self.socket_buffer
        )
        self._channels.append(channel)
        return channel

    # --- raw HTTP ---------------------------------------------------------------------

    async def request(self, method: str, path: str, **message: Unpack[Message]) -> HttpResponse:
        """One HTTP request to the HTTP binding (``headers``, ``body``); its whole
        response.  Raises RequestTimeout, TransportError (see :meth:`HttpSession.open`)."""
        return await self.session.request(method, path, **message)

    async def post(self, path: str, payload: Any, *, headers: Headers = ()) -> HttpResponse:
        """POST ``payload`` (bytes as they are, anything else as JSON) with
        ``Content-Type: application/json``, then ``headers``."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        return await self.request(
            "POST", path, headers=[("Content-Type", "application/json"), *pairs], body=body
        )

    def open(
        self, method: str, path: str, **message: Unpack[Message]
    ) -> AbstractAsyncContextManager[StreamingResponse]:
        """``async with client.open(...) as response``: the response as it arrives
        (``status``, ``headers``, ``chunks()``, ``events()``); see :meth:`HttpSession.open`."""
        return self.session.open(method, path, **message)

    # --- MCP --------------------------------------------------------------------------

    def mcp_message(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        version: str = MODERN_VERSION,
        capabilities: Mapping[str, Any] | None = None,
        request_id: int | str | None = 1,
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """An MCP request and its headers, as a client of ``version`` sends them:
        2026-07-28 puts the version and ``capabilities`` in ``params._meta`` and
        repeats the method (and name) in headers; 2025 sends the version header
        (but with ``initialize``, which negotiates it).  ``request_id`` None: a
        notification."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if request_id is not None:
            message["id"] = request_id
        headers = [("Accept", "application/json, text/event-stream")]
        args = dict(params or {})
        if version == MODERN_VERSION:
            meta = dict(args.get("_meta") or {})
            meta.setdefault(VERSION_KEY, version)
            meta.setdefault(CAPABILITIES_KEY, dict(capabilities or {}))
            args["_meta"] = meta
            headers += [("MCP-Protocol-Version", version), ("Mcp-Method", method)]
            name_param = NAME_PARAMS.get(method)
            if name_param is not None and name_param in args:
                headers.append(("Mcp-Name", str(args[name_param])))
        elif method != "initialize":
            headers.append(("MCP-Protocol-Version", version))
        if args or version == MODERN_VERSION:
            message["params"] = args
        return message, headers

    async def mcp(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        version: str = MODERN_VERSION,
        capabilities: Mapping[str, Any] | None = None,
        on_message: Callable[[dict[str, Any]], object] | None = None,
    ) -> dict[str, Any]:
        """One MCP request to the MCP endpoint (``config.mcp_path``), as
        :meth:`mcp_message` writes it: its ``result``.  ``on_message`` gets, in
        order, each message the server sent on the call's SSE stream before the
        answer (progress and log notifications).  A 2025 request to the client
        (elicitation, sampling) is not answered here: read such a call with
        :meth:`open` and :meth:`post` the answer meanwhile.

        Raises the :class:`~mcplite.client.RPCError` of a JSON-RPC error,
        TransportError for an answer that is neither, RequestTimeout.
        """
        path = self.config.mcp_path
        if path is None:
            raise TransportError("the server has no MCP endpoint (config.mcp_path is None)")
        self._mcp_ids += 1
        message, headers = self.mcp_message(
            method, params, version=version, capabilities=capabilities, request_id=self._mcp_ids
        )
        response = await self.post(path, message, headers=headers)
        content_type = response.header("content-type") or ""
        replies: list[Any]
        if content_type.startswith("text/event-stream"):
            replies = [json.loads(data) for kind, data in response.events() if kind == "message"]
        else:
            try:
                replies = [response.json()]
            except ValueError:
                raise TransportError(
                    f"{path} answered HTTP {response.status}: {response.body[:200]!r}"
                ) from None
        for reply in replies:
            if not isinstance(reply, dict):
                continue
            if reply.get("id") == message["id"] and ("result" in reply or "error" in reply):
                return _result_of(reply)
            if on_message is not None:
                on_message(reply)
        raise TransportError(f"{path} answered HTTP {response.status} without a reply")

    # --- the end ----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every connection, both bindings, and the dispatcher if made here."""
        try:
            await super().aclose()
            for channel in self._channels:
                await channel.aclose()
            self._channels.clear()
            await self.session.aclose()
            await self.http_server.close()
            if self._grpc_server is not None:
                await self._grpc_server.close()
        finally:
            if self._owns_dispatcher:
                await self.dispatcher.close()


def _result_of(reply: dict[str, Any]) -> dict[str, Any]:
    error = reply.get("error")
    if error is not None:
        raised: RPCError = error_from_object(error)
        raise raised
    result = reply.get("result")
    if not isinstance(result, dict):
        raise TransportError(f"a JSON-RPC reply whose result is not an object: {result!r}")
    return result


#: ``async with connect(tools) as client:`` an :class:`InMemoryClient` (the class
#: itself: see it for the arguments and what it raises).
connect = InMemoryClient
