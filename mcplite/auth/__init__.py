"""Authentication for remote use: who is calling, and may they.

A server with auth on (``--auth-tokens``, ``--oauth-issuer``) builds one
:class:`Auth` and hands it to every network binding (stdio is exempt: whoever
starts the process owns it).  A binding reads the bearer token from the
``Authorization`` header (HTTP) or ``authorization`` metadata (gRPC) and calls
:meth:`Auth.authenticate`; the caller it gets back goes on the request's
:class:`~mcplite.core.context.RequestContext`, and from there the core's
:class:`ScopePolicy` decides per tool (``@tools.tool(scopes=[...])``).

The rules, in the order they apply:

1. Bad credentials (malformed header, unknown or expired token, bad signature)
   are refused everywhere with :class:`~mcplite.core.errors.Unauthenticated`
   (HTTP ``401`` + ``WWW-Authenticate``, gRPC ``UNAUTHENTICATED``).
2. No credentials: refused too, unless ``open_discovery`` is set and the
   request is discovery (listing tools, prompts, resources; MCP's
   ``initialize``/``server/discover``; ``ping``).  Calls are never anonymous.
3. A caller may call a tool only when it holds every scope the tool names
   (else :class:`~mcplite.core.errors.Forbidden`, HTTP ``403``
   ``insufficient_scope``, gRPC ``PERMISSION_DENIED``); discovery lists only
   the tools the caller may call (an anonymous caller: those needing no scope).
4. A promise is bound to the subject that created it (see
   :func:`binding_of`): anyone else gets the error an unknown token gets.
5. With a rate limit, each identity (the subject, else the peer's address)
   gets a token bucket; past it, :class:`~mcplite.core.errors.RateLimited`
   (HTTP ``429`` + ``Retry-After``, gRPC ``RESOURCE_EXHAUSTED``).

Tokens are compared in constant time and never logged or echoed.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..core.context import Caller, RequestContext
from ..core.errors import Forbidden, RateLimited, Unauthenticated

if TYPE_CHECKING:
    from ..core.config import Config
    from ..core.tools import Tool

__all__ = [
    "DISCOVERY_METHODS",
    "Auth",
    "Authenticator",
    "RateLimiter",
    "ScopePolicy",
    "StaticTokens",
    "auth_from_config",
    "load_token_file",
]

#: Requests that ``open_discovery`` lets through without credentials (JSON-RPC
#: methods of MCP-lite and MCP; the MCP-lite list routes and gRPC's GetTools
#: and GetPrompts count as ``tools/list`` and ``prompts/list``).
DISCOVERY_METHODS = frozenset(
    {
        "initialize",
        "notifications/initialized",
        "server/discover",
        "ping",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    }
)

_BEARER = "bearer "
#: Bindings whose caller owns the process (stdio, in-process): never asked for a token.
_OWNER_BINDINGS = frozenset({"in-process", "stdio"})


class Authenticator(Protocol):
    """Turns a bearer token into a :class:`Caller`, or refuses it.

    :meth:`verify` answers without I/O when it can (a static token, a JWT whose
    key is cached) and returns None when it must fetch something first; then
    the binding awaits :meth:`verify_async`.  Both raise
    :class:`~mcplite.core.errors.Unauthenticated` for a token they refuse.
    """

    def verify(self, token: str) -> Caller | None: ...

    async def verify_async(self, token: str) -> Caller: ...


class StaticTokens:
    """Bearer tokens from a file: ``TOKEN [SCOPE ...]`` per line, ``#`` comments.

    A caller's subject is ``token:`` and the first 12 hex digits of the token's
    SHA-256 (stable, so promises survive a reload; the token itself appears
    nowhere).  Lookup compares SHA-256 digests with :func:`hmac.compare_digest`
    against every entry, so its time does not depend on how much of a token
    matched.
    """

    def __init__(self, entries: Iterable[tuple[str, Sequence[str]]]) -> None:
        self._entries: list[tuple[bytes, Caller]] = []
        for token, scopes in entries:
            digest = hashlib.sha256(token.encode()).digest()
            subject = "token:" + digest.hex()[:12]
            self._entries.append((digest, Caller(subject, frozenset(scopes))))

    def __len__(self) -> int:
        return len(self._entries)

    def verify(self, token: str) -> Caller | None:
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Caller | None = None
        for known, caller in self._entries:  # no early exit: the same work for every token
            if hmac.compare_digest(known, digest):
                found = caller
        if found is None:
            raise Unauthenticated("Unauthenticated: unknown bearer token")
        return found

    async def verify_async(self, token: str) -> Caller:
        caller = self.verify(token)
        assert caller is not None
        return caller


def load_token_file(path: str) -> StaticTokens:
    """Read a token file (see :class:`StaticTokens`); ValueError says what is wrong
    and where, without quoting a token."""
    entries: list[tuple[str, list[str]]] = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            token, scopes = words[0], words[1:]
            if len(token) < 16:
                raise ValueError(f"{path}:{number}: a token must be at least 16 characters")
            entries.append((token, scopes))
    if not entries:
        raise ValueError(f"{path}: no tokens (one per line: TOKEN [SCOPE ...])")
    return StaticTokens(entries)


class RateLimiter:
    """A token bucket per identity: ``rate`` requests a second, bursts of ``burst``.

    At most ``max_identities`` buckets are kept; the least recently seen is
    forgotten first (a forgotten identity starts again with a full bucket, which
    only ever errs towards letting a request through).
    """

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        max_identities: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0:
            raise ValueError("the rate limit must be positive")
        self.rate = rate
        self.burst = burst if burst is not None else max(1.0, rate)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._max = max_identities
        self._clock = clock

    def take(self, identity: str) -> float:
        """Spend one request of ``identity``'s: 0 when allowed, else the seconds
        until one is."""
        now = self._clock()
        buckets = self._buckets
        level, then = buckets.pop(identity, (self.burst, now))
        level = min(self.burst, level + (now - then) * self.rate)
        if level >= 1.0:
            buckets[identity] = (level - 1.0, now)
            wait = 0.0
        else:
            buckets[identity] = (level, now)
            wait = (1.0 - level) / self.rate
        if len(buckets) > self._max:
            buckets.popitem(last=False)
        return wait


@dataclass
class Auth:
    """Everything a binding needs to authenticate requests (see the module doc)."""

    authenticators: Sequence[Authenticator] = ()
    #: Discovery without credentials (calls never).
    open_discovery: bool = False
    #: RFC 9728 Protected Resource Metadata, served at
    #: ``/.well-known/oauth-protected-resource`` (OAuth only); its ``resource``
    #: is filled in per request from the URL the client used unless set.
    resource_metadata: dict[str, Any] | None = None
    limiter: RateLimiter | None = None
    #: The public origin of this server (``https://tools.example.com``) for the
    #: metadata's ``resource`` when clients reach it through a proxy; None: the
    #: scheme and ``Host`` of each request.
    public_url: str | None = None
    #: Where 401 answers point clients (``resource_metadata=`` in WWW-Authenticate).
    metadata_path: str = "/.well-known/oauth-protected-resource"

    @property
    def required(self) -> bool:
        return bool(self.authenticators)

    def policy(self) -> ScopePolicy:
        """The core's policy with this auth on: callers need the scopes a tool names."""
        return ScopePolicy(self)

    def authenticate(
        self, authorization: str | None
    ) -> Caller | Callable[[], Awaitable[Caller]] | None:
        """The caller of a request with this ``Authorization`` value.

        None: no credentials (the binding then allows discovery only, and only
        with ``open_discovery``).  A function: a verifier must fetch keys first;
        await what it returns, in the request's task.
        Raises :class:`Unauthenticated` for a malformed header or a refused token.
        """
        if authorization is None or not authorization.strip():
            return None
        if authorization[: len(_BEARER)].lower() != _BEARER:
            raise Unauthenticated("Unauthenticated: use the Bearer scheme")
        token = authorization[len(_BEARER) :].strip()
        if not token or " " in token:
            raise Unauthenticated("Unauthenticated: malformed bearer token")
        refusal: Unauthenticated | None = None
        for authenticator in self.authenticators:
            try:
                caller = authenticator.verify(token)
            except Unauthenticated as exc:
                refusal = refusal or exc
                continue
            if caller is None:
                return functools.partial(authenticator.verify_async, token)
            return caller
        raise refusal or Unauthenticated()

    def admit(self, context: RequestContext, method: str) -> None:
        """Refuse an anonymous request over the network unless it is open discovery."""
        if (
            context.caller is None
            and context.binding not in _OWNER_BINDINGS
            and not (self.open_discovery and method in DISCOVERY_METHODS)
        ):
            raise Unauthenticated()

    def limit(self, caller: Caller | None, peer: tuple[str, int] | None) -> None:
        """Spend one request of this caller's rate (raises :class:`RateLimited`)."""
        if self.limiter is None:
            return
        identity = caller.subject if caller is not None else (peer[0] if peer else "?")
        wait = self.limiter.take(identity)
        if wait > 0:
            retry = max(1, int(wait + 0.999))
            raise RateLimited(f"Too many requests: retry after {retry} s", retry_after=retry)

    def challenge(self, resource_url: str | None, error: Forbidden | None = None) -> str:
        """The ``WWW-Authenticate`` value of a 401 (or, with ``error``, a 403)."""
        parts = ["Bearer"]
        params = []
        if self.resource_metadata is not None and resource_url is not None:
            params.append(f'resource_metadata="{resource_url}"')
        if error is not None:
            params.append('error="insufficient_scope"')
            if error.scopes:
                params.append(f'scope="{" ".join(error.scopes)}"')
        if params:
            parts.append(", ".join(params))
        return " ".join(parts)


class ScopePolicy:
    """The core's policy with auth on: callers need every scope a tool names."""

    def __init__(self, auth: Auth) -> None:
        self.auth = auth

    def authorize(self, context: RequestContext, tool: Tool) -> None:
        caller = context.caller
        if caller is None:
            if context.binding in _OWNER_BINDINGS:
                return  # the process's owner
            raise Unauthenticated()
        missing = tool.scopes - caller.scopes
        if missing:
            raise Forbidden(
                f"Forbidden: tool {tool.name!r} needs scope {' '.join(sorted(missing))}",
                tuple(sorted(tool.scopes)),
            )

    def visible(self, context: RequestContext, tool: Tool) -> bool:
        caller = context.caller
        if caller is None and context.binding in _OWNER_BINDINGS:
            return True
        held = caller.scopes if caller is not None else frozenset()
        return tool.scopes <= held


#: Names the token file when ``--auth-tokens`` is not given.
TOKENS_ENV = "MCPLITE_AUTH_TOKENS"


def auth_from_config(config: Config, environ: Mapping[str, str] | None = None) -> Auth | None:
    """The :class:`Auth` that ``config`` asks for (None: auth off).

    Raises ValueError for a token file that cannot be used and ImportError (with
    the extra to install) when OAuth is asked for without PyJWT.
    """
    environ = os.environ if environ is None else environ
    authenticators: list[Authenticator] = []
    metadata: dict[str, Any] | None = None
    token_file = config.auth_tokens or environ.get(TOKENS_ENV) or None
    if token_file is not None:
        try:
            authenticators.append(load_token_file(token_file))
        except OSError as exc:
            raise ValueError(f"cannot read the token file: {exc}") from None
    if config.oauth_issuer is not None and config.oauth_audience is not None:
        from .oauth import OAuthVerifier

        authenticators.append(OAuthVerifier(config.oauth_issuer, config.oauth_audience))
        metadata = {
            "authorization_servers": [config.oauth_issuer],
            "bearer_methods_supported": ["header"],
        }
    if not authenticators:
        if config.open_discovery or config.rate_limit is not None:
            raise ValueError("--open-discovery and --rate-limit need auth on (tokens or OAuth)")
        return None
    limiter = None
    if config.rate_limit is not None:
        limiter = RateLimiter(config.rate_limit, config.rate_burst)
    return Auth(
        authenticators,
        open_discovery=config.open_discovery,
        resource_metadata=metadata,
        limiter=limiter,
        public_url=config.public_url.rstrip("/") if config.public_url else None,
    )
