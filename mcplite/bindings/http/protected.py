"""The server as an OAuth protected resource: its metadata (RFC 9728) and the
``WWW-Authenticate`` challenge of a 401 or 403 that points to it.

With OAuth on, ``GET /.well-known/oauth-protected-resource`` (and the same
followed by the MCP path or the base path, RFC 9728 section 3.1) serves the
Protected Resource Metadata of that resource; every 401 and 403 names the
metadata of the resource its request was for.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...core.authorize import Gate
from ...core.config import Config
from ...core.dispatch import Dispatcher
from ...core.errors import Forbidden
from ...protocols.jsonrpc import encode
from .messages import Request

__all__ = ["ProtectedResource"]


class ProtectedResource:
    """What a server behind ``auth`` tells clients about itself.

    ``scheme`` and ``default_host`` make the origin of a request that names no
    Host (set by the server once it listens); ``auth.public_url``, when set,
    is the origin instead."""

    def __init__(self, auth: Gate, config: Config, dispatcher: Dispatcher) -> None:
        self.auth = auth
        self.config = config
        self.dispatcher = dispatcher
        self.scheme = "http"
        self.default_host = "127.0.0.1"

    def _resource(self, path: str) -> str:
        """The path of the protected resource a request path belongs to."""
        metadata_path = self.auth.metadata_path
        mcp_path = self.config.mcp_path
        if path.startswith(metadata_path):
            return path[len(metadata_path) :]
        if mcp_path is not None and path == mcp_path:
            return mcp_path
        if path.startswith(self.config.base_path + "/"):
            return self.config.base_path
        return ""

    def _origin(self, headers: Mapping[bytes, bytes]) -> str:
        if self.auth.public_url is not None:
            return self.auth.public_url
        host = headers.get(b"host", b"").decode("latin-1") or self.default_host
        return f"{self.scheme}://{host}"

    def metadata_paths(self) -> list[str]:
        """The well-known paths the metadata is served at (none without OAuth)."""
        if self.auth.resource_metadata is None:
            return []
        well_known = self.auth.metadata_path
        suffixes = ("", self.config.base_path, self.config.mcp_path)
        return [well_known + suffix for suffix in suffixes if suffix is not None]

    def metadata_url(self, path: str, headers: Mapping[bytes, bytes]) -> str | None:
        """Where the Protected Resource Metadata of the resource at ``path`` is
        (None without OAuth): what a 401 names in ``resource_metadata``."""
        if self.auth.resource_metadata is None:
            return None
        return self._origin(headers) + self.auth.metadata_path + self._resource(path)

    def metadata(self, path: str, headers: Mapping[bytes, bytes]) -> bytes:
        """RFC 9728 metadata of the resource whose well-known URL is ``path``
        (OAuth on only: raises AssertionError without it)."""
        assert self.auth.resource_metadata is not None
        scopes = sorted({scope for tool in self.dispatcher.tools() for scope in tool.scopes})
        document = {
            "resource": self._origin(headers) + self._resource(path),
            **self.auth.resource_metadata,
            "scopes_supported": scopes,
        }
        return encode(document)

    def challenge(
        self, request: Request, status: int, scopes: tuple[str, ...] = ()
    ) -> tuple[bytes, bytes]:
        """``WWW-Authenticate`` of a 401 or 403 to ``request``: where the resource
        metadata is (OAuth), and for a 403 the scopes the request needed."""
        url = self.metadata_url(request.path_text(), request.headers)
        error = Forbidden(scopes=scopes) if status == 403 else None
        return (b"www-authenticate", self.auth.challenge(url, error).encode("latin-1"))
