"""What the schema checker compiles to: nodes, and how a node says a value failed.

A node takes a value and returns it (possibly a normalised copy), or raises
:class:`Fail`. An error's path parts are collected innermost first while Fail
propagates, so a successful call never builds a path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Fail", "Node", "PathError", "accept", "fail", "reject"]

Node = Callable[[Any], Any]
PathError = tuple[list[str | int], str]
"""One error: the path parts to the offending field, innermost first, and the message."""


class Fail(Exception):
    """A value failed its node; carries (reversed path parts, message) pairs.

    Never leaves the checker: :func:`mcplite.core.schema.compile_schema` turns it
    into a SchemaError.
    """

    def __init__(self, errors: list[PathError]) -> None:
        super().__init__()
        self.errors = errors


def fail(message: str) -> Fail:
    """A Fail with one error about the value itself."""
    return Fail([([], message)])


def accept(value: Any) -> Any:
    """The node of ``true`` (and of a schema with no keyword the checker knows)."""
    return value


def reject(value: Any) -> Any:
    """The node of ``false``. Raises Fail."""
    raise fail("is not allowed")
