"""MCP tasks (the ``io.modelcontextprotocol/tasks`` extension) over mcplite promises.

A task *is* a promise: its ``taskId`` is the sealed token of the call that
outlived its deadline, so ``tasks/get`` is a redeem and ``tasks/cancel`` a
cancel.  What MCP adds is the input round inside a task: a tool that returns
:class:`~mcplite.core.outcomes.InputRequired` parks the task in ``input_required``;
the client answers with ``tasks/update`` (a key at a time, if it likes), and
once every open request is answered the tool runs again with the answers in
``ctx.input_responses`` (and its ``state`` in ``ctx.request_state``), exactly
as a repeated ``tools/call`` would bring them.

For that the table below keeps, per task and in this process, what the promise
record does not: the call (tool, arguments, caller) and the open round.  It is
bounded (oldest out first) and a record lives as long as its token.  A task this
table does not know (evicted, or started by another process sharing the promise
store) is still answered from its promise, but cannot take answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ...core.context import RequestContext, binding_of
from ...core.dispatch import Dispatcher, start_task
from ...core.envelope import Result
from ...core.errors import (
    ExpiredToken,
    InvalidParams,
    InvalidToken,
    MCPLiteError,
    StoreUnavailable,
    UnknownPromise,
)
from ...core.outcomes import Elicitation, Failure, InputRequired, Promised
from ...core.tokens import sealed_expiry
from ...core.wire import iso_timestamp
from ..requests import Request
from .protocol import TASKS_EXTENSION, MissingCapability, extensions_of
from .render import call_result

__all__ = [
    "TOKEN_ERRORS",
    "Task",
    "TaskMethods",
    "TaskStatus",
    "TaskTable",
    "check_answers",
    "input_requests",
    "task_result",
    "with_elicited",
]

#: What a token that names no task (any more) raises.
TOKEN_ERRORS = (InvalidToken, ExpiredToken, UnknownPromise)
#: How often a client should poll a task (tasks/get), in milliseconds.
POLL_INTERVAL_MS = 500


class TaskStatus(StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


def input_requests(outcome: Elicitation | InputRequired) -> dict[str, dict[str, Any]]:
    """What a tool asks the client for, keyed: an :class:`Elicitation` is one
    ``elicitation/create`` under the key ``"elicitation"``."""
    if isinstance(outcome, InputRequired):
        return dict(outcome.requests)
    params = {"message": outcome.message, "requestedSchema": outcome.requested_schema}
    return {"elicitation": {"method": "elicitation/create", "params": params}}


def check_answers(
    responses: Mapping[str, Any] | None, asked: Mapping[str, str] | None
) -> dict[str, Any] | None:
    """The client's ``inputResponses`` that answer a round: with ``asked`` (the
    method of each request by key), only the keys asked for (others are ignored,
    as MCP asks of unknown data), each checked against the result its method
    gives; without it, every answer, checked against any of those results.
    Raises :class:`~mcplite.core.errors.InvalidParams` naming the first bad key."""
    if responses is None:
        return None
    if asked is None:
        for key, value in responses.items():
            if all(_answer_problem(m, value) for m in _ANSWER_SHAPES):
                _refuse(key, "must be an elicitation, sampling or roots result")
        return dict(responses)
    out: dict[str, Any] = {}
    for key, method in asked.items():
        if key in responses:
            problem = _answer_problem(method, responses[key])
            if problem is not None:
                _refuse(key, problem)
            out[key] = responses[key]
    return out


#: What answers each input request: the result its method returns.
_ANSWER_SHAPES = ("elicitation/create", "sampling/createMessage", "roots/list")


def _answer_problem(method: str, value: Any) -> str | None:
    """What is wrong with ``value`` as the result of ``method`` (None: nothing)."""
    if not isinstance(value, dict):
        return "must be an object (the result of the request asked)"
    if method == "elicitation/create":
        if value.get("action") not in ("accept", "decline", "cancel"):
            return 'must be an elicitation result: "action" is accept, decline or cancel'
        if "content" in value and not isinstance(value["content"], dict):
            return "must be an elicitation result: its content is an object"
    elif method == "sampling/createMessage":
        if not isinstance(value.get("role"), str) or not isinstance(
            value.get("content"), dict | list
        ):
            return "must be a sampling result with a role and content"
    elif method == "roots/list":
        roots = value.get("roots")
        if not isinstance(roots, list) or not all(
            isinstance(root, dict) and isinstance(root.get("uri"), str) for root in roots
        ):
            return "must be a roots result: a list of roots, each with a uri"
    return None


def with_elicited(arguments: Any, responses: Mapping[str, Any] | None) -> Any:
    """The arguments of a call answering an MCP-lite elicitation: the accepted
    content merged in; a declined or cancelled elicitation ends the call, as the
    failure returned (a :class:`Result`)."""
    answer = responses.get("elicitation") if responses else None
    if not isinstance(answer, dict):
        return arguments
    action = answer.get("action")
    if action == "accept" and isinstance(answer.get("content"), dict):
        return {**(arguments or {}), **answer["content"]}
    if action in ("decline", "cancel"):
        return Result(Failure(f"the user chose to {action}", reason=action), time.time(), 0.0)
    return arguments


def _refuse(key: str, problem: str) -> None:
    raise InvalidParams(
        f"Invalid params: inputResponses[{key!r}] {problem}",
        {"field": f"inputResponses.{key}"},
    )


@dataclass(slots=True, eq=False)
class Task:
    """One task as this process tracks it."""

    task_id: str  # the token of the call that became the task
    tool: str | None  # None: not ours to run again (see the module doc)
    arguments: dict[str, Any] | None
    context: RequestContext  # the creating request's, without its stream
    created_at: float
    expires_at: float
    updated_at: float
    token: str  # the promise answering now (the task id, until the tool runs again)
    run: asyncio.Task[Result] | None = None  # the tool running again, not yet a promise
    outcome: Result | MCPLiteError | None = None  # how the current run ended
    progress: dict[str, Any] | None = None  # the last progress the run reported
    asked: dict[str, dict[str, Any]] | None = None  # the open round's requests
    answers: dict[str, Any] = field(default_factory=dict)  # ... and its answers so far
    cancelled: bool = False

    @property
    def status(self) -> TaskStatus:
        """The status as last settled (see :meth:`TaskTable.settle`)."""
        if self.cancelled:
            return TaskStatus.CANCELLED
        outcome = self.outcome
        if outcome is None:
            return TaskStatus.WORKING
        if isinstance(outcome, MCPLiteError):
            return TaskStatus.FAILED
        if self.asked is not None:
            return TaskStatus.INPUT_REQUIRED
        return TaskStatus.COMPLETED

    def open_requests(self) -> dict[str, dict[str, Any]]:
        """The input requests not answered yet."""
        asked = self.asked or {}
        return {key: request for key, request in asked.items() if key not in self.answers}


class TaskTable:
    """The tasks of this process, bounded by ``max_entries`` (oldest dropped first)."""

    def __init__(self, dispatcher: Dispatcher, max_entries: int) -> None:
        self.dispatcher = dispatcher
        self._max = max(1, max_entries)
        self._tasks: dict[str, Task] = {}  # insertion order is expiry order

    def __len__(self) -> int:
        return len(self._tasks)

    def add(
        self,
        promised: Promised,
        tool: str,
        arguments: dict[str, Any] | None,
        context: RequestContext,
    ) -> Task:
        """Track the task a call became."""
        now = time.time()
        self._sweep(now)
        while len(self._tasks) >= self._max:
            _drop(self._tasks.pop(next(iter(self._tasks))))
        kept = dataclasses.replace(
            context, notify=None, progress_token=None, input_responses=None, request_state=None
        )
        ttl = self.dispatcher.config.promise_ttl
        # As its id says: kept no longer than its token opens (a float kept here
        # outlived the token by up to a millisecond).
        expires_at = sealed_expiry(promised.expires_at)
        task = Task(
            promised.token,
            tool,
            arguments,
            kept,
            created_at=expires_at - ttl,
            expires_at=expires_at,
            updated_at=now,
            token=promised.token,
            progress=promised.progress,
        )
        self._tasks[task.task_id] = task
        return task

    async def find(self, task_id: str, context: RequestContext) -> Task:
        """The task called ``task_id``, for ``context``'s caller; raises the token's
        error (:class:`~mcplite.core.errors.InvalidToken`, ``ExpiredToken``,
        ``UnknownPromise``) when there is none, or when another subject made it."""
        self._sweep(time.time())
        # The id is the task's first promise token, bound to its creator.
        promise_id, expires_at = self.dispatcher.sealer.open(task_id, binding_of(context.caller))
        task = self._tasks.get(task_id)
        if task is not None:
            return task
        await self.dispatcher.promises.get(promise_id)
        created = expires_at - self.dispatcher.config.promise_ttl
        # Not ours: answered from its promise alone, never stored.
        kept = dataclasses.replace(context, notify=None, input_responses=None, request_state=None)
        return Task(task_id, None, None, kept, created, expires_at, created, task_id)

    def _sweep(self, now: float) -> None:
        tasks = self._tasks
        while tasks:
            oldest = next(iter(tasks.values()))
            if oldest.expires_at > now:
                break
            _drop(tasks.pop(oldest.task_id))

    async def settle(self, task: Task) -> TaskStatus:
        """Bring ``task`` up to date with its run and its promise; its status.

        Raises the token's error when its promise is gone (expired, unknown).
        """
        if task.cancelled or task.outcome is not None:
            return task.status
        run = task.run
        if run is not None:
            if not run.done():
                return TaskStatus.WORKING
            task.run = None
            if run.cancelled():
                task.cancelled = True
                return task.status
            exc = run.exception()
            if exc is not None:
                if not isinstance(exc, MCPLiteError):  # not expected: the core raises only these
                    exc = self.dispatcher.internal_error(task.tool or "", exc)
                self._ended(task, exc)
                return task.status
            result = run.result()
            if not isinstance(result.outcome, Promised):
                self._ended(task, result)
                return task.status
            task.token = result.outcome.token
        try:
            result = await self.dispatcher.redeem(task.token, 0, task.context)
        except TOKEN_ERRORS:
            raise  # its promise is gone (expired, or unknown here)
        except StoreUnavailable:
            raise  # for now: the task goes on, and is asked about again
        except MCPLiteError as exc:  # the call ended in a protocol error
            self._ended(task, exc)
            return task.status
        if isinstance(result.outcome, Promised):
            task.progress = result.outcome.progress
            return TaskStatus.WORKING
        outcome = result.outcome
        if task.tool is None and isinstance(outcome, Failure) and outcome.reason == "cancelled":
            task.cancelled = True  # not ours: a cancelled promise reads as this failure
        self._ended(task, result)
        return task.status

    def _ended(self, task: Task, outcome: Result | MCPLiteError) -> None:
        task.outcome = outcome
        task.updated_at = time.time()
        task.answers = {}
        task.asked = None
        if isinstance(outcome, Result) and isinstance(outcome.outcome, Elicitation | InputRequired):
            task.asked = input_requests(outcome.outcome)

    async def update(self, task: Task, responses: Mapping[str, Any]) -> None:
        """Take the client's answers to the open round (others are ignored); run the
        tool again once every request of the round is answered."""
        if await self.settle(task) is not TaskStatus.INPUT_REQUIRED or task.tool is None:
            return
        asked = task.asked or {}
        methods = {key: str(request.get("method")) for key, request in asked.items()}
        answers = check_answers(responses, methods) or {}
        for key, value in answers.items():
            if key not in task.answers:
                task.answers[key] = value
                task.updated_at = time.time()
        if len(task.answers) < len(asked):
            return
        assert isinstance(task.outcome, Result)
        outcome = task.outcome.outcome
        assert isinstance(outcome, Elicitation | InputRequired)
        answers, arguments = task.answers, task.arguments
        if isinstance(outcome, Elicitation):
            # MCP-lite's elicitation: the accepted content becomes arguments.
            merged = with_elicited(arguments, answers)
            if isinstance(merged, Result):  # declined or cancelled
                self._ended(task, merged)
                return
            arguments = merged
        state = outcome.state if isinstance(outcome, InputRequired) else None
        context = dataclasses.replace(task.context, input_responses=answers, request_state=state)
        task.outcome, task.asked, task.answers = None, None, {}
        task.updated_at = time.time()
        run = start_task(self.dispatcher.call(task.tool, arguments, context))
        run.add_done_callback(_retrieve)
        task.run = run

    async def cancel(self, task: Task) -> None:
        """Stop the task unless it has ended (then nothing changes)."""
        status = await self.settle(task)
        if status not in (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED):
            return
        task.cancelled = True
        task.updated_at = time.time()
        if task.run is not None:
            task.run.cancel()
        elif status is TaskStatus.WORKING:
            with contextlib.suppress(MCPLiteError):  # gone: nothing runs any more
                await self.dispatcher.cancel(task.token, task.context)

    def close(self) -> None:
        """Stop the runs still going and forget every task (shutdown)."""
        for task in self._tasks.values():
            _drop(task)
        self._tasks.clear()


def _drop(task: Task) -> None:
    """A task leaves the table: a run of it still going stops (nothing could read it)."""
    if task.run is not None:
        task.run.cancel()


def _retrieve(run: asyncio.Task[Result]) -> None:
    # Read the exception so a run nobody polls again is not logged as unretrieved.
    if not run.cancelled():
        run.exception()


def task_result(task: Task, status: TaskStatus, result_type: str, ttl: float) -> dict[str, Any]:
    """What MCP says of a task: its id, status, times and poll interval, as a
    result of ``resultType`` ``result_type`` (``"task"`` when a call becomes
    one, ``"complete"`` answering tasks/get); ``ttl``: the promise's."""
    out: dict[str, Any] = {
        "resultType": result_type,
        "taskId": task.task_id,
        "status": str(status),
        "createdAt": iso_timestamp(task.created_at),
        "lastUpdatedAt": iso_timestamp(task.updated_at),
        "ttlMs": int(ttl * 1000) if math.isfinite(ttl) else None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    progress = task.progress or {}
    if status is TaskStatus.WORKING and isinstance(progress.get("message"), str):
        out["statusMessage"] = progress["message"]
    return out


class TaskMethods:
    """``tasks/get``, ``tasks/update`` and ``tasks/cancel`` (2026, for a client that
    declared the tasks extension) over a :class:`TaskTable`."""

    def __init__(self, tasks: TaskTable) -> None:
        self.tasks = tasks

    async def get(self, request: Request) -> dict[str, Any]:
        task = await self._find(request)
        status = task.status
        out = task_result(task, status, "complete", self.tasks.dispatcher.config.promise_ttl)
        if status is TaskStatus.INPUT_REQUIRED:
            out["inputRequests"] = task.open_requests()
        elif status is TaskStatus.FAILED:
            assert isinstance(task.outcome, MCPLiteError)
            out["error"] = {"code": task.outcome.jsonrpc_code, "message": task.outcome.message}
        elif status is TaskStatus.COMPLETED:
            assert isinstance(task.outcome, Result)
            out["result"] = {"resultType": "complete", **call_result(task.outcome, True)}
        return out

    async def update(self, request: Request) -> dict[str, Any]:
        task = await self._find(request)
        responses = request.params.get("inputResponses")
        if not isinstance(responses, dict):
            raise InvalidParams("Invalid params: inputResponses must be an object")
        await self.tasks.update(task, responses)
        return {}

    async def cancel(self, request: Request) -> dict[str, Any]:
        task = await self._find(request)
        await self.tasks.cancel(task)
        return {}

    async def _find(self, request: Request) -> Task:
        """The task ``params.taskId`` names, settled; -32021 without the extension,
        -32602 for an id that names no task of this caller."""
        if TASKS_EXTENSION not in extensions_of(request.capabilities):
            raise MissingCapability(
                f"extensions.{TASKS_EXTENSION}", {"extensions": {TASKS_EXTENSION: {}}}
            )
        task_id = request.params.get("taskId")
        if not isinstance(task_id, str):
            raise InvalidParams("Invalid params: taskId must be a string")
        try:
            task = await self.tasks.find(task_id, request.context)
            await self.tasks.settle(task)
        except TOKEN_ERRORS as exc:
            raise InvalidParams(f"Unknown task: {exc.message}", {"taskId": task_id}) from None
        return task
