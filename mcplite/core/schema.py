"""JSON Schema -> a compiled argument checker.

:func:`compile_schema` turns a schema (made from type hints by
:mod:`mcplite.core.hints`, or hand-written) into a :data:`Checker`: nested closures
built once, so a call never walks the schema dict. The checker returns the value
with defaults filled in and integral floats normalised to ints, or raises
:class:`SchemaError` naming every offending field. Stdlib only.

The checker follows JSON Schema (draft 2020-12) for the keywords it knows, with no
coercion: ``"10"`` is not an integer and ``true`` is not a number. References
inside the schema (``$ref`` to ``#/$defs/name``, any JSON pointer, an
``$anchor``, an embedded ``$id``) are compiled once per target, recursive ones
included; a reference to another document is refused when the schema is compiled.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .jsonvalues import (
    _TYPE_OF,
    _all_unique,
    _canonical,
    _describe,
    _json_type,
    _NoneType,
    _short,
    _slow_json_type,
)
from .schemarefs import Document, bad

__all__ = ["Checker", "FieldError", "SchemaError", "compile_schema"]

Checker = Callable[[Any], Any]
"""Validates one value; returns it (with defaults filled in) or raises SchemaError."""


# ---------------------------------------------------------------------------
# Public data types
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldError:
    """One offending field: ``path`` like ``filters.tags[2]`` (``(root)`` for the value itself)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SchemaError(Exception):
    """A value does not match its schema; ``errors`` lists every offending field."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__(errors)
        self.errors = errors

    def __str__(self) -> str:
        return "; ".join(str(error) for error in self.errors)


# ---------------------------------------------------------------------------
# JSON Schema -> compiled checker
# ---------------------------------------------------------------------------

# Each compiled node takes a value and returns it (possibly a normalised copy), or
# raises _Fail. An error's path parts are collected innermost first while _Fail
# propagates, so a successful call never builds a path.
_Node = Callable[[Any], Any]
_Error = tuple[list[str | int], str]

_MAX_ERRORS = 100
_TYPE_NAMES = ("string", "integer", "number", "boolean", "null", "array", "object")
_FAST_TYPE: dict[str, type] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "null": _NoneType,
    "array": list,
    "object": dict,
}


class _Fail(Exception):
    """Internal: a value failed; carries (reversed path parts, message) pairs."""

    def __init__(self, errors: list[_Error]) -> None:
        super().__init__()
        self.errors = errors


def _fail(message: str) -> _Fail:
    return _Fail([([], message)])


def compile_schema(schema: Mapping[str, Any] | bool) -> Checker:
    """Compile ``schema`` once into a checker.

    The checker returns the value, unchanged unless a default was filled in or an
    integral float was normalised to int (then the containers on the way are
    shallow copies). It raises :class:`SchemaError` listing every offending field.

    Raises ``ValueError`` here, at compile time, for a malformed schema: an unknown
    ``type``, a bad regex, a keyword with a value of the wrong kind, a ``$ref``
    that does not resolve inside the schema (a remote one included), or one that
    refers back to itself without descending into the value. Annotations
    (``$schema``, ``$id``, ``title``, ``description``, ``examples``, ...) and
    unknown keywords are ignored.
    """
    node = Document(schema, _compile).compile(schema, "#")

    def check(value: Any) -> Any:
        try:
            return node(value)
        except _Fail as exc:
            raise SchemaError(
                [FieldError(_format_path(parts), message) for parts, message in exc.errors]
            ) from None
        except RecursionError:
            # Only a recursive schema checks a value as deep as the value goes.
            raise SchemaError([FieldError("(root)", "is nested too deeply to check")]) from None

    return check


def _format_path(parts: list[str | int]) -> str:
    if not parts:
        return "(root)"
    out: list[str] = []
    for part in reversed(parts):
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            out.append(f".{part}" if out else part)
    return "".join(out)


def _accept(value: Any) -> Any:
    return value


def _reject(value: Any) -> Any:
    raise _fail("is not allowed")


def _compile(schema: Any, where: str, doc: Document) -> _Node:
    if schema is True:
        return _accept
    if schema is False:
        return _reject
    if not isinstance(schema, Mapping):
        raise bad(where, f"a schema must be an object or a boolean, not {_describe(schema)}")
    for keyword in ("$dynamicRef", "$recursiveRef"):
        if keyword in schema:
            # Ignoring a reference would silently accept anything; say so up front.
            raise bad(where, f"{keyword} is not supported; use $ref")
    declared = _declared_types(schema, where)
    by_type: dict[str, _Node] = {}
    number = _number_stage(schema, where)
    if number is not None:
        by_type["integer"] = by_type["number"] = number
    string = _string_stage(schema, where)
    if string is not None:
        by_type["string"] = string
    array = _array_stage(schema, where, doc)
    if array is not None:
        by_type["array"] = array
    obj = _object_stage(schema, where, declared is not None and "object" in declared, doc)
    if obj is not None:
        by_type["object"] = obj
    generic: list[_Node] = []
    if "$ref" in schema:
        generic.append(doc.reference(schema, where))
    if "enum" in schema:
        generic.append(_enum_stage(schema["enum"], where))
    if "const" in schema:
        generic.append(_const_stage(schema["const"]))
    for keyword, build in (("allOf", _all_of), ("anyOf", _any_of), ("oneOf", _one_of)):
        if keyword in schema:
            generic.append(build(_branches(schema[keyword], f"{where}/{keyword}", doc)))
    if "not" in schema:
        generic.append(_not(_compile(schema["not"], f"{where}/not", doc)))
    if "if" in schema:
        conditional = _conditional(schema, where, doc)
        if conditional is not None:
            generic.append(conditional)
    if "dependentRequired" in schema or "dependentSchemas" in schema:
        generic.append(_dependencies(schema, where, doc))
    return _assemble(declared, by_type, tuple(generic))


def _declared_types(schema: Mapping[str, Any], where: str) -> tuple[str, ...] | None:
    if "type" not in schema:
        return None
    raw = schema["type"]
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names:
        raise bad(where, f"'type' must be a type name or a non-empty list of them, not {raw!r}")
    for name in names:
        if name not in _TYPE_NAMES:
            close = difflib.get_close_matches(str(name), _TYPE_NAMES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise bad(
                where, f"unknown type {name!r}{hint}; expected one of {', '.join(_TYPE_NAMES)}"
            )
    return tuple(dict.fromkeys(names))


def _accepted_types(declared: tuple[str, ...] | None) -> frozenset[str] | None:
    if declared is None:
        return None
    accepted = set(declared)
    if "number" in accepted:
        accepted.add("integer")
    return frozenset(accepted)


def _expected(declared: Collection[str]) -> str:
    names = list(declared)
    if len(names) == 1:
        return names[0]
    return f"{', '.join(names[:-1])} or {names[-1]}"


def _assemble(
    declared: tuple[str, ...] | None,
    by_type: dict[str, _Node],
    generic: tuple[_Node, ...],
) -> _Node:
    if declared is None and not by_type:
        if not generic:
            return _accept
        if len(generic) == 1:
            return generic[0]
    accepted = _accepted_types(declared)
    int_from_float = accepted is not None and "integer" in accepted and "number" not in accepted
    finite = declared is not None and "number" in declared
    expected = _expected(declared) if declared is not None else ""
    isfinite = math.isfinite

    def node(value: Any) -> Any:
        jt = _TYPE_OF.get(type(value)) or _slow_json_type(value)
        if accepted is not None and jt not in accepted:
            if int_from_float and jt == "number" and value.is_integer():
                value = int(value)  # JSON Schema: 5.0 is an integer
                jt = "integer"
            else:
                raise _fail(f"expected {expected}, got {_describe(value, jt)}")
        elif finite and jt == "number" and not isfinite(value):
            raise _fail(f"expected a finite number, got {_short(value)}")
        stage = by_type.get(jt) if jt is not None else None
        if not generic:
            return value if stage is None else stage(value)
        failed: _Fail | None = None
        if stage is not None:
            try:
                value = stage(value)
            except _Fail as exc:
                failed = exc
        for check in generic:
            try:
                value = check(value)
            except _Fail as exc:
                if failed is None:
                    failed = exc
                else:
                    failed.errors.extend(exc.errors)
        if failed is not None:
            raise failed
        return value

    if generic or declared is None or len(declared) != 1:
        return node
    # Fast paths for the exact Python type of a single declared type; anything else
    # (subclasses, integral floats, errors) goes through the general node.
    only = declared[0]
    stage = by_type.get(only)
    if only == "number":

        def number_node(value: Any) -> Any:
            kind = type(value)
            if kind is int or (kind is float and isfinite(value)):
                return value if stage is None else stage(value)
            return node(value)

        return number_node
    fast = _FAST_TYPE[only]
    if stage is None:

        def type_node(value: Any) -> Any:
            if type(value) is fast:
                return value
            return node(value)

        return type_node
    staged = stage

    def staged_node(value: Any) -> Any:
        if type(value) is fast:
            return staged(value)
        return node(value)

    return staged_node


# --- keyword readers (compile time) ----------------------------------------


def _number_keyword(schema: Mapping[str, Any], key: str, where: str) -> float | None:
    if key not in schema:
        return None
    value = schema[key]
    if not _is_finite_number(value):
        raise bad(where, f"{key!r} must be a number (draft 2020 form), not {value!r}")
    return typing.cast(float, value)


def _count_keyword(schema: Mapping[str, Any], key: str, where: str) -> int | None:
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if _is_bool(value) or not isinstance(value, int) or value < 0:
        raise bad(where, f"{key!r} must be a non-negative integer, not {value!r}")
    return value


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --- per-type stages ---------------------------------------------------------


def _number_stage(schema: Mapping[str, Any], where: str) -> _Node | None:
    minimum = _number_keyword(schema, "minimum", where)
    maximum = _number_keyword(schema, "maximum", where)
    ex_min = _number_keyword(schema, "exclusiveMinimum", where)
    ex_max = _number_keyword(schema, "exclusiveMaximum", where)
    if minimum is None and maximum is None and ex_min is None and ex_max is None:
        return None

    def check(value: Any) -> Any:
        errors: list[_Error] | None = None
        if minimum is not None and value < minimum:
            errors = [([], f"{_short(value)} is less than the minimum of {minimum!r}")]
        if maximum is not None and value > maximum:
            errors = errors or []
            errors.append(([], f"{_short(value)} is greater than the maximum of {maximum!r}"))
        if ex_min is not None and value <= ex_min:
            errors = errors or []
            errors.append(([], f"{_short(value)} must be greater than {ex_min!r}"))
        if ex_max is not None and value >= ex_max:
            errors = errors or []
            errors.append(([], f"{_short(value)} must be less than {ex_max!r}"))
        if errors:
            raise _Fail(errors)
        return value

    return check


def _string_stage(schema: Mapping[str, Any], where: str) -> _Node | None:
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
        errors: list[_Error] | None = None
        if min_length is not None or max_length is not None:
            length = len(value)  # code points, as JSON Schema counts
            if min_length is not None and length < min_length:
                errors = [([], too_short)]
            if max_length is not None and length > max_length:
                errors = [([], too_long)]
        if search is not None and search(value) is None:
            errors = errors or []
            errors.append(([], f"{_short(value)} does not match the pattern {pattern_text!r}"))
        if errors:
            raise _Fail(errors)
        return value

    return check


def _too_many(errors: list[_Error]) -> bool:
    if len(errors) < _MAX_ERRORS:
        return False
    errors.append(([], f"has too many errors; only the first {_MAX_ERRORS} are reported"))
    return True


def _array_stage(schema: Mapping[str, Any], where: str, doc: Document) -> _Node | None:
    items_schema = schema.get("items")
    if isinstance(items_schema, list):
        raise bad(where, "'items' as a list (tuple validation) is not supported")
    items = None if items_schema is None else doc.child(items_schema, f"{where}/items")
    if items is _accept:
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
        errors: list[_Error] | None = None
        count = len(value)
        if min_items is not None and count < min_items:
            errors = [([], too_few)]
        if max_items is not None and count > max_items:
            errors = [([], too_many)]
        if unique and count > 1 and not _all_unique(value):
            errors = errors or []
            errors.append(([], "has duplicate items"))
        out = value
        if items is not None:
            for index, item in enumerate(value):
                try:
                    new = items(item)
                except _Fail as exc:
                    for parts, _ in exc.errors:
                        parts.append(index)
                    errors = errors or []
                    errors.extend(exc.errors)
                    if _too_many(errors):
                        break
                    continue
                if new is not item:
                    if out is value:
                        out = list(value)
                    out[index] = new
        if errors:
            raise _Fail(errors)
        return out

    return check


def _object_stage(
    schema: Mapping[str, Any], where: str, declared: bool, doc: Document
) -> _Node | None:
    raw_properties = schema.get("properties", {})
    if not isinstance(raw_properties, Mapping):
        raise bad(where, f"'properties' must be an object, not {raw_properties!r}")
    properties: dict[str, _Node] = {}
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
    additional: _Node | None = None
    if not isinstance(raw_additional, bool):
        additional = doc.child(raw_additional, f"{where}/additionalProperties")
        if additional is _accept:
            additional = None
    if not (declared or properties or required or forbid or additional is not None):
        return None
    get = properties.get
    fill = tuple(defaults)
    deepcopy = copy.deepcopy
    unexpected = "is not allowed (unexpected property)"

    def check(value: dict[Any, Any]) -> Any:
        errors: list[_Error] | None = None
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
            except _Fail as exc:
                for parts, _ in exc.errors:
                    parts.append(key)
                errors = errors or []
                errors.extend(exc.errors)
                if _too_many(errors):
                    break
                continue
            if new is not item:
                if out is value:
                    out = dict(value)
                out[key] = new
        if errors:
            raise _Fail(errors)
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
    others = frozenset(_canonical(v) for v in values if not isinstance(v, str))
    return strings, others


def _enum_stage(values: Any, where: str) -> _Node:
    if not isinstance(values, list) or not values:
        raise bad(where, f"'enum' must be a non-empty list, not {values!r}")
    strings, others = _constant_set(values)
    allowed = ", ".join(_short(v) for v in values)

    def check(value: Any) -> Any:
        if isinstance(value, str):
            if value in strings:
                return value
        elif others and _canonical(value) in others:
            return value
        raise _fail(f"{_short(value)} is not one of {allowed}")

    return check


def _const_stage(constant: Any) -> _Node:
    strings, others = _constant_set([constant])
    message = f"must be equal to {_short(constant)}"

    def check(value: Any) -> Any:
        if isinstance(value, str):
            if value in strings:
                return value
        elif others and _canonical(value) in others:
            return value
        raise _fail(message)

    return check


# --- combinators ---------------------------------------------------------------

_Branch = tuple[_Node, "frozenset[str] | None"]


class _Branches(typing.NamedTuple):
    branches: tuple[_Branch, ...]
    types: tuple[str, ...] | None  # every branch's declared types, if all declare one


def _branches(raw: Any, where: str, doc: Document) -> _Branches:
    if not isinstance(raw, list) or not raw:
        raise bad(where, f"must be a non-empty list of schemas, not {raw!r}")
    branches: list[_Branch] = []
    names: dict[str, None] = {}
    all_typed = True
    for index, sub in enumerate(raw):
        node = _compile(sub, f"{where}/{index}", doc)
        if sub is False:
            branches.append((node, frozenset()))
            continue
        declared = _declared_types(sub, where) if isinstance(sub, Mapping) else None
        if declared is None:
            all_typed = False
        else:
            names.update(dict.fromkeys(declared))
        admits = _accepted_types(declared)
        if admits is not None and "integer" in admits:
            admits = admits | {"number"}  # an integral float may still be an integer
        branches.append((node, admits))
    return _Branches(tuple(branches), tuple(names) if all_typed else None)


def _no_match(spec: _Branches, tried: int, last: _Fail | None) -> _Fail:
    if tried == 1 and last is not None:
        return last  # only one branch takes this kind of value: its errors say most
    if tried == 0 and spec.types is not None:
        return _fail(f"does not match any of the allowed types ({', '.join(spec.types)})")
    return _fail("does not match any of the allowed schemas")


def _any_of(spec: _Branches) -> _Node:
    branches = spec.branches

    def check(value: Any) -> Any:
        jt = _json_type(value)
        tried = 0
        last: _Fail | None = None
        for branch, admits in branches:
            if admits is not None and jt not in admits:
                continue
            tried += 1
            try:
                return branch(value)
            except _Fail as exc:
                last = exc
        raise _no_match(spec, tried, last)

    return check


def _one_of(spec: _Branches) -> _Node:
    branches = spec.branches

    def check(value: Any) -> Any:
        jt = _json_type(value)
        tried = matched = 0
        last: _Fail | None = None
        result: Any = None
        for branch, admits in branches:
            if admits is not None and jt not in admits:
                continue
            tried += 1
            try:
                new = branch(value)
            except _Fail as exc:
                last = exc
                continue
            matched += 1
            if matched == 1:
                result = new
        if matched == 1:
            return result
        if matched > 1:
            raise _fail("matches more than one of the allowed schemas")
        raise _no_match(spec, tried, last)

    return check


def _all_of(spec: _Branches) -> _Node:
    nodes = tuple(node for node, _ in spec.branches)

    def check(value: Any) -> Any:
        failed: _Fail | None = None
        for node in nodes:
            try:
                value = node(value)
            except _Fail as exc:
                if failed is None:
                    failed = exc
                else:
                    failed.errors.extend(exc.errors)
        if failed is not None:
            raise failed
        return value

    return check


def _not(node: _Node) -> _Node:
    def check(value: Any) -> Any:
        try:
            node(value)
        except _Fail:
            return value
        raise _fail("matches the schema it must not match ('not')")

    return check


def _conditional(schema: Mapping[str, Any], where: str, doc: Document) -> _Node | None:
    """``if``/``then``/``else``: the value is checked by ``then`` when it matches
    ``if``, else by ``else``; without either branch ``if`` decides nothing."""
    condition = _compile(schema["if"], f"{where}/if", doc)
    then = _compile(schema["then"], f"{where}/then", doc) if "then" in schema else None
    otherwise = _compile(schema["else"], f"{where}/else", doc) if "else" in schema else None
    if then is None and otherwise is None:
        return None

    def check(value: Any) -> Any:
        try:
            condition(value)
        except _Fail:
            return value if otherwise is None else otherwise(value)
        return value if then is None else then(value)

    return check


def _dependencies(schema: Mapping[str, Any], where: str, doc: Document) -> _Node:
    """``dependentRequired`` and ``dependentSchemas``: what an object must also have,
    or also match, when it has a given property."""
    raw_required = schema.get("dependentRequired", {})
    if not isinstance(raw_required, Mapping) or not all(
        isinstance(names, list) and all(isinstance(name, str) for name in names)
        for names in raw_required.values()
    ):
        raise bad(
            where, f"'dependentRequired' must map names to lists of names, not {raw_required!r}"
        )
    needs = tuple((key, tuple(names)) for key, names in raw_required.items() if names)
    raw_schemas = schema.get("dependentSchemas", {})
    if not isinstance(raw_schemas, Mapping):
        raise bad(where, f"'dependentSchemas' must be an object, not {raw_schemas!r}")
    checks = tuple(
        (key, _compile(sub, f"{where}/dependentSchemas/{key}", doc))
        for key, sub in raw_schemas.items()
    )

    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        errors: list[_Error] = []
        for present, names in needs:
            if present in value:
                message = f"is required when {present!r} is present"
                errors.extend(([name], message) for name in names if name not in value)
        for present, node in checks:
            if present in value:
                try:
                    value = node(value)
                except _Fail as exc:
                    errors.extend(exc.errors)
        if errors:
            raise _Fail(errors)
        return value

    return check
