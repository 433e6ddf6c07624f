"""Type hints -> JSON Schema, and JSON Schema -> a compiled argument checker.

Two halves, both stdlib only:

* :func:`schema_for_function` / :func:`schema_for_type` turn a tool's signature into
  the ``inputSchema`` that ``tools/list`` advertises. Unsupported hints raise
  ``TypeError`` when the tool is registered, never when it is called.
* :func:`compile_schema` turns a schema (generated or hand-written) into a
  :data:`Checker`: nested closures built once, so a call never walks the schema
  dict. The checker returns the value with defaults filled in and integral floats
  normalised to ints, or raises :class:`SchemaError` naming every offending field.

The checker follows JSON Schema (draft 2020-12) for the keywords it knows, with no
coercion: ``"10"`` is not an integer and ``true`` is not a number.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import enum
import functools
import inspect
import json
import math
import re
import reprlib
import types
import typing
from collections import abc
from collections.abc import Callable, Collection, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Annotated, Any, Literal, NotRequired, Required, Union

__all__ = [
    "Checker",
    "Field",
    "FieldError",
    "SchemaError",
    "compile_schema",
    "schema_for_function",
    "schema_for_type",
]

Checker = Callable[[Any], Any]
"""Validates one value; returns it (with defaults filled in) or raises SchemaError."""


# ---------------------------------------------------------------------------
# Public data types
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    """Constraints and a description for ``Annotated[T, Field(...)]``.

    ``ge``/``le``/``gt``/``lt`` apply to numbers, ``min_length``/``max_length``/
    ``pattern`` to strings, ``min_items``/``max_items`` to lists. A plain ``str`` in
    the ``Annotated`` metadata is a description as well.

    Raises ``ValueError`` for a negative length, a lower bound above its upper
    bound, or a pattern that is not a valid regular expression.
    """

    description: str | None = None
    _: KW_ONLY
    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    lt: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    min_items: int | None = None
    max_items: int | None = None

    def __post_init__(self) -> None:
        for name in ("min_length", "max_length", "min_items", "max_items"):
            value = getattr(self, name)
            if value is not None and (_is_bool(value) or not isinstance(value, int) or value < 0):
                raise ValueError(f"Field({name}=...) must be a non-negative integer, not {value!r}")
        for name in ("ge", "le", "gt", "lt"):
            value = getattr(self, name)
            if value is not None and not _is_finite_number(value):
                raise ValueError(f"Field({name}=...) must be a finite number, not {value!r}")
        for low, high in (("ge", "le"), ("min_length", "max_length"), ("min_items", "max_items")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"Field({low}={lo!r}) is greater than Field({high}={hi!r})")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(
                    f"Field(pattern={self.pattern!r}) is not a valid regex: {exc}"
                ) from None

    def keywords(self) -> dict[str, Any]:
        """The JSON Schema keywords for the constraints that are set."""
        pairs = (
            ("minimum", self.ge),
            ("maximum", self.le),
            ("exclusiveMinimum", self.gt),
            ("exclusiveMaximum", self.lt),
            ("minLength", self.min_length),
            ("maxLength", self.max_length),
            ("pattern", self.pattern),
            ("minItems", self.min_items),
            ("maxItems", self.max_items),
        )
        return {key: value for key, value in pairs if value is not None}


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
# Type hints -> JSON Schema
# ---------------------------------------------------------------------------

_NoneType = type(None)
_SCALARS: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    None: "null",
    _NoneType: "null",
}
_ARRAY_ORIGINS: frozenset[Any] = frozenset({list, abc.Sequence, abc.MutableSequence})
_SET_ORIGINS: frozenset[Any] = frozenset({set, frozenset, abc.Set, abc.MutableSet})
_DICT_ORIGINS: frozenset[Any] = frozenset({dict, abc.Mapping, abc.MutableMapping})

_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern")
_ARRAY_KEYWORDS = ("minItems", "maxItems")
_KEYWORD_TYPES: tuple[tuple[tuple[str, ...], frozenset[str]], ...] = (
    (_NUMBER_KEYWORDS, frozenset({"integer", "number"})),
    (_STRING_KEYWORDS, frozenset({"string"})),
    (_ARRAY_KEYWORDS, frozenset({"array"})),
)


class _HintError(TypeError):
    """An unsupported hint somewhere inside the hint being converted."""


def schema_for_type(tp: Any) -> dict[str, Any]:
    """Return the JSON Schema for one type hint.

    Raises ``TypeError`` for a hint that has no JSON Schema equivalent (``bytes``, a
    fixed-length tuple, a dict with non-``str`` keys, a recursive dataclass, ...)
    or a ``Field`` constraint that does not fit the hinted type.
    """
    return _hint_schema(tp, ())


def schema_for_function(fn: Callable[..., Any], *, skip: Collection[str] = ()) -> dict[str, Any]:
    """Return the object schema of ``fn``'s parameters, for a tool's ``inputSchema``.

    Parameters named in ``skip`` are left out (the registry injects a context there).
    A parameter without annotation accepts any value; a parameter with a default is
    optional and its JSON-serializable default (an Enum's value) is recorded.

    Raises ``TypeError`` for ``*args``/``**kwargs``, a positional-only parameter,
    type hints that cannot be resolved, or an unsupported hint (the message names
    the parameter and the hint).
    """
    name = f"{getattr(fn, '__qualname__', None) or repr(fn)}()"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read the signature of {name}: {exc}") from exc
    hints = _resolve_hints(fn, name)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        if param.name in skip:
            continue
        if param.kind is param.VAR_POSITIONAL:
            raise TypeError(
                f"{name}: *{param.name} is not supported; tool parameters must be named"
            )
        if param.kind is param.VAR_KEYWORD:
            raise TypeError(
                f"{name}: **{param.name} is not supported; tool parameters must be named"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(
                f"{name}: positional-only parameter {param.name!r} cannot be passed by name"
            )
        if param.name in hints:
            hint = hints[param.name]
            try:
                schema = _hint_schema(hint, ())
            except TypeError as exc:
                raise TypeError(
                    f"parameter {param.name!r} of {name} has type hint {_hint_name(hint)}: {exc}"
                ) from None
        else:
            schema = {}
        if param.default is param.empty:
            required.append(param.name)
        else:
            serializable, default = _json_default(param.default)
            if serializable:
                schema = {**schema, "default": default}
        properties[param.name] = schema
    return _object_schema(properties, required)


def _resolve_hints(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    target: Any = fn
    if inspect.isclass(fn):
        target = fn.__init__
    elif not (inspect.isroutine(fn) or isinstance(fn, functools.partial)):
        # A callable instance: its class's __annotations__ are attributes, not parameters.
        target = type(fn).__call__
    try:
        return typing.get_type_hints(target, include_extras=True)
    except NameError as exc:
        raise TypeError(f"cannot resolve the type hints of {name}: {exc}") from exc
    except TypeError:
        pass
    # functools.partial and callable instances: get_type_hints refuses them, but the
    # signature (with string annotations evaluated) carries the same hints.
    try:
        signature = inspect.signature(fn, eval_str=True)
    except NameError as exc:
        raise TypeError(f"cannot resolve the type hints of {name}: {exc}") from exc
    return {
        p.name: p.annotation for p in signature.parameters.values() if p.annotation is not p.empty
    }


def _object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def _hint_name(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


def _hint_schema(tp: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    if tp is Any or tp is object:
        return {}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema(tp)
    scalar = _SCALARS.get(tp) if _hashable(tp) else None
    if scalar is not None:
        return {"type": scalar}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        return _annotated_schema(args[0], tp.__metadata__, seen)
    if origin is Required or origin is NotRequired:
        return _hint_schema(args[0], seen)
    if origin is Union or origin is types.UnionType:
        return _union_schema(args, seen)
    if origin is Literal:
        return _literal_schema(tp, args)
    kind = origin if origin is not None else tp
    if _hashable(kind):
        if kind in _ARRAY_ORIGINS:
            return _array_schema(args[0] if args else None, seen)
        if kind is tuple:
            if not args or (len(args) == 2 and args[1] is Ellipsis):
                return _array_schema(args[0] if args else None, seen)
            raise _HintError(
                f"fixed-length tuple {_hint_name(tp)} is not supported; "
                "use list[T] or tuple[T, ...]"
            )
        if kind in _SET_ORIGINS:
            return {**_array_schema(args[0] if args else None, seen), "uniqueItems": True}
        if kind in _DICT_ORIGINS:
            return _dict_schema(tp, args, seen)
    if isinstance(tp, type):
        if typing.is_typeddict(tp):
            return _typeddict_schema(tp, seen)
        if dataclasses.is_dataclass(tp):
            return _dataclass_schema(tp, seen)
    supertype = getattr(tp, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        return _hint_schema(supertype, seen)
    raise _HintError(f"unsupported type hint {_hint_name(tp)}")


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _array_schema(item: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    if item is None or item is Any:
        return {"type": "array"}
    return {"type": "array", "items": _hint_schema(item, seen)}


def _dict_schema(tp: Any, args: tuple[Any, ...], seen: tuple[type, ...]) -> dict[str, Any]:
    if not args:
        return {"type": "object"}
    key, value = args
    if key is not str:
        raise _HintError(f"{_hint_name(tp)}: JSON object keys are strings, use dict[str, ...]")
    if value is Any:
        return {"type": "object"}
    return {"type": "object", "additionalProperties": _hint_schema(value, seen)}


def _union_schema(args: tuple[Any, ...], seen: tuple[type, ...]) -> dict[str, Any]:
    branches = [_hint_schema(arg, seen) for arg in args if arg is not _NoneType]
    if {} in branches:
        return {}  # Any absorbs the other branches, null included
    if len(branches) < len(args):
        branches.append({"type": "null"})
    return {"anyOf": branches}


def _json_type_of_constant(value: Any, where: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float) and math.isfinite(value):
        return "number"
    if isinstance(value, str):
        return "string"
    raise _HintError(f"{where}: {value!r} is not a JSON string, number, boolean or null")


def _constant_schema(values: list[Any], where: str) -> dict[str, Any]:
    kinds = {_json_type_of_constant(value, where) for value in values}
    if kinds == {"integer", "number"}:
        kinds = {"number"}
    if len(kinds) == 1:
        return {"type": kinds.pop(), "enum": values}
    return {"enum": values}


def _literal_schema(tp: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    values = [arg.value if isinstance(arg, enum.Enum) else arg for arg in args]
    return _constant_schema(values, _hint_name(tp))


def _enum_schema(tp: type[enum.Enum]) -> dict[str, Any]:
    values = [member.value for member in tp]
    if not values:
        raise _HintError(f"enum {tp.__qualname__} has no members")
    # StrEnum/IntEnum values are subclasses of str/int: keep the plain JSON value.
    plain = [_plain(value) for value in values]
    return _constant_schema(plain, f"enum {tp.__qualname__}")


def _plain(value: Any) -> Any:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    return value


def _typeddict_schema(tp: type, seen: tuple[type, ...]) -> dict[str, Any]:
    if tp in seen:
        raise _HintError(f"recursive type {tp.__qualname__} is not supported")
    hints = _class_hints(tp)
    required_keys = set(getattr(tp, "__required_keys__", hints))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, hint in hints.items():
        # With string annotations 3.11 cannot see NotRequired[...] when it builds
        # __required_keys__; the resolved hint still carries it.
        origin = typing.get_origin(hint)
        if origin is NotRequired:
            required_keys.discard(key)
        elif origin is Required:
            required_keys.add(key)
        properties[key] = _member_schema(tp, key, hint, seen)
        if key in required_keys:
            required.append(key)
    return _object_schema(properties, required)


def _dataclass_schema(tp: type, seen: tuple[type, ...]) -> dict[str, Any]:
    if tp in seen:
        raise _HintError(f"recursive type {tp.__qualname__} is not supported")
    hints = _class_hints(tp)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in dataclasses.fields(tp):
        if not field.init:
            continue
        schema = _member_schema(tp, field.name, hints.get(field.name, Any), seen)
        if field.default is not dataclasses.MISSING:
            serializable, default = _json_default(field.default)
            if serializable:
                schema = {**schema, "default": default}
        elif field.default_factory is dataclasses.MISSING:
            required.append(field.name)
        properties[field.name] = schema
    return _object_schema(properties, required)


def _class_hints(tp: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp, include_extras=True)
    except NameError as exc:
        raise _HintError(f"cannot resolve the type hints of {tp.__qualname__}: {exc}") from None


def _member_schema(owner: type, key: str, hint: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    try:
        return _hint_schema(hint, (*seen, owner))
    except TypeError as exc:
        raise _HintError(f"field {key!r} of {owner.__qualname__}: {exc}") from None


def _annotated_schema(
    base: Any, metadata: tuple[Any, ...], seen: tuple[type, ...]
) -> dict[str, Any]:
    schema = _hint_schema(base, seen)
    description: str | None = None
    keywords: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, str):
            description = item
        elif isinstance(item, Field):
            if item.description is not None:
                description = item.description
            keywords.update(item.keywords())
        # Other libraries' metadata (annotated-types, pydantic) is not ours to read.
    if keywords:
        schema = _apply_keywords(schema, keywords, base)
    if description is not None:
        schema = {**schema, "description": description}
    return schema


def _apply_keywords(schema: dict[str, Any], keywords: dict[str, Any], base: Any) -> dict[str, Any]:
    schema = {**schema}
    branches = schema.get("anyOf")
    if branches is not None and "type" not in schema:
        schema["anyOf"] = branches = [dict(branch) for branch in branches]
    for names, kinds in _KEYWORD_TYPES:
        chosen = {name: keywords[name] for name in names if name in keywords}
        if not chosen:
            continue
        if "type" not in schema and branches is None:
            schema.update(chosen)  # Any, or an untyped enum: the keywords apply by type
            continue
        targets = [schema] if "type" in schema else branches or []
        fitting = [target for target in targets if target.get("type") in kinds]
        if not fitting:
            wanted = " or ".join(sorted(kinds))
            raise _HintError(
                f"Field constraints {', '.join(chosen)} apply to {wanted} values, "
                f"not to {_hint_name(base)}"
            )
        for target in fitting:
            target.update(chosen)
    return schema


def _json_default(value: Any) -> tuple[bool, Any]:
    """(True, JSON form of value) if it is JSON-serializable, else (False, None)."""

    def enum_value(obj: Any) -> Any:
        if isinstance(obj, enum.Enum):
            return obj.value
        raise TypeError(f"{type(obj).__name__} is not JSON serializable")

    if isinstance(value, enum.Enum):
        value = value.value
    try:
        return True, json.loads(json.dumps(value, allow_nan=False, default=enum_value))
    except (TypeError, ValueError, RecursionError):
        return False, None


# ---------------------------------------------------------------------------
# JSON Schema -> compiled checker
# ---------------------------------------------------------------------------

# Each compiled node takes a value and returns it (possibly a normalised copy), or
# raises _Fail. An error's path parts are collected innermost first while _Fail
# propagates, so a successful call never builds a path.
_Node = Callable[[Any], Any]
_Error = tuple[list[str | int], str]

_MAX_ERRORS = 100
_SHORT = 40
_TYPE_NAMES = ("string", "integer", "number", "boolean", "null", "array", "object")
_TYPE_OF: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    _NoneType: "null",
    list: "array",
    tuple: "array",
    dict: "object",
}
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
    ``type``, a bad regex, a keyword with a value of the wrong kind, ``$ref``.
    Unknown keywords are ignored.
    """
    node = _compile(schema, "#")

    def check(value: Any) -> Any:
        try:
            return node(value)
        except _Fail as exc:
            raise SchemaError(
                [FieldError(_format_path(parts), message) for parts, message in exc.errors]
            ) from None

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


def _compile(schema: Any, where: str) -> _Node:
    if schema is True:
        return _accept
    if schema is False:
        return _reject
    if not isinstance(schema, Mapping):
        raise _bad(where, f"a schema must be an object or a boolean, not {_describe(schema)}")
    if "$ref" in schema or "$dynamicRef" in schema:
        # Ignoring a reference would silently accept anything; say so up front.
        raise _bad(where, "$ref is not supported; inline the referenced schema")
    declared = _declared_types(schema, where)
    by_type: dict[str, _Node] = {}
    number = _number_stage(schema, where)
    if number is not None:
        by_type["integer"] = by_type["number"] = number
    string = _string_stage(schema, where)
    if string is not None:
        by_type["string"] = string
    array = _array_stage(schema, where)
    if array is not None:
        by_type["array"] = array
    obj = _object_stage(schema, where, declared is not None and "object" in declared)
    if obj is not None:
        by_type["object"] = obj
    generic: list[_Node] = []
    if "enum" in schema:
        generic.append(_enum_stage(schema["enum"], where))
    if "const" in schema:
        generic.append(_const_stage(schema["const"]))
    for keyword, build in (("allOf", _all_of), ("anyOf", _any_of), ("oneOf", _one_of)):
        if keyword in schema:
            generic.append(build(_branches(schema[keyword], f"{where}/{keyword}")))
    return _assemble(declared, by_type, tuple(generic))


def _bad(where: str, message: str) -> ValueError:
    return ValueError(f"invalid schema at {where}: {message}")


def _declared_types(schema: Mapping[str, Any], where: str) -> tuple[str, ...] | None:
    if "type" not in schema:
        return None
    raw = schema["type"]
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names:
        raise _bad(where, f"'type' must be a type name or a non-empty list of them, not {raw!r}")
    for name in names:
        if name not in _TYPE_NAMES:
            close = difflib.get_close_matches(str(name), _TYPE_NAMES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _bad(
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


def _slow_json_type(value: Any) -> str | None:
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


def _json_type(value: Any) -> str | None:
    return _TYPE_OF.get(type(value)) or _slow_json_type(value)


# --- keyword readers (compile time) ----------------------------------------


def _number_keyword(schema: Mapping[str, Any], key: str, where: str) -> float | None:
    if key not in schema:
        return None
    value = schema[key]
    if not _is_finite_number(value):
        raise _bad(where, f"{key!r} must be a number (draft 2020 form), not {value!r}")
    return typing.cast(float, value)


def _count_keyword(schema: Mapping[str, Any], key: str, where: str) -> int | None:
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if _is_bool(value) or not isinstance(value, int) or value < 0:
        raise _bad(where, f"{key!r} must be a non-negative integer, not {value!r}")
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
            raise _bad(where, f"'pattern' must be a string, not {pattern_text!r}")
        try:
            search = re.compile(pattern_text).search
        except re.error as exc:
            raise _bad(where, f"'pattern' {pattern_text!r} is not a valid regex: {exc}") from None
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


def _array_stage(schema: Mapping[str, Any], where: str) -> _Node | None:
    items_schema = schema.get("items")
    if isinstance(items_schema, list):
        raise _bad(where, "'items' as a list (tuple validation) is not supported")
    items = None if items_schema is None else _compile(items_schema, f"{where}/items")
    if items is _accept:
        items = None
    min_items = _count_keyword(schema, "minItems", where)
    max_items = _count_keyword(schema, "maxItems", where)
    unique = schema.get("uniqueItems", False)
    if not isinstance(unique, bool):
        raise _bad(where, f"'uniqueItems' must be true or false, not {unique!r}")
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


def _object_stage(schema: Mapping[str, Any], where: str, declared: bool) -> _Node | None:
    raw_properties = schema.get("properties", {})
    if not isinstance(raw_properties, Mapping):
        raise _bad(where, f"'properties' must be an object, not {raw_properties!r}")
    properties: dict[str, _Node] = {}
    defaults: list[tuple[str, Any, bool]] = []
    for key, sub in raw_properties.items():
        if not isinstance(key, str):
            raise _bad(where, f"property names must be strings, not {key!r}")
        properties[key] = _compile(sub, f"{where}/properties/{key}")
        if isinstance(sub, Mapping) and "default" in sub:
            default = copy.deepcopy(sub["default"])
            defaults.append((key, default, isinstance(default, (list, dict))))
    raw_required = schema.get("required", [])
    if not isinstance(raw_required, list) or not all(isinstance(k, str) for k in raw_required):
        raise _bad(where, f"'required' must be a list of property names, not {raw_required!r}")
    required = tuple(dict.fromkeys(raw_required))
    raw_additional = schema.get("additionalProperties", True)
    forbid = raw_additional is False
    additional: _Node | None = None
    if not isinstance(raw_additional, bool):
        additional = _compile(raw_additional, f"{where}/additionalProperties")
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
        raise _bad(where, f"'enum' must be a non-empty list, not {values!r}")
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


def _branches(raw: Any, where: str) -> _Branches:
    if not isinstance(raw, list) or not raw:
        raise _bad(where, f"must be a non-empty list of schemas, not {raw!r}")
    branches: list[_Branch] = []
    names: dict[str, None] = {}
    all_typed = True
    for index, sub in enumerate(raw):
        node = _compile(sub, f"{where}/{index}")
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


# --- value helpers (no recursion deeper than a fixed bound) -------------------

_CLOSE_ARRAY = object()
_CLOSE_OBJECT = object()


class _Key:
    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key


def _canonical(value: Any) -> str:
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


def _all_unique(values: list[Any]) -> bool:
    seen: set[Any] = set()
    for item in values:
        key = item if type(item) is str else (_canonical(item),)
        if key in seen:
            return False
        seen.add(key)
    return True


def _describe(value: Any, jt: str | None = None) -> str:
    """``string "10"``: the JSON type name and a short rendering of the value."""
    if jt is None:
        jt = _json_type(value)
    if jt is None:
        return f"Python {type(value).__qualname__} {reprlib.repr(value)}"
    if value is None:
        return "null"
    return f"{jt} {_short(value)}"


def _short(value: Any) -> str:
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
