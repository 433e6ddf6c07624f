"""Declaring tools: the :class:`Tools` registry and its ``@tools.tool`` decorator.

::

    tools = Tools()

    @tools.tool(type="query")
    async def search_documents(query: str, limit: Annotated[int, Field(ge=1, le=100)] = 10):
        "Search through available documents."
        ...

A parameter annotated :class:`Context` is not an argument: the runner passes a
context through which a long tool reports progress (seen by ``redeem``).

A return annotation that describes a JSON object (a TypedDict, a dataclass,
``dict[str, int]``) also gives the tool an ``output_schema``, which MCP lists as
``outputSchema``: such a return is sent as ``structuredContent`` (see
:mod:`mcplite.protocols.mcp.render`), and MCP clients check it against that schema.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import time
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, TypedDict, TypeVar, Unpack, overload

from .content import BLOCK_TYPES
from .context import LOG_LEVELS, Caller, RequestContext
from .hints import schema_for_function, schema_for_type
from .listeners import Registry
from .metadata import (
    Icon,
    TaskSupport,
    ToolAnnotations,
    annotations_of,
    copy_icons,
    icons_of,
    task_support_of,
    title_of,
)
from .outcomes import OUTCOME_TYPES, Partial, Promised
from .schema import Checker, FieldError, SchemaError, compile_schema
from .wire import set_present

__all__ = [
    "ALWAYS",
    "NEVER",
    "Context",
    "Kind",
    "Progress",
    "Tool",
    "ToolOptions",
    "Tools",
    "context_param_of",
    "known_options",
]

log = logging.getLogger("mcplite")

ALWAYS = 0.0
"""``promise_after=ALWAYS``: every call of the tool answers with a promise at once."""
NEVER = math.inf
"""``promise_after=NEVER``: the caller always waits for the answer."""

F = TypeVar("F", bound=Callable[..., Any])


class Kind(Enum):
    ASYNC = "async"
    SYNC = "sync"
    STREAM = "stream"
    SYSTEM = "system"  # the core's own redeem and cancel: they return a whole Result


@dataclass(slots=True)
class Progress:
    """What a tool last said about its progress; shown by ``redeem`` while pending."""

    progress: float | None = None
    total: float | None = None
    message: str | None = None
    estimated_completion: float | None = None  # epoch seconds
    #: Told of every report once the call is a promise (the core stores it).
    sink: Callable[[Progress], None] | None = None

    @property
    def reported(self) -> bool:
        return self.progress is not None or self.estimated_completion is not None

    def snapshot(self) -> dict[str, Any]:
        return set_present({}, progress=self.progress, total=self.total, message=self.message)

    def record(self) -> dict[str, Any]:
        """The snapshot plus ``estimated_completion``: what a promise record keeps."""
        out = self.snapshot()
        if self.estimated_completion is not None:
            out["estimated_completion"] = self.estimated_completion
        return out


@dataclass(slots=True)
class Context:
    """Handed to a tool that asks for it with a ``ctx: Context`` parameter.

    ``caller`` is the authenticated caller of this call (None: anonymous).
    """

    tool: str
    progress: Progress = field(default_factory=Progress)
    caller: Caller | None = None
    request: RequestContext | None = None

    @property
    def progress_token(self) -> str | int | None:
        """The client's progress token for this call (MCP ``_meta.progressToken``),
        None when it sent none; :meth:`report_progress` sends it for you."""
        return None if self.request is None else self.request.progress_token

    @property
    def input_responses(self) -> Mapping[str, Any]:
        """Answers the client gave to this tool's input requests (MCP ``inputResponses``)."""
        return (self.request and self.request.input_responses) or {}

    @property
    def request_state(self) -> str | None:
        """The ``state`` of this tool's last :class:`~mcplite.core.outcomes.InputRequired`,
        verified by the server, on the call that answers it (MCP)."""
        return None if self.request is None else self.request.request_state

    @property
    def client_capabilities(self) -> Mapping[str, Any]:
        """What the client declared it can do (MCP; empty when unknown)."""
        return (self.request and self.request.client_capabilities) or {}

    def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Tell the client something (MCP ``notifications/message``), when it asked
        to hear ``level`` or lower; ``level`` is a syslog name (``"info"``, ...)."""
        request = self.request
        if request is None or request.notify is None or request.log_level is None:
            return
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LOG_LEVELS)}")
        if LOG_LEVELS.index(level) < LOG_LEVELS.index(request.log_level):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        request.notify("notifications/message", params)

    def report_progress(
        self,
        progress: float,
        total: float | None = None,
        message: str | None = None,
        *,
        eta_seconds: float | None = None,
    ) -> None:
        """Record progress (e.g. ``3, 10, "parsing"``); ``eta_seconds`` from now, if known."""
        p = self.progress
        p.progress, p.total, p.message = progress, total, message
        if eta_seconds is not None:
            p.estimated_completion = time.time() + eta_seconds
        if p.sink is not None:
            p.sink(p)
        request = self.request
        if (
            request is not None
            and request.notify is not None
            and request.progress_token is not None
        ):
            params: dict[str, Any] = {"progressToken": request.progress_token, "progress": progress}
            if total is not None:
                params["total"] = total
            if message is not None:
                params["message"] = message
            request.notify("notifications/progress", params)


@dataclass(slots=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    description: str
    input_schema: dict[str, Any]
    checker: Checker
    kind: Kind
    type: str | None = None
    context_param: str | None = None
    promise_after: float | None = None  # None: the server's default
    #: MCP client capabilities the tool needs (e.g. ``{"sampling": {}}``): a client
    #: that did not declare them gets -32021 before the tool runs.
    requires: dict[str, Any] | None = None
    converters: dict[str, Converter] = field(default_factory=dict)
    #: The JSON Schema of the ``structuredContent`` of every answer (MCP's
    #: ``outputSchema``), given or made from the return annotation; None: no promise.
    output_schema: dict[str, Any] | None = None
    #: The schema of an answer that is data but not an object (a list, a number),
    #: from the return annotation: see :meth:`output_schema_for`.
    value_schema: dict[str, Any] | None = None
    #: The scopes a caller must hold to see and call the tool (auth on only).
    scopes: frozenset[str] = frozenset()
    #: What MCP lists besides the name (see :mod:`mcplite.core.metadata`).
    title: str | None = None
    annotations: ToolAnnotations | None = None
    icons: list[Icon] = field(default_factory=list)
    #: MCP's ``execution.taskSupport`` (None: not declared; see :meth:`Tools.tool`).
    task_support: TaskSupport | None = None

    def output_schema_for(self, modern: bool) -> dict[str, Any] | None:
        """MCP's ``outputSchema`` for a revision: the object schema when there is one;
        else, for an answer that is other data (a list, a number), its own schema
        on 2026-07-28, where ``structuredContent`` may be any JSON value, and on
        2025 that schema as the ``result`` of the object the value is wrapped in."""
        if self.output_schema is not None or self.value_schema is None:
            return self.output_schema
        if modern:
            return self.value_schema
        return {
            "type": "object",
            "properties": {"result": self.value_schema},
            "required": ["result"],
        }

    def arguments(self, checked: dict[str, Any]) -> dict[str, Any]:
        """Validated JSON arguments as the function declared them (Enum, dataclass).

        Raises :class:`SchemaError` naming the field a constructor refused.
        """
        if not self.converters:
            return checked
        out = dict(checked)
        for name, conv in self.converters.items():
            if name in out:
                try:
                    out[name] = conv(out[name])
                except (TypeError, ValueError) as exc:
                    # e.g. a dataclass whose __post_init__ refuses the values
                    raise SchemaError([FieldError(name, str(exc) or type(exc).__name__)]) from None
        return out

    def definition(self) -> dict[str, Any]:
        """The discovery entry: ``name``, ``@type`` (when set), ``title`` (when set),
        ``description``, ``inputSchema``, and ``annotations`` and ``icons`` when set."""
        entry = set_present({"name": self.name}, **{"@type": self.type}, title=self.title)
        entry["description"] = self.description
        entry["inputSchema"] = self.input_schema
        if self.annotations is not None:
            entry["annotations"] = dict(self.annotations)
        if self.icons:
            entry["icons"] = copy_icons(self.icons)
        return entry


def context_param_of(fn: Callable[..., Any]) -> str | None:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable hints: schema generation reports them
        return None
    for name, hint in hints.items():
        if hint is Context or (
            typing.get_origin(hint) in (typing.Union, types.UnionType)
            and Context in typing.get_args(hint)
        ):
            return name
    return None


Converter = Callable[[Any], Any]


def _converter(hint: Any) -> Converter | None:
    """How to turn a validated JSON value into the declared Python type, if needed.

    Only Enum and dataclass hints (also inside Optional, unions, lists and dicts)
    need it; everything else arrives as it is, at no cost per call.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _converter(args[0])
    if isinstance(hint, type) and issubclass(hint, Enum):
        enum_type = hint
        return lambda value: value if isinstance(value, enum_type) else enum_type(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        cls = hint
        hints = typing.get_type_hints(cls, include_extras=True)
        fields = {
            f.name: _converter(hints.get(f.name, Any)) for f in dataclasses.fields(cls) if f.init
        }

        def to_dataclass(value: Any) -> Any:
            if not isinstance(value, dict):
                return value
            kwargs = {
                k: (conv(v) if (conv := fields.get(k)) is not None else v) for k, v in value.items()
            }
            return cls(**kwargs)

        return to_dataclass
    if origin in (typing.Union, types.UnionType):
        branches = [(a, _converter(a)) for a in args if a is not type(None)]
        convertible = [(a, c) for a, c in branches if c is not None]
        if not convertible:
            return None

        def to_union(value: Any) -> Any:
            if value is None:
                return None
            for _, conv in convertible:
                try:
                    return conv(value)
                except (TypeError, ValueError):
                    continue
            return value

        return to_union
    if origin in (list, tuple, set, frozenset, Sequence) and args:
        each = _converter(args[0])
        if each is None:
            return None
        make = list if origin is Sequence else origin
        return lambda value: make(each(v) for v in value)
    if origin in (dict, Mapping) and len(args) == 2:
        each_value = _converter(args[1])
        if each_value is None:
            return None
        return lambda value: {k: each_value(v) for k, v in value.items()}
    return None


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """``fn``'s type hints, extras kept; None for what has none to read (a partial,
    a callable object, an unresolvable name).  Read once per registration: with
    many tools, resolving them is most of the cost of registering."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return None


def _converters(hints: dict[str, Any] | None, skip: str | None) -> dict[str, Converter]:
    if hints is None:
        return {}
    out = {}
    for name, hint in hints.items():
        if name in ("return", skip):
            continue
        conv = _converter(hint)
        if conv is not None:
            out[name] = conv
    return out


def _output_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema of what ``fn`` returns, when its return annotation promises an
    answer that is sent as ``structuredContent`` (see :mod:`mcplite.protocols.mcp.render`):
    a JSON object that can never be taken for a content block.  None otherwise
    (no annotation, ``str``, a list, a union, an outcome, a stream, an
    annotation with no JSON Schema), and the tool is listed without one.
    ``schema``: the return annotation's (:func:`_return_schema`).
    """
    if schema is None or schema.get("type") != "object" or not _never_a_block(schema):
        return None
    return schema


def _value_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema of what ``fn`` returns when it is JSON data other than an object
    that is always sent as ``structuredContent``: an array of numbers, booleans
    or objects that are never content blocks.  (A string or a lone number is a
    text block; a list that may hold strings or blocks becomes content items.)
    None otherwise."""
    if schema is None or not _plain_value(schema):
        return None
    return schema


def _plain_value(schema: Mapping[str, Any]) -> bool:
    if schema.get("type") != "array":
        return False
    items = schema.get("items")
    if not isinstance(items, Mapping):
        return False
    if items.get("type") == "object":
        return _never_a_block(items)
    return items.get("type") in ("number", "integer", "boolean")


def _return_schema(hints: dict[str, Any] | None, kind: Kind) -> dict[str, Any] | None:
    """The JSON Schema of a function's return annotation (``hints``: its type
    hints), when it has one and names data."""
    if (kind is not Kind.ASYNC and kind is not Kind.SYNC) or hints is None:
        return None
    hint = hints.get("return")
    base = hint
    while typing.get_origin(base) is typing.Annotated:
        base = typing.get_args(base)[0]
    if base is None or (isinstance(base, type) and issubclass(base, _NOT_DATA)):
        return None
    try:
        return schema_for_type(hint, returned=True)
    except TypeError:
        return None


#: What a tool returns that is not its data: an outcome is rendered as itself.
_NOT_DATA = (*OUTCOME_TYPES, Promised, Partial)


def _never_a_block(schema: Mapping[str, Any]) -> bool:
    """Whether no object of ``schema`` has a ``type`` naming a content block: such a
    dict is sent as that block, with no ``structuredContent``."""
    properties = schema.get("properties")
    if properties is not None:  # a TypedDict or a dataclass: its own keys only
        return "type" not in properties or not _may_name_a_block(properties["type"])
    values = schema.get("additionalProperties")  # dict[str, X]
    return isinstance(values, Mapping) and not _may_name_a_block(values)


def _may_name_a_block(schema: Mapping[str, Any]) -> bool:
    if "enum" in schema:
        return any(value in BLOCK_TYPES for value in schema["enum"] if isinstance(value, str))
    if "anyOf" in schema:
        return any(_may_name_a_block(branch) for branch in schema["anyOf"])
    kinds = schema.get("type")
    if kinds is None:
        return True  # Any
    return "string" in ([kinds] if isinstance(kinds, str) else kinds)


def _given_output_schema(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError(
            f'output_schema must be a JSON Schema with "type": "object" '
            f"(structuredContent is an object), not {schema!r}"
        )
    compile_schema(schema)  # a malformed schema fails here, as an input schema does
    return schema


def _kind(fn: Callable[..., Any]) -> Kind:
    if inspect.isasyncgenfunction(fn):
        return Kind.STREAM
    if inspect.iscoroutinefunction(fn):
        return Kind.ASYNC
    return Kind.SYNC


class ToolOptions(TypedDict, total=False):
    """The options of a tool (:meth:`Tools.tool` says what each one does)."""

    name: str | None
    type: str | None
    title: str | None
    description: str | None
    schema: dict[str, Any] | None
    output_schema: dict[str, Any] | Literal[False] | None
    promise_after: float | None
    requires: dict[str, Any] | None
    scopes: Iterable[str]
    annotations: ToolAnnotations | None
    icons: Iterable[Icon] | None
    task_support: TaskSupport | None


def known_options(given: Mapping[str, object], options: type, where: str) -> None:
    """Raise TypeError, as Python does for a keyword argument, when ``given`` has
    a key the TypedDict ``options`` does not name."""
    for name in given:
        if name not in options.__annotations__:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")


class Tools(Registry[Tool]):
    """A registry of tools.  Names are unique: registering one twice raises ``ValueError``.

    Tools may be added (:meth:`tool`, :meth:`add`) and removed (:meth:`remove`)
    while the registry is served: every dispatcher made from it follows, and
    each change is told to :meth:`on_change` listeners (MCP clients hear
    ``notifications/tools/list_changed``).
    """

    @overload
    def tool(self, fn: F) -> F: ...

    @overload
    def tool(self, **options: Unpack[ToolOptions]) -> Callable[[F], F]: ...

    def tool(self, fn: F | None = None, **options: Unpack[ToolOptions]) -> F | Callable[[F], F]:
        """Register a function as a tool; usable bare (``@tools.tool``) or with options.

        ``name`` defaults to the function's name, ``description`` to its docstring,
        ``schema`` (a hand-written ``inputSchema``, JSON Schema 2020-12 with local
        ``$ref`` allowed, listed exactly as given) to one generated from the type
        hints.  ``output_schema`` (MCP's ``outputSchema``, an object schema) defaults
        to one generated from a return annotation that describes a JSON object;
        ``False`` lists none.  ``promise_after`` overrides the server's promise
        deadline in seconds (:data:`ALWAYS`, :data:`NEVER`).  ``requires`` names the
        MCP client capabilities the tool needs (answered -32021 to a client that lacks
        them).  ``scopes`` are the OAuth scopes (or static token scopes) a caller
        must hold to see and call the tool when auth is on (see :mod:`mcplite.auth`).
        ``title``, ``annotations`` and ``icons`` are listed as MCP's (see
        :mod:`mcplite.core.metadata`); ``task_support`` (MCP's ``execution.taskSupport``)
        says whether a 2026 call may become a task (``"optional"``), must be made
        by a client that takes tasks (``"required"``: others get -32021), or never
        becomes one (``"forbidden"``: the call completes on its own request).
        Raises ``ValueError`` for a duplicate name, a malformed schema or a bad
        value of an option, ``TypeError`` for a signature that cannot be described,
        an option of the wrong type or one that does not exist.
        """
        known_options(options, ToolOptions, "Tools.tool")
        return self._decorate(fn, lambda f: self.add(f, **options))

    def add(self, fn: Callable[..., Any], **options: Unpack[ToolOptions]) -> Tool:
        """Register ``fn`` with the options of :meth:`tool` and return its
        :class:`Tool`; a registry being served serves it from now on."""
        known_options(options, ToolOptions, "Tools.add")
        tool_name = options.get("name") or fn.__name__
        if not tool_name or not isinstance(tool_name, str):
            raise ValueError(f"a tool needs a non-empty name, got {tool_name!r}")
        if tool_name in self._entries:
            raise ValueError(f"a tool named {tool_name!r} is already registered")
        promise_after = options.get("promise_after")
        if promise_after is not None and not promise_after >= 0:
            raise ValueError(f"promise_after must be >= 0 or None, got {promise_after!r}")
        what = f"tool {tool_name!r}"
        title = title_of(options.get("title"), what)
        annotations = annotations_of(options.get("annotations"), what)
        icons = icons_of(options.get("icons"), what)
        task_support = task_support_of(options.get("task_support"), what)
        ctx_param = context_param_of(fn)
        schema = options.get("schema")
        generated = schema is None
        if schema is None:
            skip = (ctx_param,) if ctx_param else ()
            schema = schema_for_function(fn, skip=skip)
        kind = _kind(fn)
        hints = _type_hints(fn)
        value_schema = None
        output_schema = options.get("output_schema")
        if output_schema is None:
            returned = _return_schema(hints, kind)
            output_schema = _output_schema(returned)
            if output_schema is None:
                value_schema = _value_schema(returned)
        elif output_schema is not False:
            output_schema = _given_output_schema(output_schema)
        description = options.get("description")
        tool = Tool(
            name=tool_name,
            fn=fn,
            description=description if description is not None else inspect.getdoc(fn) or "",
            input_schema=schema,
            checker=compile_schema(schema),
            kind=kind,
            type=options.get("type"),
            context_param=ctx_param,
            promise_after=promise_after,
            requires=options.get("requires"),
            converters=_converters(hints, ctx_param) if generated else {},
            output_schema=output_schema or None,
            value_schema=value_schema,
            scopes=_scopes(options.get("scopes", ())),
            title=title,
            annotations=annotations,
            icons=icons,
            task_support=task_support,
        )
        return self._keep(tool_name, tool)


def _scopes(scopes: Iterable[str]) -> frozenset[str]:
    if isinstance(scopes, str):
        raise TypeError("scopes must be a list of strings, not one string")
    held = frozenset(scopes)
    for scope in held:
        if not isinstance(scope, str) or not scope or any(c.isspace() for c in scope):
            raise ValueError(f"a scope is a non-empty string without spaces, got {scope!r}")
    return held
