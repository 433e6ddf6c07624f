"""Tests for mcplite.promises and the promise flow of the dispatcher (spec 3.5, 3.6, A.3)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import gc
import hashlib
import hmac
import logging
import math
import string
import struct
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import SECRET, make_config
from hypothesis import given
from hypothesis import strategies as st

from mcplite import (
    ALWAYS,
    NEVER,
    Config,
    Context,
    Dispatcher,
    ExpiredToken,
    Failure,
    InternalError,
    InvalidParams,
    InvalidToken,
    Overloaded,
    ResponseType,
    Result,
    Tools,
    UnknownPromise,
)
from mcplite.errors import PromiseTableFull
from mcplite.promises import PromiseEntry, PromiseTable, TokenSealer
from mcplite.tools import Progress

OLD_SECRET = b"old-secret-0123456789abcdefghij"
WAIT = 5.0  # upper bound of every wait in this file
T0 = 1_704_110_400.0  # 2024-01-01T12:00:00Z
ALPHABET = string.ascii_letters + string.digits + "-_"  # base64url


@dataclass
class FakeClock:
    """A clock the test moves by hand."""

    now: float = T0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SpyDict(dict[bytes, PromiseEntry]):
    """The table's storage, recording every lookup."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups: list[bytes] = []

    def get(self, key: Any, default: Any = None) -> Any:
        self.lookups.append(key)
        return super().get(key, default)

    def __getitem__(self, key: bytes) -> PromiseEntry:
        self.lookups.append(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.lookups.append(key)  # type: ignore[arg-type]
        return super().__contains__(key)


class SpyTable(PromiseTable):
    """A promise table whose storage records every lookup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spy = SpyDict()
        self._entries = self.spy


class InjectableTable(PromiseTable):
    """A PromiseTable that stays truthy while empty.

    Dispatcher.__init__ takes ``promises or PromiseTable(...)``; an empty table is
    falsy (it has ``__len__``), so an injected table would be silently replaced
    (see test_an_injected_promise_table_is_the_one_the_dispatcher_uses).
    """

    def __bool__(self) -> bool:
        return True


class WaitSignalTable(InjectableTable):
    """Sets ``waiting`` when a redeem starts a long-poll wait."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting = asyncio.Event()

    async def wait(self, entry: PromiseEntry, timeout: float) -> bool:
        if timeout > 0:
            self.waiting.set()
        return await super().wait(entry, timeout)


class WatchedTable(PromiseTable):
    """Sets ``emptied`` when a sweep leaves the table empty."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.emptied = asyncio.Event()

    def sweep(self) -> int:
        dropped = super().sweep()
        if len(self) == 0:
            self.emptied.set()
        return dropped


def serve(
    made: list[Dispatcher], tools: Tools, promises: PromiseTable | None = None, **overrides: Any
) -> Dispatcher:
    dispatcher = Dispatcher(tools, make_config(**overrides), promises=promises)
    made.append(dispatcher)
    return dispatcher


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def parse_iso(value: str) -> float:
    parsed = datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


def token_of(result: Result) -> str:
    assert result.response_type is ResponseType.PROMISE, result
    token = result.extra_meta["promise_token"]
    assert isinstance(token, str)
    return token


def other_tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}


def raw_token(version: int, promise_id: bytes, expires_ms: int, key: bytes) -> str:
    """A token built by hand with the documented layout."""
    head = struct.pack(">B16sQ", version, promise_id, expires_ms)
    mac = hmac.digest(key, head, hashlib.sha256)
    return "prom_" + base64.urlsafe_b64encode(head + mac).decode().rstrip("=")


def token_with_dash_and_underscore(sealer: TokenSealer, expires_at: float) -> str:
    """A genuine token whose payload has both '-' and '_' (the base64url-only letters)."""
    for i in range(1000):
        token = sealer.seal(i.to_bytes(16, "big"), expires_at)
        if "-" in token[5:] and "_" in token[5:]:
            return token
    raise AssertionError("no such token in 1000 tries")


def single_changes(token: str) -> Iterator[str]:
    """Every single-character change of ``token``: substitutions, deletions, insertions,
    truncations and extensions (each distinct from the token)."""
    out: dict[str, None] = {}
    for i, ch in enumerate(token):
        nxt = ALPHABET[(ALPHABET.index(ch) + 1) % 64] if ch in ALPHABET else "A"
        subs = {nxt, ch.swapcase(), "A", "0", "-", "_", "+", "/", "=", "!", " ", "\u00e9", "\x00"}
        for sub in subs:
            out[token[:i] + sub + token[i + 1 :]] = None
        out[token[:i] + token[i + 1 :]] = None
        out[token[:i] + "A" + token[i:]] = None
    for n in (0, 1, 4, 5, 6, 40, len(token) - 2, len(token) - 1):
        out[token[:n]] = None
    for extension in ("A", "-", "=", "==", "\n", " ", token):
        out[token + extension] = None
    out[" " + token] = None
    out.pop(token, None)
    return iter(out)


# --- TokenSealer --------------------------------------------------------------------------


def test_a_sealed_token_opens_to_its_id_and_expiry() -> None:
    clock = FakeClock()
    sealer = TokenSealer(SECRET, clock=clock)
    promise_id = bytes(range(16))
    token = sealer.seal(promise_id, T0 + 600.25)
    assert token.startswith("prom_")
    assert len(token) == 81
    assert set(token[5:]) <= set(ALPHABET)
    assert sealer.open(token) == (promise_id, T0 + 600.25)


def test_tokens_for_different_ids_differ_and_do_not_show_the_secret() -> None:
    sealer = TokenSealer(SECRET)
    a = sealer.seal(b"a" * 16, T0 + 600)
    b = sealer.seal(b"b" * 16, T0 + 600)
    assert a != b
    assert SECRET.decode() not in a


def test_a_secret_shorter_than_16_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        TokenSealer(b"short")


def test_every_single_character_change_of_a_token_is_refused_as_invalid() -> None:
    clock = FakeClock()
    sealer = TokenSealer(SECRET, clock=clock)
    token = token_with_dash_and_underscore(sealer, T0 + 600)
    accepted: list[str] = []
    wrong_error: list[tuple[str, str]] = []
    count = 0
    for changed in single_changes(token):
        count += 1
        try:
            sealer.open(changed)
        except InvalidToken:
            continue
        except Exception as exc:
            wrong_error.append((changed, type(exc).__name__))
        else:
            accepted.append(changed)
    assert count > 81 * 10
    # base64.b64decode(altchars=b"-_") also takes '+' and '/' as the same digits
    # as '-' and '_': a changed token that decodes to the same bytes must still
    # be refused, since the token is an opaque string, not its bytes.
    assert accepted == [], f"{len(accepted)} changed tokens were accepted, e.g. {accepted[:3]}"
    assert wrong_error == []


async def test_a_changed_token_never_reaches_the_table() -> None:
    clock = FakeClock()
    sealer = TokenSealer(SECRET, clock=clock)
    table = SpyTable(sealer, ttl=600, max_entries=100, clock=clock)
    loop = asyncio.get_running_loop()
    for _ in range(50):  # many live entries, so an accepted change would find one
        table.put("tool", loop.create_future(), Progress())
    tokens = [table.token(entry) for entry in table.spy.values()]
    token = next(t for t in tokens if "-" in t[5:] and "_" in t[5:])
    looked_up_by: list[str] = []
    not_refused: list[str] = []
    for changed in single_changes(token):
        before = len(table.spy.lookups)
        try:
            table.get(changed)
        except InvalidToken:
            pass
        else:
            not_refused.append(changed)
        if len(table.spy.lookups) != before:
            looked_up_by.append(changed)
    assert not_refused == [], f"{len(not_refused)} changed tokens were accepted"
    assert looked_up_by == [], f"{len(looked_up_by)} changed tokens were looked up"
    assert table.token(table.get(token)) == token  # the spy does see a genuine lookup
    assert len(table.spy.lookups) == 1
    table.close()


async def test_random_strings_never_reach_the_table() -> None:
    table = SpyTable(TokenSealer(SECRET), ttl=600, max_entries=10)
    for junk in ["", "prom_", "prom_" + "A" * 76, "prom_" + "_" * 76, "x" * 81, "PROM_" + "A" * 76]:
        with pytest.raises(InvalidToken):
            table.get(junk)
    assert table.spy.lookups == []


@given(st.text(max_size=120))
def test_random_text_is_an_invalid_token(junk: str) -> None:
    with pytest.raises(InvalidToken):
        TokenSealer(SECRET).open(junk)


@given(st.from_regex(r"prom_[A-Za-z0-9_-]{76}", fullmatch=True))
def test_random_token_shaped_strings_are_invalid_tokens(junk: str) -> None:
    with pytest.raises(InvalidToken):
        TokenSealer(SECRET).open(junk)


@pytest.mark.parametrize(
    "junk",
    [None, 0, 1.5, True, b"prom_" + b"A" * 76, bytearray(b"prom_"), ["prom_"], {"t": 1}, object()],
    ids=lambda v: type(v).__name__,
)
def test_a_non_string_is_an_invalid_token(junk: object) -> None:
    with pytest.raises(InvalidToken) as caught:
        TokenSealer(SECRET).open(junk)
    assert caught.value.jsonrpc_code == -32602
    assert caught.value.grpc_status == 3
    assert caught.value.data == {"reason": "invalid"}


def test_the_bytes_of_a_genuine_token_are_not_a_token() -> None:
    sealer = TokenSealer(SECRET)
    token = sealer.seal(b"i" * 16, time.time() + 60)
    with pytest.raises(InvalidToken):
        sealer.open(token.encode())


def test_a_token_sealed_under_another_secret_is_invalid() -> None:
    token = TokenSealer(b"someone-else-0123456789").seal(b"i" * 16, time.time() + 60)
    with pytest.raises(InvalidToken):
        TokenSealer(SECRET).open(token)


def test_a_token_of_another_version_is_invalid_even_with_a_good_mac() -> None:
    expires_ms = int((time.time() + 60) * 1000)
    good = raw_token(1, b"i" * 16, expires_ms, SECRET)
    other = raw_token(2, b"i" * 16, expires_ms, SECRET)
    sealer = TokenSealer(SECRET)
    assert sealer.open(good)[0] == b"i" * 16
    with pytest.raises(InvalidToken):
        sealer.open(other)


def test_a_token_is_expired_from_its_expiry_on() -> None:
    clock = FakeClock()
    sealer = TokenSealer(SECRET, clock=clock)
    token = sealer.seal(b"e" * 16, T0 + 10)
    clock.advance(9.999)
    assert sealer.open(token) == (b"e" * 16, T0 + 10)
    clock.advance(0.001)
    with pytest.raises(ExpiredToken) as caught:
        sealer.open(token)
    assert caught.value.jsonrpc_code == -32602
    assert caught.value.data == {"reason": "expired"}
    clock.advance(10_000)
    with pytest.raises(ExpiredToken):
        sealer.open(token)


def test_a_token_whose_expiry_was_pushed_back_is_invalid_not_alive() -> None:
    clock = FakeClock()
    sealer = TokenSealer(SECRET, clock=clock)
    token = sealer.seal(b"e" * 16, T0 + 10)
    raw = bytearray(base64.urlsafe_b64decode(token[5:] + "="))
    raw[17:25] = struct.pack(">Q", int((T0 + 1_000_000) * 1000))
    forged = "prom_" + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(InvalidToken):
        sealer.open(forged)
    clock.advance(20)  # the genuine token is now expired; the forged one is still invalid
    with pytest.raises(InvalidToken):
        sealer.open(forged)
    with pytest.raises(ExpiredToken):
        sealer.open(token)


def test_a_tampered_expired_token_is_invalid_rather_than_expired() -> None:
    clock = FakeClock()
    sealer = TokenSealer(SECRET, clock=clock)
    token = sealer.seal(b"e" * 16, T0 - 10)
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    with pytest.raises(InvalidToken):
        sealer.open(tampered)


def test_a_token_sealed_under_a_previous_secret_opens_only_while_that_secret_is_listed() -> None:
    clock = FakeClock()
    old_token = TokenSealer(OLD_SECRET, clock=clock).seal(b"o" * 16, T0 + 60)
    rotated = TokenSealer(SECRET, [OLD_SECRET], clock=clock)
    assert rotated.open(old_token) == (b"o" * 16, T0 + 60)
    with pytest.raises(InvalidToken):
        TokenSealer(SECRET, clock=clock).open(old_token)
    # New tokens are sealed under the current secret, not the previous one.
    new_token = rotated.seal(b"n" * 16, T0 + 60)
    assert TokenSealer(SECRET, clock=clock).open(new_token)[0] == b"n" * 16
    with pytest.raises(InvalidToken):
        TokenSealer(OLD_SECRET, clock=clock).open(new_token)


def test_an_old_token_under_a_previous_secret_still_expires() -> None:
    clock = FakeClock()
    old_token = TokenSealer(OLD_SECRET, clock=clock).seal(b"o" * 16, T0 + 60)
    rotated = TokenSealer(SECRET, [OLD_SECRET], clock=clock)
    clock.advance(61)
    with pytest.raises(ExpiredToken):
        rotated.open(old_token)


# --- PromiseTable ---------------------------------------------------------------------------


def clocked_table(clock: FakeClock, **kwargs: Any) -> PromiseTable:
    kwargs.setdefault("ttl", 600)
    kwargs.setdefault("max_entries", 100)
    return InjectableTable(TokenSealer(SECRET, clock=clock), clock=clock, **kwargs)


async def test_a_stored_promise_is_found_by_its_token() -> None:
    clock = FakeClock()
    table = clocked_table(clock, ttl=600)
    task: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
    progress = Progress()
    entry = table.put("analyze_dataset", task, progress)
    assert entry.tool == "analyze_dataset"
    assert entry.task is task
    assert entry.progress is progress
    assert entry.expires_at == T0 + 600
    assert table.token(entry).startswith("prom_")
    assert table.token(entry) == table.token(entry)  # the same token every time
    assert table.get(table.token(entry)) is entry
    assert len(table) == 1
    table.close()


async def test_a_genuine_token_unknown_to_the_table_raises_unknown_promise() -> None:
    clock = FakeClock()
    before = clocked_table(clock)
    entry = before.put("tool", asyncio.get_running_loop().create_future(), Progress())
    after_restart = clocked_table(clock)  # same secret, fresh memory
    with pytest.raises(UnknownPromise) as caught:
        after_restart.get(before.token(entry))
    assert caught.value.jsonrpc_code == -32602
    assert caught.value.grpc_status == 5
    assert caught.value.data == {"reason": "unknown"}
    before.close()


async def test_a_full_table_refuses_a_new_promise_with_promise_table_full_and_does_not_grow() -> (
    None
):
    clock = FakeClock()
    table = clocked_table(clock, max_entries=3, retry_after=7.0)
    loop = asyncio.get_running_loop()
    for _ in range(3):
        table.put("tool", loop.create_future(), Progress())
    refused = loop.create_future()
    with pytest.raises(PromiseTableFull) as caught:
        table.put("tool", refused, Progress())
    error = caught.value
    assert isinstance(error, Overloaded)
    assert error.jsonrpc_code == -32000
    assert error.grpc_status == 8
    assert error.data == {"retry_after": 7.0}
    assert len(table) == 3
    assert not table.has_room()
    assert not refused.cancelled()  # the table leaves the caller's task alone
    refused.cancel()
    table.close()


async def test_a_full_table_makes_room_by_dropping_expired_entries() -> None:
    clock = FakeClock()
    table = clocked_table(clock, ttl=60, max_entries=2)
    loop = asyncio.get_running_loop()
    first = table.put("tool", loop.create_future(), Progress())
    clock.advance(30)
    table.put("tool", loop.create_future(), Progress())
    clock.advance(30)  # the first has just expired
    third = table.put("tool", loop.create_future(), Progress())
    assert len(table) == 2
    assert first.task.cancelled()
    with pytest.raises(ExpiredToken):
        table.get(table.token(first))
    assert table.get(table.token(third)) is third
    table.close()


async def test_sweep_drops_only_expired_entries_from_the_front_and_cancels_running_ones() -> None:
    clock = FakeClock()
    table = clocked_table(clock, ttl=100)
    loop = asyncio.get_running_loop()
    running_old = table.put("a", loop.create_future(), Progress())
    clock.advance(5)
    finished_old = table.put("b", loop.create_future(), Progress())
    outcome = Result(ResponseType.ANSWER, {"content": []}, T0, 1.0)
    finished_old.task.set_result(outcome)
    clock.advance(5)
    running_young = table.put("c", loop.create_future(), Progress())

    assert table.sweep() == 0  # nothing expired yet
    assert len(table) == 3

    clock.now = T0 + 106  # a and b expired (100, 105), c not (110)
    assert table.sweep() == 2
    assert len(table) == 1
    assert running_old.task.cancelled()
    assert finished_old.task.result() is outcome  # a finished task is left as it was
    assert not running_young.task.done()
    assert table.get(table.token(running_young)) is running_young
    assert table.sweep() == 0

    clock.now = T0 + 110
    assert table.sweep() == 1
    assert len(table) == 0
    assert running_young.task.cancelled()


async def test_the_sweep_timer_frees_expired_entries_without_any_traffic() -> None:
    table = WatchedTable(TokenSealer(SECRET), ttl=0.05, max_entries=10)
    loop = asyncio.get_running_loop()
    running = loop.create_future()
    finished = loop.create_future()
    finished.set_result(Result(ResponseType.ANSWER, {"content": []}, time.time(), 0.0))
    table.put("a", running, Progress())
    table.put("b", finished, Progress())
    await asyncio.wait_for(table.emptied.wait(), WAIT)
    assert len(table) == 0
    assert running.cancelled()
    table.close()


async def test_wait_returns_at_once_with_zero_and_as_soon_as_the_task_is_done() -> None:
    clock = FakeClock()
    table = clocked_table(clock)
    loop = asyncio.get_running_loop()
    task = loop.create_future()
    entry = table.put("tool", task, Progress())
    assert await table.wait(entry, 0) is False
    loop.call_soon(task.set_result, Result(ResponseType.ANSWER, {"content": []}, T0, 0.0))
    started = time.perf_counter()
    assert await asyncio.wait_for(table.wait(entry, 30), WAIT) is True
    assert time.perf_counter() - started < WAIT
    assert await table.wait(entry, 0) is True
    table.close()


async def test_cancel_cancels_a_running_task_and_not_a_finished_one() -> None:
    clock = FakeClock()
    table = clocked_table(clock)
    loop = asyncio.get_running_loop()
    running = table.put("tool", loop.create_future(), Progress())
    done_task = loop.create_future()
    done_task.set_result(Result(ResponseType.ANSWER, {"content": []}, T0, 0.0))
    finished = table.put("tool", done_task, Progress())
    assert table.cancel(running) is True
    assert running.cancelled and running.task.cancelled()
    assert table.cancel(finished) is False
    assert not finished.cancelled
    assert table.cancel(running) is False  # already cancelled: finished
    table.close()


async def test_close_cancels_every_running_task_and_forgets_every_entry() -> None:
    clock = FakeClock()
    table = clocked_table(clock)
    loop = asyncio.get_running_loop()
    entries = [table.put("tool", loop.create_future(), Progress()) for _ in range(3)]
    table.close()
    assert len(table) == 0
    assert all(e.task.cancelled() for e in entries)
    with pytest.raises(UnknownPromise):
        table.get(table.token(entries[0]))


# --- the dispatcher's promise flow ---------------------------------------------------------


def gated_tools(gate: asyncio.Event, started: asyncio.Event | None = None) -> Tools:
    """``wait_for_gate`` (server deadline), ``always`` (ALWAYS) and ``never`` (NEVER)."""
    tools = Tools()

    async def body(n: int = 0) -> str:
        if started is not None:
            started.set()
        await gate.wait()
        return f"done {n}"

    tools.add(body, name="wait_for_gate")
    tools.add(body, name="always", promise_after=ALWAYS)
    tools.add(body, name="never", promise_after=NEVER)
    return tools


def test_an_injected_promise_table_is_the_one_the_dispatcher_uses(
    dispatchers: list[Dispatcher],
) -> None:
    clock = FakeClock()
    table = PromiseTable(TokenSealer(SECRET, clock=clock), ttl=60, max_entries=5, clock=clock)
    dispatcher = serve(dispatchers, Tools(), promises=table)
    # `promises or PromiseTable(...)`: a new, empty PromiseTable is falsy (it has __len__).
    assert dispatcher.promises is table


async def test_a_call_past_the_promise_deadline_answers_with_a_promise(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate), promise_after=0.05, promise_ttl=600)
    before = time.time()
    result = await asyncio.wait_for(dispatcher.call("wait_for_gate", {"n": 1}), WAIT)
    token = token_of(result)
    assert token.startswith("prom_")
    assert result.body == {"content": []}
    meta = result.to_json()["_meta"]
    assert meta["response_type"] == "promise"
    assert meta["promise_token"] == token
    expires_at = parse_iso(meta["expires_at"])
    assert before + 600 - 1 <= expires_at <= time.time() + 600 + 1
    assert result.processing_time_ms >= 45
    assert len(dispatcher.promises) == 1  # type: ignore[arg-type]
    assert dispatcher.active == 0
    gate.set()


async def test_a_call_that_finishes_before_the_deadline_is_a_plain_answer(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    gate.set()
    dispatcher = serve(dispatchers, gated_tools(gate), promise_after=5)
    result = await asyncio.wait_for(dispatcher.call("wait_for_gate", {"n": 2}), WAIT)
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": [text("done 2")]}
    assert len(dispatcher.promises) == 0  # type: ignore[arg-type]


async def test_a_tool_with_promise_after_always_answers_with_a_promise_at_once(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate), promise_after=math.inf)
    result = await asyncio.wait_for(dispatcher.call("always", {}), WAIT)
    token_of(result)
    gate.set()


async def test_a_tool_with_promise_after_always_promises_even_when_it_finishes_at_once(
    dispatchers: list[Dispatcher],
) -> None:
    # tools.ALWAYS: "every call of the tool answers with a promise at once".
    tools = Tools()

    @tools.tool(promise_after=ALWAYS)
    async def submit_job(job: str) -> str:
        return f"job {job} queued"

    dispatcher = serve(dispatchers, tools)
    result = await asyncio.wait_for(dispatcher.call("submit_job", {"job": "j1"}), WAIT)
    token = token_of(result)
    redeemed = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    assert redeemed.body == {"content": [text("job j1 queued")]}


async def test_a_tool_with_promise_after_never_is_waited_for_past_the_server_deadline(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate), promise_after=0.01)
    asyncio.get_running_loop().call_later(0.2, gate.set)  # 20 times the server deadline
    result = await asyncio.wait_for(dispatcher.call("never", {"n": 3}), WAIT)
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": [text("done 3")]}
    assert len(dispatcher.promises) == 0  # type: ignore[arg-type]


async def test_a_promised_tool_keeps_running_and_its_outcome_is_stored(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    tools = Tools()
    finished = asyncio.Event()

    @tools.tool
    async def long_job() -> dict[str, int]:
        await gate.wait()
        finished.set()
        return {"rows": 200}

    dispatcher = serve(dispatchers, tools, promise_after=0.02)
    token = token_of(await asyncio.wait_for(dispatcher.call("long_job", {}), WAIT))
    gate.set()
    await asyncio.wait_for(finished.wait(), WAIT)
    result = await dispatcher.call("redeem", {"promise": token})
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": [{"rows": 200}]}


async def test_redeeming_a_pending_promise_gives_the_same_token_and_the_progress(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    step_one = asyncio.Event()
    step_two = asyncio.Event()
    reported_two = asyncio.Event()
    finish = asyncio.Event()

    @tools.tool
    async def crunch(ctx: Context) -> str:
        ctx.report_progress(1, 10, "parsing", eta_seconds=30)
        step_one.set()
        await step_two.wait()
        ctx.report_progress(7, 10, "indexing", eta_seconds=5)
        reported_two.set()
        await finish.wait()
        return "crunched"

    dispatcher = serve(dispatchers, tools, promise_after=0.02)
    first = await asyncio.wait_for(dispatcher.call("crunch", {}), WAIT)
    token = token_of(first)
    assert first.extra_meta["progress"] == {"progress": 1, "total": 10, "message": "parsing"}

    again = await dispatcher.call("redeem", {"promise": token})
    assert token_of(again) == token
    meta = again.to_json()["_meta"]
    assert meta["progress"] == {"progress": 1, "total": 10, "message": "parsing"}
    eta = parse_iso(meta["estimated_completion"])
    assert time.time() + 20 < eta < time.time() + 31
    assert meta["expires_at"] == first.extra_meta["expires_at"]

    step_two.set()
    await asyncio.wait_for(reported_two.wait(), WAIT)
    later = await dispatcher.call("redeem", {"promise": token, "wait": 0})
    assert token_of(later) == token
    assert later.extra_meta["progress"] == {"progress": 7, "total": 10, "message": "indexing"}
    assert parse_iso(later.extra_meta["estimated_completion"]) < time.time() + 6

    finish.set()
    done = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    assert done.response_type is ResponseType.ANSWER
    assert done.body == {"content": [text("crunched")]}


async def test_a_pending_promise_without_progress_has_no_progress_fields(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate))
    token = token_of(await dispatcher.call("always", {}))
    again = await dispatcher.call("redeem", {"promise": token})
    assert set(again.extra_meta) == {"promise_token", "expires_at"}
    gate.set()


async def test_redeem_with_wait_returns_as_soon_as_the_outcome_is_ready(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate), max_redeem_wait=30)
    token = token_of(await dispatcher.call("always", {"n": 4}))
    asyncio.get_running_loop().call_later(0.05, gate.set)
    started = time.perf_counter()
    result = await asyncio.wait_for(
        dispatcher.call("redeem", {"promise": token, "wait": 20}), WAIT * 2
    )
    elapsed = time.perf_counter() - started
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": [text("done 4")]}
    assert elapsed < 5  # far below the 20 s asked for


async def test_redeem_with_wait_gives_the_promise_again_when_the_wait_runs_out(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate))
    token = token_of(await dispatcher.call("always", {}))
    result = await asyncio.wait_for(
        dispatcher.call("redeem", {"promise": token, "wait": 0.05}), WAIT
    )
    assert token_of(result) == token
    gate.set()


async def test_a_redeem_wait_beyond_the_configured_maximum_is_invalid(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate), max_redeem_wait=10)
    token = token_of(await dispatcher.call("always", {}))
    with pytest.raises(InvalidParams) as caught:
        await dispatcher.call("redeem", {"promise": token, "wait": 11})
    assert caught.value.data is not None
    assert [e["field"] for e in caught.value.data["errors"]] == ["wait"]
    with pytest.raises(InvalidParams):
        await dispatcher.call("redeem", {})
    gate.set()


async def test_a_redeem_caller_that_goes_away_does_not_cancel_the_promised_work(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    table = WaitSignalTable(TokenSealer(SECRET), ttl=600, max_entries=10)
    dispatcher = serve(dispatchers, gated_tools(gate), promises=table)
    token = token_of(await dispatcher.call("always", {"n": 5}))
    waiting = asyncio.create_task(dispatcher.call("redeem", {"promise": token, "wait": 20}))
    await asyncio.wait_for(table.waiting.wait(), WAIT)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, WAIT)
    gate.set()
    result = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    assert result.body == {"content": [text("done 5")]}


async def test_redeeming_a_finished_promise_twice_gives_the_identical_result(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate))
    token = token_of(await dispatcher.call("always", {"n": 6}))
    gate.set()
    first = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    second = await dispatcher.call("redeem", {"promise": token})
    assert first.response_type is ResponseType.ANSWER
    assert first == second
    assert first.to_json() == second.to_json()


async def test_a_cancelled_promise_redeems_as_a_cancelled_failure(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    started = asyncio.Event()
    saw_cancel = asyncio.Event()

    @tools.tool(promise_after=ALWAYS)
    async def long_job() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            saw_cancel.set()
            raise
        return "never"

    dispatcher = serve(dispatchers, tools)
    token = token_of(await dispatcher.call("long_job", {}))
    await asyncio.wait_for(started.wait(), WAIT)
    cancelled = await dispatcher.call("cancel", {"promise": token})
    assert cancelled.response_type is ResponseType.ANSWER
    assert cancelled.body == {
        "content": [text("cancelled")],
        "structuredContent": {"cancelled": True},
    }
    await asyncio.wait_for(saw_cancel.wait(), WAIT)
    result = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    assert result.response_type is ResponseType.FAILURE
    assert result.body["isError"] is True
    assert result.body["failure"]["reason"] == "cancelled"
    again = await dispatcher.call("cancel", {"promise": token})
    assert again.body["structuredContent"] == {"cancelled": False}


async def test_a_redeem_right_after_a_successful_cancel_reports_the_cancellation(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate))
    token = token_of(await dispatcher.call("always", {}))
    cancelled = await dispatcher.call("cancel", {"promise": token})
    assert cancelled.body["structuredContent"] == {"cancelled": True}
    # cancel said "cancelled": the operation is over, not still pending.
    result = await dispatcher.call("redeem", {"promise": token})
    assert result.response_type is ResponseType.FAILURE, result
    assert result.body["failure"]["reason"] == "cancelled"


async def test_cancelling_a_finished_promise_says_already_finished_and_keeps_the_result(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate))
    token = token_of(await dispatcher.call("always", {"n": 7}))
    gate.set()
    await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    result = await dispatcher.call("cancel", {"promise": token})
    assert result.body == {
        "content": [text("already finished")],
        "structuredContent": {"cancelled": False},
    }
    redeemed = await dispatcher.call("redeem", {"promise": token})
    assert redeemed.body == {"content": [text("done 7")]}


async def test_a_tool_that_raises_after_its_deadline_redeems_as_internal_error_with_an_id(
    dispatchers: list[Dispatcher], caplog: pytest.LogCaptureFixture
) -> None:
    tools = Tools()
    gate = asyncio.Event()

    @tools.tool(promise_after=ALWAYS)
    async def fragile() -> str:
        await gate.wait()
        raise RuntimeError("connection reset by warehouse")

    dispatcher = serve(dispatchers, tools)
    token = token_of(await dispatcher.call("fragile", {}))
    with caplog.at_level(logging.ERROR, logger="mcplite"):
        gate.set()
        with pytest.raises(InternalError) as caught:
            await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    error = caught.value
    assert error.data is not None
    error_id = error.data["error_id"]
    assert "warehouse" not in error.message
    assert [r.name for r in caplog.records if error_id in r.getMessage()] == ["mcplite"]
    with pytest.raises(InternalError) as again:
        await dispatcher.call("redeem", {"promise": token})
    assert again.value.data == {"error_id": error_id}


async def test_a_tool_returning_a_failure_after_its_deadline_redeems_as_a_failure(
    dispatchers: list[Dispatcher],
) -> None:
    tools = Tools()
    gate = asyncio.Event()

    @tools.tool(promise_after=ALWAYS)
    async def order(item: str) -> str | Failure:
        await gate.wait()
        return Failure(f"{item} sold out", reason="sold_out")

    @tools.tool(promise_after=ALWAYS)
    async def order_raising(item: str) -> str:
        await gate.wait()
        raise Failure(f"{item} sold out", reason="sold_out")

    dispatcher = serve(dispatchers, tools)
    tokens = [
        token_of(await dispatcher.call(name, {"item": "tea"}))
        for name in ("order", "order_raising")
    ]
    gate.set()
    for token in tokens:
        result = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
        assert result.response_type is ResponseType.FAILURE
        assert result.body["failure"] == {
            "message": "tea sold out",
            "retryable": False,
            "reason": "sold_out",
        }


async def test_redeem_and_cancel_refuse_bad_tokens_with_the_right_error(
    dispatchers: list[Dispatcher],
) -> None:
    clock = FakeClock(time.time())
    table = clocked_table(clock, ttl=60)
    gate = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate), promises=table)
    token = token_of(await dispatcher.call("always", {}))
    for tool in ("redeem", "cancel"):
        with pytest.raises(InvalidToken):
            await dispatcher.call(tool, {"promise": "prom_a7b9c2d4e6f8"})
        with pytest.raises(InvalidToken):
            await dispatcher.call(
                tool, {"promise": token[:-1] + ("A" if token[-1] != "A" else "B")}
            )

    restarted = serve(dispatchers, gated_tools(gate))  # same secret, fresh table
    with pytest.raises(UnknownPromise):
        await restarted.call("redeem", {"promise": token})

    clock.advance(61)
    with pytest.raises(ExpiredToken):
        await dispatcher.call("redeem", {"promise": token})
    with pytest.raises(ExpiredToken):
        await dispatcher.call("cancel", {"promise": token})


async def test_a_token_from_before_a_secret_rotation_passes_only_with_previous_secrets(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    old = Dispatcher(gated_tools(gate), Config(secret=OLD_SECRET, access_log=False))
    dispatchers.append(old)
    token = token_of(await old.call("always", {}))
    rotated = Dispatcher(
        gated_tools(gate),
        Config(secret=SECRET, previous_secrets=(OLD_SECRET,), access_log=False),
    )
    dispatchers.append(rotated)
    # Genuine (the MAC checks out under a previous secret) but unknown to this process.
    with pytest.raises(UnknownPromise):
        await rotated.call("redeem", {"promise": token})
    not_rotated = serve(dispatchers, gated_tools(gate))
    with pytest.raises(InvalidToken):
        await not_rotated.call("redeem", {"promise": token})
    gate.set()


async def test_a_thousand_concurrent_promises_are_all_redeemable_once_released(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()
    dispatcher = serve(dispatchers, gated_tools(gate, started), max_concurrent_calls=4096)
    promised = await asyncio.wait_for(
        asyncio.gather(*(dispatcher.call("always", {"n": n}) for n in range(1000))), WAIT * 4
    )
    tokens = [token_of(r) for r in promised]
    assert len(set(tokens)) == 1000
    assert len(dispatcher.promises) == 1000  # type: ignore[arg-type]
    assert started.is_set()
    gate.set()
    results = await asyncio.wait_for(
        asyncio.gather(*(dispatcher.call("redeem", {"promise": t, "wait": WAIT}) for t in tokens)),
        WAIT * 4,
    )
    assert [r.body for r in results] == [{"content": [text(f"done {n}")]} for n in range(1000)]
    assert dispatcher.active == 0


async def test_finished_and_expired_promises_leave_no_entry_task_or_result_behind(
    dispatchers: list[Dispatcher],
) -> None:
    clock = FakeClock(time.time())
    table = clocked_table(clock, ttl=60, max_entries=1000)
    tools = Tools()
    gate = asyncio.Event()
    task_refs: list[weakref.ref[asyncio.Task[Any]]] = []

    @tools.tool(promise_after=ALWAYS)
    async def job(n: int) -> dict[str, Any]:
        task = asyncio.current_task()
        assert task is not None
        task_refs.append(weakref.ref(task))
        await gate.wait()
        return {"n": n, "payload": "x" * 1000}

    dispatcher = serve(dispatchers, tools, promises=table)
    tokens = [token_of(await dispatcher.call("job", {"n": n})) for n in range(200)]
    gate.set()
    for token in tokens[::2]:  # half of them are redeemed, half never are
        await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    await asyncio.wait_for(asyncio.gather(*other_tasks()), WAIT)
    assert len(table) == 200

    clock.advance(61)
    assert table.sweep() == 200
    assert len(table) == 0
    assert other_tasks() == set()
    assert dispatcher.active == 0
    gc.collect()
    assert len(task_refs) == 200
    assert [ref for ref in task_refs if ref() is not None] == []


async def test_a_flood_of_always_promise_calls_stops_at_max_promises(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    tools = Tools()
    starts: list[int] = []

    @tools.tool(promise_after=ALWAYS)
    async def job(n: int) -> str:
        starts.append(n)
        await gate.wait()
        return f"done {n}"

    dispatcher = serve(dispatchers, tools, max_promises=10, retry_after=3.0)
    tokens = [token_of(await dispatcher.call("job", {"n": n})) for n in range(10)]
    for n in range(10, 15):
        with pytest.raises(PromiseTableFull) as caught:
            await dispatcher.call("job", {"n": n})
        error = caught.value
        assert error.jsonrpc_code == -32000
        assert error.grpc_status == 8
        assert error.data == {"retry_after": 3.0}
    assert len(dispatcher.promises) == 10  # type: ignore[arg-type]
    gate.set()
    results = [await dispatcher.call("redeem", {"promise": t, "wait": WAIT}) for t in tokens]
    assert [r.body for r in results] == [{"content": [text(f"done {n}")]} for n in range(10)]
    assert sorted(starts) == list(range(10))  # a refused call never started its tool


async def test_a_call_past_its_deadline_with_the_table_full_is_refused_and_its_tool_cancelled(
    dispatchers: list[Dispatcher],
) -> None:
    gate = asyncio.Event()
    tools = Tools()
    cancelled: list[int] = []
    all_cancelled = asyncio.Event()

    @tools.tool
    async def job(n: int) -> str:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            cancelled.append(n)
            all_cancelled.set()
            raise
        return f"done {n}"

    dispatcher = serve(dispatchers, tools, max_promises=2, promise_after=0.01)
    for n in range(2):
        token_of(await asyncio.wait_for(dispatcher.call("job", {"n": n}), WAIT))
    with pytest.raises(PromiseTableFull):
        await asyncio.wait_for(dispatcher.call("job", {"n": 2}), WAIT)
    await asyncio.wait_for(all_cancelled.wait(), WAIT)
    assert cancelled == [2]
    assert len(dispatcher.promises) == 2  # type: ignore[arg-type]
    gate.set()


def test_an_infinite_promise_ttl_is_refused_since_tokens_must_expire() -> None:
    # Spec 3.5: promise tokens are time-bounded.  (A token cannot even encode +inf.)
    with pytest.raises(ValueError, match="promise_ttl"):
        make_config(promise_ttl=math.inf)
    with pytest.raises(ValueError, match="promise_ttl"):
        make_config(promise_ttl=0)
