"""One validated configuration for the core and every binding.

Every limit has a default that protects a server nobody has tuned; the README's
"Limits" table lists them with the error each one produces.

A field the command line sets carries its :class:`Flag` in its metadata (name,
help, parser, group, and whether ``stdio`` takes it too): ``mcplite.ops.cli``
builds ``serve`` and ``stdio``'s options from them, so a setting is written once.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import secrets
import ssl
from collections.abc import Callable, Iterator
from dataclasses import Field, dataclass, field, fields
from typing import Any, Final
from urllib.parse import urlsplit

from .wire import DEFAULT_BASE_PATH, DEFAULT_MAX_MESSAGE_SIZE

log = logging.getLogger("mcplite")

__all__ = [
    "LOG_FORMATS",
    "LOOPBACK_ADDRESSES",
    "LOOPBACK_NAMES",
    "STDIN_EOF_GRACE",
    "Config",
    "Flag",
    "address",
    "flags",
    "is_loopback",
    "non_negative",
    "positive_float",
    "positive_int",
    "resolve_secret",
]

KiB = 1024
MiB = 1024 * KiB

#: Addresses that only this host can reach (a listener's, or a bind address).
LOOPBACK_ADDRESSES: Final = frozenset({"127.0.0.1", "::1", "localhost"})
#: Who may name a loopback-bound server in Host or Origin (any port): the default
#: of :attr:`Config.mcp_allowed_hosts`.
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})


#: Seconds stdio's requests in flight get once stdin has ended (``grace``, if
#: shorter): enough for quick calls piped in (``printf ... | mcplite stdio``), short
#: of the 2 seconds an MCP client waits after closing stdin before it sends SIGTERM.
STDIN_EOF_GRACE: Final = 0.25

#: ``--log-format``: text lines, or one JSON object per line (mcplite.ops.logs).
LOG_FORMATS: Final[tuple[str, ...]] = ("text", "json")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind or listening address) is reachable from this host only."""
    return host in LOOPBACK_ADDRESSES or host.startswith("127.")


# -- the command line's view of a field ------------------------------------------------

SERVE: Final[tuple[str, ...]] = ("serve",)
SERVE_AND_STDIO: Final[tuple[str, ...]] = ("serve", "stdio")

# Option groups of --help, in the order they are shown.
BINDINGS: Final = "bindings"
LIMITS: Final = "limits"
SECURITY: Final = "security (HTTP and gRPC; see docs/security.md)"
PROMISES: Final = "promises"
PROCESS: Final = "process"
GROUPS: Final[tuple[str, ...]] = (BINDINGS, LIMITS, SECURITY, PROMISES, PROCESS)


@dataclass(frozen=True, slots=True)
class Flag:
    """How the command line sets one :class:`Config` field.

    The flag is ``--field-name`` unless ``name`` says otherwise; a bool field's
    flag sets the opposite of its default (``--open-discovery``, ``--no-access-log``).
    ``parse`` turns the text given into the field's value, raising ValueError
    with a message for the user.  ``off`` is a second flag and its help: it
    sets the field to None (a binding turned off, ``--no-http``).  A
    ``repeat`` flag may be given again and again; the field holds them all.
    """

    help: str
    group: str
    commands: tuple[str, ...] = SERVE
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    name: str | None = None
    off: tuple[str, str] | None = None
    repeat: bool = False

    def flag(self, field_name: str) -> str:
        return self.name or "--" + field_name.replace("_", "-")


# Parsers of a flag's text: ValueError says what was expected.


def _number(kind: type[int] | type[float], text: str) -> int | float:
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def positive_int(text: str) -> int:
    value = int(_number(int, text))
    if value <= 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = float(_number(float, text))
    if not value > 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def non_negative(text: str) -> float:
    value = float(_number(float, text))
    if not value >= 0:
        raise ValueError(f"expected a number >= 0, got {text!r}")
    return value


def address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return (host.strip("[]") or "127.0.0.1", int(port))


def _secret(text: str) -> bytes | None:
    return text.encode() or None  # empty: as if not given


def _secret_bytes(name: str, value: object) -> bytes:
    """A promise secret given to :class:`Config` as bytes: a ``str`` is taken as
    its UTF-8, as ``--secret`` and ``$MCPLITE_SECRET`` are."""
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{name}: a secret is bytes or str, got {type(value).__name__}")


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


def _option(default: Any, flag: Flag) -> Any:
    """A field with a default and the :class:`Flag` that sets it from the command line."""
    return field(default=default, metadata={"flag": flag})


@dataclass(slots=True)
class Config:
    # -- bindings (None turns one off) --
    http: tuple[str, int] | None = _option(
        ("127.0.0.1", 8080),
        Flag(
            "HTTP/1.1 address (port 0: any free port)",
            BINDINGS,
            metavar="HOST:PORT",
            parse=address,
            off=("--no-http", "do not serve HTTP"),
        ),
    )
    grpc: tuple[str, int] | None = _option(
        ("127.0.0.1", 50051),
        Flag(
            "gRPC address (port 0: any free port)",
            BINDINGS,
            metavar="HOST:PORT",
            parse=address,
            off=("--no-grpc", "do not serve gRPC"),
        ),
    )
    base_path: str = _option(DEFAULT_BASE_PATH, Flag("HTTP path prefix", BINDINGS))
    # Full MCP (streamable HTTP) on the HTTP port.
    mcp_path: str | None = _option(
        "/mcp",
        Flag(
            "path of the full MCP endpoint on the HTTP port",
            BINDINGS,
            off=("--no-mcp", "do not serve the MCP endpoint"),
        ),
    )
    # DNS rebinding protection.  A tuple: exactly those hosts ("name" or
    # "name:port"), for Host and for Origin.
    mcp_allowed_hosts: tuple[str, ...] | None = _option(
        None,
        Flag(
            "a Host/Origin the MCP endpoint accepts (repeatable; default: localhost, "
            "127.0.0.1 and [::1] when bound to loopback, any otherwise)",
            BINDINGS,
            name="--allowed-host",
            metavar="HOST[:PORT]",
            repeat=True,
        ),
    )
    # CORS (mcplite.bindings.http.cors): these origins pass the Origin check
    # above too (Host is still checked).
    cors_allow_origins: tuple[str, ...] = _option(
        (),
        Flag(
            "let web pages of ORIGIN (http[s]://host[:port]) call the HTTP endpoints from a "
            "browser (CORS; repeatable; '*': any origin; off by default; see docs/security.md)",
            BINDINGS,
            name="--cors-allow-origin",
            metavar="ORIGIN",
            repeat=True,
        ),
    )
    playground: bool = _option(
        False,
        Flag(
            "serve the playground, a page to try the tools in a browser, at GET / "
            "(on in 'mcplite dev'; see docs/develop.md)",
            BINDINGS,
        ),
    )
    # -- limits --
    page_size: int | None = _option(
        None,
        Flag(
            "answer MCP's lists (tools, prompts, resources, templates) in pages of N "
            "entries, each with a nextCursor to the next (off by default)",
            LIMITS,
            SERVE_AND_STDIO,
            metavar="N",
            parse=positive_int,
        ),
    )
    max_body_size: int = _option(
        1 * MiB,
        Flag(
            "larger requests are refused: HTTP 413; on stdio a longer line gets a -32600 "
            "error and is skipped",
            LIMITS,
            SERVE_AND_STDIO,
            metavar="BYTES",
            parse=positive_int,
        ),
    )
    max_header_size: int = _option(
        16 * KiB,
        Flag("larger request heads get 431", LIMITS, metavar="BYTES", parse=positive_int),
    )
    request_timeout: float = _option(
        10.0,
        Flag(
            "seconds to receive a whole request, else 408",
            LIMITS,
            metavar="S",
            parse=positive_float,
        ),
    )
    keepalive_timeout: float = _option(
        15.0,
        Flag(
            "idle seconds before a keep-alive connection is closed",
            LIMITS,
            metavar="S",
            parse=positive_float,
        ),
    )
    max_connections: int = _option(
        1024, Flag("more connections get 503", LIMITS, metavar="N", parse=positive_int)
    )
    max_concurrent_calls: int = _option(
        512,
        Flag(
            "more calls in flight are refused: HTTP 503 + Retry-After, gRPC "
            "RESOURCE_EXHAUSTED, stdio a -32000 error",
            LIMITS,
            SERVE_AND_STDIO,
            metavar="N",
            parse=positive_int,
        ),
    )
    retry_after: float = 1.0  # seconds, in Retry-After and error data
    grpc_max_message_size: int = _option(
        DEFAULT_MAX_MESSAGE_SIZE,
        Flag(
            "larger gRPC messages get RESOURCE_EXHAUSTED",
            LIMITS,
            metavar="BYTES",
            parse=positive_int,
        ),
    )
    grpc_idle_timeout: float = _option(
        15.0,
        Flag(
            "seconds without an open stream before a gRPC connection is closed (GOAWAY)",
            LIMITS,
            metavar="S",
            parse=positive_float,
        ),
    )
    grpc_max_connections: int = _option(
        1024,
        Flag(
            "more gRPC connections are closed at once (UNAVAILABLE)",
            LIMITS,
            metavar="N",
            parse=positive_int,
        ),
    )

    # -- promises --
    # 5 s: well inside the 30-60 s timeouts of common HTTP clients, proxies and
    # agent frameworks, and short enough that an agent is not left hanging; per
    # tool it can be 0 (always a promise) or math.inf (never).
    promise_after: float = _option(
        5.0,
        Flag(
            "seconds before a running call becomes a promise",
            PROMISES,
            SERVE_AND_STDIO,
            metavar="S",
            parse=non_negative,
        ),
    )
    # Finite: spec 3.5.
    promise_ttl: float = _option(
        600.0,
        Flag(
            "seconds a promise token and its result live",
            PROMISES,
            SERVE_AND_STDIO,
            metavar="S",
            parse=positive_float,
        ),
    )
    # More pending: -32000 / RESOURCE_EXHAUSTED, retryable.
    max_promises: int = _option(
        10_000,
        Flag(
            "pending promises before new long calls are refused",
            PROMISES,
            SERVE_AND_STDIO,
            metavar="N",
            parse=positive_int,
        ),
    )
    # See mcplite.stores.
    promise_store: str = _option(
        "memory://",
        Flag(
            "where promises live: memory:// (this process; with --workers > 1 and no "
            "--promise-store, a SQLite file in a private temporary directory), "
            "sqlite:///PATH (the processes of one host), redis://HOST:PORT/DB or rediss:// "
            "(many hosts; mcplite[redis])",
            PROMISES,
            SERVE_AND_STDIO,
            metavar="URL",
        ),
    )
    max_redeem_wait: float = 30.0  # upper bound of redeem's long-poll `wait`
    secret: bytes | None = _option(
        None,
        Flag(
            "promise sealing secret (default: $MCPLITE_SECRET, else random per process)",
            PROMISES,
            SERVE_AND_STDIO,
            parse=_secret,
        ),
    )
    previous_secrets: tuple[bytes, ...] = ()
    heartbeat: float = _option(
        15.0,
        Flag(
            "seconds of tool silence before an SSE heartbeat",
            BINDINGS,
            metavar="S",
            parse=positive_float,
        ),
    )

    # -- process --
    grace: float = _option(
        10.0,
        Flag(
            "seconds in-flight calls get after SIGINT/SIGTERM (stdio: at most "
            f"{STDIN_EOF_GRACE} once stdin closes)",
            PROCESS,
            SERVE_AND_STDIO,
            metavar="S",
            parse=non_negative,
        ),
    )
    access_log: bool = _option(
        True,
        Flag(
            "no access log line per request or call",
            PROCESS,
            SERVE_AND_STDIO,
            name="--no-access-log",
        ),
    )
    # Otherwise a tool that raises is, on MCP, a result with isError true whose
    # text gives only an error id (the log has the rest).
    show_tool_errors: bool = _option(
        False,
        Flag(
            "MCP: put a raising tool's exception (type and text) in its isError result, "
            "not only its error id (for development: it may reveal internals)",
            PROCESS,
            SERVE_AND_STDIO,
        ),
    )
    log_format: str = _option(
        "text",
        Flag(
            "log lines as text, or as one JSON object each (see docs/operations.md)",
            PROCESS,
            SERVE_AND_STDIO,
            choices=LOG_FORMATS,
        ),
    )
    metrics: tuple[str, int] | None = _option(
        None,
        Flag(
            "serve /metrics (Prometheus), /healthz and /readyz on this address "
            "(its own listener; off by default)",
            PROCESS,
            metavar="HOST:PORT",
            parse=address,
        ),
    )
    sync_workers: int | None = None  # thread pool size for sync tools (None: Python's default)

    # -- TLS on HTTP and gRPC (both or neither) --
    certfile: str | None = _option(
        None, Flag("serve TLS with this certificate chain", SECURITY, metavar="PEM")
    )
    keyfile: str | None = _option(
        None, Flag("the certificate's private key", SECURITY, metavar="PEM")
    )
    # Mutual TLS.
    client_ca: str | None = _option(
        None, Flag("require client certificates signed by this CA", SECURITY, metavar="PEM")
    )

    # -- authentication on HTTP and gRPC (stdio is exempt); see mcplite.auth --
    auth_tokens: str | None = _option(
        None,
        Flag(
            "bearer tokens, one per line followed by the scopes it grants "
            "(default: the file $MCPLITE_AUTH_TOKENS names)",
            SECURITY,
            metavar="PATH",
        ),
    )
    oauth_issuer: str | None = _option(
        None, Flag("accept JWT access tokens from this issuer", SECURITY, metavar="URL")
    )
    oauth_audience: str | None = _option(
        None, Flag("the audience those tokens must name", SECURITY, metavar="AUD")
    )
    public_url: str | None = _option(
        None,
        Flag(
            "the origin clients reach this server at (for the OAuth resource metadata)",
            SECURITY,
            metavar="URL",
        ),
    )
    # Calls never go without a token.
    open_discovery: bool = _option(
        False,
        Flag("let clients without a token list tools, prompts and resources", SECURITY),
    )
    # A token bucket per caller.
    rate_limit: float | None = _option(
        None,
        Flag(
            "requests per second per caller (429 / RESOURCE_EXHAUSTED beyond)",
            SECURITY,
            metavar="N",
            parse=positive_float,
        ),
    )
    rate_burst: float | None = _option(
        None,
        Flag("burst size (default: N, at least 1)", SECURITY, metavar="N", parse=positive_float),
    )

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
        if self.secret is not None:
            self.secret = _secret_bytes("secret", self.secret)
        if isinstance(self.previous_secrets, str | bytes | bytearray):
            raise TypeError("previous_secrets must be a sequence of secrets, not one secret")
        self.previous_secrets = tuple(
            _secret_bytes("previous_secrets", old) for old in self.previous_secrets
        )
        if self.mcp_path is not None:
            if not self.mcp_path.startswith("/"):
                raise ValueError(f"mcp_path must start with '/', got {self.mcp_path!r}")
            self.mcp_path = self.mcp_path.rstrip("/") or "/"
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"log_format must be one of {LOG_FORMATS}, got {self.log_format!r}")
        if (self.oauth_issuer is None) != (self.oauth_audience is None):
            raise ValueError("OAuth needs both an issuer and an audience")
        if (self.keyfile is not None or self.client_ca is not None) and self.certfile is None:
            raise ValueError("keyfile and client_ca need a certfile")
        self.cors_allow_origins = tuple(_origin(o) for o in self.cors_allow_origins)
        if not self.base_path.startswith("/"):
            raise ValueError(f"base_path must start with '/', got {self.base_path!r}")
        self.base_path = self.base_path.rstrip("/")


def flags() -> Iterator[tuple[Field[Any], Flag]]:
    """Each :class:`Config` field the command line sets, with its :class:`Flag`, in order."""
    for f in fields(Config):
        flag = f.metadata.get("flag")
        if flag is not None:
            yield f, flag


def resolve_secret(
    config: Config,
    random_means: str = "using a random one; promise tokens will not survive a restart",
) -> Config:
    """``config`` with its promise secret settled: ``--secret``, else
    ``$MCPLITE_SECRET``, else a random one (tokens then die with the process: said
    once, as a warning that ends with ``random_means``)."""
    if config.secret is not None:
        return config
    env = os.environ.get("MCPLITE_SECRET")
    if env:
        return dataclasses.replace(config, secret=env.encode())
    log.warning("no promise secret given (--secret or MCPLITE_SECRET): %s", random_means)
    return dataclasses.replace(config, secret=secrets.token_bytes(32))
