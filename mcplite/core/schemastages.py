"""The per-type stages of a compiled schema: what the keywords of one JSON type
check (numbers, strings, arrays, objects), and ``enum`` / ``const``.

:mod:`mcplite.core.schema` runs a stage only on a value of its type; each reads
its keywords once, at compile time, and raises ValueError there for a keyword
whose value is of the wrong kind.
"""

from __future__ import annotations

import copy
import re
import typing
from collections.abc import Mapping
from typing import Any

from .jsonvalues import all_unique, canonical, is_finite_number, short
from .schemanodes import Fail, Node, PathError, accept, fail
from .schemarefs import Document, bad

__all__ = [
    "array_stage",
    "const_stage",
    "enum_stage",
    "number_stage",
    "object_stage",
    "string_stage",
]

_MAX_ERRORS = 100


# --- keyword readers (compile time) ----------------------------------------


def _number_keyword(schema: Mapping[str, Any], key: str, where: str) -> float | None:
    if key not in schema:
        return None
    value = schema[key]
    if not is_finite_number(value):
        raise bad(where, f"{key!r} must be a number (draft 2020 form), not {value!r}")
    return typing.cast(float, value)


def _count_keyword(schema: Mapping[str, Any], key: str, where: str) -> int | None:
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise bad(where, f"{key!r} must be a non-negative integer, not {value!r}")
    return value


# --- per-type stages ---------------------------------------------------------


def number_stage(schema: Mapping[str, Any], where: str) -> Node | None:
    minimum = _number_keyword(schema, "minimum", where)
    maximum = _number_keyword(schema, "maximum", where)
    ex_min = _number_keyword(schema, "exclusiveMinimum", where)
    ex_max = _number_keyword(schema, "exclusiveMaximum", where)
    if minimum is None and maximum is None and ex_min is None and ex_max is None:
        return None

    def check(value: Any) -> Any:
        errors: list[PathError] | None = None
        if minimum is not None and value < minimum:
            errors = [([], f"{short(value)} is less than the minimum of {minimum!r}")]
        if maximum is not None and value > maximum:
            errors = errors or []
            errors.append(([], f"{short(value)} is greater than the maximum of {maximum!r}"))
        if ex_min is not None and value <= ex_min:
            errors = errors or []
            errors.append(([], f"{short(value)} must be greater than {ex_min!r}"))
        if ex_max is not None and value >= ex_max:
            errors = errors or []
            errors.append(([], f"{short(value)} must be less than {ex_max!r}"))
        if errors:
            raise Fail(errors)
        return value

    return check


def string_stage(schema: Mapping[str, Any], where: str) -> Node | None:
    min_length = _count_keyword(schema, "minLength", where)
    max_length = _count_keyword(schema, "maxLength", where)
    pattern_text = schema.get("pattern")
    if pattern_text is None:
        search = None
    else:
        if not isinstance(pattern_text, str):
            raise bad(where, f"'pattern' must be a string, not {pattern_text!r}")
        try:
            search = re.compile(pattern_text).search
        except re.error as exc:
            raise bad(where, f"'pattern' {pattern_text!r} is not a valid regex: {exc}") from None
    if min_length is None and max_length is None and search is None:
        return None
    too_short = f"must be at least {min_length} characters long"
    too_long = f"must be at most {max_length} characters long"

    def check(value: str) -> Any:
        errors: list[PathError] | None = None
        if min_length is not None or max_length is not None:
            length = len(value)  # code points, as JSON Schema counts
            if min_length is not None and length < min_length:
                errors = [([], too_short)]
            if max_length is not None and length > max_length:
                errors = [([], too_long)]
        if search is not None and search(value) is None:
            errors = errors or []
            errors.append(([], f"{short(value)} does not match the pattern {pattern_text!r}"))
        if errors:
            raise Fail(errors)
        return value

    return check


def _nested(errors: list[PathError] | None, exc: Fail, key: Any) -> list[PathError]:
    """``errors`` (a new list for None) with those of ``exc``, a child's, put under
    ``key`` (an item's index or a property's name)."""
    for parts, _ in exc.errors:
        parts.append(key)
    errors = errors or []
    errors.extend(exc.errors)
    return errors


def _too_many(errors: list[PathError]) -> bool:
    if len(errors) < _MAX_ERRORS:
        return False
    errors.append(([], f"has too many errors; only the first {_MAX_ERRORS} are reported"))
    return True


def array_stage(schema: Mapping[str, Any], where: str, doc: Document) -> Node | None:
    items_schema = schema.get("items")
    if isinstance(items_schema, list):
        raise bad(where, "'items' as a list (tuple validation) is not supported")
    items = None if items_schema is None else doc.child(items_schema, f"{where}/items")
    if items is accept:
        items = None
    min_items = _count_keyword(schema, "minItems", where)
    max_items = _count_keyword(schema, "maxItems", where)
    unique = schema.get("uniqueItems", False)
    if not isinstance(unique, bool):
        raise bad(where, f"'uniqueItems' must be true or false, not {unique!r}")
    if items is None and min_items is None and max_items is None and not unique:
        return None
    too_few = f"must have at least {min_items} items"
    too_many = f"must have at most {max_items} items"

    def check(value: list[Any]) -> Any:
        errors: list[PathError] | None = None
        count = len(value)
        if min_items is not None and count < min_items:
            errors = [([], too_few)]
        if max_items is not None and count > max_items:
            errors = [([], too_many)]
        if unique and count > 1 and not all_unique(value):
            errors = errors or []
            errors.append(([], "has duplicate items"))
        out = value
        if items is not None:
            for index, item in enumerate(value):
                try:
                    new = items(item)
                except Fail as exc:
                    errors = _nested(errors, exc, index)
                    if _too_many(errors):
                        break
                    continue
                if new is not item:
                    if out is value:
                        out = list(value)
                    out[index] = new
        if errors:
            raise Fail(errors)
        return out

    return check


def object_stage(
    schema: Mapping[str, Any], where: str, declared: bool, doc: Document
) -> Node | None:
    raw_properties = schema.get("properties", {})
    if not isinstance(raw_properties, Mapping):
        raise bad(where, f"'properties' must be an object, not {raw_properties!r}")
    properties: dict[str, Node] = {}
    defaults: list[tuple[str, Any, bool]] = []
    for key, sub in raw_properties.items():
        if not isinstance(key, str):
            raise bad(where, f"property names must be strings, not {key!r}")
        properties[key] = doc.child(sub, f"{where}/properties/{key}")
        if isinstance(sub, Mapping) and "default" in sub:
            default = copy.deepcopy(sub["default"])
            defaults.append((key, default, isinstance(default, (list, dict))))
    raw_required = schema.get("required", [])
    if not isinstance(raw_required, list) or not all(isinstance(k, str) for k in raw_required):
        raise bad(where, f"'required' must be a list of property names, not {raw_required!r}")
    required = tuple(dict.fromkeys(raw_required))
    raw_additional = schema.get("additionalProperties", True)
    forbid = raw_additional is False
    additional: Node | None = None
    if not isinstance(raw_additional, bool):
        additional = doc.child(raw_additional, f"{where}/additionalProperties")
        if additional is accept:
            additional = None
    if not (declared or properties or required or forbid or additional is not None):
        return None
    get = properties.get
    fill = tuple(defaults)
    deepcopy = copy.deepcopy
    unexpected = "is not allowed (unexpected property)"

    def check(value: dict[Any, Any]) -> Any:
        errors: list[PathError] | None = None
        if required:
            for key in required:
                if key not in value:
                    errors = errors or []
                    errors.append(([key], "is required"))
        out = value
        for key, item in value.items():
            child = get(key)
            if child is None:
                if forbid:
                    errors = errors or []
                    errors.append(([str(key)], unexpected))
                    continue
                if not isinstance(key, str):
                    errors = errors or []
                    errors.append(([], f"has a property name that is not a string: {key!r}"))
                    continue
                if additional is None:
                    continue
                child = additional
            try:
                new = child(item)
            except Fail as exc:
                errors = _nested(errors, exc, key)
                if _too_many(errors):
                    break
                continue
            if new is not item:
                if out is value:
                    out = dict(value)
                out[key] = new
        if errors:
            raise Fail(errors)
        if fill:
            for key, default, mutable in fill:
                if key not in value:
                    if out is value:
                        out = dict(value)
                    out[key] = deepcopy(default) if mutable else default
        return out

    return check


# --- enum / const --------------------------------------------------------------


def _constant_set(values: list[Any]) -> tuple[frozenset[str], frozenset[str]]:
    strings = frozenset(v for v in values if isinstance(v, str))
    others = frozenset(canonical(v) for v in values if not isinstance(v, str))
    return strings, others


def enum_stage(values: Any, where: str) -> Node:
    if not isinstance(values, list) or not values:
        raise bad(where, f"'enum' must be a non-empty list, not {values!r}")
    strings, others = _constant_set(values)
    allowed = ", ".join(short(v) for v in values)

    def check(value: Any) -> Any:
        if isinstance(value, str):
            if value in strings:
                return value
        elif others and canonical(value) in others:
            return value
        raise fail(f"{short(value)} is not one of {allowed}")

    return check


def const_stage(constant: Any) -> Node:
    strings, others = _constant_set([constant])
    message = f"must be equal to {short(constant)}"

    def check(value: Any) -> Any:
        if isinstance(value, str):
            if value in strings:
                return value
        elif others and canonical(value) in others:
            return value
        raise fail(message)

    return check
