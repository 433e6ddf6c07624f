"""JSON text <-> values, as every JSON binding reads and writes it.

:func:`encode` writes compact UTF-8 (what a tool may return beyond plain JSON:
dataclasses, enums, dates, sets), :func:`encode_text` the same JSON as text;
:func:`decode` reads a body strictly (RFC 8259: no NaN or Infinity) and reports
anything unparsable as a :class:`~mcplite.core.errors.ParseError`.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import gc
import json
import json.scanner
import sys
from collections.abc import Callable, Iterable
from typing import Any, cast

from ..core.accel import enabled
from ..core.errors import ParseError

__all__ = ["decode", "encode", "encode_text"]


def _default(value: Any) -> Any:
    # What a tool may put in a result beyond plain JSON, and how it is written.
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        raise TypeError("bytes are not JSON: encode them (base64) in the tool")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_encoder = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default
)
# The standard library's C encoder built once, where the speed path is on.
_c_encode: Callable[[Any, int], Iterable[str]] | None = None
if enabled("json", {}):
    from .accel import c_encoder

    _c_encode = c_encoder(_default)


_ascii_encode = json.JSONEncoder(
    ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=_default
).encode


def encode(obj: Any) -> bytes:
    """Compact UTF-8 JSON; raises ``ValueError``/``TypeError`` for what JSON cannot hold.

    A lone surrogate (possible in a Python str, never in UTF-8) is written as a
    ``\\udXXX`` escape rather than failing the whole reply.
    """
    try:
        if _c_encode is not None:  # the C encoder, called directly (one call less)
            return "".join(_c_encode(obj, 0)).encode()
        return _encoder.encode(obj).encode()
    except UnicodeEncodeError:
        return _ascii_encode(obj).encode()
    except RecursionError:
        raise ValueError("nested too deeply, or circular") from None


def encode_text(obj: Any) -> str:
    """The JSON :func:`encode` writes, as text: for JSON that goes inside other text
    (an MCP text block, an SSE frame) without a round trip through bytes, which
    copied it twice.  Raises as :func:`encode`."""
    try:
        text = "".join(_c_encode(obj, 0)) if _c_encode is not None else _encoder.encode(obj)
        if not text.isascii():
            text.encode()  # a lone surrogate has no UTF-8: escaped below, as encode does
        return text
    except UnicodeEncodeError:
        return _ascii_encode(obj)
    except RecursionError:
        raise ValueError("nested too deeply, or circular") from None


class _NotJson(ValueError):
    pass


def _not_json(literal: str) -> Any:
    raise _NotJson(f"{literal} is not JSON (RFC 8259 has no NaN or Infinity)")


_decoder = json.JSONDecoder(parse_constant=_not_json)
_decode = _decoder.decode
#: The decoder's C scanner, called directly for a document that starts with a
#: value and ends with it (JSONDecoder.decode matches whitespace around it first).
_scan = json.scanner.make_scanner(cast(Any, _decoder))


#: A body with no more brackets than this cannot nest deep enough to come near
#: the interpreter's recursion limit while it is parsed.
_SHALLOW = 256


def _decode_deep(text: str) -> Any:
    """``_decode(text)`` with the cyclic collector held off: a document that may
    nest deep enough to exhaust the recursion limit must not have the collector
    run finalizers (weakref callbacks of other objects) at that depth, where they
    would fail for want of stack."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _decode(text)
    finally:
        if enabled:
            gc.enable()


def decode(body: bytes) -> Any:
    """Parse a UTF-8 JSON body; anything unparsable raises :class:`ParseError`.

    That includes invalid UTF-8, NaN and Infinity, nesting deep enough to exhaust
    the parser's recursion, and integers beyond Python's digit limit (4300 digits).
    """
    try:
        text = body.decode("utf-8")
        if len(body) > _SHALLOW and body.count(b"[") + body.count(b"{") > _SHALLOW:
            return _decode_deep(text)
        try:
            value, end = _scan(text, 0)
        except (StopIteration, json.JSONDecodeError):
            pass  # _decode says what is wrong, and where
        else:
            if end == len(text):
                return value
        return _decode(text)  # whitespace around the value, or an error
    except UnicodeDecodeError:
        raise ParseError("Parse error: the body is not valid UTF-8") from None
    except RecursionError:
        raise ParseError("Parse error: JSON nested too deeply") from None
    except (json.JSONDecodeError, _NotJson) as exc:
        raise ParseError(f"Parse error: {exc}") from None
    except ValueError:
        # The only other one: int() refusing more digits than the interpreter's
        # limit.  Its own message tells the *server* to call
        # sys.set_int_max_str_digits(), which is no advice for a client.
        limit = sys.get_int_max_str_digits()
        raise ParseError(f"Parse error: integer too large (over {limit} digits)") from None
