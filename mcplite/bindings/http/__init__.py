"""The HTTP/1.1 binding (h11) with SSE streaming."""

from .server import HttpServer

__all__ = ["HttpServer"]
