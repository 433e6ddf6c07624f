"""2026 ``subscriptions/listen``: a stream of list changes that stays open.

Its acknowledgement names the filter honoured (tools, prompts, resources list
changes); then ``notifications/{tools,prompts,resources}/list_changed`` follow
as the registries change (``Tools.add``/``remove``,
:meth:`~mcplite.core.dispatch.Dispatcher.add_tool`, ``Prompts.add``/``remove``,
``Resources.add``/``remove``), each tagged with the subscription id (the
request's id).  The transport ends it by cancelling the call (the client left,
or cancelled it on stdio); :meth:`Subscriptions.end` ends every one with its
final result at shutdown.  Delivery is to the streams open in this process: it
does not cross processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...core.errors import InvalidParams, InvalidRequest, Overloaded
from ..requests import Request
from .protocol import SUBSCRIPTION_ID_KEY

__all__ = ["Subscriptions"]

#: The filter fields this server honours, by the kind of list.
_LIST_CHANGED = {
    "tools": "toolsListChanged",
    "prompts": "promptsListChanged",
    "resources": "resourcesListChanged",
}


@dataclass(eq=False, slots=True)
class _Subscription:
    """One open ``subscriptions/listen``: the lists it wants to hear about, and how
    to put a message on its stream (from any thread)."""

    kinds: frozenset[str]
    deliver: Callable[[dict[str, Any]], None]
    ended: asyncio.Future[None]


class Subscriptions:
    """The open ``subscriptions/listen`` streams of one server.  ``served``: the
    kinds of list it has (tools always; prompts, resources when it serves them);
    at most ``limit`` streams are open at once."""

    def __init__(self, served: frozenset[str], limit: int, retry_after: float) -> None:
        self.served = served
        self.limit = limit
        self.retry_after = retry_after
        self._open: set[_Subscription] = set()
        self._ended = False  # shutting down: a new listen ends at once

    def __len__(self) -> int:
        return len(self._open)

    def end(self) -> None:
        """End every open stream (at shutdown): each answers its final
        ``resultType: complete`` result; so does any listen that comes after."""
        self._ended = True
        for subscription in list(self._open):
            ended = subscription.ended
            if not ended.done():
                with contextlib.suppress(RuntimeError):  # its loop is gone
                    ended.get_loop().call_soon_threadsafe(_set_done, ended)

    def changed(self, kind: str) -> None:
        """Tell every stream that asked for it that the list of ``kind`` changed
        (any thread)."""
        for subscription in list(self._open):
            if kind in subscription.kinds:
                subscription.deliver(
                    {"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed"}
                )

    async def listen(self, request: Request) -> dict[str, Any]:
        """The acknowledgement naming the filter honoured, then the list changes of
        the kinds asked for, until the client goes (the transport cancels this) or
        the server shuts down (:meth:`end`): then the final result."""
        send = request.send
        if send is None:
            raise InvalidRequest("Invalid request: subscriptions/listen needs a stream (SSE)")
        wanted = request.params.get("notifications", {})
        if not isinstance(wanted, dict):
            raise InvalidParams("Invalid params: notifications must be an object")
        if len(self._open) >= self.limit:
            raise Overloaded(
                f"Too many open subscriptions (max {self.limit})", retry_after=self.retry_after
            )
        kinds = frozenset(
            kind
            for kind, key in _LIST_CHANGED.items()
            if kind in self.served and wanted.get(key) is True
        )
        honoured = {_LIST_CHANGED[kind]: True for kind in sorted(kinds)}
        meta = {SUBSCRIPTION_ID_KEY: request.id}
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def deliver(message: dict[str, Any]) -> None:
            message = {**message, "params": {"_meta": dict(meta)}}
            if threading.get_ident() == loop_thread:
                send(message)
            else:  # a change made from a worker thread (a sync tool)
                with contextlib.suppress(RuntimeError):  # the loop is gone
                    loop.call_soon_threadsafe(send, message)

        subscription = _Subscription(kinds, deliver, loop.create_future())
        if self._ended:
            subscription.ended.set_result(None)
        self._open.add(subscription)
        try:
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": dict(meta), "notifications": honoured},
                }
            )
            await subscription.ended
        finally:
            self._open.discard(subscription)
        return {"resultType": "complete", "_meta": dict(meta)}


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
