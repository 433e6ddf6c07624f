"""The pieces of mcplite.auth on their own: token files, the bucket, bound tokens."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mcplite.auth import Auth, RateLimiter, StaticTokens, auth_from_config, load_token_file
from mcplite.core.config import Config
from mcplite.core.context import Caller, RequestContext
from mcplite.core.errors import ExpiredToken, InvalidToken, RateLimited, Unauthenticated
from mcplite.core.tokens import TokenSealer

GOOD = "tok-aaaaaaaaaaaaaaaaaaaa"
ADMIN = "tok-bbbbbbbbbbbbbbbbbbbb"


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tokens"
    path.write_text(text)
    return str(path)


def test_a_token_file_gives_each_token_its_scopes_and_a_subject_that_hides_it(
    tmp_path: Path,
) -> None:
    tokens = load_token_file(
        _file(tmp_path, f"# who may call\n\n{GOOD}\n{ADMIN} admin read  # the admin\n")
    )
    assert len(tokens) == 2
    plain, admin = tokens.verify(GOOD), tokens.verify(ADMIN)
    assert plain is not None and admin is not None
    assert plain.scopes == frozenset() and admin.scopes == {"admin", "read"}
    assert plain.subject.startswith("token:") and plain.subject != admin.subject
    assert GOOD not in plain.subject and GOOD[4:16] not in plain.subject


@pytest.mark.parametrize(
    ("text", "complaint"),
    [("", "no tokens"), ("# only a comment\n", "no tokens"), ("short admin\n", ":1: a token")],
)
def test_an_unusable_token_file_is_refused_saying_where(
    tmp_path: Path, text: str, complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint) as info:
        load_token_file(_file(tmp_path, text))
    assert "short" not in str(info.value)  # the token itself is never quoted


def test_an_unknown_token_is_refused_without_being_echoed() -> None:
    tokens = StaticTokens([(GOOD, ())])
    with pytest.raises(Unauthenticated) as info:
        tokens.verify(GOOD + "x")
    assert GOOD not in info.value.message


@pytest.mark.parametrize(
    "header", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", f"Bearer {GOOD} extra", GOOD]
)
def test_a_malformed_authorization_header_is_refused(header: str) -> None:
    auth = Auth([StaticTokens([(GOOD, ())])])
    with pytest.raises(Unauthenticated):
        auth.authenticate(header)


def test_the_bearer_scheme_is_case_insensitive_and_no_header_is_anonymous() -> None:
    auth = Auth([StaticTokens([(GOOD, ())])])
    assert isinstance(auth.authenticate(f"bearer {GOOD}"), Caller)
    assert isinstance(auth.authenticate(f"BEARER {GOOD}"), Caller)
    assert auth.authenticate(None) is None
    assert auth.authenticate("") is None


def test_anonymous_network_requests_get_only_open_discovery() -> None:
    closed = Auth([StaticTokens([(GOOD, ())])])
    opened = Auth([StaticTokens([(GOOD, ())])], open_discovery=True)
    http = RequestContext("http")
    with pytest.raises(Unauthenticated):
        closed.admit(http, "tools/list")
    opened.admit(http, "tools/list")
    opened.admit(http, "initialize")
    for method in ("tools/call", "prompts/get", "resources/read", "tasks/get"):
        with pytest.raises(Unauthenticated):
            opened.admit(http, method)
    # Whoever runs the process (stdio, in-process) is never asked.
    closed.admit(RequestContext("stdio"), "tools/call")


def test_the_bucket_allows_a_burst_then_the_rate_and_tells_how_long_to_wait() -> None:
    now = [100.0]
    limiter = RateLimiter(2, 3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0, 0, 0]
    wait = limiter.take("a")
    assert wait == pytest.approx(0.5)
    assert limiter.take("b") == 0  # another identity has its own bucket
    now[0] += 0.5
    assert limiter.take("a") == 0
    assert limiter.take("a") > 0


def test_the_bucket_table_is_bounded() -> None:
    limiter = RateLimiter(1, 1, max_identities=10, clock=lambda: 0.0)
    for i in range(1000):
        limiter.take(f"id{i}")
    assert len(limiter._buckets) == 10  # private: the bound is the point of the test


def test_a_rate_limited_caller_is_told_when_to_retry() -> None:
    auth = Auth([StaticTokens([(GOOD, ())])], limiter=RateLimiter(1, 1, clock=lambda: 0.0))
    caller = Caller("someone")
    auth.limit(caller, None)
    with pytest.raises(RateLimited) as info:
        auth.limit(caller, None)
    assert info.value.retry_after >= 1


def test_a_promise_token_opens_only_for_the_subject_it_was_sealed_for() -> None:
    sealer = TokenSealer(b"s" * 32)
    expires = time.time() + 60
    token = sealer.seal(b"p" * 16, expires, b"alice")
    assert sealer.open(token, b"alice")[0] == b"p" * 16
    for other in (b"bob", b"", b"alice\x00"):
        with pytest.raises(InvalidToken) as info:
            sealer.open(token, other)
        assert info.value.to_jsonrpc() == InvalidToken().to_jsonrpc()  # same as a forgery
    anonymous = sealer.seal(b"p" * 16, expires)
    with pytest.raises(InvalidToken):
        sealer.open(anonymous, b"alice")


def test_a_request_state_opens_only_for_its_subject() -> None:
    sealer = TokenSealer(b"s" * 32)
    state = sealer.seal_state('["tool", 1]', 60, b"alice")
    assert sealer.open_state(state, b"alice") == '["tool", 1]'
    with pytest.raises(InvalidToken):
        sealer.open_state(state, b"bob")
    with pytest.raises(InvalidToken):
        sealer.open_state(state)
    expired = TokenSealer(b"s" * 32, clock=lambda: time.time() + 120)
    with pytest.raises(ExpiredToken):
        expired.open_state(state, b"alice")


def test_auth_is_off_unless_configured_and_its_options_need_it(tmp_path: Path) -> None:
    assert auth_from_config(Config(), environ={}) is None
    with pytest.raises(ValueError, match="need auth on"):
        auth_from_config(Config(open_discovery=True), environ={})
    path = _file(tmp_path, f"{GOOD}\n")
    from_env = auth_from_config(Config(), environ={"MCPLITE_AUTH_TOKENS": path})
    assert from_env is not None and from_env.required
    with pytest.raises(ValueError, match="cannot read the token file"):
        auth_from_config(Config(auth_tokens=str(tmp_path / "missing")), environ={})
