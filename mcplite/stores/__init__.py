"""Promise stores by URL: :func:`open_store`.

==========================  ===============================================================
URL                         store
==========================  ===============================================================
``memory://``               :class:`~mcplite.promises.MemoryStore`: this process only
``sqlite:///PATH``          :class:`~mcplite.stores.sqlite.SQLiteStore` on the file ``PATH``
                            (``sqlite:////abs/path`` or ``sqlite:///rel/path``): the
                            processes of one host
``sqlite://``               the same, on a file in a private temporary directory
``redis://HOST:PORT/DB``    :class:`~mcplite.stores.redis.RedisStore` (``rediss://`` for
                            TLS): many hosts; needs ``pip install 'mcplite[redis]'``
==========================  ===============================================================
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

from ..promises import MemoryStore, PromiseStore

__all__ = ["open_store"]

SCHEMES = ("memory://", "sqlite:///PATH", "sqlite://", "redis://HOST:PORT/DB", "rediss://...")


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

        path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
        return SQLiteStore(
            path or None, ttl=ttl, max_entries=max_entries, retry_after=retry_after, clock=clock
        )
    if scheme in ("redis", "rediss"):
        if not parts.hostname:
            raise ValueError(f"redis promise store URL {url!r} has no host")
        from .redis import RedisStore

        return RedisStore(
            url, ttl=ttl, max_entries=max_entries, retry_after=retry_after, clock=clock
        )
    raise ValueError(f"unknown promise store URL {url!r}: expected one of {', '.join(SCHEMES)}")
