"""The ASGI 3 contract, as far as this binding uses it (asgiref's specification:
"HTTP & WebSocket" and "Lifespan").

An application is ``await app(scope, receive, send)``: ``scope`` describes the
connection (``type``: ``http``, ``websocket``, ``lifespan``), ``receive``
gives the next message from the server, ``send`` hands one to it.  Messages
are dicts with a ``type`` key; the server owns the socket.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["Message", "Receive", "Scope", "Send"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
