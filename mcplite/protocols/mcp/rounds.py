"""Input rounds: what a tool or prompt asks the client for, and the answers.

A tool answers :class:`~mcplite.core.outcomes.Elicitation` or
:class:`~mcplite.core.outcomes.InputRequired` (a prompt the latter) when it
needs the client: a person's answer (``elicitation/create``), a completion
(``sampling/createMessage``), the client's roots (``roots/list``).

- **2026-07-28** answers ``resultType: input_required`` with the requests and a
  sealed ``requestState`` (:meth:`InputRounds.input_required`); the client calls
  again with ``inputResponses`` and that state, which :meth:`InputRounds.answered`
  opens (sealed by this server, for this tool or prompt and this caller) to give
  the tool only the answers that round asked for.
- **2025-11-25** has no ``input_required``: the server asks the client itself,
  each request a JSON-RPC request on the call's stream, and the client POSTs its
  answer back (:meth:`InputRounds.ask`, :meth:`InputRounds.answer`).  The
  requests waiting for answers live in this process: no session is needed, but
  a client's answer must reach the process that asked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any, Final

from ...core.context import RequestContext, binding_of
from ...core.dispatch import Dispatcher
from ...core.envelope import Result
from ...core.errors import ExpiredToken, InvalidParams, InvalidToken
from ...core.outcomes import Elicitation, Failure, InputRequired
from ..requests import Sender
from .protocol import MissingCapability
from .tasks import check_answers, input_requests

__all__ = ["MAX_ROUNDS", "InputRounds", "failed"]

#: 2025: rounds of requests to the client per call.
MAX_ROUNDS: Final = 16
#: Seconds a repeated call may take to come back with its answers.
_STATE_TTL = 3600.0
#: 2025: seconds a client gets to answer a request sent on a call's stream (a
#: person may be answering an elicitation), and requests pending at once over
#: all calls.
_ASK_TIMEOUT = 300.0
_MAX_PENDING = 1024
#: The client capability each input request needs.
_REQUEST_CAPABILITY = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


class InputRounds:
    """The rounds of input requests of one server's calls and prompts."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        # 2025: requests sent to clients, by id: the answer's future and who may answer.
        self._pending: dict[str, tuple[asyncio.Future[Any], bytes]] = {}

    # -- 2026: input_required and requestState ---------------------------------

    def answered(
        self, owner: str, params: Mapping[str, Any], context: RequestContext
    ) -> tuple[RequestContext, bool] | None:
        """The context of a call that answers a round of input requests, and
        whether that round was an elicitation to merge into the arguments; None
        when no round was asked for (no ``requestState``): then the answers, if
        any, reach the tool as they are (checked for shape), never as arguments.
        With a ``requestState``, only the answers that round asked for, checked.
        ``owner`` names the tool (or ``prompt:NAME``) the state must be sealed for.
        Raises :class:`InvalidParams`."""
        if "requestState" not in params:
            if context.input_responses is not None:
                check_answers(context.input_responses, None)
            return None
        state, asked, merge = self._open_state(owner, params["requestState"], context)
        responses = check_answers(context.input_responses, asked)
        return (
            dataclasses.replace(context, request_state=state, input_responses=responses),
            merge,
        )

    def _open_state(
        self, owner: str, sealed: Any, context: RequestContext
    ) -> tuple[str | None, dict[str, str], bool]:
        """The ``requestState`` a call was given, verified (sealed by this server,
        for this tool or prompt and this caller): the tool's own state, what the
        round asked for (method by key), and whether it was an elicitation."""
        try:
            opened = self.dispatcher.sealer.open_state(sealed, binding_of(context.caller))
        except (InvalidToken, ExpiredToken) as exc:
            raise InvalidParams(f"Invalid params: requestState: {exc.message}") from None
        try:
            issued_to, state, asked, merge = json.loads(opened)
        except (ValueError, TypeError):  # sealed by this secret, but not by this code
            raise InvalidParams("Invalid params: requestState is not one of ours") from None
        if issued_to != owner:
            raise InvalidParams(f"Invalid params: requestState was not issued for {owner}")
        return state, asked, merge

    def input_required(
        self,
        owner: str,
        outcome: Elicitation | InputRequired,
        capabilities: Mapping[str, Any],
        context: RequestContext,
    ) -> dict[str, Any]:
        """An ``input_required`` result; -32021 when it asks for something the client
        did not declare it can do (MCP: never send such a request)."""
        requests = input_requests(outcome)
        for asked in requests.values():
            needed = _REQUEST_CAPABILITY.get(asked.get("method", ""))
            if needed is not None and needed not in capabilities:
                raise MissingCapability(needed, {needed: {}})
        state = outcome.state if isinstance(outcome, InputRequired) else None
        asked = {key: str(request.get("method")) for key, request in requests.items()}
        merge = isinstance(outcome, Elicitation)
        # Sealed with the owner's name: a state given by one tool never reaches
        # another; and with the round, so that only what was asked is answered.
        sealed = self.dispatcher.sealer.seal_state(
            json.dumps([owner, state, asked, merge]), _STATE_TTL, binding_of(context.caller)
        )
        return {"resultType": "input_required", "inputRequests": requests, "requestState": sealed}

    # -- 2025: asking the client on the call's stream --------------------------

    async def ask(
        self, requests: Mapping[str, Mapping[str, Any]], send: Sender, context: RequestContext
    ) -> dict[str, Any] | Result:
        """Send ``requests`` to the client; its answers by key, or the failure that
        ends the call (an error answer, no answer in time, too many pending).  Only
        the caller that was asked can answer (with auth on: the same subject)."""
        started = time.time()
        if len(self._pending) + len(requests) > _MAX_PENDING:
            return failed(started, "too many requests to clients are pending; try again")
        loop = asyncio.get_running_loop()
        waiting: dict[str, tuple[str, asyncio.Future[Any]]] = {}
        try:
            for key, asked in requests.items():
                request_id = f"mcplite-{secrets.token_hex(16)}"
                future: asyncio.Future[Any] = loop.create_future()
                self._pending[request_id] = (future, binding_of(context.caller))
                waiting[key] = (request_id, future)
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": asked.get("method"),
                        "params": asked.get("params", {}),
                    }
                )
            futures = [future for _, future in waiting.values()]
            done, _ = await asyncio.wait(futures, timeout=_ASK_TIMEOUT)
            answers: dict[str, Any] = {}
            for key, (_, future) in waiting.items():
                method = requests[key].get("method")
                if future not in done:
                    return failed(started, f"the client did not answer {method} in time")
                answer = future.result()
                if "error" in answer:
                    error = answer["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    return failed(started, f"the client could not answer {method}: {message}")
                answers[key] = answer.get("result")
            try:
                asked_methods = {
                    key: str(request.get("method")) for key, request in requests.items()
                }
                return check_answers(answers, asked_methods) or {}
            except InvalidParams as exc:
                return failed(started, f"the client's answer is not usable: {exc.message}")
        finally:
            for request_id, _ in waiting.values():
                self._pending.pop(request_id, None)

    def answer(self, message: Mapping[str, Any], context: RequestContext) -> None:
        """A client's answer to a request of :meth:`ask` (others are dropped)."""
        request_id = message.get("id")
        pending = self._pending.get(request_id) if isinstance(request_id, str) else None
        if pending is None:
            return
        future, asked = pending
        if not future.done() and hmac.compare_digest(asked, binding_of(context.caller)):
            future.set_result(message)


def failed(started: float, message: str) -> Result:
    """A call that ends as a failure without running (again)."""
    return Result(Failure(message), started, (time.time() - started) * 1000)
