"""The keyword options of :class:`~mcplite.client.Client`, written once.

:class:`~mcplite.client.Client` and :class:`~mcplite.client.sync.SyncClient` both
take them as ``**options: Unpack[ClientOptions]``, so a type checker knows each
one, and :func:`check_options` refuses any other at run time, as a plain
keyword parameter would.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any, TypedDict

__all__ = ["ClientOptions", "check_options"]


class ClientOptions(TypedDict, total=False):
    """What a :class:`~mcplite.client.Client` may be given besides its URL (see it
    for what each one means, and its default)."""

    timeout: float
    pool_size: int
    token: str | None
    cafile: str | None
    certfile: str | None
    keyfile: str | None
    ssl_context: ssl.SSLContext | None


def check_options(options: Mapping[str, Any], allowed: type[Mapping[str, Any]], to: str) -> None:
    """Raise TypeError, as Python does for a keyword a function does not take, for
    a key of ``options`` that the TypedDict ``allowed`` does not name; ``to``
    names the callable in the message."""
    unexpected = sorted(set(options) - set(allowed.__annotations__))
    if unexpected:
        raise TypeError(f"{to}() got an unexpected keyword argument {unexpected[0]!r}")
