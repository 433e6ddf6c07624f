"""Resources: data a client lists and reads by URI (MCP ``resources/list``,
``resources/templates/list``, ``resources/read``).

A resource is a function that returns its contents: a ``str`` is text, ``bytes``
a blob (base64 on the wire).  A URI with ``{variables}`` (RFC 6570 level 1) is a
template: the function takes the variables as parameters, and any URI that
matches it can be read::

    from mcplite import Resources

    resources = Resources()

    @resources.resource("docs://readme", mime_type="text/markdown")
    def readme() -> str:
        return README

    @resources.resource("docs://sections/{section_id}", mime_type="text/markdown")
    def section(section_id: str) -> str:
        return SECTIONS[section_id]

The function may also return a list of contents (``{"uri", "text" | "blob",
"mimeType"}`` dicts, or str/bytes items, which take the resource's URI), raise
:class:`~mcplite.core.outcomes.Failure` (an error naming the URI) or
:class:`ResourceNotFound` (e.g. an unknown ``section_id``).  A variable matches
one path segment (no ``/``), percent-decoded.  ``Literal``/``Enum`` variables and
``complete={"var": fn}`` completers answer ``completion/complete``.
"""

from __future__ import annotations

import base64
import inspect
import re
import typing
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar, Unpack

from .completion import Completer, choices_of
from .context import RequestContext
from .errors import InternalError, InvalidParams
from .listeners import Listeners
from .metadata import Icon, copy_icons, icons_of, title_of
from .prompts import PromptOptions, context_for, invoke
from .tools import context_param_of, known_options
from .wire import set_present

__all__ = ["Resource", "ResourceNotFound", "ResourceOptions", "ResourceTemplate", "Resources"]

F = TypeVar("F", bound=Callable[..., Any])

_VARIABLE = re.compile(r"\{([A-Za-z0-9_]+)\}")


class ResourceNotFound(InvalidParams):
    """No resource has this URI (MCP: -32602 with ``data.uri``)."""

    default_message = "Resource not found"

    def __init__(self, uri: str) -> None:
        super().__init__(f"Resource not found: {uri}", {"uri": uri})


@dataclass(slots=True, kw_only=True)
class Listed:
    """What a resource and a template have alike: how MCP lists them and the
    function that reads them."""

    name: str
    fn: Callable[..., Any]
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    context_param: str | None = None
    icons: list[Icon] = field(default_factory=list)

    def _definition(self, out: dict[str, Any]) -> dict[str, Any]:
        out["name"] = self.name
        set_present(out, title=self.title, description=self.description, mimeType=self.mime_type)
        if self.icons:
            out["icons"] = copy_icons(self.icons)
        return out


@dataclass(slots=True)
class Resource(Listed):
    """A resource at a fixed URI; :meth:`definition` is its MCP ``Resource``."""

    uri: str

    def definition(self) -> dict[str, Any]:
        return self._definition({"uri": self.uri})


@dataclass(slots=True)
class ResourceTemplate(Listed):
    """Resources whose URIs match ``uri_template``; :meth:`definition` is its MCP
    ``ResourceTemplate``."""

    uri_template: str
    variables: tuple[str, ...] = ()
    pattern: re.Pattern[str] = field(default_factory=lambda: re.compile(""))
    completers: dict[str, Completer] = field(default_factory=dict)
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def definition(self) -> dict[str, Any]:
        return self._definition({"uriTemplate": self.uri_template})

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables of ``uri`` if it matches this template (None: it does not)."""
        found = self.pattern.fullmatch(uri)
        if found is None:
            return None
        return {name: urllib.parse.unquote(value) for name, value in found.groupdict().items()}


def _compile_template(template: str) -> tuple[tuple[str, ...], re.Pattern[str]]:
    """The variables of a level-1 URI template and a regex matching its URIs;
    raises ValueError for any other ``{...}`` expression."""
    parts: list[str] = []
    variables: list[str] = []
    last = 0
    for found in _VARIABLE.finditer(template):
        parts.append(re.escape(template[last : found.start()]))
        name = found.group(1)
        if name in variables:
            raise ValueError(f"URI template {template!r} repeats the variable {name!r}")
        variables.append(name)
        parts.append(f"(?P<{name}>[^/?#]+)")
        last = found.end()
    rest = template[last:]
    if "{" in rest or "}" in rest or any("{" in p or "}" in p for p in parts[::2]):
        raise ValueError(
            f"URI template {template!r}: only simple {{name}} variables (RFC 6570 level 1)"
        )
    parts.append(re.escape(rest))
    return tuple(variables), re.compile("".join(parts))


def contents_of(value: Any, uri: str, mime_type: str | None) -> list[dict[str, Any]]:
    """What a resource function returned, as MCP ``ResourceContents``; raises
    TypeError for anything else."""
    items = value if isinstance(value, list | tuple) else [value]
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, str):
            out.append({"uri": uri, "mimeType": mime_type or "text/plain", "text": item})
        elif isinstance(item, bytes | bytearray):
            blob = base64.b64encode(bytes(item)).decode("ascii")
            out.append(
                {"uri": uri, "mimeType": mime_type or "application/octet-stream", "blob": blob}
            )
        elif isinstance(item, dict) and (("text" in item) != ("blob" in item)):
            content = {"uri": uri, **item}
            if mime_type is not None:
                content.setdefault("mimeType", mime_type)
            out.append(content)
        else:
            raise TypeError(f"not resource contents: {item!r}")
    if not out:
        raise TypeError("a resource has at least one contents item")
    return out


class ResourceOptions(PromptOptions, total=False):
    """The options of a resource (:meth:`Resources.resource` says what each one does)."""

    mime_type: str | None


class Resources:
    """A registry of resources and resource templates: decorate functions with
    :meth:`resource`."""

    def __init__(self) -> None:
        self._resources: dict[str, Resource] = {}
        self._templates: dict[str, ResourceTemplate] = {}
        self._listeners = Listeners()

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every resource or template added or removed;
        returns the function that stops it."""
        return self._listeners.add(listener)

    def replace(self, other: Resources) -> None:
        """Serve exactly what ``other`` holds from now on, and say so to the
        listeners once (a reloaded module's registry: ``mcplite dev``)."""
        self._resources = dict(other._resources)
        self._templates = dict(other._templates)
        self._listeners.notify()

    def remove(self, uri: str) -> Resource | ResourceTemplate:
        """Stop serving the resource or template registered at ``uri`` and return
        it; KeyError if none."""
        entry: Resource | ResourceTemplate | None = self._resources.pop(uri, None)
        if entry is None:
            entry = self._templates.pop(uri)
        self._listeners.notify()
        return entry

    def resource(self, uri: str, **options: Unpack[ResourceOptions]) -> Callable[[F], F]:
        """Register the decorated function as the resource at ``uri``, or as a
        template when ``uri`` has ``{variables}``; returns the function unchanged.

        ``name`` defaults to the function's name, ``description`` to its
        docstring; ``mime_type`` is the contents' default MIME type; ``complete``
        maps a template variable to its completer; ``title`` and ``icons`` are
        listed as MCP's (:mod:`mcplite.core.metadata`).  Raises ValueError for a
        URI already registered, a template whose variables are not the
        function's parameters, a completer for no variable or a bad icon;
        TypeError for an option of the wrong type or one that does not exist.
        """
        known_options(options, ResourceOptions, "Resources.resource")

        def register(fn: F) -> F:
            self.add(fn, uri, **options)
            return fn

        return register

    def add(
        self, fn: Callable[..., Any], uri: str, **options: Unpack[ResourceOptions]
    ) -> Resource | ResourceTemplate:
        """Register ``fn`` at ``uri`` and return the entry (see :meth:`resource`)."""
        known_options(options, ResourceOptions, "Resources.add")
        if uri in self._resources or uri in self._templates:
            raise ValueError(f"a resource at {uri!r} is already registered")
        name = options.get("name") or fn.__name__
        title = title_of(options.get("title"), f"resource {uri!r}")
        checked_icons = icons_of(options.get("icons"), f"resource {uri!r}")
        description = options.get("description") or inspect.cleandoc(fn.__doc__ or "") or None
        mime_type = options.get("mime_type")
        complete = options.get("complete")
        context_param = context_param_of(fn)
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != context_param]
        variables, pattern = _compile_template(uri)
        listed: dict[str, Any] = {
            "name": name,
            "fn": fn,
            "title": title,
            "description": description,
            "mime_type": mime_type,
            "context_param": context_param,
            "icons": checked_icons,
        }
        if not variables:
            if complete:
                raise ValueError(f"resource {uri!r} has no variables to complete")
            if any(p.default is p.empty for p in params):
                raise ValueError(f"resource {uri!r} has no variables, but {name}() needs arguments")
            resource = Resource(uri, **listed)
            self._resources[uri] = resource
            self._listeners.notify()
            return resource
        names = {p.name for p in params}
        missing = [v for v in variables if v not in names]
        if missing:
            raise ValueError(f"URI template {uri!r}: {name}() has no parameter {missing[0]!r}")
        unfilled = [p.name for p in params if p.default is p.empty and p.name not in variables]
        if unfilled:
            raise ValueError(f"URI template {uri!r} does not fill {name}()'s {unfilled[0]!r}")
        completers = dict(complete or {})
        unknown = set(completers) - set(variables)
        if unknown:
            raise ValueError(f"URI template {uri!r} has no variable {sorted(unknown)[0]!r}")
        hints = typing.get_type_hints(fn, include_extras=True)
        choices = {v: c for v in variables if (c := choices_of(hints.get(v))) is not None}
        template = ResourceTemplate(uri, variables, pattern, completers, choices, **listed)
        self._templates[uri] = template
        self._listeners.notify()
        return template

    def find(self, uri: str) -> tuple[Resource | ResourceTemplate, dict[str, str]] | None:
        """The entry that serves ``uri`` with its variables: a fixed URI first, then
        the templates in the order they were registered."""
        resource = self._resources.get(uri)
        if resource is not None:
            return resource, {}
        for template in self._templates.values():
            variables = template.match(uri)
            if variables is not None:
                return template, variables
        return None

    def template(self, uri_template: str) -> ResourceTemplate | None:
        return self._templates.get(uri_template)

    async def read(self, uri: str, request: RequestContext | None = None) -> list[dict[str, Any]]:
        """The contents of ``uri`` (MCP ``ResourceContents``, never empty).

        Raises :class:`ResourceNotFound`, :class:`~mcplite.core.errors.InvalidParams`
        (the function raised a Failure) or :class:`~mcplite.core.errors.InternalError`.
        """
        found = self.find(uri)
        if found is None:
            raise ResourceNotFound(uri)
        entry, kwargs = found
        if isinstance(entry, ResourceTemplate) and entry.choices:
            for variable, value in kwargs.items():
                allowed = entry.choices.get(variable)
                if allowed is not None and value not in allowed:
                    raise ResourceNotFound(uri)
        args: dict[str, Any] = dict(kwargs)
        if entry.context_param is not None:
            args[entry.context_param] = context_for(entry.name, request)
        try:
            value = await invoke(entry.fn, args, f"resource {uri!r}")
        except InvalidParams as exc:
            if isinstance(exc, ResourceNotFound):
                raise
            raise InvalidParams(exc.message, {"uri": uri}) from None
        try:
            return contents_of(value, uri, entry.mime_type)
        except TypeError as exc:
            raise InternalError(f"resource {uri!r} returned what is not contents: {exc}") from None

    def definitions(self) -> list[dict[str, Any]]:
        """Every fixed resource's MCP ``Resource``, in the order registered."""
        return [resource.definition() for resource in self._resources.values()]

    def template_definitions(self) -> list[dict[str, Any]]:
        """Every template's MCP ``ResourceTemplate``, in the order registered."""
        return [template.definition() for template in self._templates.values()]

    def __iter__(self) -> Iterator[Resource | ResourceTemplate]:
        yield from self._resources.values()
        yield from self._templates.values()

    def __len__(self) -> int:
        return len(self._resources) + len(self._templates)
