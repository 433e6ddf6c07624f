"""A request and its answer as the endpoint handlers see them: no socket, no h11.

An endpoint (:mod:`mcplite.bindings.http.endpoints`,
:mod:`mcplite.bindings.http.mcp_endpoint`) takes a :class:`Request` (method,
path, headers, the whole body) and gives a :class:`Response` (status, headers,
body) or a :class:`StreamingResponse` (an SSE :class:`EventStream`).
:class:`~mcplite.bindings.http.connection.HttpConnection` drives them over h11;
anything that can build a :class:`Request` can drive them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any, Protocol

from ...core.context import Caller, RequestContext
from ...core.errors import MCPLiteError
from . import sse

__all__ = [
    "EventStream",
    "HeaderView",
    "Request",
    "Response",
    "StreamingResponse",
    "header_dict",
]


class Request:
    """One HTTP request, its body read whole.

    ``headers`` maps each lowercase name to its value (a repeated one's values
    joined, see :func:`header_dict`); ``path`` is
    the target before any ``?``.  ``caller`` is who authentication found (None:
    anonymous, or auth off).  An endpoint sets ``tool`` to what the request
    calls as soon as it knows, for the access log.
    """

    __slots__ = ("body", "caller", "headers", "method", "path", "peer", "target", "tool")

    def __init__(
        self,
        method: bytes,
        target: bytes,
        headers: dict[bytes, bytes],
        body: bytes = b"",
        peer: tuple[str, int] | None = None,
        caller: Caller | None = None,
    ) -> None:
        self.method = method
        self.target = target
        self.path = target.split(b"?", 1)[0]
        self.headers = headers
        self.body = body
        self.peer = peer
        self.caller = caller
        self.tool: str | None = None

    def path_text(self) -> str:
        """``path`` as text (Latin-1, as sent)."""
        return self.path.decode("latin-1")

    def context(self, binding: str = "http") -> RequestContext:
        """The request as the core sees it."""
        return RequestContext(binding, self.peer, HeaderView(self.headers), self.caller)


class Response:
    """A whole answer: status, headers (lowercase names; no ``Content-Length``,
    which the writer adds) and body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> None:
        self.status = status
        self.headers = headers
        self.body = body


class EventStream(Protocol):
    """The body of an SSE answer: each item is one whole frame, written as it comes."""

    def __aiter__(self) -> EventStream: ...

    async def __anext__(self) -> bytes: ...

    def interrupt(self, error: MCPLiteError) -> None:
        """The server is shutting down: end soon, with ``error`` if the stream says errors."""

    async def aclose(self, *, disconnected: bool) -> None:
        """Stop, and release what the stream holds (its call); ``disconnected``: the
        client left.  Called once, however the stream ended."""


class StreamingResponse:
    """An SSE answer: ``200`` with the event-stream headers, then ``events``."""

    __slots__ = ("events", "headers", "status")

    def __init__(self, events: EventStream) -> None:
        self.status = 200
        self.headers = sse.HEADERS
        self.events = events


def header_dict(fields: Iterable[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """Header fields (lowercase names, in order) by name, a repeated name's values
    joined with ``", "`` in order (RFC 9110 section 5.3).  Never the last (or
    first) one alone: a proxy in front may read the other, and two readers must
    not see two requests (a repeated ``Mcp-Name`` or ``Authorization`` is then
    refused as it reads)."""
    if not isinstance(fields, Sized):
        fields = list(fields)
    out = dict(fields)
    if len(out) == len(fields):
        return out  # no name repeated: the usual request
    out = {}
    for name, value in fields:
        seen = out.get(name)
        out[name] = value if seen is None else seen + b", " + value
    return out


#: Header names as asked for (``str``) to the keys a Request holds (lowercase bytes).
_HEADER_KEYS: dict[str, bytes] = {}


class HeaderView(Mapping[str, str]):
    """A request's headers as the core sees them (lowercase ``str`` names and
    values), decoded only when asked for: most calls never look."""

    __slots__ = ("_raw",)

    def __init__(self, raw: dict[bytes, bytes]) -> None:
        self._raw = raw

    def __getitem__(self, name: str) -> str:
        return self._raw[name.lower().encode("latin-1")].decode("latin-1")

    def get(self, name: str, default: Any = None) -> Any:  # Mapping's, without a KeyError
        key = _HEADER_KEYS.get(name)
        if key is None:
            key = name.lower().encode("latin-1")
            if len(_HEADER_KEYS) < 64:  # the names code asks for: a few, asked every call
                _HEADER_KEYS[name] = key
        value = self._raw.get(key)
        return default if value is None else value.decode("latin-1")

    def __iter__(self) -> Iterator[str]:
        return (name.decode("latin-1") for name in self._raw)

    def __len__(self) -> int:
        return len(self._raw)
