"""Promise tokens: sealed, opaque, expiring.

A token is ``prom_`` followed by the unpadded base64url of 57 bytes::

    version (1) | promise id (16, random) | expires_at (8, epoch ms, big endian) | HMAC-SHA256 (32)

The MAC covers the first 25 bytes under the server secret, followed by what the
token is *bound* to, when anything (the subject of the caller that created the
promise, with auth on; see :func:`mcplite.auth.binding_of`).  The binding is not
in the token: a token opened for another subject fails its MAC exactly as a
forged one does, so nobody learns that the promise exists.  :meth:`TokenSealer.open`
checks it in constant time against the current secret and each previous one
(rotation) and only then the expiry, so a forged or tampered token is refused
before anything touches a promise store, and an expired one costs nothing either.
57 bytes encode to exactly 76 characters with no spare bits, so every single
character change produces different bytes and fails the MAC.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import struct
import time
from collections.abc import Callable, Sequence

from .errors import ExpiredToken, InvalidToken

__all__ = ["TokenSealer", "promise_id_of", "sealed_expiry"]

_PREFIX = "prom_"
_VERSION = 1
_HEAD = struct.Struct(">B16sQ")  # version, id, expires_at ms
_MAC_SIZE = 32
_RAW_SIZE = _HEAD.size + _MAC_SIZE  # 57
_TOKEN_SHAPE = re.compile(r"prom_[A-Za-z0-9_-]{76}")  # 57 bytes: 76 chars, no padding
_STATE_SHAPE = re.compile(r"st_[A-Za-z0-9_-]{11,}\.[A-Za-z0-9_-]{43}")


def sealed_expiry(expires_at: float) -> float:
    """The expiry a token sealed for ``expires_at`` carries (whole milliseconds,
    rounded down): the instant :meth:`TokenSealer.open` says it expired."""
    return int(expires_at * 1000) / 1000


class TokenSealer:
    """Seals and opens promise tokens under ``secret`` (and ``previous`` secrets)."""

    def __init__(
        self,
        secret: bytes,
        previous: Sequence[bytes] = (),
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if len(secret) < 16:
            raise ValueError("the promise secret must be at least 16 bytes")
        self._keys = [_HmacKey(key) for key in (secret, *previous)]
        self._clock = clock

    def seal(self, promise_id: bytes, expires_at: float, bound: bytes = b"") -> str:
        head = _HEAD.pack(_VERSION, promise_id, int(expires_at * 1000))
        mac = self._keys[0].mac(head + bound)
        return _PREFIX + base64.urlsafe_b64encode(head + mac).decode("ascii")

    def open(self, token: object, bound: bytes = b"") -> tuple[bytes, float]:
        """Return ``(promise_id, expires_at)`` of a genuine, unexpired token.

        Raises :class:`InvalidToken` for anything malformed, forged or tampered
        with, or sealed for another ``bound``, and :class:`ExpiredToken` for a
        genuine token past its expiry.
        """
        if not isinstance(token, str) or _TOKEN_SHAPE.fullmatch(token) is None:
            raise InvalidToken()
        # The shape check leaves only the base64url alphabet, so "+" or "/" cannot
        # stand in for "-" or "_" and decode to the same bytes.
        raw = base64.urlsafe_b64decode(token[len(_PREFIX) :])
        head, mac = raw[: _HEAD.size], raw[_HEAD.size :]
        for key in self._keys:
            if hmac.compare_digest(key.mac(head + bound), mac):
                break
        else:
            raise InvalidToken()
        version, promise_id, expires_ms = _HEAD.unpack(head)
        if version != _VERSION:
            raise InvalidToken()
        expires_at = expires_ms / 1000
        if expires_at <= self._clock():
            raise ExpiredToken()
        return promise_id, expires_at

    def seal_state(self, data: str, ttl: float, bound: bytes = b"") -> str:
        """``data`` made tamper-evident for a round trip through a client (MCP's
        ``requestState``): ``st_`` + base64url(expiry ms | data) + ``.`` + MAC,
        bound like a promise token (:meth:`seal`)."""
        head = struct.pack(">Q", int((self._clock() + ttl) * 1000)) + data.encode("utf-8")
        mac = self._keys[0].mac(_state_message(head, bound))
        return "st_" + _unpadded(head) + "." + _unpadded(mac)

    def open_state(self, sealed: object, bound: bytes = b"") -> str:
        """The data of a :meth:`seal_state` string; raises :class:`InvalidToken` if it
        was changed in any way, :class:`ExpiredToken` past its expiry."""
        if not isinstance(sealed, str) or not _STATE_SHAPE.fullmatch(sealed):
            raise InvalidToken("invalid request state")
        body, _, mac_text = sealed[3:].partition(".")
        try:
            head = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            mac = base64.urlsafe_b64decode(mac_text + "=" * (-len(mac_text) % 4))
        except ValueError:
            raise InvalidToken("invalid request state") from None
        # Unpadded base64 leaves spare bits in a last character: two strings would
        # open to one state.  Only the string seal_state wrote is one of ours.
        if _unpadded(head) != body or _unpadded(mac) != mac_text:
            raise InvalidToken("invalid request state")
        if len(head) < 8 or not any(
            hmac.compare_digest(key.mac(_state_message(head, bound)), mac) for key in self._keys
        ):
            raise InvalidToken("invalid request state")
        (expires_ms,) = struct.unpack(">Q", head[:8])
        if expires_ms / 1000 <= self._clock():
            raise ExpiredToken("request state expired")
        try:
            return head[8:].decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidToken("invalid request state") from None


def _unpadded(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def promise_id_of(token: object) -> bytes | None:
    """The promise id ``token`` names, read WITHOUT checking its MAC or expiry: for
    logs and traces, never to decide anything (the id is not secret, the MAC is what
    makes a token worth having).  None when ``token`` does not have a token's shape."""
    if not isinstance(token, str) or _TOKEN_SHAPE.fullmatch(token) is None:
        return None
    head = base64.urlsafe_b64decode(token[len(_PREFIX) : len(_PREFIX) + 36])  # 27 bytes
    version, promise_id, _ = _HEAD.unpack(head[: _HEAD.size])
    return promise_id if version == _VERSION else None


def _state_message(head: bytes, bound: bytes) -> bytes:
    # The binding goes first, length-prefixed: ``head`` ends with free-form data.
    if not bound:
        return b"state:" + head
    return b"state:" + struct.pack(">H", len(bound)) + bound + head


class _HmacKey:
    """HMAC-SHA256 (RFC 2104) with the keyed inner and outer states computed once.

    Same bytes as ``hmac.digest(key, msg, "sha256")``, at a third of the cost:
    copying a hash state is cheaper than hashing the padded key on every token.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > 64:
            key = hashlib.sha256(key).digest()
        key = key.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def mac(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()
