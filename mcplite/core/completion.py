"""Completion of prompt arguments and resource-template variables (MCP ``completion/complete``).

An argument's candidates come from a completer the author declares
(``complete={"arg": fn}`` on :meth:`~mcplite.core.prompts.Prompts.prompt` or
:meth:`~mcplite.core.resources.Resources.resource`), or, without one, from its
``Literal[...]`` or ``Enum`` annotation.  A completer takes the partial value,
and optionally the other arguments already given, and returns candidates (sync
or async)::

    def cities(value: str) -> list[str]:
        return [c for c in CITIES if c.lower().startswith(value.lower())]

MCP caps an answer at 100 values; ``total`` and ``hasMore`` say what was cut.
"""

from __future__ import annotations

import enum
import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

__all__ = ["MAX_VALUES", "Completer", "choices_of", "complete", "completion_result"]

#: At most this many values in one answer (MCP).
MAX_VALUES = 100

Completer: TypeAlias = Callable[..., Iterable[str] | Awaitable[Iterable[str]]]
"""``fn(value)`` or ``fn(value, arguments)``: candidates for a partial ``value``."""


def choices_of(hint: Any) -> tuple[str, ...] | None:
    """The string values a ``Literal`` or ``Enum`` annotation allows (None: not one)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return choices_of(args[0])
    if origin is Literal:
        return tuple(str(arg.value if isinstance(arg, enum.Enum) else arg) for arg in args)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return tuple(str(member.value) for member in hint)
    return None


async def complete(
    completer: Completer | None,
    choices: Iterable[str] | None,
    value: str,
    arguments: Mapping[str, str],
) -> list[str]:
    """Every candidate for ``value``: the completer's, else the choices that start
    with it (case-insensitively); ``[]`` when there is neither."""
    if completer is not None:
        takes_arguments = len(inspect.signature(completer).parameters) >= 2
        found = completer(value, dict(arguments)) if takes_arguments else completer(value)
        if inspect.isawaitable(found):
            found = await found
        return [str(item) for item in found]
    if choices is None:
        return []
    lowered = value.lower()
    return [choice for choice in choices if choice.lower().startswith(lowered)]


def completion_result(values: list[str]) -> dict[str, Any]:
    """MCP's ``CompleteResult``: at most :data:`MAX_VALUES` values, the total, whether cut."""
    return {
        "completion": {
            "values": values[:MAX_VALUES],
            "total": len(values),
            "hasMore": len(values) > MAX_VALUES,
        }
    }
