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

import difflib
import math
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .jsonvalues import TYPE_OF, NoneType, describe, json_type, short, slow_json_type
from .schemanodes import Fail, Node, PathError, accept, fail, reject
from .schemarefs import Document, bad
from .schemastages import (
    array_stage,
    const_stage,
    enum_stage,
    number_stage,
    object_stage,
    string_stage,
)

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

# Each compiled node (mcplite.core.schemanodes) runs the stage of the value's JSON
# type (mcplite.core.schemastages), then the keywords that apply to any value.

_TYPE_NAMES = ("string", "integer", "number", "boolean", "null", "array", "object")
_FAST_TYPE: dict[str, type] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "null": NoneType,
    "array": list,
    "object": dict,
}


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
        except Fail as exc:
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


def _compile(schema: Any, where: str, doc: Document) -> Node:
    if schema is True:
        return accept
    if schema is False:
        return reject
    if not isinstance(schema, Mapping):
        raise bad(where, f"a schema must be an object or a boolean, not {describe(schema)}")
    for keyword in ("$dynamicRef", "$recursiveRef"):
        if keyword in schema:
            # Ignoring a reference would silently accept anything; say so up front.
            raise bad(where, f"{keyword} is not supported; use $ref")
    declared = _declared_types(schema, where)
    by_type: dict[str, Node] = {}
    number = number_stage(schema, where)
    if number is not None:
        by_type["integer"] = by_type["number"] = number
    string = string_stage(schema, where)
    if string is not None:
        by_type["string"] = string
    array = array_stage(schema, where, doc)
    if array is not None:
        by_type["array"] = array
    obj = object_stage(schema, where, declared is not None and "object" in declared, doc)
    if obj is not None:
        by_type["object"] = obj
    generic: list[Node] = []
    if "$ref" in schema:
        generic.append(doc.reference(schema, where))
    if "enum" in schema:
        generic.append(enum_stage(schema["enum"], where))
    if "const" in schema:
        generic.append(const_stage(schema["const"]))
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
    by_type: dict[str, Node],
    generic: tuple[Node, ...],
) -> Node:
    if declared is None and not by_type:
        if not generic:
            return accept
        if len(generic) == 1:
            return generic[0]
    accepted = _accepted_types(declared)
    int_from_float = accepted is not None and "integer" in accepted and "number" not in accepted
    finite = declared is not None and "number" in declared
    expected = _expected(declared) if declared is not None else ""
    isfinite = math.isfinite

    def node(value: Any) -> Any:
        jt = TYPE_OF.get(type(value)) or slow_json_type(value)
        if accepted is not None and jt not in accepted:
            if int_from_float and jt == "number" and value.is_integer():
                value = int(value)  # JSON Schema: 5.0 is an integer
                jt = "integer"
            else:
                raise fail(f"expected {expected}, got {describe(value, jt)}")
        elif finite and jt == "number" and not isfinite(value):
            raise fail(f"expected a finite number, got {short(value)}")
        stage = by_type.get(jt) if jt is not None else None
        if not generic:
            return value if stage is None else stage(value)
        failed: Fail | None = None
        if stage is not None:
            try:
                value = stage(value)
            except Fail as exc:
                failed = exc
        return _through_all(generic, value, failed)

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


# --- combinators ---------------------------------------------------------------

_Branch = tuple[Node, "frozenset[str] | None"]


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


def _no_match(spec: _Branches, tried: int, last: Fail | None) -> Fail:
    if tried == 1 and last is not None:
        return last  # only one branch takes this kind of value: its errors say most
    if tried == 0 and spec.types is not None:
        return fail(f"does not match any of the allowed types ({', '.join(spec.types)})")
    return fail("does not match any of the allowed schemas")


def _any_of(spec: _Branches) -> Node:
    branches = spec.branches

    def check(value: Any) -> Any:
        jt = json_type(value)
        tried = 0
        last: Fail | None = None
        for branch, admits in branches:
            if admits is not None and jt not in admits:
                continue
            tried += 1
            try:
                return branch(value)
            except Fail as exc:
                last = exc
        raise _no_match(spec, tried, last)

    return check


def _one_of(spec: _Branches) -> Node:
    branches = spec.branches

    def check(value: Any) -> Any:
        jt = json_type(value)
        tried = matched = 0
        last: Fail | None = None
        result: Any = None
        for branch, admits in branches:
            if admits is not None and jt not in admits:
                continue
            tried += 1
            try:
                new = branch(value)
            except Fail as exc:
                last = exc
                continue
            matched += 1
            if matched == 1:
                result = new
        if matched == 1:
            return result
        if matched > 1:
            raise fail("matches more than one of the allowed schemas")
        raise _no_match(spec, tried, last)

    return check


def _all_of(spec: _Branches) -> Node:
    nodes = tuple(node for node, _ in spec.branches)

    def check(value: Any) -> Any:
        return _through_all(nodes, value)

    return check


def _through_all(nodes: Iterable[Node], value: Any, failed: Fail | None = None) -> Any:
    """``value`` passed through each of ``nodes`` in turn.  Raises Fail with the
    errors of ``failed`` and of every node that failed, when there are any."""
    for node in nodes:
        try:
            value = node(value)
        except Fail as exc:
            if failed is None:
                failed = exc
            else:
                failed.errors.extend(exc.errors)
    if failed is not None:
        raise failed
    return value


def _not(node: Node) -> Node:
    def check(value: Any) -> Any:
        try:
            node(value)
        except Fail:
            return value
        raise fail("matches the schema it must not match ('not')")

    return check


def _conditional(schema: Mapping[str, Any], where: str, doc: Document) -> Node | None:
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
        except Fail:
            return value if otherwise is None else otherwise(value)
        return value if then is None else then(value)

    return check


def _dependencies(schema: Mapping[str, Any], where: str, doc: Document) -> Node:
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
        errors: list[PathError] = []
        for present, names in needs:
            if present in value:
                message = f"is required when {present!r} is present"
                errors.extend(([name], message) for name in names if name not in value)
        for present, node in checks:
            if present in value:
                try:
                    value = node(value)
                except Fail as exc:
                    errors.extend(exc.errors)
        if errors:
            raise Fail(errors)
        return value

    return check
