"""JSON values as the checker sees them: their JSON type, a canonical form (for
``enum``, ``const`` and ``uniqueItems``), and short descriptions for messages.

Nothing here recurses deeper than a fixed bound, whatever the value's nesting.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import Any

__all__ = [
    "TYPE_OF",
    "NoneType",
    "all_unique",
    "canonical",
    "describe",
    "is_finite_number",
    "json_type",
    "short",
    "slow_json_type",
]

_SHORT = 40  # characters of a value quoted in an error message

NoneType = type(None)
# The JSON type of each Python type a decoded value can have; mcplite.core.hints maps a
# scalar type hint through the same table.
TYPE_OF: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    NoneType: "null",
    list: "array",
    tuple: "array",
    dict: "object",
}


def slow_json_type(value: Any) -> str | None:
    """The JSON type of an instance of a subclass (a str enum, an IntEnum, an
    OrderedDict), or None for a value that is no JSON type."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None


def json_type(value: Any) -> str | None:
    """``"string"``, ``"integer"``, ... for a JSON-like value; None for any other."""
    return TYPE_OF.get(type(value)) or slow_json_type(value)


def is_finite_number(value: Any) -> bool:
    """A JSON number the schema checker accepts as a bound: not a bool, not NaN or infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --- value helpers (no recursion deeper than a fixed bound) -------------------

_CLOSE_ARRAY = object()
_CLOSE_OBJECT = object()


class _Key:
    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


def canonical(value: Any) -> str:
    """A string equal for JSON-equal values (1 == 1.0, true != 1, key order ignored).

    Iterative, so a deeply nested value cannot exhaust the Python stack.
    """
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if item is _CLOSE_ARRAY:
            out.append("],")
        elif item is _CLOSE_OBJECT:
            out.append("},")
        elif isinstance(item, _Key):
            out.append(f"{_scalar_token(item.key)}:")
        elif isinstance(item, (list, tuple)):
            out.append("[")
            stack.append(_CLOSE_ARRAY)
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_CLOSE_OBJECT)
            for key in sorted(item, key=repr, reverse=True):
                stack.append(item[key])
                stack.append(_Key(key))
        else:
            out.append(f"{_scalar_token(item)},")
    return "".join(out)


def _scalar_token(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return hex(value)  # no digit limit, unlike str(int)
    if isinstance(value, float):
        return hex(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return repr(str(value))
    return f"<{type(value).__qualname__} {id(value):#x}>"


def all_unique(values: list[Any]) -> bool:
    seen: set[Any] = set()
    for item in values:
        key = item if type(item) is str else (canonical(item),)
        if key in seen:
            return False
        seen.add(key)
    return True


def describe(value: Any, jt: str | None = None) -> str:
    """``string "10"``: the JSON type name and a short rendering of the value."""
    if jt is None:
        jt = json_type(value)
    if jt is None:
        return f"Python {type(value).__qualname__} {reprlib.repr(value)}"
    if value is None:
        return "null"
    return f"{jt} {short(value)}"


def short(value: Any) -> str:
    """A JSON-like rendering of value, at most 40 characters."""
    text = _render(value, _SHORT + 1)
    if len(text) > _SHORT:
        text = text[: _SHORT - 3] + "..."
    return text


def _render(value: Any, budget: int) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(str(value[: max(budget, 0)]), ensure_ascii=False)
    if isinstance(value, int):
        try:
            return repr(int(value))
        except ValueError:  # more digits than sys.get_int_max_str_digits()
            return f"<{value.bit_length()}-bit integer>"
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, (list, tuple, dict)):
        if budget <= 2:
            return "[...]" if not isinstance(value, dict) else "{...}"
        used = 2
        parts: list[str] = []
        pairs = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        for key, item in pairs:
            if used >= budget:
                parts.append("...")
                break
            prefix = "" if key is None else f"{_render(str(key), budget - used)}: "
            text = prefix + _render(item, budget - used - len(prefix))
            parts.append(text)
            used += len(text) + 2
        inner = ", ".join(parts)
        return f"{{{inner}}}" if isinstance(value, dict) else f"[{inner}]"
    return reprlib.repr(value)
