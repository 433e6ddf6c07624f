"""Promise stores by URL: :func:`open_store`.

==========================  ===============================================================
URL                         store
==========================  ===============================================================
``memory://``               :class:`~mcplite.core.promises.MemoryStore`: this process only
``sqlite:///PATH``          :class:`~mcplite.stores.sqlite.SQLiteStore` on the file ``PATH``
                            (``sqlite:////abs/path`` or ``sqlite:///rel/path``): the
                            processes of one host
``sqlite://``               the same, on a file in a private temporary directory
``redis://HOST:PORT/DB``    :class:`~mcplite.stores.redis.RedisStore` (``rediss://`` for
                            TLS): many hosts; needs ``pip install 'mcplite[redis]'``
==========================  ===============================================================

The shared stores (SQLite, Redis) take one query parameter of their own:

``lease=SECONDS``
    how long a process's lease on its running promises lasts (default
    :data:`~mcplite.core.promises.DEFAULT_LEASE`, 10 s; renewed every third of it).
    A promise whose process dies resolves, within about one lease, to a
    retryable failure with reason ``worker_lost`` (see
    :class:`~mcplite.core.promises.PromiseStore`).  A short lease notices a dead
    process sooner and costs more renewals; a process whose event loop is
    blocked for longer than its lease loses its running promises.  Example:
    ``sqlite:///var/lib/mcplite/core/promises.db?lease=5``,
    ``redis://cache:6379/0?lease=5``.  Other query parameters of a Redis URL go
    to the ``redis`` client.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ..core.promises import DEFAULT_LEASE, MemoryStore, PromiseStore

__all__ = ["open_store"]

SCHEMES = ("memory://", "sqlite:///PATH", "sqlite://", "redis://HOST:PORT/DB", "rediss://...")


def _lease(url: str, query: str) -> tuple[float, list[tuple[str, str]]]:
    """The ``lease`` of a URL's query, and the query's other parameters."""
    lease = DEFAULT_LEASE
    rest = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name != "lease":
            rest.append((name, value))
            continue
        try:
            lease = float(value)
        except ValueError:
            lease = math.nan
        if not (math.isfinite(lease) and lease > 0):
            raise ValueError(
                f"promise store URL {url!r}: lease must be a positive number of seconds"
            )
    return lease, rest


def open_store(
    url: str,
    *,
    ttl: float,
    max_entries: int,
    retry_after: float = 1.0,
    clock: Callable[[], float] = time.time,
) -> PromiseStore:
    """The promise store that ``url`` names (see the module doc); ValueError otherwise."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.netloc or parts.path or parts.query:
            raise ValueError(f"a memory:// promise store takes no location: {url!r}")
        return MemoryStore(ttl=ttl, max_entries=max_entries, retry_after=retry_after, clock=clock)
    if scheme == "sqlite":
        if parts.netloc:
            raise ValueError(
                f"sqlite promise store URL {url!r} has a host; "
                "write sqlite:///relative/path or sqlite:////absolute/path"
            )
        from .sqlite import SQLiteStore

        lease, rest = _lease(url, parts.query)
        if rest:
            names = ", ".join(sorted({name for name, _ in rest}))
            raise ValueError(f"sqlite promise store URL {url!r}: unknown parameter {names}")
        path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
        return SQLiteStore(
            path or None,
            ttl=ttl,
            max_entries=max_entries,
            retry_after=retry_after,
            clock=clock,
            lease=lease,
        )
    if scheme in ("redis", "rediss"):
        if not parts.hostname:
            raise ValueError(f"redis promise store URL {url!r} has no host")
        from .redis import RedisStore

        lease, rest = _lease(url, parts.query)
        client_url = urlunsplit(parts._replace(query=urlencode(rest)))
        return RedisStore(
            client_url,
            ttl=ttl,
            max_entries=max_entries,
            retry_after=retry_after,
            clock=clock,
            lease=lease,
        )
    raise ValueError(f"unknown promise store URL {url!r}: expected one of {', '.join(SCHEMES)}")
