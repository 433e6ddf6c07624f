"""The core: find a tool, refuse or admit the call, validate, run, promise.

Every binding goes through :class:`Dispatcher`; it knows no wire.  The steps of
a call, each in one place:

1. look the tool up (:meth:`Dispatcher.tool`, with A.5's suggestion);
2. ask the policy whether this caller may call it (:mod:`mcplite.core.authorize`);
3. validate the arguments against the compiled schema (:mod:`mcplite.core.schema`);
4. admit it under the concurrency limit;
5. run it (:mod:`mcplite.core.runner`), and when it outlives its promise deadline,
   store a promise record (:mod:`mcplite.core.promises`) and answer with a sealed
   token (:mod:`mcplite.core.tokens`) while the task goes on in this process.
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import logging
import math
import os
import secrets
import socket
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .authorize import AllowAll, Gate, Policy
from .config import Config
from .content import text as text_block
from .context import IN_PROCESS, RequestContext, binding_of
from .envelope import Result
from .errors import (
    InvalidArguments,
    MCPLiteError,
    Overloaded,
    PromiseTableFull,
    StoreUnavailable,
    ToolNotFound,
)
from .listeners import Listeners
from .middleware import CallNext, Middleware, ToolCall, chain
from .observe import QUIET, AccessLog, Metrics
from .outcomes import Answer, Failure, Promised
from .promises import (
    MemoryStore,
    PromiseRecord,
    PromiseStatus,
    PromiseStore,
    stop_tasks,
    store_outcome,
)
from .runner import Runner, aggregate, internal_error, start_task
from .schema import SchemaError
from .streams import ToolStream
from .tokens import TokenSealer
from .tools import Context, Kind, Progress, Tool, Tools

__all__ = ["Dispatcher", "ToolStream", "aggregate", "start_task"]

log = logging.getLogger("mcplite")

#: The dispatchers serving each registry (see Dispatcher.serving).
_SERVING: weakref.WeakKeyDictionary[Tools, weakref.WeakSet[Dispatcher]] = (
    weakref.WeakKeyDictionary()
)


class Dispatcher:
    """Serves the tools of a registry to any binding.

    :meth:`call` and :meth:`stream` raise :class:`~mcplite.core.errors.MCPLiteError`
    subclasses for protocol errors (unknown tool, refused, invalid arguments,
    overload, a crash inside a tool); every business outcome is a :class:`Result`.

    ``config.secret`` seals promise tokens; without one a random secret is used
    (resolving ``--secret`` and ``MCPLITE_SECRET`` is :mod:`mcplite.ops.serve`'s job).
    """

    def __init__(
        self,
        tools: Tools | Iterable[Tool],
        config: Config | None = None,
        *,
        promises: PromiseStore | None = None,
        policy: Policy | None = None,
        auth: Gate | None = None,
        metrics: Metrics = QUIET,
        access_log: AccessLog = QUIET,
        middleware: Iterable[Middleware] = (),
    ) -> None:
        self.config = config = config or Config()
        secret = config.secret if config.secret is not None else secrets.token_bytes(32)
        self.sealer = TokenSealer(secret, config.previous_secrets)
        self.promises: PromiseStore = (
            promises
            if promises is not None
            else MemoryStore(
                ttl=config.promise_ttl,
                max_entries=config.max_promises,
                retry_after=config.retry_after,
            )
        )
        self.promises.on_cancel(self._stop_local)
        #: Authentication for the network bindings (None: off); see :mod:`mcplite.auth`.
        self.auth = auth if auth is not None and auth.required else None
        if policy is None:
            policy = self.auth.policy() if self.auth is not None else AllowAll()
        self.policy: Policy = policy
        #: Where calls are counted and requests logged (see :mod:`mcplite.core.observe`).
        self.metrics = metrics
        self.access_log = access_log
        #: Around every call, the first outermost (see :mod:`mcplite.core.middleware`).
        self.middleware: tuple[Middleware, ...] = ()
        self._handler: CallNext = self._run
        for each in middleware:
            self.use(each)
        self.runner = Runner(config.sync_workers)
        #: Names this process as the owner of the promises whose tasks it runs.
        self.owner = f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"
        self._local: dict[bytes, _Kept] = {}  # the promised calls this process runs
        self._storing: set[asyncio.Task[None]] = set()  # their outcomes on the way to the store
        self._tools: dict[str, Tool] = {}
        #: The tools served now, by name (system tools included), for a binding's
        #: lookup on every request without a call; change it with :meth:`add_tool`
        #: and :meth:`remove_tool` (or the registry).  :meth:`tool` says what is
        #: missing.
        self.served: Mapping[str, Tool] = self._tools
        for tool in (*self._system_tools(), *tools):
            if tool.name in self._tools:
                raise ValueError(f"a tool named {tool.name!r} is already registered")
            self._tools[tool.name] = tool
        self._definitions = [t.definition() for t in self._tools.values()]
        self._names = list(self._tools)
        self.active = 0  # calls and streams in flight
        self.streams = 0  # streams open (started, tool not done)
        #: Counts the changes to the tool list (add_tool, remove_tool): caches of it check it.
        self.version = 0
        self._listeners = Listeners()
        #: The tools of the registry this dispatcher follows (see _registry_changed).
        self._from_registry: dict[str, Tool] = {}
        if isinstance(tools, Tools):
            _SERVING.setdefault(tools, weakref.WeakSet()).add(self)
            self._from_registry = {tool.name: tool for tool in tools}
            _follow(self, tools)

    # -- changing the tools while serving -------------------------------------

    @staticmethod
    def serving(tools: Tools) -> list[Dispatcher]:
        """The dispatchers built from the registry ``tools`` that are still alive
        (for a tool that changes the list of the server it runs in)."""
        return list(_SERVING.get(tools, ()))

    def add_tool(self, tool: Tool) -> None:
        """Serve ``tool`` from now on (made with :meth:`Tools.add`); ValueError when
        a tool of that name is already served."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._changed()

    def remove_tool(self, name: str) -> Tool:
        """Stop serving the tool called ``name`` and return it (calls already
        running finish).  Raises :class:`ToolNotFound`, or ValueError for a system
        tool (redeem, cancel)."""
        tool = self.tool(name)
        if tool.kind is Kind.SYSTEM:
            raise ValueError(f"the system tool {name!r} cannot be removed")
        del self._tools[name]
        self._changed()
        return tool

    def _registry_changed(self, tools: Tools) -> None:
        """The registry this dispatcher was made from changed (``tools.add``,
        ``tools.remove``): serve what it holds now.  A tool :meth:`remove_tool`
        took away stays away; a new tool whose name this dispatcher already
        serves (a system tool, one given to :meth:`add_tool`) is not served."""
        held = {tool.name: tool for tool in tools}
        changed = False
        for name, tool in list(self._from_registry.items()):
            if held.get(name) is not tool:  # removed from the registry, or replaced
                del self._from_registry[name]
                if self._tools.get(name) is tool:
                    del self._tools[name]
                    changed = True
        for name, tool in held.items():
            if name in self._from_registry:
                continue
            self._from_registry[name] = tool
            if name in self._tools:
                log.error("tool %r is not served: another tool of that name is", name)
                continue
            self._tools[name] = tool
            changed = True
        if changed:
            self._changed()

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every tool added or removed; returns the
        function that stops it."""
        return self._listeners.add(listener)

    def _changed(self) -> None:
        # New lists, never edited in place: a binding that cached the old one
        # (by identity, or by version) sees the change.
        self._definitions = [t.definition() for t in self._tools.values()]
        self._names = list(self._tools)
        self.version += 1
        self._listeners.notify()

    # -- discovery ----------------------------------------------------------

    @property
    def pending_promises(self) -> int:
        """Promises whose calls this process runs now."""
        return len(self._local)

    def tools(self) -> list[Tool]:
        """Every tool served, system tools included."""
        return list(self._tools.values())

    def tool_definitions(self, context: RequestContext = IN_PROCESS) -> list[dict[str, Any]]:
        """Every tool's discovery entry the caller may see, system tools included."""
        if type(self.policy) is AllowAll:
            return self._definitions  # built once
        return [t.definition() for t in self._tools.values() if self.policy.visible(context, t)]

    def tool(self, name: str, context: RequestContext = IN_PROCESS, *, system: bool = True) -> Tool:
        """The tool called ``name``; raises :class:`ToolNotFound` with a suggestion
        among the tools ``context``'s caller may see.  ``system=False``: MCP-lite's
        own ``redeem`` and ``cancel`` are left out of that list and suggestion
        (MCP does not list them: it has tasks), though they may still be called."""
        tool = self._tools.get(name)
        if tool is None:
            names = self._names
            if not system or type(self.policy) is not AllowAll:
                visible = self.policy.visible
                names = [
                    n
                    for n, t in self._tools.items()
                    if (system or t.kind is not Kind.SYSTEM) and visible(context, t)
                ]
            raise ToolNotFound(name, names, _closest(name, names))
        return tool

    # -- calls --------------------------------------------------------------

    def use(self, middleware: Middleware) -> None:
        """Run ``middleware`` around every call from now on, inside those added
        before it (see :mod:`mcplite.core.middleware`)."""
        self.middleware = (*self.middleware, middleware)
        self._handler = chain(self.middleware, self._run)

    def validate(self, tool: Tool, arguments: Any) -> dict[str, Any]:
        """Arguments checked against the tool's schema, defaults filled in.

        Raises :class:`InvalidArguments` naming every offending field.
        """
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise InvalidArguments.from_fields([("arguments", "expected an object")])
        try:
            return tool.arguments(tool.checker(arguments))
        except SchemaError as exc:
            raise InvalidArguments.from_fields([(e.path, e.message) for e in exc.errors]) from None

    def _admit(self, tool: Tool, arguments: Any, context: RequestContext) -> dict[str, Any]:
        """The arguments of a call of ``tool`` by ``context``'s caller, once the
        policy allows it, the schema accepts them and the concurrency limit has
        room; raises what the policy refuses with, :class:`InvalidArguments` or
        :class:`Overloaded`."""
        self.policy.authorize(context, tool)
        args = self.validate(tool, arguments)
        if self.active >= self.config.max_concurrent_calls:
            raise Overloaded(
                f"Too many concurrent calls (max {self.config.max_concurrent_calls})",
                retry_after=self.config.retry_after,
            )
        return args

    async def call(
        self, name: str, arguments: Any = None, context: RequestContext = IN_PROCESS
    ) -> Result:
        """Run tool ``name`` for ``context``'s caller: its outcome, or a promise once
        it outlives its promise deadline (the tool goes on in this process).

        Raises :class:`ToolNotFound`, :class:`InvalidArguments`,
        :class:`Overloaded`, :class:`PromiseTableFull`, what the policy refuses
        with, and :class:`~mcplite.core.errors.InternalError` for an exception
        in the tool; and what a middleware raises.
        """
        t0 = time.perf_counter()
        try:
            tool = self._tools.get(name)
            if tool is None:
                tool = self.tool(name, context)  # raises ToolNotFound, with a suggestion
            args = self._admit(tool, arguments, context)
            self.active += 1
            try:
                result = await self._handler(ToolCall(tool, args, context))
            finally:
                self.active -= 1
        except MCPLiteError as exc:
            metrics = self.metrics
            if metrics.on:
                label = name if name in self._tools else _UNKNOWN
                elapsed = time.perf_counter() - t0
                metrics.call_error(context.binding, label, exc.jsonrpc_code, elapsed)
            raise
        metrics = self.metrics
        if metrics.on:
            kind = result.response_type.value
            metrics.call(context.binding, name, kind, time.perf_counter() - t0)
        return result

    async def _run(self, call: ToolCall) -> Result:
        """The innermost step of the chain: run the tool, racing its promise deadline."""
        started, t0 = time.time(), time.perf_counter()
        tool, args, context = call.tool, call.arguments, call.context
        if tool.kind is _SYSTEM:
            result: Result = await tool.fn(context, **args)
            return result
        progress: Progress | None = None
        if tool.context_param is not None:
            progress = Progress()
            ctx = Context(tool.name, progress, context.caller, context)
            args = {**args, tool.context_param: ctx}
        deadline = tool.promise_after
        if deadline is None:
            deadline = self.config.promise_after
        if math.isinf(deadline):
            # The hot path: no task, no timer.
            outcome = await self.runner.run(tool, args)
            return Result(outcome, started, (time.perf_counter() - t0) * 1000)
        return await self._race(tool, args, progress, deadline, started, t0, context)

    async def _race(
        self,
        tool: Tool,
        args: dict[str, Any],
        progress: Progress | None,
        deadline: float,
        started: float,
        t0: float,
        context: RequestContext,
    ) -> Result:
        """Run the call in a task of its own for up to ``deadline`` seconds (0: not
        at all): its result if it ends by then, else a promise of it.  Raises
        :class:`PromiseTableFull` when the store has no room for the promise."""
        if deadline == 0 and not await self.promises.has_room():
            raise PromiseTableFull(retry_after=self.config.retry_after)
        kept = _Kept(self, tool, self.runner.start(tool, args), started, t0)
        del args  # the task holds them; this frame waits up to the deadline
        task = kept.task
        promised = False
        try:
            # ALWAYS (0) means a promise even for a tool that is already done.
            if deadline > 0 and await _wait_done(task, deadline):
                return _unwrap(kept.result())
            record = await self.promises.create(tool.name, self.owner)
            promised = True
            self._adopt(record, kept, progress)
            return self._promised(record, started, t0, binding_of(context.caller))
        finally:
            if not promised:
                if not task.done():
                    task.cancel()  # the caller left, or the store is full: stop the tool
                elif not task.cancelled():
                    kept.result()  # read, so that an exception of the tool is logged

    def _adopt(self, record: PromiseRecord, kept: _Kept, progress: Progress | None) -> None:
        """Keep a promised task in this process and store its outcome when it ends."""
        promise_id = kept.promise_id = record.promise_id
        kept.expires_at = record.expires_at
        self._local[promise_id] = kept
        if progress is not None:
            store = self.promises
            if progress.reported:
                # The promise is answered from this record, which a shared store's
                # set_progress does not update: show the progress reported so far.
                record.progress = progress.record()
                store.set_progress(promise_id, record.progress)
            progress.sink = lambda p: store.set_progress(promise_id, p.record())
        # An empty context: no copy of the caller's per callback (a pending
        # promise costs its task and the tool's frame, little else).
        kept.task.add_done_callback(kept.finished, context=_CALLBACKS)

    def _finished(self, kept: _Kept) -> None:
        if kept.stopped():
            self._local.pop(kept.promise_id, None)
            return
        task = start_task(self._settled(kept, kept.result()))
        if not task.done():  # a store that is slow, or down: close() stops it
            self._storing.add(task)
            task.add_done_callback(self._storing.discard)

    async def _settled(self, kept: _Kept, outcome: Result | MCPLiteError) -> None:
        promise_id, retry = kept.promise_id, self.config.retry_after
        try:
            # Tried again while the store is down (a redeem here may answer from _local).
            await store_outcome(self.promises, promise_id, outcome, kept.expires_at, retry)
        except StoreUnavailable:
            log.warning("a promise of %r expired before the store took its outcome", kept.tool.name)
        except Exception as exc:
            # A result the store cannot encode: the promise must not look as if the
            # call were still running until it expires.
            error = internal_error(kept.tool.name, exc, "its outcome could not be stored")
            try:
                await self.promises.complete(promise_id, None, error)
            except Exception:
                log.error(
                    "the promise store refused the error too (%s): the promise stays "
                    "pending until it expires",
                    error.message,
                )
        finally:
            self._local.pop(promise_id, None)

    def _stop_local(self, promise_id: bytes) -> None:
        """The store says a promise must stop (cancelled or expired): stop our task."""
        kept = self._local.pop(promise_id, None)
        if kept is not None and not kept.task.done():
            kept.task.cancel()

    def _promised(self, record: PromiseRecord, started: float, t0: float, bound: bytes) -> Result:
        progress = record.progress
        estimated = None
        shown = None
        if progress:
            estimated = progress.get("estimated_completion")
            shown = {k: v for k, v in progress.items() if k != "estimated_completion"} or None
        token = self.sealer.seal(record.promise_id, record.expires_at, bound)
        outcome = Promised(token, record.expires_at, shown, estimated)
        return Result(outcome, started, (time.perf_counter() - t0) * 1000)

    # -- streams ------------------------------------------------------------

    def stream(
        self,
        name: str,
        arguments: Any = None,
        context: RequestContext = IN_PROCESS,
        *,
        progress: bool = False,
    ) -> ToolStream:
        """Start a streamed call: an async iterator of :class:`Partial` then one :class:`Result`.

        ``progress``: what the tool reports (``ctx.report_progress``) comes too, as
        :class:`ProgressUpdate` items between the parts, from :meth:`ToolStream.next`
        (the bindings ask for it; ``async for`` gives the parts and the result only).
        Raises :class:`ToolNotFound`, :class:`InvalidParams` or :class:`Overloaded`
        (and whatever the policy refuses with) before anything runs.  Close it
        (``aclose``) to stop the tool.
        """
        tool = self.tool(name, context)
        args = self._admit(tool, arguments, context)
        ctx = None
        if tool.context_param is not None:
            ctx = Context(tool.name, caller=context.caller, request=context)
        stream = ToolStream(self, tool, args, context, ctx)
        if progress and ctx is not None:
            ctx.progress.sink = stream.reported
        return stream

    # -- system tools: redeem and cancel ------------------------------------

    def _system_tools(self) -> list[Tool]:
        system = Tools()
        token = {
            "type": "string",
            "description": "The promise token received from a previous operation",
        }
        system.add(
            self._redeem,
            name="redeem",
            type="system",
            description="Redeem a promise token to get the result of a long-running operation",
            schema={
                "type": "object",
                "required": ["promise"],
                "properties": {
                    "promise": token,
                    "wait": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": self.config.max_redeem_wait,
                        "default": 0,
                        "description": "Seconds to wait for the outcome before answering "
                        "with the promise again (long poll)",
                    },
                },
            },
            promise_after=math.inf,
        ).kind = Kind.SYSTEM
        system.add(
            self._cancel,
            name="cancel",
            type="system",
            description="Cancel the long-running operation behind a promise token",
            schema={"type": "object", "required": ["promise"], "properties": {"promise": token}},
            promise_after=math.inf,
        ).kind = Kind.SYSTEM
        return list(system)

    async def redeem(
        self, token: str, wait: float = 0, context: RequestContext = IN_PROCESS
    ) -> Result:
        """The outcome behind a promise token, or the promise again while it runs.

        The token is verified before any store access, for ``context``'s caller
        (a promise is bound to the subject that created it); raises
        :class:`InvalidToken`, :class:`ExpiredToken` or :class:`UnknownPromise`.
        """
        started, t0 = time.time(), time.perf_counter()
        bound = binding_of(context.caller)
        promise_id, _ = self.sealer.open(token, bound)
        record = await self.promises.get(promise_id)
        if record.status is PromiseStatus.RUNNING:
            kept = self._local.get(promise_id)
            if kept is not None:  # ours: the task itself says when it is done
                task = kept.task
                if not task.done() and wait > 0:
                    await _wait_done(task, wait)
                if task.done():
                    # Read again: a record read before the wait (a copy, from a
                    # shared store) does not show a cancel that stopped the task.
                    record = await self.promises.get(promise_id)
                    if record.status is PromiseStatus.RUNNING and not kept.stopped():
                        return _unwrap(kept.result())
            elif wait > 0:
                record = await self.promises.wait(promise_id, wait)
        if record.status is PromiseStatus.RUNNING:
            return self._promised(record, started, t0, bound)
        if record.status is PromiseStatus.CANCELLED:
            elapsed = (time.perf_counter() - t0) * 1000
            failure = Failure("the operation was cancelled", reason="cancelled")
            return Result(failure, started, elapsed)
        if record.error is not None:
            raise record.error
        assert record.result is not None
        return record.result

    async def cancel(self, token: str, context: RequestContext = IN_PROCESS) -> bool:
        """Stop the call behind a promise token; False when it had already ended.
        Only the subject that created the promise may (see :meth:`redeem`)."""
        promise_id, _ = self.sealer.open(token, binding_of(context.caller))
        kept = self._local.get(promise_id)
        if kept is not None and kept.task.done() and not kept.stopped():
            await self.promises.get(promise_id)  # still known?
            return False  # finished; its outcome is on its way to the store
        return await self.promises.request_cancel(promise_id)

    async def _redeem(
        self, context: RequestContext, /, promise: str, wait: float = 0, **_: Any
    ) -> Result:
        return await self.redeem(promise, wait, context)

    async def _cancel(self, context: RequestContext, /, promise: str, **_: Any) -> Result:
        started, t0 = time.time(), time.perf_counter()
        cancelled = await self.cancel(promise, context)
        text = "cancelled" if cancelled else "already finished"
        answer = Answer([text_block(text)], {"cancelled": cancelled})
        return Result(answer, started, (time.perf_counter() - t0) * 1000)

    # -- lifecycle ----------------------------------------------------------

    def internal_error(self, tool: str, exc: BaseException) -> MCPLiteError:
        """Log an unexpected exception with an id; the error sent carries only the id."""
        return internal_error(tool, exc)

    def not_json(self, tool: str, exc: BaseException, what: str = "result") -> MCPLiteError:
        """A tool's result (or part) JSON cannot hold (NaN, bytes, a cycle): an
        internal error, logged with its id, that says so."""
        error = internal_error(tool, exc)
        error.message = f"The tool's {what} is not valid JSON: {exc}"
        return error

    async def close(self) -> None:
        """Cancel promised tasks, close the store and stop the thread pool (shutdown)."""
        for kept in list(self._local.values()):
            kept.task.cancel()
        self._local.clear()
        await stop_tasks(list(self._storing))
        await self.promises.close()
        self.runner.close()


def _follow(dispatcher: Dispatcher, tools: Tools) -> None:
    """Have ``dispatcher`` serve what ``tools`` holds after each change to it, for
    as long as the dispatcher lives (held weakly: a registry served by many
    dispatchers, in tests or workers, keeps none of them alive)."""
    ref = weakref.ref(dispatcher)

    def changed() -> None:
        live = ref()
        if live is not None:
            live._registry_changed(tools)

    weakref.finalize(dispatcher, tools.on_change(changed))


#: The context the done callbacks of promised tasks run in (they read no context variable).
_CALLBACKS = contextvars.Context()


@dataclass(slots=True, eq=False)
class _Kept:
    """A call this process runs in a task of its own: before its deadline, and
    after, as a promise (``promise_id`` set once the record exists)."""

    dispatcher: Dispatcher
    tool: Tool
    task: asyncio.Task[Any]
    started: float
    t0: float
    promise_id: bytes = b""
    expires_at: float = 0.0  # the promise's, epoch seconds
    _result: Result | MCPLiteError | None = None

    def stopped(self) -> bool:
        """Whether the task was cancelled by request (not by a stray CancelledError)."""
        return self.task.cancelled() and self.task.cancelling() > 0

    def result(self) -> Result | MCPLiteError:
        """The call's result or protocol error, read once from the done task
        (an internal error is logged once, however often it is asked for)."""
        if self._result is None:
            try:
                outcome = self.dispatcher.runner.outcome(self.tool, self.task)
            except MCPLiteError as exc:
                self._result = exc.with_traceback(None)
            else:
                elapsed = (time.perf_counter() - self.t0) * 1000
                self._result = Result(outcome, self.started, elapsed)
        return self._result

    def finished(self, _: asyncio.Task[Any]) -> None:
        self.dispatcher._finished(self)


#: Read on every call: an Enum member read off its class costs a metaclass lookup.
_SYSTEM = Kind.SYSTEM

#: The ``tool`` label of a call to a name that is not served (never the name itself:
#: a client could make the label set grow without bound).
_UNKNOWN = "(unknown)"


def _closest(name: str, names: list[str]) -> str | None:
    """The name in ``names`` closest to ``name`` (A.5's suggestion), if any is close.

    A name containing the request (or contained in it) wins; otherwise the best
    similarity ratio of at least 0.3, which still catches a wrong word in a long
    name while leaving unrelated names unsuggested.
    """
    lowered = name.lower()
    contains = [n for n in names if lowered and (lowered in n or n in lowered)]
    if contains:
        return min(contains, key=lambda n: abs(len(n) - len(name)))
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.3)
    return close[0] if close else None


def _unwrap(outcome: Result | MCPLiteError) -> Result:
    if isinstance(outcome, MCPLiteError):
        raise outcome
    return outcome


async def _wait_done(fut: asyncio.Future[Any], timeout: float) -> bool:
    """Wait for ``fut`` up to ``timeout`` seconds without cancelling it."""
    if fut.done():
        return True
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def release(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    handle = loop.call_later(timeout, release)
    fut.add_done_callback(release)
    try:
        await waiter
    finally:
        handle.cancel()
        fut.remove_done_callback(release)
    return fut.done()
