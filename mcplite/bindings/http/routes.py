"""The HTTP binding's routes, as data: a path, its methods, its handler.

What a request gets before its handler runs follows from its :class:`Route`
(:mod:`mcplite.bindings.http.admission`): 404 when no route has its path, 405
with ``Allow`` naming the route's methods when its method is not one of them,
the Host check against DNS rebinding where the route asks for it, and
authentication unless the route is public.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass

from .messages import Request, Response, StreamingResponse

__all__ = ["Answer", "Handle", "Route", "Routes"]

#: A handler that answers at once (no task is started for it).
Answer = Callable[[Request], Response]
#: A handler that is awaited: a whole answer or an event stream.
Handle = Callable[[Request], Awaitable[Response | StreamingResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    """One endpoint: exactly one of ``answer`` and ``handle`` is its handler."""

    path: bytes
    methods: tuple[bytes, ...]
    answer: Answer | None = None
    handle: Handle | None = None
    #: The binding the access log and the metrics name: ``http`` (MCP-lite) or ``mcp``.
    binding: str = "http"
    #: Host and Origin must name this server (DNS rebinding; see hosts.py).
    check_host: bool = False
    #: Answered without authentication.
    public: bool = False
    #: A body must be ``application/json`` in UTF-8 (415 otherwise).
    json_body: bool = True
    #: The methods a CORS preflight is told, when not ``methods``.
    preflight_methods: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if (self.answer is None) == (self.handle is None):
            raise ValueError(f"route {self.path!r}: give exactly one of answer and handle")
        if not self.methods:
            raise ValueError(f"route {self.path!r}: no methods")

    @property
    def allow(self) -> bytes:
        """The ``Allow`` header of a 405 on this route."""
        return b", ".join(self.methods)

    @property
    def preflight(self) -> bytes:
        """The methods a CORS preflight for this path is told it may use."""
        return b", ".join(self.preflight_methods or self.methods)


class Routes:
    """The route table, by exact path (a later route for a path replaces an earlier one)."""

    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self._by_path: dict[bytes, Route] = {}
        for route in routes:
            self.add(route)

    def add(self, route: Route) -> None:
        self._by_path[route.path] = route

    def match(self, path: bytes) -> Route | None:
        """The route of ``path`` (no query), or None."""
        return self._by_path.get(path)

    def __iter__(self) -> Iterator[Route]:
        return iter(self._by_path.values())

    def __len__(self) -> int:
        return len(self._by_path)
