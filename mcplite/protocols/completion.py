"""``completion/complete`` (MCP): values for a prompt's or a resource template's argument.

The completers and choices are the registries' (:mod:`mcplite.core.completion`);
this reads MCP's params and answers MCP's result.  A fixed resource has nothing
to complete; an unknown prompt is -32602 naming it.
"""

from __future__ import annotations

import logging
from typing import Any

from ..core.completion import Completer, complete, completion_result
from ..core.errors import InternalError, InvalidParams
from ..core.prompts import Prompts
from ..core.resources import Resources
from .requests import Request

__all__ = ["CompletionMethod"]

log = logging.getLogger("mcplite")


class CompletionMethod:
    """``completion/complete`` over the prompts and resources served (either may be None)."""

    def __init__(self, prompts: Prompts | None, resources: Resources | None) -> None:
        self.prompts = prompts
        self.resources = resources

    async def complete(self, request: Request) -> Any:
        params = request.params
        ref = params.get("ref")
        argument = params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise InvalidParams("Invalid params: params.ref and params.argument must be objects")
        name, value = argument.get("name"), argument.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidParams("Invalid params: argument.name and argument.value must be strings")
        context = params.get("context")
        given = context.get("arguments") if isinstance(context, dict) else None
        given = (
            {k: v for k, v in given.items() if isinstance(v, str)}
            if isinstance(given, dict)
            else {}
        )
        kind = ref.get("type")
        completer: Completer | None
        choices: tuple[str, ...] | None
        if kind == "ref/prompt" and self.prompts is not None:
            prompt_name = ref.get("name")
            prompt = self.prompts.get(prompt_name) if isinstance(prompt_name, str) else None
            if prompt is None:
                raise InvalidParams(f"Unknown prompt: {prompt_name}", {"name": prompt_name})
            completer, choices = prompt.completers.get(name), prompt.choices.get(name)
        elif kind == "ref/resource" and self.resources is not None:
            uri = ref.get("uri")
            template = self.resources.template(uri) if isinstance(uri, str) else None
            if template is None:  # a fixed resource has nothing to complete
                return completion_result([])
            completer, choices = template.completers.get(name), template.choices.get(name)
        else:
            raise InvalidParams(f"Invalid params: cannot complete a reference of type {kind!r}")
        try:
            values = await complete(completer, choices, value, given)
        except Exception:
            log.exception("completing %r failed", name)
            raise InternalError(f"completing {name!r} failed") from None
        return completion_result(values)
