"""``prompts/list`` and ``prompts/get``: one handler each, for every profile.

The same params, results and errors everywhere (MCP's): an unknown prompt is
-32602 naming it.  What differs is a list's pages (MCP; MCP-lite's endpoint
answers the whole list) and a prompt that needs the client's input
(:class:`~mcplite.core.outcomes.InputRequired`): 2026 answers
``input_required``, 2025 asks the client on the response's stream, and where
the client cannot be asked (MCP-lite, a 2025 answer as plain JSON) it is an
internal error saying so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.envelope import Result
from ..core.errors import InternalError, InvalidParams
from ..core.outcomes import Failure, InputRequired
from ..core.prompts import Prompts
from .mcp.pagination import listed
from .mcp.rounds import MAX_ROUNDS, InputRounds
from .mcp.tasks import input_requests
from .requests import LITE, MCP_2026, Request

__all__ = ["PromptMethods", "object_params"]


def object_params(params: Any) -> dict[str, Any]:
    """``params`` as an object (None: empty); raises :class:`InvalidParams` for an array."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidParams("Invalid params: params must be an object")
    return params


class PromptMethods:
    """The prompts methods of a registry.  ``rounds``: the MCP server's input
    rounds (MCP-lite never asks the client)."""

    def __init__(
        self, prompts: Prompts, page_size: int | None, rounds: InputRounds | None = None
    ) -> None:
        self.prompts = prompts
        self.page_size = page_size
        self.rounds = rounds

    async def list(self, request: Request) -> Any:
        return listed(request, "prompts", self.prompts.definitions(), "name", self.page_size)

    async def get(self, request: Request) -> Any:
        params = object_params(request.params)
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("Invalid params: params.name must be a string")
        prompt = self.prompts.get(name)
        if prompt is None:
            raise InvalidParams(f"Unknown prompt: {name}", {"name": name})
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParams("Invalid params: params.arguments must be an object")
        owner = f"prompt:{name}"  # a tool's requestState never reaches a prompt
        context = request.context
        rounds = self.rounds
        if rounds is not None and request.profile is not LITE:
            answered = rounds.answered(owner, params, context)
            if answered is not None:
                context = answered[0]
        rendered = await prompt.render(arguments, context)
        for _ in range(MAX_ROUNDS):
            if not isinstance(rendered, InputRequired):
                return rendered
            if rounds is None or request.profile is LITE:
                break  # MCP-lite has no way to ask the client
            if request.profile is MCP_2026:
                return rounds.input_required(owner, rendered, request.capabilities, context)
            if request.send is None:  # 2025 answered as plain JSON: no stream to ask on
                break
            # 2025: ask the client on the response's stream, as for a tool.
            answers = await rounds.ask(input_requests(rendered), request.send, context)
            if isinstance(answers, Result):
                assert isinstance(answers.outcome, Failure)
                raise InternalError(f"prompt {name!r}: {answers.outcome.message}")
            context = dataclasses.replace(
                context, input_responses=answers, request_state=rendered.state
            )
            rendered = await prompt.render(arguments, context)
        raise InternalError(f"prompt {name!r} needs input the client could not be asked for")
