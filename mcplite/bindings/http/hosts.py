"""The Host check against DNS rebinding: a page elsewhere must not reach a
server on loopback through a name that resolves there.

A route that asks for it (the MCP endpoint) is answered only when ``Host``,
and ``Origin`` when sent, name this server: one of the allowed names
(``Config.mcp_allowed_hosts``; for a server bound to loopback, by default,
``mcplite.core.config.LOOPBACK_NAMES`` on any port).  An ``Origin`` that
CORS allows passes too: the Host check is what stops a rebinding.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from .cors import CorsPolicy

__all__ = ["AllowedHosts", "host_allowed"]
#: Host values whose check is kept (see AllowedHosts.admits).
_HOSTS_KEPT = 64


def _host_name(value: str) -> str:
    """``name`` of ``name:port`` (``[v6]`` kept in brackets), lowercased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.split(":", 1)[0]


def host_allowed(
    headers: Mapping[bytes, bytes], allowed: frozenset[str] | None, cors: CorsPolicy | None = None
) -> bool:
    """Whether Host, and Origin when sent, name this server (``allowed``: the
    names, None: any); an Origin ``cors`` allows passes too."""
    if allowed is None:
        return True
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    if host not in allowed and _host_name(host) not in allowed:
        return False
    origin = headers.get(b"origin")
    if origin is None:
        return True
    if cors is not None and cors.allows(origin):
        return True
    parts = urlsplit(origin.decode("latin-1").strip().lower())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return name in allowed or parts.netloc in allowed


class AllowedHosts:
    """:func:`host_allowed` for one server, the answer for a Host sent without
    Origin kept: clients send the same one or two, and checking one decodes and
    splits it (a microsecond a request, 2% of an MCP call)."""

    def __init__(self, allowed: frozenset[str] | None, cors: CorsPolicy | None = None) -> None:
        self._allowed = allowed
        self._cors = cors
        self._known: dict[bytes | None, bool] = {}

    @property
    def allowed(self) -> frozenset[str] | None:
        """The names a Host may give (lowercase), or None: any."""
        return self._allowed

    @allowed.setter
    def allowed(self, names: frozenset[str] | None) -> None:
        self._allowed = names
        self._known.clear()

    def admits(self, headers: Mapping[bytes, bytes]) -> bool:
        """Whether a request with these headers names this server."""
        allowed = self._allowed
        if allowed is None:
            return True
        if b"origin" in headers:
            return host_allowed(headers, allowed, self._cors)
        host = headers.get(b"host")
        known = self._known.get(host)
        if known is None:
            known = host_allowed(headers, allowed)
            if len(self._known) < _HOSTS_KEPT:
                self._known[host] = known
        return known
