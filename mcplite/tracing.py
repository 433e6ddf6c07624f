"""Tracing with OpenTelemetry: one span per tool call, in the caller's trace.

Needs ``opentelemetry-api`` (``pip install 'mcplite[otel]'``); nothing else in
mcplite imports it.  :class:`Tracing` is a middleware
(:mod:`mcplite.core.middleware`); give it first, so that its span covers what
the other middleware do::

    from mcplite.tracing import Tracing

    dispatcher = Dispatcher(tools, middleware=[Tracing()])

Each call that reaches the chain gets a span ``tools/call {tool}`` of kind
SERVER whose parent is the caller's span, read by the global propagator (W3C
``traceparent``, ``tracestate``, ``baggage`` unless configured otherwise) from
the request's MCP ``params._meta`` when it holds a ``traceparent``, else from
its HTTP headers or gRPC metadata; with neither, the span is a child of
whatever span is current (an in-process caller's).  The span is current while
the tool runs, so the spans an async tool starts are its children, also after
a promise, in the task the call goes on in.

A call that ends as a promise records its span; a later ``redeem`` (or
``cancel``) of that promise in this process gets a span *linked* to it.  The
attribute names are below (``docs/tracing.md`` says more).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.propagators.textmap import Getter
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("tracing needs the OpenTelemetry API: pip install 'mcplite[otel]'") from exc

from ._version import __version__
from .core.context import RequestContext
from .core.envelope import Result
from .core.errors import MCPLiteError
from .core.middleware import CallNext, ToolCall
from .core.outcomes import Promised
from .core.tokens import promise_id_of
from .core.tools import Kind
from .core.wire import iso_timestamp

__all__ = [
    "BINDING",
    "ERROR_TYPE",
    "METHOD",
    "PROMISE_EXPIRES_AT",
    "PROMISE_ID",
    "RESPONSE_TYPE",
    "STATUS_CODE",
    "TOOL_NAME",
    "Tracing",
]

# The attributes of a span.  Where OpenTelemetry's conventions for MCP name one
# (gen-ai/mcp: mcp.method.name, gen_ai.tool.name, rpc.response.status_code,
# error.type), that name; mcplite's own under ``mcplite.``.
#: ``tools/call``.
METHOD: Final = "mcp.method.name"
#: The tool's name (``redeem`` and ``cancel`` for the system tools).
TOOL_NAME: Final = "gen_ai.tool.name"
#: The binding the call came over: ``http``, ``mcp``, ``grpc``, ``stdio``, ``in-process``.
BINDING: Final = "mcplite.binding"
#: A result's ``response_type``: ``answer``, ``promise``, ``failure``, ``elicitation``,
#: ``request-for-more-resource``.
RESPONSE_TYPE: Final = "mcplite.response_type"
#: A protocol error's JSON-RPC code, as a string (``"-32603"``); the span's status is ERROR.
STATUS_CODE: Final = "rpc.response.status_code"
#: What went wrong: the JSON-RPC code of a protocol error, the class of anything else.
ERROR_TYPE: Final = "error.type"
#: A promise's id, in hex (not its token: a token is a bearer secret): on the call
#: that made the promise and on each redeem or cancel of it.
PROMISE_ID: Final = "mcplite.promise.id"
#: When a promise expires (ISO 8601 UTC, as ``_meta.expires_at``).
PROMISE_EXPIRES_AT: Final = "mcplite.promise.expires_at"

#: How many promises' spans are kept for the links of their redeems, by default.
MAX_PROMISES: Final = 10_000

_TRACEPARENT: Final = "traceparent"
_SYSTEM: Final = Kind.SYSTEM


class _MappingGetter(Getter[Mapping[str, Any]]):
    """Reads a carrier that maps a lowercase name to one string: HTTP headers,
    gRPC text metadata, MCP ``_meta`` (whose other values may be anything)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return list(carrier)


_GETTER: Final = _MappingGetter()


def _carrier_of(context: RequestContext) -> Mapping[str, Any]:
    """Where a request carries its caller's trace context: MCP's ``params._meta``
    when it holds a ``traceparent``, else the HTTP headers or gRPC metadata."""
    meta = context.meta
    if meta is not None and _TRACEPARENT in meta:
        return meta
    return context.headers


class Tracing:
    """A middleware that traces every call through the chain with OpenTelemetry.

    ``tracer_provider``: where the spans go (None: the global provider, as set
    by ``opentelemetry.trace.set_tracer_provider`` at any time, before or after).
    ``max_promises``: how many promises' spans are kept so that their redeems
    link to them, the least recently made or redeemed forgotten first.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        max_promises: int = MAX_PROMISES,
    ) -> None:
        if max_promises < 0:
            raise ValueError("max_promises must be at least 0")
        self.tracer = trace.get_tracer("mcplite", __version__, tracer_provider)
        self.max_promises = max_promises
        #: The span of the call that made each promise kept, by promise id.
        self._origins: OrderedDict[bytes, SpanContext] = OrderedDict()

    async def __call__(self, call: ToolCall, call_next: CallNext) -> Result:
        """The rest of the chain's result, in a span; raises what the rest raises."""
        tool = call.tool
        context = call.context
        # Over the current context (the propagators start from an empty one): with
        # no trace context sent, the span is a child of the current span, if any.
        parent = propagate.extract(_carrier_of(context), otel_context.get_current(), _GETTER)
        attributes = {METHOD: "tools/call", TOOL_NAME: tool.name, BINDING: context.binding}
        links = None
        if tool.kind is _SYSTEM:  # redeem, cancel: link to the call that made the promise
            promise_id = promise_id_of(call.arguments.get("promise"))
            if promise_id is not None:
                # Also where the link cannot be made (another process made the
                # promise), the id finds that call's span.
                attributes[PROMISE_ID] = promise_id.hex()
                origin = self._origin(promise_id)
                if origin is not None:
                    links = [Link(origin)]
        span = self.tracer.start_span(
            f"tools/call {tool.name}",
            parent,
            SpanKind.SERVER,
            attributes,
            links,
            record_exception=False,
            set_status_on_exception=False,
        )
        # Current while the chain runs: a task the tool goes on in (a promise)
        # copies it, so the tool's own spans are children of this one.
        attached = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            result = await call_next(call)
        except MCPLiteError as exc:
            code = str(exc.jsonrpc_code)
            span.set_attributes({STATUS_CODE: code, ERROR_TYPE: code})
            span.set_status(Status(StatusCode.ERROR, exc.message))
            raise
        except BaseException as exc:
            # A client that went away (CancelledError) is not the server's error.
            span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            if isinstance(exc, Exception):
                span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise
        else:
            outcome = result.outcome
            span.set_attribute(RESPONSE_TYPE, result.response_type.value)
            if isinstance(outcome, Promised):
                self._promised(span, outcome, remember=tool.kind is not _SYSTEM)
            return result
        finally:
            otel_context.detach(attached)
            span.end()

    def _promised(self, span: trace.Span, promised: Promised, *, remember: bool) -> None:
        if not span.is_recording():  # sampled out: nothing to show, nothing to link to
            return
        promise_id = promise_id_of(promised.token)
        span.set_attribute(PROMISE_EXPIRES_AT, iso_timestamp(promised.expires_at))
        if promise_id is None:
            return
        span.set_attribute(PROMISE_ID, promise_id.hex())
        if remember and self.max_promises:
            origins = self._origins
            origins[promise_id] = span.get_span_context()
            if len(origins) > self.max_promises:
                origins.popitem(last=False)

    def _origin(self, promise_id: bytes) -> SpanContext | None:
        """The span of the call that made the promise ``promise_id``, if kept."""
        origin = self._origins.get(promise_id)
        if origin is not None:
            self._origins.move_to_end(promise_id)  # still redeemed: keep it longer
        return origin
