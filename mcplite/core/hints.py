"""Type hints -> JSON Schema: the ``inputSchema`` a tool advertises.

:func:`schema_for_function` / :func:`schema_for_type` turn a tool's signature into
the ``inputSchema`` that ``tools/list`` advertises; ``Annotated[T, Field(...)]``
adds constraints and a description. Unsupported hints raise ``TypeError`` when
the tool is registered, never when it is called. Stdlib only.

What is made here is checked by :mod:`mcplite.core.schema`, whose JSON type names and
number rules (:mod:`mcplite.core.jsonvalues`) this module reuses rather than restates.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import inspect
import json
import math
import re
import types
import typing
from collections import abc
from collections.abc import Callable, Collection, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Annotated, Any, Literal, NotRequired, Required, Union

from .jsonvalues import TYPE_OF, NoneType, is_finite_number, json_type

__all__ = ["Field", "schema_for_function", "schema_for_type"]


@dataclass(frozen=True, slots=True)
class Field:
    """Constraints and a description for ``Annotated[T, Field(...)]``.

    ``ge``/``le``/``gt``/``lt`` apply to numbers, ``min_length``/``max_length``/
    ``pattern`` to strings, ``min_items``/``max_items`` to lists. A plain ``str`` in
    the ``Annotated`` metadata is a description as well.  ``json_schema_extra``
    is merged into the parameter's schema last, as written: keywords of your
    own such as MCP's ``{"x-mcp-header": "Region"}``, or ``examples``.

    Raises ``ValueError`` for a negative length, a lower bound above its upper
    bound, or a pattern that is not a valid regular expression; ``TypeError``
    for a ``json_schema_extra`` that is not a JSON object.
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
    #: Not hashed (a dict is not hashable); compared.
    json_schema_extra: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)

    def __post_init__(self) -> None:
        for name in ("min_length", "max_length", "min_items", "max_items"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValueError(f"Field({name}=...) must be a non-negative integer, not {value!r}")
        for name in ("ge", "le", "gt", "lt"):
            value = getattr(self, name)
            if value is not None and not is_finite_number(value):
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
        extra = self.json_schema_extra
        if extra is not None:
            if not isinstance(extra, Mapping) or not all(isinstance(k, str) for k in extra):
                raise TypeError(
                    f"Field(json_schema_extra=...) is a dict with str keys, not {extra!r}"
                )
            fits, as_json = _json_default(dict(extra))
            if not fits:
                raise TypeError(f"Field(json_schema_extra={extra!r}) is not JSON")
            object.__setattr__(self, "json_schema_extra", as_json)  # a copy: frozen from here

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


# ---------------------------------------------------------------------------
# Type hints -> JSON Schema
# ---------------------------------------------------------------------------

# str, int, float, bool and NoneType, named as the checker names them; a bare
# ``None`` in a hint means NoneType.
_SCALARS: dict[Any, str] = {
    **{tp: name for tp, name in TYPE_OF.items() if name not in ("array", "object")},
    None: "null",
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


@dataclass(frozen=True, slots=True)
class _Walk:
    """Where a conversion is: the classes it is inside (a recursive type is refused),
    and whether it describes a returned value rather than arguments."""

    inside: tuple[type, ...] = ()
    returned: bool = False

    def into(self, owner: type) -> _Walk:
        return _Walk((*self.inside, owner), self.returned)


_ARGUMENTS = _Walk()
_RETURNED = _Walk(returned=True)


def schema_for_type(tp: Any, *, returned: bool = False) -> dict[str, Any]:
    """Return the JSON Schema for one type hint.

    By default the schema describes arguments: objects made from a TypedDict or a
    dataclass admit no other keys, and a dataclass field that ``__init__`` does not
    take is left out.  ``returned=True`` describes a value a tool returns, as it
    is sent (``dataclasses.asdict``): every dataclass field, always present, and
    other keys tolerated, so that a client validating the result (an MCP
    ``outputSchema``) does not refuse what the type allows.

    Raises ``TypeError`` for a hint that has no JSON Schema equivalent (``bytes``, a
    fixed-length tuple, a dict with non-``str`` keys, a recursive dataclass, ...)
    or a ``Field`` constraint that does not fit the hinted type.
    """
    return _hint_schema(tp, _RETURNED if returned else _ARGUMENTS)


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
                schema = _hint_schema(hint, _ARGUMENTS)
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


def _object_schema(
    properties: dict[str, Any], required: list[str], *, closed: bool = True
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    return schema


def _hint_name(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


def _hint_schema(tp: Any, walk: _Walk) -> dict[str, Any]:
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
        return _annotated_schema(args[0], tp.__metadata__, walk)
    if origin is Required or origin is NotRequired:
        return _hint_schema(args[0], walk)
    if origin is Union or origin is types.UnionType:
        return _union_schema(args, walk)
    if origin is Literal:
        return _literal_schema(tp, args)
    kind = origin if origin is not None else tp
    if _hashable(kind):
        if kind in _ARRAY_ORIGINS:
            return _array_schema(args[0] if args else None, walk)
        if kind is tuple:
            if not args or (len(args) == 2 and args[1] is Ellipsis):
                return _array_schema(args[0] if args else None, walk)
            raise _HintError(
                f"fixed-length tuple {_hint_name(tp)} is not supported; "
                "use list[T] or tuple[T, ...]"
            )
        if kind in _SET_ORIGINS:
            return {**_array_schema(args[0] if args else None, walk), "uniqueItems": True}
        if kind in _DICT_ORIGINS:
            return _dict_schema(tp, args, walk)
    if isinstance(tp, type):
        if typing.is_typeddict(tp):
            return _typeddict_schema(tp, walk)
        if dataclasses.is_dataclass(tp):
            return _dataclass_schema(tp, walk)
    supertype = getattr(tp, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        return _hint_schema(supertype, walk)
    raise _HintError(f"unsupported type hint {_hint_name(tp)}")


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _array_schema(item: Any, walk: _Walk) -> dict[str, Any]:
    if item is None or item is Any:
        return {"type": "array"}
    return {"type": "array", "items": _hint_schema(item, walk)}


def _dict_schema(tp: Any, args: tuple[Any, ...], walk: _Walk) -> dict[str, Any]:
    if not args:
        return {"type": "object"}
    key, value = args
    if key is not str:
        raise _HintError(f"{_hint_name(tp)}: JSON object keys are strings, use dict[str, ...]")
    if value is Any:
        return {"type": "object"}
    return {"type": "object", "additionalProperties": _hint_schema(value, walk)}


def _union_schema(args: tuple[Any, ...], walk: _Walk) -> dict[str, Any]:
    branches = [_hint_schema(arg, walk) for arg in args if arg is not NoneType]
    if {} in branches:
        return {}  # Any absorbs the other branches, null included
    if len(branches) < len(args):
        branches.append({"type": "null"})
    return {"anyOf": branches}


def _json_type_of_constant(value: Any, where: str) -> str:
    kind = json_type(value)
    if kind in (None, "array", "object") or (kind == "number" and not math.isfinite(value)):
        raise _HintError(f"{where}: {value!r} is not a JSON string, number, boolean or null")
    return kind


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


def _typeddict_schema(tp: type, walk: _Walk) -> dict[str, Any]:
    if tp in walk.inside:
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
        properties[key] = _member_schema(tp, key, hint, walk)
        if key in required_keys:
            required.append(key)
    return _object_schema(properties, required, closed=not walk.returned)


def _dataclass_schema(tp: type, walk: _Walk) -> dict[str, Any]:
    if tp in walk.inside:
        raise _HintError(f"recursive type {tp.__qualname__} is not supported")
    hints = _class_hints(tp)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in dataclasses.fields(tp):
        if walk.returned:
            # dataclasses.asdict writes every field, whatever __init__ takes.
            properties[field.name] = _member_schema(
                tp, field.name, hints.get(field.name, Any), walk
            )
            required.append(field.name)
            continue
        if not field.init:
            continue
        schema = _member_schema(tp, field.name, hints.get(field.name, Any), walk)
        if field.default is not dataclasses.MISSING:
            serializable, default = _json_default(field.default)
            if serializable:
                schema = {**schema, "default": default}
        elif field.default_factory is dataclasses.MISSING:
            required.append(field.name)
        properties[field.name] = schema
    return _object_schema(properties, required, closed=not walk.returned)


def _class_hints(tp: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp, include_extras=True)
    except NameError as exc:
        raise _HintError(f"cannot resolve the type hints of {tp.__qualname__}: {exc}") from None


def _member_schema(owner: type, key: str, hint: Any, walk: _Walk) -> dict[str, Any]:
    try:
        return _hint_schema(hint, walk.into(owner))
    except TypeError as exc:
        raise _HintError(f"field {key!r} of {owner.__qualname__}: {exc}") from None


def _annotated_schema(base: Any, metadata: tuple[Any, ...], walk: _Walk) -> dict[str, Any]:
    schema = _hint_schema(base, walk)
    description: str | None = None
    keywords: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, str):
            description = item
        elif isinstance(item, Field):
            if item.description is not None:
                description = item.description
            keywords.update(item.keywords())
            if item.json_schema_extra:
                extra.update(item.json_schema_extra)
        # Other libraries' metadata (annotated-types, pydantic) is not ours to read.
    if keywords:
        schema = _apply_keywords(schema, keywords, base)
    if description is not None:
        schema = {**schema, "description": description}
    if extra:
        schema = {**schema, **copy.deepcopy(extra)}
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
