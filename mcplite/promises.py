"""Promise tokens and the table of running or finished long calls.

A token is ``prom_`` followed by the unpadded base64url of 57 bytes::

    version (1) | promise id (16, random) | expires_at (8, epoch ms, big endian) | HMAC-SHA256 (32)

The MAC covers the first 25 bytes under the server secret.  :meth:`TokenSealer.open`
checks it in constant time against the current secret and each previous one
(rotation) and only then the expiry, so a forged or tampered token is refused
before anything touches the table, and an expired one costs nothing either.
57 bytes encode to exactly 76 characters with no spare bits, so every single
character change produces different bytes and fails the MAC.

The in-memory :class:`PromiseTable` is the first implementation of
:class:`PromiseStore`; a shared store (Redis) can take its place for
several replicas, since any replica holding the secret can verify a token.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import re
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from .envelope import Result
from .errors import ExpiredToken, InvalidToken, MCPLiteError, PromiseTableFull, UnknownPromise
from .tools import Progress

__all__ = ["PromiseEntry", "PromiseStore", "PromiseTable", "TokenSealer"]

log = logging.getLogger("mcplite.promises")

Outcome: TypeAlias = Result | MCPLiteError
"""What a promised task ends with: protocol errors are returned, not raised."""

_PREFIX = "prom_"
_VERSION = 1
_HEAD = struct.Struct(">B16sQ")  # version, id, expires_at ms
_MAC_SIZE = 32
_RAW_SIZE = _HEAD.size + _MAC_SIZE  # 57
_TOKEN_SHAPE = re.compile(r"prom_[A-Za-z0-9_-]{76}")  # 57 bytes: 76 chars, no padding


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

    def seal(self, promise_id: bytes, expires_at: float) -> str:
        head = _HEAD.pack(_VERSION, promise_id, int(expires_at * 1000))
        mac = self._keys[0].mac(head)
        return _PREFIX + base64.urlsafe_b64encode(head + mac).decode("ascii")

    def open(self, token: object) -> tuple[bytes, float]:
        """Return ``(promise_id, expires_at)`` of a genuine, unexpired token.

        Raises :class:`InvalidToken` for anything malformed, forged or tampered
        with, and :class:`ExpiredToken` for a genuine token past its expiry.
        """
        if not isinstance(token, str) or _TOKEN_SHAPE.fullmatch(token) is None:
            raise InvalidToken()
        # The shape check leaves only the base64url alphabet, so "+" or "/" cannot
        # stand in for "-" or "_" and decode to the same bytes.
        raw = base64.urlsafe_b64decode(token[len(_PREFIX) :])
        head, mac = raw[: _HEAD.size], raw[_HEAD.size :]
        for key in self._keys:
            if hmac.compare_digest(key.mac(head), mac):
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


@dataclass(slots=True, eq=False)
class PromiseEntry:
    """One long call: its task (while running), then its stored outcome."""

    # Kept small: 10,000 pending promises should cost little beyond their tasks.
    # The token is not stored; it is sealed again from the id and expiry on demand.
    promise_id: bytes
    tool: str
    task: asyncio.Future[Outcome]
    expires_at: float
    progress: Progress | None = None  # set when the tool takes a Context
    cancelled: bool = False


class PromiseStore(Protocol):
    """What the dispatcher needs from a promise store (in memory now, shared later)."""

    def put(
        self, tool: str, task: asyncio.Future[Outcome], progress: Progress | None
    ) -> PromiseEntry: ...
    def token(self, entry: PromiseEntry) -> str: ...
    def get(self, token: str) -> PromiseEntry: ...
    async def wait(self, entry: PromiseEntry, timeout: float) -> bool: ...
    def cancel(self, entry: PromiseEntry) -> bool: ...
    def sweep(self) -> int: ...


class PromiseTable:
    """An in-memory, bounded table of promises keyed by a random 128-bit id.

    Every entry lives ``ttl`` seconds from its creation, so insertion order is
    expiry order: sweeping pops expired entries from the front and never scans
    the rest.  A task still running when its entry expires is cancelled.
    """

    def __init__(
        self,
        sealer: TokenSealer,
        *,
        ttl: float,
        max_entries: int,
        clock: Callable[[], float] = time.time,
        retry_after: float = 1.0,
    ) -> None:
        self._sealer = sealer
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._retry_after = retry_after
        self._entries: dict[bytes, PromiseEntry] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def has_room(self) -> bool:
        if len(self._entries) < self._max:
            return True
        self.sweep()
        return len(self._entries) < self._max

    def put(
        self, tool: str, task: asyncio.Future[Outcome], progress: Progress | None
    ) -> PromiseEntry:
        """Store a running task; raises :class:`PromiseTableFull` at the bound."""
        if not self.has_room():
            raise PromiseTableFull(retry_after=self._retry_after)
        promise_id = os.urandom(16)
        expires_at = self._clock() + self._ttl
        entry = PromiseEntry(promise_id, tool, task, expires_at, progress)
        self._entries[promise_id] = entry
        self._schedule_sweep()
        return entry

    def token(self, entry: PromiseEntry) -> str:
        """The entry's token (the same string every time: sealing is deterministic)."""
        return self._sealer.seal(entry.promise_id, entry.expires_at)

    def get(self, token: str) -> PromiseEntry:
        """The entry of a token; the token is verified before any lookup.

        Raises :class:`InvalidToken`, :class:`ExpiredToken` or :class:`UnknownPromise`.
        """
        promise_id, _ = self._sealer.open(token)
        entry = self._entries.get(promise_id)
        if entry is None:
            raise UnknownPromise()
        return entry

    async def wait(self, entry: PromiseEntry, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the entry's task; True when it is done."""
        task = entry.task
        if task.done() or timeout <= 0:
            return task.done()
        await asyncio.wait((task,), timeout=timeout)
        return task.done()

    def cancel(self, entry: PromiseEntry) -> bool:
        """Cancel a running task; False when it had already finished."""
        if entry.task.done():
            return False
        entry.cancelled = True
        entry.task.cancel()
        return True

    def sweep(self) -> int:
        """Drop expired entries (cancelling tasks still running); return how many."""
        now = self._clock()
        entries = self._entries
        dropped = 0
        while entries:
            oldest = next(iter(entries.values()))
            if oldest.expires_at > now:
                break
            del entries[oldest.promise_id]
            if not oldest.task.done():
                log.warning("promise for %s expired while running; cancelled", oldest.tool)
                oldest.task.cancel()
            dropped += 1
        return dropped

    def close(self) -> None:
        """Cancel every running task and forget every entry (server shutdown)."""
        for entry in self._entries.values():
            entry.task.cancel()
        self._entries.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule_sweep(self) -> None:
        # One timer while the table is non-empty, none while it is empty: no task
        # lives forever, and expired results are freed even with no traffic.
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        oldest = next(iter(self._entries.values()))
        delay = max(0.05, min(oldest.expires_at - self._clock(), 60.0))
        self._timer = loop.call_later(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.sweep()
        if self._entries:
            self._schedule_sweep()
