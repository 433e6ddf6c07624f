"""Tests for promise tokens (mcplite.core.tokens) and the promise flow of the dispatcher
(spec 3.5, 3.6, A.3).

The store's own contract (capacity, expiry, wait, cancel, close) is in
test_promise_store.py, with the proof that a bad token never reaches a store.
The dispatcher tests here that take the ``serve`` fixture run twice: over a
:class:`MemoryStore`, and over a store that hands out copies of its records, as
a store that serialises them (SQLite, Redis) does, so that the dispatcher never
depends on a record being the very object the store holds.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import gc
import hashlib
import hmac
import logging
import math
import struct
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    SECRET,
    T0,
    TOKEN_ALPHABET,
    DelegatingStore,
    FakeClock,
    make_config,
    single_changes,
)
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
    MemoryStore,
    PromiseRecord,
    PromiseStore,
    ResponseType,
    Result,
    Tools,
    UnknownPromise,
)
from mcplite.core.errors import PromiseTableFull
from mcplite.core.tokens import TokenSealer
from mcplite.stores.sqlite import SQLiteStore

OLD_SECRET = b"old-secret-0123456789abcdefghij"
WAIT = 5.0  # upper bound of every wait in this file


class CopyingStore(DelegatingStore):
    """A :class:`PromiseStore` over a :class:`MemoryStore` whose every record is a copy.

    A store that serialises records (SQLite, Redis) hands out a new object on each
    read: a change made by the store later is not seen through a record read earlier.
    """

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.memory = inner

    def __len__(self) -> int:
        return len(self.memory)

    async def create(self, tool: str, owner: str) -> PromiseRecord:
        return copy.copy(await self.inner.create(tool, owner))

    def set_progress(self, promise_id: bytes, progress: dict[str, Any]) -> None:
        self.inner.set_progress(promise_id, dict(progress))

    async def get(self, promise_id: bytes) -> PromiseRecord:
        return copy.copy(await self.inner.get(promise_id))

    async def wait(self, promise_id: bytes, timeout: float) -> PromiseRecord:
        return copy.copy(await self.inner.wait(promise_id, timeout))


class LookupSignalStore(MemoryStore):
    """Sets ``looked_up`` on every ``get`` (a redeem looks its record up, then waits)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.looked_up = asyncio.Event()

    async def get(self, promise_id: bytes) -> PromiseRecord:
        self.looked_up.set()
        return await super().get(promise_id)


STORE_KINDS: dict[str, Callable[[Config], PromiseStore]] = {
    "memory": lambda c: MemoryStore(
        ttl=c.promise_ttl, max_entries=c.max_promises, retry_after=c.retry_after
    ),
    "copying": lambda c: CopyingStore(
        MemoryStore(ttl=c.promise_ttl, max_entries=c.max_promises, retry_after=c.retry_after)
    ),
}

Serve = Callable[..., Dispatcher]


@pytest.fixture(params=list(STORE_KINDS))
def serve(request: pytest.FixtureRequest, dispatchers: list[Dispatcher]) -> Serve:
    """``serve(tools, **config_overrides)``: a dispatcher over each kind of store in turn."""
    open_store = STORE_KINDS[request.param]

    def make(tools: Tools, **overrides: Any) -> Dispatcher:
        config = make_config(**overrides)
        dispatcher = Dispatcher(tools, config, promises=open_store(config))
        dispatchers.append(dispatcher)
        return dispatcher

    return make


def serve_on(
    made: list[Dispatcher], tools: Tools, promises: PromiseStore, **overrides: Any
) -> Dispatcher:
    """A dispatcher over the given store (closed with the ``dispatchers`` fixture)."""
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


# --- TokenSealer --------------------------------------------------------------------------


def test_a_sealed_token_opens_to_its_id_and_expiry() -> None:
    clock = FakeClock()
    sealer = TokenSealer(SECRET, clock=clock)
    promise_id = bytes(range(16))
    token = sealer.seal(promise_id, T0 + 600.25)
    assert token.startswith("prom_")
    assert len(token) == 81
    assert set(token[5:]) <= set(TOKEN_ALPHABET)
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


async def test_an_injected_empty_store_is_the_one_the_dispatcher_uses(
    dispatchers: list[Dispatcher],
) -> None:
    store = MemoryStore(ttl=60, max_entries=5)
    assert not store  # empty, hence falsy (it has __len__): `promises or ...` would drop it
    gate = asyncio.Event()
    dispatcher = serve_on(dispatchers, gated_tools(gate), store)
    assert dispatcher.promises is store
    token = token_of(await dispatcher.call("always", {"n": 1}))
    assert len(store) == 1
    gate.set()
    done = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    assert done.body == {"content": [text("done 1")]}


async def test_a_call_past_the_promise_deadline_answers_with_a_promise(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate), promise_after=0.05, promise_ttl=600)
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
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    gate.set()
    dispatcher = serve(gated_tools(gate), promise_after=5)
    result = await asyncio.wait_for(dispatcher.call("wait_for_gate", {"n": 2}), WAIT)
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": [text("done 2")]}
    assert len(dispatcher.promises) == 0  # type: ignore[arg-type]


async def test_a_tool_with_promise_after_always_answers_with_a_promise_at_once(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate), promise_after=math.inf)
    result = await asyncio.wait_for(dispatcher.call("always", {}), WAIT)
    token_of(result)
    gate.set()


async def test_a_tool_with_promise_after_always_promises_even_when_it_finishes_at_once(
    serve: Serve,
) -> None:
    # tools.ALWAYS: "every call of the tool answers with a promise at once".
    tools = Tools()

    @tools.tool(promise_after=ALWAYS)
    async def submit_job(job: str) -> str:
        return f"job {job} queued"

    dispatcher = serve(tools)
    result = await asyncio.wait_for(dispatcher.call("submit_job", {"job": "j1"}), WAIT)
    token = token_of(result)
    redeemed = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    assert redeemed.body == {"content": [text("job j1 queued")]}


async def test_a_tool_with_promise_after_never_is_waited_for_past_the_server_deadline(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate), promise_after=0.01)
    asyncio.get_running_loop().call_later(0.2, gate.set)  # 20 times the server deadline
    result = await asyncio.wait_for(dispatcher.call("never", {"n": 3}), WAIT)
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": [text("done 3")]}
    assert len(dispatcher.promises) == 0  # type: ignore[arg-type]


async def test_a_promised_tool_keeps_running_and_its_outcome_is_stored(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    tools = Tools()
    finished = asyncio.Event()

    @tools.tool
    async def long_job() -> dict[str, int]:
        await gate.wait()
        finished.set()
        return {"rows": 200}

    dispatcher = serve(tools, promise_after=0.02)
    token = token_of(await asyncio.wait_for(dispatcher.call("long_job", {}), WAIT))
    gate.set()
    await asyncio.wait_for(finished.wait(), WAIT)
    result = await dispatcher.call("redeem", {"promise": token})
    assert result.response_type is ResponseType.ANSWER
    assert result.body == {"content": [{"rows": 200}]}


async def test_redeeming_a_pending_promise_gives_the_same_token_and_the_progress(
    serve: Serve,
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

    dispatcher = serve(tools, promise_after=0.02)
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
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate))
    token = token_of(await dispatcher.call("always", {}))
    again = await dispatcher.call("redeem", {"promise": token})
    assert set(again.extra_meta) == {"promise_token", "expires_at"}
    gate.set()


async def test_redeem_with_wait_returns_as_soon_as_the_outcome_is_ready(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate), max_redeem_wait=30)
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
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate))
    token = token_of(await dispatcher.call("always", {}))
    result = await asyncio.wait_for(
        dispatcher.call("redeem", {"promise": token, "wait": 0.05}), WAIT
    )
    assert token_of(result) == token
    gate.set()


async def test_a_redeem_wait_beyond_the_configured_maximum_is_invalid(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate), max_redeem_wait=10)
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
    store = LookupSignalStore(ttl=600, max_entries=10)
    dispatcher = serve_on(dispatchers, gated_tools(gate), store)
    token = token_of(await dispatcher.call("always", {"n": 5}))
    store.looked_up.clear()
    waiting = asyncio.create_task(dispatcher.call("redeem", {"promise": token, "wait": 20}))
    await asyncio.wait_for(store.looked_up.wait(), WAIT)  # looked up: now it waits
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, WAIT)
    gate.set()
    result = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    assert result.body == {"content": [text("done 5")]}


async def test_redeeming_a_finished_promise_twice_gives_the_identical_result(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate))
    token = token_of(await dispatcher.call("always", {"n": 6}))
    gate.set()
    first = await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    second = await dispatcher.call("redeem", {"promise": token})
    assert first.response_type is ResponseType.ANSWER
    assert first == second
    assert first.to_json() == second.to_json()


async def test_a_cancelled_promise_redeems_as_a_cancelled_failure(
    serve: Serve,
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

    dispatcher = serve(tools)
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
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate))
    token = token_of(await dispatcher.call("always", {}))
    cancelled = await dispatcher.call("cancel", {"promise": token})
    assert cancelled.body["structuredContent"] == {"cancelled": True}
    # cancel said "cancelled": the operation is over, not still pending.
    result = await dispatcher.call("redeem", {"promise": token})
    assert result.response_type is ResponseType.FAILURE, result
    assert result.body["failure"]["reason"] == "cancelled"


async def test_a_redeem_waiting_when_its_promise_is_cancelled_reports_the_cancellation(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate), max_redeem_wait=30)
    token = token_of(await dispatcher.call("always", {}))
    waiting = asyncio.create_task(dispatcher.call("redeem", {"promise": token, "wait": 20}))
    await asyncio.sleep(0)  # one loop turn: the redeem has looked its record up and waits
    assert not waiting.done()
    assert await dispatcher.cancel(token) is True
    result = await asyncio.wait_for(waiting, WAIT)
    # Not the promise again: the record it read before waiting is stale by now.
    assert result.response_type is ResponseType.FAILURE, result
    assert result.body["failure"]["reason"] == "cancelled"


@pytest.mark.parametrize("kind", list(STORE_KINDS))
async def test_another_dispatcher_sharing_the_store_redeems_long_polls_and_cancels_a_promise(
    dispatchers: list[Dispatcher], kind: str
) -> None:
    config = make_config()
    store = STORE_KINDS[kind](config)
    gate = asyncio.Event()
    reported: dict[int, asyncio.Event] = {1: asyncio.Event(), 2: asyncio.Event()}
    stopped: list[int] = []
    stopped_one = asyncio.Event()
    tools = Tools()

    @tools.tool(promise_after=ALWAYS)
    async def job(n: int, ctx: Context) -> str:
        ctx.report_progress(n, 10, "working")
        reported[n].set()
        try:
            await gate.wait()
        except asyncio.CancelledError:
            stopped.append(n)
            stopped_one.set()
            raise
        return f"done {n}"

    owner = serve_on(dispatchers, tools, store)
    other = serve_on(dispatchers, tools, store)  # another process, as far as promises go
    assert owner.owner != other.owner
    kept = token_of(await owner.call("job", {"n": 1}))
    dropped = token_of(await owner.call("job", {"n": 2}))
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in reported.values())), WAIT)

    pending = await other.call("redeem", {"promise": kept})
    assert token_of(pending) == kept
    assert pending.extra_meta["progress"] == {"progress": 1, "total": 10, "message": "working"}

    long_poll = asyncio.create_task(other.call("redeem", {"promise": kept, "wait": 20}))
    cancelled = await other.call("cancel", {"promise": dropped})
    assert cancelled.body["structuredContent"] == {"cancelled": True}
    await asyncio.wait_for(stopped_one.wait(), WAIT)
    assert stopped == [2]  # the owner stopped its task when the store told it
    assert not long_poll.done()

    gate.set()
    done = await asyncio.wait_for(long_poll, WAIT)  # woken when the owner's outcome lands
    assert done.body == {"content": [text("done 1")]}
    assert (await owner.redeem(kept)).body == {"content": [text("done 1")]}
    for dispatcher in (owner, other):
        result = await dispatcher.redeem(dropped)
        assert result.body["failure"]["reason"] == "cancelled"
    assert await owner.cancel(kept) is False


async def test_cancelling_a_finished_promise_says_already_finished_and_keeps_the_result(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    dispatcher = serve(gated_tools(gate))
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
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    tools = Tools()
    gate = asyncio.Event()

    @tools.tool(promise_after=ALWAYS)
    async def fragile() -> str:
        await gate.wait()
        raise RuntimeError("connection reset by warehouse")

    dispatcher = serve(tools)
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
    serve: Serve,
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

    dispatcher = serve(tools)
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
    gate = asyncio.Event()
    store = MemoryStore(ttl=60, max_entries=10, clock=clock)
    dispatcher = serve_on(dispatchers, gated_tools(gate), store)
    dispatcher.sealer = TokenSealer(SECRET, clock=clock)  # tokens expire on the same clock
    token = token_of(await dispatcher.call("always", {}))
    for tool in ("redeem", "cancel"):
        with pytest.raises(InvalidToken):
            await dispatcher.call(tool, {"promise": "prom_a7b9c2d4e6f8"})
        with pytest.raises(InvalidToken):
            await dispatcher.call(
                tool, {"promise": token[:-1] + ("A" if token[-1] != "A" else "B")}
            )

    # The same secret over a fresh store, as after a restart.
    restarted = serve_on(dispatchers, gated_tools(gate), MemoryStore(ttl=60, max_entries=10))
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
    old = Dispatcher(gated_tools(gate), make_config(secret=OLD_SECRET))
    dispatchers.append(old)
    token = token_of(await old.call("always", {}))
    rotated = Dispatcher(gated_tools(gate), make_config(previous_secrets=(OLD_SECRET,)))
    dispatchers.append(rotated)
    # Genuine (the MAC checks out under a previous secret) but unknown to this process.
    with pytest.raises(UnknownPromise):
        await rotated.call("redeem", {"promise": token})
    not_rotated = Dispatcher(gated_tools(gate), make_config())
    dispatchers.append(not_rotated)
    with pytest.raises(InvalidToken):
        await not_rotated.call("redeem", {"promise": token})
    gate.set()


async def test_a_thousand_concurrent_promises_are_all_redeemable_once_released(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()
    dispatcher = serve(gated_tools(gate, started), max_concurrent_calls=4096)
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
    store = MemoryStore(ttl=60, max_entries=1000, clock=clock)
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

    dispatcher = serve_on(dispatchers, tools, store)
    tokens = [token_of(await dispatcher.call("job", {"n": n})) for n in range(200)]
    gate.set()
    for token in tokens[::2]:  # half of them are redeemed, half never are
        await dispatcher.call("redeem", {"promise": token, "wait": WAIT})
    await asyncio.wait_for(asyncio.gather(*other_tasks()), WAIT)
    assert len(store) == 200

    clock.advance(61)
    assert await store.sweep() == 200
    assert len(store) == 0
    assert other_tasks() == set()
    assert dispatcher.active == 0
    gc.collect()
    assert len(task_refs) == 200
    assert [ref for ref in task_refs if ref() is not None] == []


async def test_a_flood_of_always_promise_calls_stops_at_max_promises(
    serve: Serve,
) -> None:
    gate = asyncio.Event()
    tools = Tools()
    starts: list[int] = []

    @tools.tool(promise_after=ALWAYS)
    async def job(n: int) -> str:
        starts.append(n)
        await gate.wait()
        return f"done {n}"

    dispatcher = serve(tools, max_promises=10, retry_after=3.0)
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


async def test_a_call_past_its_deadline_with_the_store_full_is_refused_and_its_tool_cancelled(
    serve: Serve,
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

    dispatcher = serve(tools, max_promises=2, promise_after=0.01)
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


async def test_a_promised_result_the_store_cannot_take_resolves_to_an_internal_error(
    dispatchers: list[Dispatcher], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A shared store encodes results as JSON: a dict with tuple keys has no form.
    # The promise must end (with an error that says so), not stay "running" until
    # its token expires.
    tools = Tools()

    @tools.tool(promise_after=ALWAYS)
    async def tuple_keys() -> dict[Any, str]:
        return {(1, 2): "JSON has no form for this key"}

    store = SQLiteStore(tmp_path / "promises.sqlite3", ttl=600.0, max_entries=100)
    owner = serve_on(dispatchers, tools, store)
    other = serve_on(dispatchers, tools, store)  # another process, as far as promises go
    token = token_of(await owner.call("tuple_keys", {}))
    with caplog.at_level(logging.ERROR, logger="mcplite"), pytest.raises(InternalError) as caught:
        await other.redeem(token, wait=WAIT)
    assert caught.value.data is not None
    error_id = caught.value.data["error_id"]
    assert "could not be stored" in caught.value.message
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    with pytest.raises(InternalError):  # the owner, too, answers from the store now
        await owner.redeem(token)
