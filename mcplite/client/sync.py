"""A synchronous client for scripts: :class:`SyncClient`.

It runs a :class:`~mcplite.client.Client` on its own event loop in a background
thread; each method blocks until the answer and raises what the async client
raises::

    from mcplite.client.sync import SyncClient

    with SyncClient("http://127.0.0.1:8080/mcp-lite/v1") as client:
        print(client.call("echo", {"text": "hi"}).text)
        for item in client.stream("generate_report", {"topic": "Q3"}):
            print(item)
        parts = list(client.stream("generate_report", {"topic": "Q3"}))
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar, Unpack

from ..core.outcomes import Partial, ProgressUpdate
from . import BaseClient, Client
from .options import ClientOptions, check_options
from .results import Response, ToolInfo

__all__ = ["SyncClient"]

T = TypeVar("T")


async def _next(items: AsyncIterator[T]) -> T:
    return await items.__anext__()


class SyncClient:
    """Blocking twin of :class:`~mcplite.client.Client` (same arguments and methods).

    Instead of ``url``, ``client`` wraps an async client made elsewhere (an
    :class:`~mcplite.testing.InMemoryClient`, say); it is then used only on this
    object's loop, and closed with it.  Close with :meth:`close` or ``with``.
    Raises what :class:`~mcplite.client.Client` raises, and ValueError for both or
    neither of ``url`` and ``client``.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: BaseClient | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        check_options(options, ClientOptions, "SyncClient")
        if (url is None) == (client is None):
            raise ValueError("give either url or client")
        if client is None:
            client = Client(str(url), **options)
        self._client = client
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="mcplite-sync-client", daemon=True
        )
        self._thread.start()
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and stop the background loop."""
        if self._closed:
            return
        try:
            self._run(self._client.aclose())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def list_tools(self) -> list[ToolInfo]:
        """See :meth:`mcplite.client.BaseClient.list_tools`."""
        return self._run(self._client.list_tools())

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        wait: bool = True,
        timeout: float | None = None,
    ) -> Response:
        """See :meth:`mcplite.client.BaseClient.call`."""
        return self._run(self._client.call(name, arguments, wait=wait, timeout=timeout))

    def redeem(self, token: str, wait: float = 0) -> Response:
        """See :meth:`mcplite.client.BaseClient.redeem`."""
        return self._run(self._client.redeem(token, wait))

    def cancel(self, token: str) -> Response:
        """See :meth:`mcplite.client.BaseClient.cancel`."""
        return self._run(self._client.cancel(token))

    def list_prompts(self) -> list[dict[str, Any]]:
        """See :meth:`mcplite.client.BaseClient.list_prompts`."""
        return self._run(self._client.list_prompts())

    def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> dict[str, Any]:
        """See :meth:`mcplite.client.BaseClient.get_prompt`."""
        return self._run(self._client.get_prompt(name, arguments))

    def list_resources(self) -> list[dict[str, Any]]:
        """See :meth:`mcplite.client.BaseClient.list_resources`."""
        return self._run(self._client.list_resources())

    def list_resource_templates(self) -> list[dict[str, Any]]:
        """See :meth:`mcplite.client.BaseClient.list_resource_templates`."""
        return self._run(self._client.list_resource_templates())

    def read_resource(self, uri: str) -> list[dict[str, Any]]:
        """See :meth:`mcplite.client.BaseClient.read_resource`."""
        return self._run(self._client.read_resource(uri))

    def stream(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_progress: Callable[[ProgressUpdate], object] | None = None,
    ) -> Iterator[Partial | Response]:
        """A generator of :class:`Partial` parts as they arrive, then the final
        :class:`Response`; ``list(client.stream(...))`` collects them all.
        ``on_progress`` hears the tool's progress reports (see
        :meth:`mcplite.client.BaseClient.stream`).  Leaving the loop early stops the tool."""
        items = self._client.stream(name, arguments, on_progress=on_progress)
        finished = False
        try:
            while True:
                try:
                    item = self._run(_next(items))
                except StopAsyncIteration:
                    finished = True
                    return
                yield item
        finally:
            if not finished and not self._closed:
                self._run(items.aclose())
