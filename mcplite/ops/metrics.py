"""Metrics (Prometheus text format) and health, on a listener of their own.

``--metrics HOST:PORT`` serves, never on the public port:

- ``GET /metrics``: the figures below, in the Prometheus text exposition format
  (0.0.4), with no dependency beyond the standard library;
- ``GET /healthz``: 200 while the process runs its event loop (liveness);
- ``GET /readyz``: 200 when every binding listens, the promise store answers and
  the server is not draining; 503 with the reasons otherwise.  It turns 503 the
  moment SIGTERM starts the drain, so a load balancer stops sending first.

Figures (``binding`` is ``http`` for MCP-lite over HTTP, ``mcp`` for the MCP
endpoint, ``grpc``, ``stdio``; ``tool`` is a served tool's name, never a name a
client made up):

==================================== ========= ======================================
``mcplite_requests_total``           counter   requests by binding and status (HTTP
                                               status, or gRPC status name)
``mcplite_calls_total``              counter   tool calls by binding, tool and
                                               outcome (``answer``, ``promise``,
                                               ``elicitation``, ``failure``,
                                               ``request-for-more-resource``,
                                               ``error``, ``disconnected``: a
                                               stream stopped as its client left)
``mcplite_call_errors_total``        counter   calls ended by a protocol error, by
                                               binding, tool and JSON-RPC ``code``
``mcplite_call_duration_seconds``    histogram time to a call's result or promise, by tool
``mcplite_refusals_total``           counter   requests refused before any tool ran,
                                               by binding and reason (see REASONS)
``mcplite_calls_in_flight``          gauge     calls and streams running now
``mcplite_streams_open``             gauge     streamed calls open now
``mcplite_promises_pending``         gauge     promises this process is running
``mcplite_connections_open``         gauge     open connections by binding
``mcplite_tasks_alive``              gauge     asyncio tasks alive on the serving loop
``process_resident_memory_bytes``    gauge     resident memory (Linux: /proc)
``process_open_fds``                 gauge     open file descriptors (Linux: /proc)
==================================== ========= ======================================

The last three are what a leak shows in first; the soak (docs/operations.md)
watches them.

With ``--workers N`` the supervisor serves ``--metrics``: ``/metrics`` is every
worker's figures, each sample labelled ``worker="1"`` .. ``"N"`` (scraped from the
workers' own listeners on the next N ports, which are loopback only);
``/readyz`` is ready while at least one worker is ready and the supervisor is not
draining.

Counting costs one dictionary update per request and per call, and nothing at
all unless ``--metrics`` is given.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import math
import os
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import h11

__all__ = ["METRICS", "REASONS", "MetricsServer", "Registry", "watch_process"]

log = logging.getLogger("mcplite")

#: Upper bounds of the latency histogram's buckets, in seconds.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: Why a request was refused before any tool ran (``mcplite_refusals_total``).
REASONS = (
    "unauthenticated",  # 401 / UNAUTHENTICATED
    "forbidden",  # 403: a scope, or a Host/Origin not allowed
    "rate_limited",  # 429
    "overloaded",  # 503 + Retry-After: too many calls, connections or promises
    "shutting_down",  # 503 / UNAVAILABLE while draining
    "too_large",  # 413, 431, RESOURCE_EXHAUSTED for a message
    "timeout",  # 408
    "bad_request",  # 400, 404, 405, 406, 415 and other malformed requests
)

#: HTTP status -> refusal reason (statuses not here are no refusal).
_HTTP_REASONS = {
    401: "unauthenticated",
    403: "forbidden",
    429: "rate_limited",
    503: "overloaded",
    413: "too_large",
    431: "too_large",
    408: "timeout",
    400: "bad_request",
    404: "bad_request",
    405: "bad_request",
    406: "bad_request",
    415: "bad_request",
    501: "bad_request",
}

#: gRPC status name -> refusal reason.
_GRPC_REASONS = {
    "UNAUTHENTICATED": "unauthenticated",
    "PERMISSION_DENIED": "forbidden",
    "RESOURCE_EXHAUSTED": "overloaded",
    "UNAVAILABLE": "shutting_down",
}


#: A gauge's reader: its samples as ``(labels, value)`` when scraped.
GaugeReader = Callable[[], Iterable[tuple[dict[str, str], float]]]


class _Histogram:
    __slots__ = ("count", "counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1


class Registry:
    """This process's figures.  ``on`` is False until a metrics listener starts:
    then nothing is counted at all."""

    def __init__(self) -> None:
        self.on = False
        self.requests: dict[tuple[str, str], int] = {}
        self.calls: dict[tuple[str, str, str], int] = {}
        self.errors: dict[tuple[str, str, int], int] = {}
        self.refusals: dict[tuple[str, str], int] = {}
        self.durations: dict[str, _Histogram] = {}
        #: Gauges read when scraped: name -> (help, function giving [(labels, value)]).
        self.gauges: dict[
            str, tuple[str, Callable[[], Iterable[tuple[dict[str, str], float]]]]
        ] = {}

    # -- counting (bindings and the core call these) ------------------------

    def request(self, binding: str, status: int | str, reason: str | None = None) -> None:
        """A request answered: by status; a refusal too when the status (or the
        ``reason`` the binding knows better) says so."""
        key = (binding, str(status))
        self.requests[key] = self.requests.get(key, 0) + 1
        if reason is None:
            reason = (
                _HTTP_REASONS.get(status) if isinstance(status, int) else _GRPC_REASONS.get(status)
            )
        if reason is not None:
            self.refuse(binding, reason)

    def refuse(self, binding: str, reason: str) -> None:
        key = (binding, reason)
        self.refusals[key] = self.refusals.get(key, 0) + 1

    def call(self, binding: str, tool: str, outcome: str, seconds: float) -> None:
        key = (binding, tool, outcome)
        self.calls[key] = self.calls.get(key, 0) + 1
        histogram = self.durations.get(tool)
        if histogram is None:
            histogram = self.durations[tool] = _Histogram()
        histogram.observe(seconds)

    def call_error(self, binding: str, tool: str, code: int, seconds: float) -> None:
        self.call(binding, tool, "error", seconds)
        key = (binding, tool, code)
        self.errors[key] = self.errors.get(key, 0) + 1

    def gauge(
        self,
        name: str,
        help: str,
        read: GaugeReader,
    ) -> None:
        """Register (or replace) a gauge read when scraped."""
        self.gauges[name] = (help, read)

    # -- exposition ----------------------------------------------------------

    def render(self) -> str:
        """Every figure in the Prometheus text exposition format 0.0.4."""
        out: list[str] = []
        _counter(
            out,
            "mcplite_requests_total",
            "Requests answered, by binding and status.",
            (({"binding": b, "status": s}, n) for (b, s), n in self.requests.items()),
        )
        _counter(
            out,
            "mcplite_calls_total",
            "Tool calls, by binding, tool and outcome.",
            (({"binding": b, "tool": t, "outcome": o}, n) for (b, t, o), n in self.calls.items()),
        )
        _counter(
            out,
            "mcplite_call_errors_total",
            "Tool calls ended by a protocol error, by binding, tool and JSON-RPC code.",
            (
                ({"binding": b, "tool": t, "code": str(c)}, n)
                for (b, t, c), n in self.errors.items()
            ),
        )
        _counter(
            out,
            "mcplite_refusals_total",
            "Requests refused before any tool ran, by binding and reason.",
            (({"binding": b, "reason": r}, n) for (b, r), n in self.refusals.items()),
        )
        name = "mcplite_call_duration_seconds"
        out.append(f"# HELP {name} Time to a tool call's result or promise, by tool.")
        out.append(f"# TYPE {name} histogram")
        for tool, histogram in sorted(self.durations.items()):
            cumulative = 0
            for bound, count in zip((*BUCKETS, math.inf), histogram.counts, strict=True):
                cumulative += count
                le = "+Inf" if math.isinf(bound) else repr(bound)
                out.append(f"{name}_bucket{_labels({'tool': tool, 'le': le})} {cumulative}")
            out.append(f"{name}_sum{_labels({'tool': tool})} {histogram.sum!r}")
            out.append(f"{name}_count{_labels({'tool': tool})} {histogram.count}")
        for gauge, (help_text, read) in sorted(self.gauges.items()):
            out.append(f"# HELP {gauge} {help_text}")
            out.append(f"# TYPE {gauge} gauge")
            try:
                samples = list(read())
            except Exception:  # a gauge must never break the scrape
                log.exception("metrics: gauge %s failed", gauge)
                continue
            for labels, value in samples:
                out.append(f"{gauge}{_labels(labels)} {_number(value)}")
        return "\n".join(out) + "\n"


def _counter(
    out: list[str], name: str, help: str, samples: Iterable[tuple[dict[str, str], int]]
) -> None:
    out.append(f"# HELP {name} {help}")
    out.append(f"# TYPE {name} counter")
    for labels, value in sorted(samples, key=lambda s: sorted(s[0].items())):
        out.append(f"{name}{_labels(labels)} {value}")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


#: This process's registry.
METRICS = Registry()


class Health:
    """What ``/readyz`` asks: a list of checks, each giving a reason or None."""

    def __init__(self) -> None:
        self.draining = False
        self.listening = False
        self.checks: list[Callable[[], Awaitable[str | None]]] = []

    async def reasons(self) -> list[str]:
        """Why the server is not ready (empty: ready)."""
        out = []
        if self.draining:
            out.append("draining")
        if not self.listening:
            out.append("bindings not listening yet")
        for check in self.checks:
            try:
                reason = await asyncio.wait_for(check(), 2.0)
            except Exception as exc:
                reason = f"check failed: {type(exc).__name__}"
            if reason:
                out.append(reason)
        return out


Route = Callable[[], Awaitable[tuple[int, str, bytes]]]


class MetricsServer:
    """The metrics and health listener: GET ``/metrics``, ``/healthz``, ``/readyz``.

    One request per connection (answered with ``Connection: close``), heads of
    at most 8 KiB, 5 s to send one, at most 64 connections at a time (more are
    closed at once): a scraper's needs, and nothing a client can make it hold on to.
    Anything that is not a GET or HEAD of a whole, well-formed request head is
    closed without an answer or a log line.
    """

    name = "metrics"
    max_connections = 64

    def __init__(
        self,
        registry: Registry,
        health: Health,
        *,
        metrics: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        self.registry = registry
        self.health = health
        self._metrics = metrics
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> asyncio.Server:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.registry.on = True
        return self._server

    @property
    def address(self) -> tuple[str, int]:
        """The host and port listened on (once started)."""
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def port(self) -> int:
        return self.address[1]

    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/metrics"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= self.max_connections:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        import h11  # here: the core imports this module, and needs no HTTP parser

        try:
            await asyncio.wait_for(self._answer(reader, writer), 5.0)
        except (TimeoutError, OSError, h11.ProtocolError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h11

        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=8192)
        request: h11.Request | None = None
        while request is None:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(8192)
                conn.receive_data(data)
                if not data:
                    return
            elif isinstance(event, h11.Request):
                request = event
            else:
                return
        path = request.target.split(b"?", 1)[0]
        if request.method not in (b"GET", b"HEAD"):
            status, ctype, body = 405, "text/plain", b"use GET\n"
        elif path == b"/metrics":
            text = await self._metrics() if self._metrics else self.registry.render()
            status, ctype, body = 200, "text/plain; version=0.0.4; charset=utf-8", text.encode()
        elif path == b"/healthz":
            status, ctype, body = 200, "text/plain", b"ok\n"
        elif path == b"/readyz":
            reasons = await self.health.reasons()
            status = 503 if reasons else 200
            ctype = "text/plain"
            body = ("not ready: " + "; ".join(reasons) + "\n" if reasons else "ready\n").encode()
        else:
            status, ctype, body = 404, "text/plain", b"not found: /metrics, /healthz, /readyz\n"
        headers = [
            ("content-type", ctype),
            ("content-length", str(len(body))),
            ("connection", "close"),
        ]
        if status == 405:
            headers.append(("allow", "GET, HEAD"))
        reason = HTTPStatus(status).phrase.encode()
        out = conn.send(h11.Response(status_code=status, headers=headers, reason=reason)) or b""
        if request.method != b"HEAD":
            out += conn.send(h11.Data(data=body)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        writer.write(out)
        await writer.drain()


def labelled(text: str, labels: dict[str, str]) -> list[str]:
    """The sample lines of an exposition ``text`` with ``labels`` added to each
    (``# HELP``/``# TYPE`` lines dropped: the caller writes them once)."""
    extra = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        if "{" in name:
            base, _, inner = name.partition("{")
            out.append(f"{base}{{{extra},{inner} {rest}")
        else:
            out.append(f"{name}{{{extra}}} {rest}")
    return out


def merge(texts: dict[str, str]) -> str:
    """Several workers' expositions as one: each family's HELP and TYPE once, its
    samples from every worker labelled ``worker="<key>"``."""
    headers: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    order: list[str] = []
    for worker, text in texts.items():
        family = ""
        for line in text.splitlines():
            if line.startswith("# HELP "):
                family = line.split(" ", 3)[2]
                if family not in headers:
                    headers[family] = []
                    samples[family] = []
                    order.append(family)
                if line not in headers[family]:
                    headers[family].append(line)
            elif line.startswith("# TYPE "):
                if line not in headers.setdefault(family, []):
                    headers[family].append(line)
            elif line and family:
                samples[family].extend(labelled(line, {"worker": worker}))
    out: list[str] = []
    for family in order:
        out.extend(headers[family])
        out.extend(samples[family])
    return "\n".join(out) + "\n"


def watch_process(registry: Registry) -> None:
    """Add the gauges of the process itself to ``registry``: asyncio tasks alive on
    the loop that scrapes, and (where ``/proc`` is) resident memory and open files."""

    def tasks() -> list[tuple[dict[str, str], float]]:
        return [({}, float(len(asyncio.all_tasks())))]

    registry.gauge("mcplite_tasks_alive", "Asyncio tasks alive on the serving loop.", tasks)
    if not os.path.isdir("/proc/self/fd"):
        return
    page = os.sysconf("SC_PAGE_SIZE")

    def resident() -> list[tuple[dict[str, str], float]]:
        with open("/proc/self/statm", "rb") as statm:
            return [({}, float(int(statm.read().split()[1]) * page))]

    def open_fds() -> list[tuple[dict[str, str], float]]:
        return [({}, float(len(os.listdir("/proc/self/fd"))))]

    registry.gauge("process_resident_memory_bytes", "Resident memory in bytes.", resident)
    registry.gauge("process_open_fds", "Open file descriptors.", open_fds)
