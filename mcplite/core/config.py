"""One validated configuration for the core and every binding.

Every limit has a default that protects a server nobody has tuned; the README's
"Limits" table lists them with the error each one produces.
"""

from __future__ import annotations

import math
import os
import ssl
from dataclasses import dataclass, fields
from urllib.parse import urlsplit

from .wire import DEFAULT_BASE_PATH, DEFAULT_MAX_MESSAGE_SIZE

__all__ = ["Config"]

KiB = 1024
MiB = 1024 * KiB


def _ssl_reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc).replace("_", " ").lower()


def _origin(value: str) -> str:
    """A CORS origin as browsers send it in ``Origin`` (RFC 6454 section 6.1:
    lowercase, no default port, no path), or ``*``; ValueError otherwise."""
    text = value.strip()
    if text == "*":
        return text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme.lower() not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise ValueError(
            f"cors_allow_origins: {value!r} is not an origin (http[s]://host[:port]) or '*'"
        )
    scheme = parts.scheme.lower()
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is None or port == {"http": 80, "https": 443}[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


@dataclass(slots=True)
class Config:
    # Bindings.  `None` turns a binding off.
    http: tuple[str, int] | None = ("127.0.0.1", 8080)
    grpc: tuple[str, int] | None = ("127.0.0.1", 50051)
    base_path: str = DEFAULT_BASE_PATH

    # Full MCP (streamable HTTP) on the HTTP port; None turns it off.
    mcp_path: str | None = "/mcp"
    # Host/Origin values the MCP endpoint accepts (DNS rebinding protection).
    # None: when bound to loopback, only localhost, 127.0.0.1 and [::1] (any
    # port); otherwise no check.  A tuple: exactly those hosts ("name" or
    # "name:port"), for Host and for Origin.
    mcp_allowed_hosts: tuple[str, ...] | None = None
    # Web origins ("https://app.example:8443") whose pages may call the HTTP
    # endpoints from a browser (CORS, mcplite.bindings.http.cors); they pass the Origin
    # check above too (Host is still checked).  "*": any origin.  Empty: off.
    cors_allow_origins: tuple[str, ...] = ()
    # MCP's lists (tools, prompts, resources, resource templates): at most this
    # many entries per answer, and a nextCursor for the rest; None: one answer.
    page_size: int | None = None

    # HTTP limits.
    max_body_size: int = 1 * MiB  # 413
    max_header_size: int = 16 * KiB  # 431
    request_timeout: float = 10.0  # seconds to receive one whole request: 408
    keepalive_timeout: float = 15.0  # idle seconds between requests before we close
    max_connections: int = 1024  # more: 503 and close
    max_concurrent_calls: int = 512  # more: 503 + Retry-After / RESOURCE_EXHAUSTED
    retry_after: float = 1.0  # seconds, in Retry-After and error data

    # gRPC limits.
    grpc_max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE  # RESOURCE_EXHAUSTED
    grpc_idle_timeout: float = 15.0  # seconds without an open stream before GOAWAY + close
    grpc_max_connections: int = 1024  # more: closed at once (clients see UNAVAILABLE)

    # Promises.  A call still running after `promise_after` seconds answers with a
    # promise.  5 s: well inside the 30-60 s timeouts of common HTTP clients,
    # proxies and agent frameworks, and short enough that an agent is not left
    # hanging; per tool it can be 0 (always a promise) or math.inf (never).
    promise_after: float = 5.0
    promise_ttl: float = 600.0  # a token and its stored result live this long (finite: spec 3.5)
    max_promises: int = 10_000  # more pending: -32000 / RESOURCE_EXHAUSTED, retryable
    # Where promise records live: memory:// (this process), sqlite:///PATH (the
    # processes of one host), redis://HOST:PORT/DB (many hosts); see mcplite.stores.
    promise_store: str = "memory://"
    max_redeem_wait: float = 30.0  # upper bound of redeem's long-poll `wait`
    secret: bytes | None = None  # None: MCPLITE_SECRET, else random per process
    previous_secrets: tuple[bytes, ...] = ()

    # Streaming.
    heartbeat: float = 15.0  # seconds of tool silence before an SSE heartbeat

    # Process.
    grace: float = 10.0  # seconds in-flight calls get after SIGTERM
    access_log: bool = True
    # MCP: a tool that raises is a result with isError true whose text gives only
    # an error id (the log has the rest); True: its exception's type and text too.
    show_tool_errors: bool = False
    log_format: str = "text"  # or "json": one object per line (mcplite.ops.logs)
    metrics: tuple[str, int] | None = None  # --metrics: /metrics, /healthz, /readyz there
    sync_workers: int | None = None  # thread pool size for sync tools (None: Python's default)

    # TLS on HTTP and gRPC (both or neither): a PEM certificate chain and its key;
    # with a client CA, clients must present a certificate it signed (mutual TLS).
    certfile: str | None = None
    keyfile: str | None = None
    client_ca: str | None = None

    # Authentication on HTTP and gRPC (stdio is exempt); see mcplite.auth.
    auth_tokens: str | None = None  # a file: TOKEN [SCOPE ...] per line
    oauth_issuer: str | None = None  # verify JWT access tokens from this issuer...
    oauth_audience: str | None = None  # ...issued for this audience
    public_url: str | None = None  # the origin clients use, for the resource metadata
    open_discovery: bool = False  # listing without a token (calls never)
    rate_limit: float | None = None  # requests per second per caller (token bucket)
    rate_burst: float | None = None  # the bucket's size (default: max(1, rate_limit))

    def server_ssl_context(self, alpn: tuple[str, ...] = ()) -> ssl.SSLContext | None:
        """The TLS context of a listener (None: plaintext).  Raises ValueError
        naming the file that cannot be used, and why."""
        if self.certfile is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        for option, path in (
            ("certfile", self.certfile),
            ("keyfile", self.keyfile),
            ("client_ca", self.client_ca),
        ):
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"{option} {path}: no such file")
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ValueError) as exc:
            where = self.certfile if self.keyfile is None else f"{self.certfile} / {self.keyfile}"
            raise ValueError(
                f"certfile/keyfile {where}: not a PEM certificate chain and its key "
                f"({_ssl_reason(exc)})"
            ) from None
        if self.client_ca is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca)
            except (OSError, ValueError) as exc:
                raise ValueError(
                    f"client_ca {self.client_ca}: not a PEM CA certificate ({_ssl_reason(exc)})"
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        if alpn:
            context.set_alpn_protocols(list(alpn))
        return context

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "promise_after":
                if not value >= 0:
                    raise ValueError(f"{f.name} must be >= 0 (math.inf for never), got {value!r}")
            elif f.name == "grace":
                if not 0 <= value < math.inf:
                    raise ValueError(f"grace must be a number >= 0, got {value!r}")
            elif (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and (not value > 0 or math.isinf(value))
            ):
                raise ValueError(f"{f.name} must be a positive number, got {value!r}")
        if self.mcp_path is not None:
            if not self.mcp_path.startswith("/"):
                raise ValueError(f"mcp_path must start with '/', got {self.mcp_path!r}")
            self.mcp_path = self.mcp_path.rstrip("/") or "/"
        if self.log_format not in ("text", "json"):
            raise ValueError(f"log_format must be 'text' or 'json', got {self.log_format!r}")
        if (self.oauth_issuer is None) != (self.oauth_audience is None):
            raise ValueError("OAuth needs both an issuer and an audience")
        if (self.keyfile is not None or self.client_ca is not None) and self.certfile is None:
            raise ValueError("keyfile and client_ca need a certfile")
        self.cors_allow_origins = tuple(_origin(o) for o in self.cors_allow_origins)
        if not self.base_path.startswith("/"):
            raise ValueError(f"base_path must start with '/', got {self.base_path!r}")
        self.base_path = self.base_path.rstrip("/")
