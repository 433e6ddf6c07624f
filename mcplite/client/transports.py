"""What a client needs of a wire (:class:`Transport` and its prompt and resource
variants), and the transport a URL asks for (:func:`transport_for`).

The HTTP and gRPC transports are imported only when a URL asks for them, so a
client of one does not load the other's dependencies.
"""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.outcomes import Partial, ProgressUpdate
from ..core.wire import DEFAULT_BASE_PATH

__all__ = [
    "DEFAULT_GRPC_PORT",
    "PromptTransport",
    "ResourceTransport",
    "Security",
    "Transport",
    "transport_for",
]

#: Port of a ``grpc://`` URL given without one.
DEFAULT_GRPC_PORT = 50051


class Transport(Protocol):
    """What a client needs of a wire.  Results are the HTTP binding's JSON shapes."""

    async def list_tools(self, timeout: float) -> list[dict[str, Any]]:
        """The discovery entries.  Raises RPCError, TransportError."""
        ...

    async def call(
        self, name: str, arguments: dict[str, Any], timeout: float, *, idempotent: bool = False
    ) -> dict[str, Any]:
        """One ``tools/call``: the result object (with ``_meta``).

        ``idempotent`` allows a retry after the server closed a reused connection
        without answering.  Raises RPCError, TransportError.
        """
        ...

    def stream(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> AsyncIterator[Partial | ProgressUpdate | dict[str, Any]]:
        """A streamed call: :class:`Partial` parts (and :class:`ProgressUpdate`
        reports among them, when the tool makes some), then the final result object.

        ``timeout`` bounds each wait for the next item.
        """
        ...

    async def aclose(self) -> None: ...


class PromptTransport(Protocol):
    """A transport that also carries prompts (MCP's JSON shapes)."""

    async def list_prompts(self, timeout: float) -> list[dict[str, Any]]: ...

    async def get_prompt(
        self, name: str, arguments: dict[str, str], timeout: float
    ) -> dict[str, Any]: ...


class ResourceTransport(Protocol):
    """A transport that also carries resources: any MCP-style JSON-RPC request."""

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One JSON-RPC request: its result object.  Raises RPCError, TransportError."""
        ...


@dataclass(frozen=True, slots=True)
class Security:
    """The credentials and TLS options of a :class:`Client` (``repr`` hides the token)."""

    token: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    ssl_context: ssl.SSLContext | None = None

    def context(self, url: str, tls: bool, alpn: str) -> ssl.SSLContext | None:
        """The SSL context of a connection to ``url`` (None: plaintext)."""
        from ._tls import client_context

        files = self.cafile is not None or self.certfile is not None or self.keyfile is not None
        if not tls:
            if files or self.ssl_context is not None:
                raise ValueError(f"TLS options need an https:// or grpcs:// URL, not {url!r}")
            return None
        if self.ssl_context is not None:
            if files:
                raise ValueError("give either ssl_context or cafile/certfile/keyfile")
            if alpn == "h2":
                self.ssl_context.set_alpn_protocols(["h2"])
            return self.ssl_context
        return client_context(
            cafile=self.cafile, certfile=self.certfile, keyfile=self.keyfile, alpn=alpn
        )


def transport_for(url: str, pool_size: int, security: Security | None = None) -> Transport:
    """The transport of ``url``: HTTP(S) with a pool of ``pool_size`` idle
    connections, or gRPC(S).  Raises ValueError for an unsupported or malformed
    URL, or TLS options that do not fit it (see :class:`~mcplite.client.Client`)."""
    from ._tls import authorization

    security = security or Security()
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in URL {url!r}") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in URL {url!r}")
    if scheme in ("http", "https"):
        from .http import HttpTransport

        tls = scheme == "https"
        base = parts.path if parts.path else DEFAULT_BASE_PATH
        return HttpTransport(
            host,
            port or (443 if tls else 80),
            base.rstrip("/"),
            tls=tls,
            ssl_context=security.context(url, tls, "http/1.1"),
            authorization=authorization(security.token),
            pool_size=pool_size,
        )
    if scheme in ("grpc", "grpcs"):
        from .grpc import GrpcTransport

        if parts.path not in ("", "/"):
            raise ValueError(f"a {scheme}:// URL has no path: {url!r}")
        return GrpcTransport(
            host,
            port or DEFAULT_GRPC_PORT,
            ssl_context=security.context(url, scheme == "grpcs", "h2"),
            authorization=authorization(security.token),
        )
    raise ValueError(
        f"unsupported URL {url!r}: use http(s)://HOST:PORT/BASE or grpc(s)://HOST:PORT"
    )
