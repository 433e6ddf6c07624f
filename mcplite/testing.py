"""Test helpers for users of mcplite: a client that calls a dispatcher directly.

:class:`InMemoryClient` has the interface of :class:`mcplite.client.Client` (the
same results, the same exceptions) but no sockets: it calls a
:class:`~mcplite.Dispatcher` in the running event loop, as the MCP SDK's
in-memory client does.  Results go through JSON on the way, as on the wire, so a
value JSON cannot hold fails here as it would over HTTP::

    from mcplite.testing import InMemoryClient
    from mytools import tools

    async def test_search_finds_the_spec() -> None:
        async with InMemoryClient(tools) as client:
            response = await client.call("search", {"query": "MCP"})
            assert response.response_type == "answer"
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterable
from typing import Any

from .client import BaseClient, Partial, ProgressUpdate, RequestTimeout, RPCError, error_from_object
from .core.config import Config
from .core.dispatch import Dispatcher
from .core.errors import MCPLiteError
from .core.tools import Tool, Tools
from .protocols.jsonrpc import decode, encode

__all__ = ["DispatcherTransport", "InMemoryClient"]


def _rpc_error(exc: MCPLiteError) -> RPCError:
    return error_from_object(exc.to_jsonrpc())


class DispatcherTransport:
    """A :class:`mcplite.client.Transport` over a dispatcher in this process."""

    def __init__(self, dispatcher: Dispatcher, *, owned: bool = False) -> None:
        self.dispatcher = dispatcher
        self._owned = owned

    def _wire(self, name: str, value: Any) -> Any:
        """``value`` after a trip through JSON, as a wire would carry it."""
        try:
            return decode(encode(value))
        except (TypeError, ValueError) as exc:
            error = self.dispatcher.not_json(name, exc)
            raise _rpc_error(error) from None

    async def list_tools(self, timeout: float) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = self._wire("(tools)", self.dispatcher.tool_definitions())
        return tools

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float, *, idempotent: bool = False
    ) -> dict[str, Any]:
        try:
            async with asyncio.timeout(timeout):
                result = await self.dispatcher.call(name, self._wire(name, arguments))
        except MCPLiteError as exc:
            raise _rpc_error(exc) from None
        except TimeoutError:
            raise RequestTimeout(f"no answer from '{name}' within {timeout:g} s") from None
        out: dict[str, Any] = self._wire(name, result.to_json())
        return out

    async def stream(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> AsyncIterator[Partial | ProgressUpdate | dict[str, Any]]:
        try:
            parts = self.dispatcher.stream(name, self._wire(name, arguments), progress=True)
        except MCPLiteError as exc:
            raise _rpc_error(exc) from None
        try:
            while True:
                try:
                    item = await parts.next(timeout)
                except StopAsyncIteration:
                    return
                except MCPLiteError as exc:
                    raise _rpc_error(exc) from None
                if item is None:
                    raise RequestTimeout(f"nothing from '{name}' for {timeout:g} s")
                if isinstance(item, Partial):
                    yield Partial(self._wire(name, item.value))
                elif isinstance(item, ProgressUpdate):
                    progress = ProgressUpdate.from_json(self._wire(name, item.to_json()))
                    if progress is not None:
                        yield progress
                else:
                    yield self._wire(name, item.to_json())
                    return
        finally:
            await parts.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self.dispatcher.close()


class InMemoryClient(BaseClient):
    """The client interface over a dispatcher, without sockets (see the module doc).

    ``tools_or_dispatcher`` is a :class:`~mcplite.Tools` registry (or tools), for
    which a dispatcher is made with ``config`` (default: a random promise secret)
    and closed with the client; or a :class:`~mcplite.Dispatcher`, used as it is
    and left open.
    """

    def __init__(
        self,
        tools_or_dispatcher: Tools | Iterable[Tool] | Dispatcher,
        config: Config | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        if isinstance(tools_or_dispatcher, Dispatcher):
            if config is not None:
                raise ValueError("config is for a dispatcher made here, not a given one")
            transport = DispatcherTransport(tools_or_dispatcher)
        else:
            if config is None:
                config = Config(secret=secrets.token_bytes(32), access_log=False)
            dispatcher = Dispatcher(tools_or_dispatcher, config)
            transport = DispatcherTransport(dispatcher, owned=True)
        super().__init__(transport, timeout=timeout)
        self.dispatcher = transport.dispatcher

    async def __aenter__(self) -> InMemoryClient:
        return self
