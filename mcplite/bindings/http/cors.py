"""CORS: what lets a web page on another origin call the server from a browser.

Off unless origins are given (``--cors-allow-origin``, ``Config.cors_allow_origins``).
Then, for a request whose ``Origin`` is one of them (the Fetch standard, "CORS
protocol"):

- a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) is answered
  ``204`` with the methods of the path and the request headers asked for that
  the server reads (MCP's own, ``Mcp-Param-*`` included: a wildcard cannot name
  them, so the names asked for are echoed), cached by the browser for 10 minutes;
- every answer carries ``Access-Control-Allow-Origin`` (with ``Vary: Origin``)
  and exposes the response headers a client reads (``WWW-Authenticate`` to
  start OAuth, ``Retry-After``, MCP's session and version headers).

Any other origin gets none of this: the browser then keeps the answer from
the page.  ``*`` allows every origin (``Access-Control-Allow-Origin: *``, never
with credentials; bearer tokens are sent as a header, which needs none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["ALLOWED_HEADERS", "EXPOSED_HEADERS", "CorsPolicy"]

#: Request headers a cross-origin page may send (lowercase), besides ``mcp-param-*``.
ALLOWED_HEADERS = frozenset(
    {
        "accept",
        "authorization",
        "content-type",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        "mcp-session-id",
    }
)
_PARAM_PREFIX = "mcp-param-"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")  # a field name (RFC 9110 section 5.1)
#: Response headers a cross-origin page may read (beyond the CORS-safelisted ones).
EXPOSED_HEADERS = b"Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, Retry-After"
#: Seconds a browser may keep a preflight's answer (Chromium caps it at 7200).
MAX_AGE = b"600"

_NONE: tuple[tuple[bytes, bytes], ...] = ()
_PREFLIGHT_VARY = (
    b"vary",
    b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
)


class CorsPolicy:
    """The origins allowed (already normalized by :class:`~mcplite.core.config.Config`:
    ``scheme://host[:port]``, lowercase, no default port; or ``*``)."""

    def __init__(self, origins: Iterable[str]) -> None:
        origins = tuple(origins)
        self.any = "*" in origins
        self.origins = frozenset(o.encode("latin-1") for o in origins if o != "*")
        # The headers of every answer, built once per origin: a request pays a lookup.
        self._answers = {
            origin: (
                (b"access-control-allow-origin", origin),
                (b"vary", b"Origin"),
                (b"access-control-expose-headers", EXPOSED_HEADERS),
            )
            for origin in self.origins
        }
        self._any = (
            (b"access-control-allow-origin", b"*"),
            (b"access-control-expose-headers", EXPOSED_HEADERS),
        )

    def allows(self, origin: bytes) -> bool:
        """Whether a request with this ``Origin`` value may be answered to its page."""
        return self.any or origin.strip().lower() in self.origins

    def response_headers(self, origin: bytes | None) -> tuple[tuple[bytes, bytes], ...]:
        """What every answer to a request from ``origin`` carries (empty: nothing,
        the origin is not allowed or the request is not a cross-origin one)."""
        if origin is None:
            return _NONE
        if self.any:
            return self._any
        return self._answers.get(origin.strip().lower(), _NONE)

    def preflight(
        self, headers: Mapping[bytes, bytes], methods: bytes
    ) -> tuple[tuple[bytes, bytes], ...] | None:
        """The headers of the ``204`` that answers a preflight from an allowed
        origin to a path that takes ``methods``; None when ``headers`` are not
        that (no ``Access-Control-Request-Method``, an origin not allowed)."""
        origin = headers.get(b"origin")
        if origin is None or b"access-control-request-method" not in headers:
            return None
        answer = self.response_headers(origin)
        if not answer:
            return None
        out = [answer[0], _PREFLIGHT_VARY, (b"access-control-allow-methods", methods)]
        asked = headers.get(b"access-control-request-headers")
        if asked is not None:
            allowed = _allowed(asked)
            if allowed:
                out.append((b"access-control-allow-headers", allowed))
        out.append((b"access-control-max-age", MAX_AGE))
        return tuple(out)


def _allowed(asked: bytes) -> bytes:
    """Of the header names a preflight asks for, those a page may send (the
    browser refuses the request if one it needs is missing)."""
    names = []
    for raw in asked.decode("latin-1").split(","):
        name = raw.strip().lower()
        if name in ALLOWED_HEADERS or (name.startswith(_PARAM_PREFIX) and _TOKEN.fullmatch(name)):
            names.append(name)
    return ", ".join(names).encode("latin-1")
