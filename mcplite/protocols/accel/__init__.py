"""The JSON encoder's speed path: the standard library's C encoder, built once.

``json.JSONEncoder.encode`` builds its C encoder (``json.encoder.c_make_encoder``,
undocumented) again on every call: a third of the cost of encoding a small
reply.  :func:`c_encoder` builds it once, with the settings of
:mod:`mcplite.protocols.jsoncodec`'s encoder, for that module to call directly.
No circular-reference markers: a cycle ends in RecursionError, which the codec
reports as ValueError.  Imported only while :func:`mcplite.core.accel.enabled`
says so (``MCPLITE_ACCEL=0`` turns it off); else ``JSONEncoder.encode``, the
public way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["c_encoder"]


def c_encoder(default: Callable[[Any], Any]) -> Callable[[Any, int], Iterable[str]] | None:
    """The C encoder of compact, non-ASCII-escaping JSON calling ``default`` for
    what JSON has no type for; None when the interpreter has none."""
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    encoder: Callable[[Any, int], Iterable[str]] = make(
        None, default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
    return encoder
