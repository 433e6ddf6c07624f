"""Prompts: message templates a client lists and fills in (MCP ``prompts/list``, ``prompts/get``).

Declared like tools: the function's parameters are the prompt's arguments
(required unless they have a default; described with
``Annotated[str, Field(description=...)]``), its docstring the description::

    from mcplite import Field, Prompts, content

    prompts = Prompts()

    @prompts.prompt
    def review(code: Annotated[str, Field(description="The code to review")]) -> str:
        \"\"\"Ask for a code review.\"\"\"
        return f"Please review this code:\\n{code}"

What the function returns becomes the prompt's messages:

- a ``str``: one user message of that text;
- a list whose items are each a ``str`` (a user text message), a :class:`Message`,
  a dict ``{"role": ..., "content": ...}`` (content a str or a content block), or
  a content block alone (:mod:`mcplite.core.content`: image, audio, embedded
  resource), which is a user message;
- an :class:`~mcplite.core.outcomes.InputRequired` (MCP 2026 ``input_required``): a
  function that takes a ``ctx: Context`` reads the answers in
  ``ctx.input_responses`` when the client gets the prompt again.

Arguments arrive as strings (MCP's prompt arguments are strings), except that an
``Enum`` parameter gets its member.  ``Literal`` and ``Enum`` parameters complete
themselves (``completion/complete``); ``complete={"arg": fn}`` declares a
completer (:mod:`mcplite.core.completion`).
"""

from __future__ import annotations

import enum
import inspect
import logging
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeVar, Unpack, overload

from .completion import Completer, choices_of
from .content import is_block
from .content import text as text_block
from .context import RequestContext
from .errors import InternalError, InvalidParams, MCPLiteError
from .hints import schema_for_function
from .listeners import Registry
from .metadata import Icon, copy_icons, icons_of, title_of
from .outcomes import Failure, InputRequired
from .tools import Context, context_param_of, known_options
from .wire import set_present

__all__ = ["Message", "Prompt", "PromptOptions", "Prompts"]

log = logging.getLogger("mcplite")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a prompt: ``content`` is a str (text) or a content block."""

    role: Literal["user", "assistant"]
    content: str | dict[str, Any]

    def to_mcp(self) -> dict[str, Any]:
        return _message(self.role, self.content)


def _message(role: Any, content: Any) -> dict[str, Any]:
    if role not in ("user", "assistant"):
        raise TypeError(f"a message's role is 'user' or 'assistant', not {role!r}")
    if isinstance(content, str):
        return {"role": role, "content": text_block(content)}
    if is_block(content):
        return {"role": role, "content": content}
    raise TypeError(f"a message's content is a str or a content block, not {content!r}")


def messages_of(value: Any) -> list[dict[str, Any]]:
    """What a prompt function returned, as MCP ``PromptMessage`` objects; raises
    TypeError for anything else."""
    if isinstance(value, str):
        return [_message("user", value)]
    if not isinstance(value, list | tuple):
        raise TypeError(f"a prompt returns a str or a list of messages, not {type(value).__name__}")
    out = []
    for item in value:
        if isinstance(item, Message):
            out.append(item.to_mcp())
        elif isinstance(item, str) or is_block(item):
            out.append(_message("user", item))
        elif isinstance(item, dict) and set(item) == {"role", "content"}:
            out.append(_message(item["role"], item["content"]))
        else:
            raise TypeError(f"not a prompt message: {item!r}")
    return out


def context_for(name: str, request: RequestContext | None) -> Context:
    """The :class:`~mcplite.core.tools.Context` a prompt or resource function asks for."""
    caller = None if request is None else request.caller
    return Context(tool=name, caller=caller, request=request)


async def invoke(fn: Callable[..., Any], kwargs: dict[str, Any], what: str) -> Any:
    """Call an author's function (sync or async); a :class:`Failure` it raises is
    -32602, a protocol error passes as it is, anything else is -32603 (logged)."""
    try:
        value = fn(**kwargs)
        if inspect.isawaitable(value):
            value = await value
    except Failure as exc:
        raise InvalidParams(exc.message) from None
    except MCPLiteError:  # a protocol error of its choosing (e.g. ResourceNotFound)
        raise
    except Exception:
        log.exception("%s failed", what)
        raise InternalError(f"{what} failed") from None
    return value


@dataclass(slots=True)
class Prompt:
    """One registered prompt; :meth:`definition` is its MCP ``Prompt``."""

    name: str
    fn: Callable[..., Any]
    description: str | None = None
    title: str | None = None
    #: MCP ``PromptArgument`` objects, in the function's order.
    arguments: list[dict[str, Any]] = field(default_factory=list)
    context_param: str | None = None
    completers: dict[str, Completer] = field(default_factory=dict)
    #: The values a Literal/Enum argument allows, by argument.
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    enums: dict[str, type[enum.Enum]] = field(default_factory=dict)
    icons: list[Icon] = field(default_factory=list)

    def definition(self) -> dict[str, Any]:
        out = set_present({"name": self.name}, title=self.title, description=self.description)
        out["arguments"] = self.arguments
        if self.icons:
            out["icons"] = copy_icons(self.icons)
        return out

    def call_arguments(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """The keyword arguments of the function for ``given``; raises
        :class:`InvalidParams` for a missing required argument or a value that is
        not a string (unknown arguments are ignored)."""
        given = given or {}
        kwargs: dict[str, Any] = {}
        for argument in self.arguments:
            name = argument["name"]
            value = given.get(name)
            if value is None:
                if argument["required"]:
                    raise InvalidParams(
                        f"Missing required argument {name!r} for prompt {self.name!r}",
                        {"argument": name},
                    )
                continue
            if not isinstance(value, str):
                raise InvalidParams(
                    f"Invalid argument {name!r} for prompt {self.name!r}: expected a string",
                    {"argument": name},
                )
            enum_type = self.enums.get(name)
            if enum_type is not None:
                try:
                    kwargs[name] = enum_type(value)
                except ValueError:
                    raise InvalidParams(
                        f"Invalid argument {name!r} for prompt {self.name!r}: "
                        f"expected one of {', '.join(self.choices[name])}",
                        {"argument": name},
                    ) from None
                continue
            if name in self.choices and value not in self.choices[name]:
                raise InvalidParams(
                    f"Invalid argument {name!r} for prompt {self.name!r}: "
                    f"expected one of {', '.join(self.choices[name])}",
                    {"argument": name},
                )
            kwargs[name] = value
        return kwargs

    async def render(
        self, given: Mapping[str, Any] | None, request: RequestContext | None = None
    ) -> dict[str, Any] | InputRequired:
        """MCP's ``GetPromptResult`` for the ``given`` arguments, or the input the
        function asks for first; raises :class:`InvalidParams` (bad arguments, a
        :class:`Failure`) or :class:`InternalError` (the function failed)."""
        kwargs = self.call_arguments(given)
        if self.context_param is not None:
            kwargs[self.context_param] = context_for(self.name, request)
        value = await invoke(self.fn, kwargs, f"prompt {self.name!r}")
        if isinstance(value, InputRequired):
            return value
        try:
            messages = messages_of(value)
        except TypeError as exc:
            log.error("prompt %r returned what is not a prompt: %s", self.name, exc)
            raise InternalError(f"prompt {self.name!r} failed") from None
        out: dict[str, Any] = {}
        if self.description is not None:
            out["description"] = self.description
        out["messages"] = messages
        return out


class PromptOptions(TypedDict, total=False):
    """The options of a prompt (:meth:`Prompts.prompt` says what each one does)."""

    name: str | None
    title: str | None
    description: str | None
    complete: Mapping[str, Completer] | None
    icons: Iterable[Icon] | None


class Prompts(Registry[Prompt]):
    """A registry of prompts: decorate functions with :meth:`prompt`.

    Prompts may be added (:meth:`add`) and removed (:meth:`remove`) while the
    registry is served; each change is told to :meth:`on_change` listeners (MCP
    sends ``notifications/prompts/list_changed`` to subscribed clients).
    """

    @overload
    def prompt(self, fn: F) -> F: ...

    @overload
    def prompt(self, **options: Unpack[PromptOptions]) -> Callable[[F], F]: ...

    def prompt(self, fn: F | None = None, **options: Unpack[PromptOptions]) -> F | Callable[[F], F]:
        """Register ``fn`` as a prompt (bare or with options); returns ``fn`` unchanged.

        ``name`` defaults to the function's name, ``description`` to its
        docstring; ``complete`` maps an argument to its completer; ``title`` and
        ``icons`` are listed as MCP's (:mod:`mcplite.core.metadata`).  Raises
        ValueError for a duplicate name, a completer for no argument or a bad
        icon, TypeError for parameters a prompt cannot take (``*args``,
        unsupported hints), an option of the wrong type or one that does not exist.
        """
        known_options(options, PromptOptions, "Prompts.prompt")
        return self._decorate(fn, lambda f: self.add(f, **options))

    def add(self, fn: Callable[..., Any], **options: Unpack[PromptOptions]) -> Prompt:
        """Register ``fn`` as a prompt and return it (see :meth:`prompt`)."""
        known_options(options, PromptOptions, "Prompts.add")
        name = options.get("name") or fn.__name__
        if name in self._entries:
            raise ValueError(f"a prompt named {name!r} is already registered")
        title = title_of(options.get("title"), f"prompt {name!r}")
        checked_icons = icons_of(options.get("icons"), f"prompt {name!r}")
        description = options.get("description")
        context_param = context_param_of(fn)
        skip = () if context_param is None else (context_param,)
        schema = schema_for_function(fn, skip=skip)
        required = set(schema.get("required", ()))
        hints = typing.get_type_hints(fn, include_extras=True)
        prompt = Prompt(
            name,
            fn,
            description=description or inspect.cleandoc(fn.__doc__ or "") or None,
            title=title,
            context_param=context_param,
            completers=dict(options.get("complete") or {}),
            icons=checked_icons,
        )
        for arg, prop in schema.get("properties", {}).items():
            argument: dict[str, Any] = {"name": arg}
            if isinstance(prop.get("description"), str):
                argument["description"] = prop["description"]
            argument["required"] = arg in required
            prompt.arguments.append(argument)
            hint = hints.get(arg)
            choices = choices_of(hint)
            if choices is not None:
                prompt.choices[arg] = choices
            base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
            if isinstance(base, type) and issubclass(base, enum.Enum):
                prompt.enums[arg] = base
        unknown = set(prompt.completers) - {a["name"] for a in prompt.arguments}
        if unknown:
            raise ValueError(f"prompt {name!r} has no argument {sorted(unknown)[0]!r} to complete")
        return self._keep(name, prompt)

    def definitions(self) -> list[dict[str, Any]]:
        """Every prompt's MCP ``Prompt``, in the order they were registered."""
        return [prompt.definition() for prompt in self]
