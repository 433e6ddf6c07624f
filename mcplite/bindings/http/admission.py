"""What a request's head decides, before its body is read.

:meth:`Admission.admit` takes a request's head and its :class:`~.routes.Route`
and says, in this order:

- no route for its path: ``404``;
- a route that checks Host (the MCP endpoint) named by another host: ``403``
  (DNS rebinding, :mod:`mcplite.bindings.http.hosts`);
- a CORS preflight from an allowed origin: ``204`` with the preflight's
  headers (no authentication: browsers send no credentials with one);
- a method the route does not take: ``405`` with ``Allow`` naming its methods;
- a body that is not ``application/json`` in UTF-8 where the route takes JSON:
  ``415``;
- with auth on and a route that is not public, the caller
  (:attr:`Request.caller <mcplite.bindings.http.messages.Request.caller>`), or
  ``401``, ``403`` or ``429`` with the headers that say why; or a verification
  to await first (a verifier that fetches keys), :meth:`Admission.verify`.

A refusal is answered once the body is read (and dropped unread), so that the
connection can go on.  No socket here: any server can ask.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from ...core.authorize import Gate
from ...core.context import Caller
from ...core.errors import Forbidden, MCPLiteError, RateLimited, Unauthenticated
from ...protocols.status import refusal_status
from .cors import CorsPolicy
from .hosts import AllowedHosts
from .messages import Request
from .protected import ProtectedResource
from .routes import Route
from .statuses import retry_after

__all__ = ["Admission", "Refusal", "Verification"]

Headers = tuple[tuple[bytes, bytes], ...]


class Refusal:
    """An answer decided by the head: ``status``, a ``message`` for the JSON-RPC
    error body, and the headers that go with it (``Allow``, ``Retry-After``,
    ``WWW-Authenticate``; a preflight's CORS headers, for a ``204``)."""

    __slots__ = ("headers", "message", "status")

    def __init__(self, status: int, message: str, headers: Headers = ()) -> None:
        self.status = status
        self.message = message
        self.headers = headers

    def __repr__(self) -> str:
        return f"Refusal({self.status}, {self.message!r})"


class Verification:
    """A caller that can only be verified by awaiting (a key fetch): see
    :meth:`Admission.verify`."""

    __slots__ = ("verify",)

    def __init__(self, verify: Callable[[], Awaitable[Caller]]) -> None:
        self.verify = verify


@dataclasses.dataclass(slots=True)
class Admission:
    """The head checks of one server (see the module docstring).  Raises
    ValueError for ``auth`` without the ``protected`` resource its refusals name."""

    hosts: AllowedHosts
    cors: CorsPolicy | None = dataclasses.field(default=None, kw_only=True)
    auth: Gate | None = dataclasses.field(default=None, kw_only=True)
    protected: ProtectedResource | None = dataclasses.field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.auth is not None and self.protected is None:
            raise ValueError("with auth on, refusals need the protected resource they name")

    def admit(
        self, request: Request, route: Route | None, cors: Headers = ()
    ) -> Refusal | Verification | None:
        """What the head of ``request`` (to ``route``) gets: a refusal, a caller to
        verify, or None (go on; ``request.caller`` is set when auth found one).
        ``cors``: the CORS headers its Origin gets (empty: none, not allowed)."""
        if route is None:
            return Refusal(404, f"Not found: {request.path_text()}")
        headers = request.headers
        method = request.method
        if route.check_host and not self.hosts.admits(headers):
            return Refusal(403, "Forbidden: Host or Origin not allowed")
        if cors and method == b"OPTIONS":
            assert self.cors is not None
            answer = self.cors.preflight(headers, route.preflight)
            if answer is not None:
                return Refusal(204, "", answer)
            # Not a preflight: an OPTIONS request, answered 405 below.
        if method not in route.methods:
            allow = route.allow
            use = route.methods[0].decode("ascii")
            return Refusal(405, f"Method not allowed: use {use}", ((b"allow", allow),))
        if route.json_body:
            length = headers.get(b"content-length")
            if (length is not None and length != b"0") or b"transfer-encoding" in headers:
                ctype = headers.get(b"content-type", b"").lower()
                if ctype.split(b";", 1)[0].strip() != b"application/json":
                    return Refusal(
                        415, "Unsupported media type: send Content-Type: application/json"
                    )
                if ctype.find(b"charset") >= 0 and ctype.find(b"utf-8") < 0:
                    return Refusal(415, "Unsupported charset: the body must be UTF-8")
        if self.auth is not None and not route.public:
            return self._authenticate(request)
        return None

    def _authenticate(self, request: Request) -> Refusal | Verification | None:
        auth = self.auth
        assert auth is not None
        value = request.headers.get(b"authorization")
        try:
            found = auth.authenticate(None if value is None else value.decode("latin-1"))
            if found is None:
                # Anonymous: discovery only, and only when it is open.  The JSON-RPC
                # routes carry both, so their methods are checked one by one.
                if not auth.open_discovery:
                    raise Unauthenticated()
            elif isinstance(found, Caller):
                request.caller = found
            else:
                return Verification(found)  # a verifier must fetch keys: awaited
            auth.limit(request.caller, request.peer)
        except MCPLiteError as exc:
            return self.refused(request, exc)
        return None

    async def verify(self, request: Request, verification: Verification) -> Refusal | None:
        """Await the caller's verification (sets ``request.caller``); a refusal
        when it fails or the caller is over its rate."""
        assert self.auth is not None
        try:
            request.caller = await verification.verify()
            self.auth.limit(request.caller, request.peer)
        except MCPLiteError as exc:
            return self.refused(request, exc)
        return None

    def refused(self, request: Request, exc: MCPLiteError) -> Refusal:
        """The answer to a caller authentication refused: ``429`` with Retry-After
        (over its rate), ``403`` (a scope missing) or ``401``, with the challenge."""
        status = refusal_status(exc)
        if isinstance(exc, RateLimited):
            return Refusal(status, exc.message, (retry_after(exc.retry_after),))
        assert self.protected is not None
        scopes = exc.scopes if isinstance(exc, Forbidden) else ()
        return Refusal(status, exc.message, (self.protected.challenge(request, status, scopes),))
