"""Tests for mcplite.core.listeners: what every registry tells about its changes."""

from __future__ import annotations

import logging

import pytest

from mcplite import Prompts, Resources, Tools
from mcplite.core.listeners import Listeners


def test_listeners_hear_each_change_in_order_until_they_stop() -> None:
    heard: list[str] = []
    listeners = Listeners()
    stop_a = listeners.add(lambda: heard.append("a"))
    listeners.add(lambda: heard.append("b"))
    listeners.notify()
    stop_a()
    stop_a()  # stopping twice is harmless
    listeners.notify()
    assert heard == ["a", "b", "b"]
    assert len(listeners) == 1


def test_a_listener_that_raises_is_logged_and_the_others_still_hear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[str] = []
    listeners = Listeners()

    def broken() -> None:
        raise RuntimeError("listener bug")

    listeners.add(broken)
    listeners.add(lambda: heard.append("after"))
    with caplog.at_level(logging.ERROR, logger="mcplite"):
        listeners.notify()
    assert heard == ["after"]
    assert "a change listener failed" in caplog.text


def test_tools_prompts_and_resources_tell_each_addition_and_removal() -> None:
    tools, prompts, resources = Tools(), Prompts(), Resources()
    heard: list[str] = []
    tools.on_change(lambda: heard.append("tools"))
    prompts.on_change(lambda: heard.append("prompts"))
    resources.on_change(lambda: heard.append("resources"))

    def greet() -> str:
        return "hi"

    tools.add(greet)
    prompts.add(greet)
    resources.add(greet, "memo://greeting")
    tools.remove("greet")
    prompts.remove("greet")
    resources.remove("memo://greeting")
    assert heard == ["tools", "prompts", "resources"] * 2
