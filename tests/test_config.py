"""Tests for mcplite.core.config: the facts it holds for the bindings and the CLI."""

from __future__ import annotations

import pytest

from mcplite import Config, Dispatcher, Tools
from mcplite.core.config import address, is_loopback, non_negative, positive_int


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "localhost"])
def test_a_loopback_address_is_one_only_this_host_reaches(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "example.com", "128.0.0.1"])
def test_an_address_others_may_reach_is_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_an_address_flag_takes_host_colon_port_with_brackets_for_ipv6() -> None:
    assert address("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert address("[::1]:0") == ("::1", 0)
    assert address(":9000") == ("127.0.0.1", 9000)
    for bad in ("localhost", "host:http", "host:65536"):
        with pytest.raises(ValueError, match="expected HOST:PORT"):
            address(bad)


def test_number_flags_say_what_they_expected() -> None:
    assert positive_int("3") == 3
    assert non_negative("0") == 0.0
    with pytest.raises(ValueError, match="expected a positive number"):
        positive_int("0")
    with pytest.raises(ValueError, match="expected a number >= 0"):
        non_negative("nan")


def test_a_promise_secret_given_as_text_seals_as_its_utf8_bytes() -> None:
    text = "a secret of thirty-two characters"
    tools = Tools()
    config = Config(secret=text, previous_secrets=("an older secret, rotated",))  # type: ignore[arg-type]
    as_text = Dispatcher(tools, config)
    as_bytes = Dispatcher(tools, Config(secret=text.encode()))
    token = as_text.sealer.seal(b"p" * 16, 4e9)
    assert token == as_bytes.sealer.seal(b"p" * 16, 4e9)
    rotated = Dispatcher(tools, Config(secret=b"an older secret, rotated"))
    older = rotated.sealer.seal(b"q" * 16, 4e9)
    assert as_text.sealer.open(older) == (b"q" * 16, 4e9)  # the rotated secret still opens


def test_a_promise_secret_of_another_kind_is_refused_when_configured() -> None:
    with pytest.raises(TypeError, match="secret: a secret is bytes or str, got int"):
        Config(secret=12345678901234567890)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="previous_secrets must be a sequence"):
        Config(secret=b"s" * 32, previous_secrets="one old secret")  # type: ignore[arg-type]
