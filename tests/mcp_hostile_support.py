"""What the hostile-client tests of ``POST /mcp`` share: a server with tools,
prompts and resources; clients that send what no well-behaved client would
(raw header lines, bodies by the byte); and the checks every test ends with.

Every answer is held to one rule (:func:`answer_of`): a well-formed JSON-RPC
response (``jsonrpc``, the request's id or null, exactly one of ``result`` and
``error``, an integer code and a message), sent as JSON or as the last message
of an SSE stream, with the HTTP status docs/mcp.md gives its code in that
revision; never a 5xx.  After each test (:func:`watch`) the server's loop holds
no task beyond those it had before, no connection is left open, and neither the
``mcplite`` nor the ``asyncio`` logger has said anything at ERROR.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import http.client
import json
import logging
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

from conftest import SECRET, WAIT, RunningServer, make_config, run_in_thread
from sse_client import RawHttp, Response, connect, parse_events

from mcplite import (
    ALWAYS,
    Config,
    Context,
    Dispatcher,
    Elicitation,
    Field,
    InputRequired,
    Prompts,
    Resources,
    Tools,
)
from mcplite.bindings.http import HttpServer
from mcplite.core.tokens import TokenSealer, promise_id_of

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
TASKS = "io.modelcontextprotocol/tasks"
ACCEPT_BOTH = "application/json, text/event-stream"
#: What a 2026 client of these tests declares: tasks, and what the tools ask.
CAPABILITIES: dict[str, Any] = {"extensions": {TASKS: {}}, "elicitation": {}}
#: Which param ``Mcp-Name`` repeats, per method (the 2026 revision's table).
NAME_PARAMS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
#: The HTTP status of each JSON-RPC error code, per revision (docs/mcp.md,
#: "HTTP status of an error"); a code not listed is answered 200.
STATUS_2026 = {-32700: 400, -32600: 400, -32602: 400, -32020: 400, -32021: 400, -32022: 400}
STATUS_2026[-32601] = 404
STATUS_2025 = {-32700: 400, -32600: 400}
#: Every code a request without auth can be answered with on /mcp.
CODES = {-32700, -32600, -32601, -32602, -32603, -32020, -32021, -32022}
#: The codes of a client's own mistakes: never an internal error.
CLIENT_CODES = CODES - {-32603}
#: A secret that is not the server's (the server's is conftest.SECRET).
OTHER_SECRET = b"another-servers-secret-0123456789"


# --- the server ------------------------------------------------------------------


@dataclass
class Runs:
    """How often each tool of the hostile server ran (set on its loop)."""

    counts: dict[str, int] = field(default_factory=dict)

    def ran(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1


ASK_NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_tools(runs: Runs) -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @tools.tool
    async def count(steps: int = 1, ctx: Context | None = None) -> str:
        """Report progress once per step."""
        assert ctx is not None
        for step in range(steps):
            ctx.report_progress(step + 1, steps)
        return f"counted {steps}"

    @tools.tool
    async def hold(ctx: Context) -> str:
        """Report progress, then wait until the client leaves."""
        runs.ran("hold")
        ctx.report_progress(0, 1, "holding")
        await asyncio.Event().wait()
        return "never"

    @tools.tool(promise_after=ALWAYS)
    async def quick() -> str:
        """A task that is done at once."""
        runs.ran("quick")
        return "done"

    @tools.tool(promise_after=ALWAYS)
    async def confirm(ok: bool | None = None) -> str | Elicitation:
        """A task that asks before it goes on."""
        runs.ran("confirm")
        if ok is None:
            return Elicitation(
                "Go on?", {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            )
        return "went on" if ok else "stopped"

    @tools.tool
    async def greet(name: str | None = None) -> str | Elicitation:
        """Greet someone; asks for the name when it is missing."""
        runs.ran("greet")
        if name is None:
            return Elicitation("What is your name?", ASK_NAME)
        return f"Hello, {name}!"

    @tools.tool
    async def regional(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    ) -> str:
        """A tool whose argument 2026 clients repeat in ``Mcp-Param-Region``."""
        return region

    return tools


def make_prompts() -> Prompts:
    prompts = Prompts()

    @prompts.prompt
    def hello(who: str = "world") -> str:
        """Say hello."""
        return f"Hello, {who}"

    @prompts.prompt
    def ask(ctx: Context) -> str | InputRequired:
        """A prompt that asks for a name first."""
        answer = ctx.input_responses.get("who")
        if answer is None:
            return InputRequired(
                {
                    "who": {
                        "method": "elicitation/create",
                        "params": {"message": "Who?", "requestedSchema": ASK_NAME},
                    }
                }
            )
        return f"Hello, {answer['content']['name']}"

    return prompts


def make_resources() -> Resources:
    resources = Resources()

    @resources.resource("test://one", mime_type="text/plain")
    def one() -> str:
        return "one"

    @resources.resource("test://item/{key}", mime_type="text/plain")
    def item(key: str) -> str:
        return key

    return resources


class Hostile(RunningServer):
    """A running server of :func:`make_tools`, prompts and resources."""

    runs: Runs


def start_hostile(config: Config | None = None) -> Hostile:
    """The hostile server on an ephemeral port (pages of 2, so cursors matter)."""
    config = config or make_config(page_size=2)
    runs = Runs()
    prompts, resources = make_prompts(), make_resources()

    async def boot() -> tuple[Dispatcher, HttpServer, Any]:
        dispatcher = Dispatcher(make_tools(runs), config)
        http = HttpServer(dispatcher, config, prompts=prompts, resources=resources)
        await http.start("127.0.0.1", 0)
        return dispatcher, http, None

    served = run_in_thread(boot, "mcplite-test-hostile", Hostile)
    assert isinstance(served, Hostile)
    served.runs = runs
    return served


# --- what every test ends with -------------------------------------------------------


class Records(logging.Handler):
    """Every record the ``mcplite`` and ``asyncio`` loggers hear at ERROR or above."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [f"{record.name}: {record.getMessage()}" for record in self.records]


def wait_on_loop(server: RunningServer, done: Any, what: str) -> None:
    """Wait (bounded, polling the server loop's own state) until ``done()`` holds."""

    async def wait() -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while not done():
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    assert server.run(wait(), timeout=WAIT + 1), what


def collect(server: RunningServer) -> None:
    """Collect garbage on the server's loop and let it turn, so that a task whose
    exception nobody read is reported now if there is one."""

    async def turn() -> None:
        gc.collect()  # a task nobody awaited reports its exception as it is freed
        for _ in range(3):
            await asyncio.sleep(0)  # ... through the loop's exception handler, soon

    server.run(turn())


@contextmanager
def watch(server: Hostile) -> Iterator[Records]:
    """Run a test against ``server``; then nothing of it may be left on the server
    (tasks, connections, subscriptions, calls in flight, pending questions to
    clients) and nothing said at ERROR."""
    records = Records()
    loggers = [logging.getLogger(name) for name in ("mcplite", "asyncio")]
    for logger in loggers:
        logger.addHandler(records)
    baseline = server.tasks()
    try:
        yield records
        mcp = server.http.mcp
        wait_on_loop(server, lambda: not server.http.connections, "connections left open")
        wait_on_loop(server, lambda: mcp.subscription_count == 0, "subscriptions left")
        assert server.settle(baseline, WAIT) == []
        collect(server)
        assert len(mcp.inflight._running) == 0
        assert len(mcp.rounds._pending) == 0
        assert records.messages() == []
    finally:
        for logger in loggers:
            logger.removeHandler(records)


# --- the wire -------------------------------------------------------------------------


def modern_message(
    method: str,
    params: dict[str, Any] | None = None,
    request_id: Any = 1,
    *,
    capabilities: dict[str, Any] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    """A 2026-07-28 request: ``params._meta`` with the version and capabilities."""
    params = dict(params or {})
    params["_meta"] = {
        VERSION_KEY: MODERN,
        CAPABILITIES_KEY: CAPABILITIES if capabilities is None else capabilities,
        **meta,
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def legacy_message(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def modern_headers(message: dict[str, Any]) -> dict[str, str]:
    """The headers a 2026 client sends with ``message``: a printable ASCII name
    as it is, any other (spaces around it, say) in the base64 form."""
    method = message["method"]
    headers = {"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    name_param = NAME_PARAMS.get(method)
    params = message.get("params")
    value = params.get(name_param) if name_param and isinstance(params, dict) else None
    if isinstance(value, str):
        plain = value.isascii() and value.isprintable() and value == value.strip()
        headers["Mcp-Name"] = value if plain else b64(value)
    elif value is not None:
        headers["Mcp-Name"] = json.dumps(value)[:200]
    return headers


LEGACY_HEADERS = {"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": LEGACY}


def b64(text: str) -> str:
    """A header value in the 2026 base64 form."""
    raw = text.encode("utf-8", "surrogatepass")  # a lone surrogate: bytes no server decodes
    return "=?base64?" + base64.b64encode(raw).decode("ascii") + "?="


class Client:
    """One keep-alive ``http.client`` connection to ``/mcp`` (reopened when the
    server closes it), for many requests in a row."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)

    def post(
        self, payload: Any, headers: dict[str, str], *, method: str = "POST"
    ) -> tuple[int, dict[str, str], bytes]:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        all_headers = {"Content-Type": "application/json", **headers}
        self.conn.request(
            method, "/mcp", body=body if method == "POST" else None, headers=all_headers
        )
        response = self.conn.getresponse()
        data = response.read()
        if response.will_close:
            self.conn.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def close(self) -> None:
        self.conn.close()


@contextmanager
def client(server: RunningServer) -> Iterator[Client]:
    opened = Client(server.port)
    try:
        yield opened
    finally:
        opened.close()


def answer_of(status: int, headers: dict[str, str], body: bytes, modern: bool) -> dict[str, Any]:
    """The JSON-RPC response an answer carries (as JSON, or as the last message of
    an SSE stream), checked: well-formed, and sent with the status docs/mcp.md
    gives its code in this revision."""
    assert status < 500, (status, body[:300])
    content_type = headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        assert status == 200, (status, body[:300])
        messages = [event.json() for event in parse_events(body)]
        responses = [m for m in messages if "id" in m and "method" not in m]
        assert len(responses) == 1 and messages[-1] is responses[0], messages
        reply: dict[str, Any] = responses[0]
    else:
        assert content_type.startswith("application/json"), (status, headers, body[:300])
        reply = json.loads(body)
    assert isinstance(reply, dict), reply
    assert reply.get("jsonrpc") == "2.0", reply
    assert ("result" in reply) != ("error" in reply), reply
    assert set(reply) <= {"jsonrpc", "id", "result", "error"}, reply
    assert reply.get("id", "absent") is None or type(reply["id"]) in (str, int), reply
    if "error" in reply:
        error = reply["error"]
        assert type(error.get("code")) is int and error["code"] in CODES, reply
        assert isinstance(error.get("message"), str) and error["message"], reply
        table = STATUS_2026 if modern else STATUS_2025
        assert status == table.get(error["code"], 200), (status, reply)
    else:
        assert status == 200, (status, reply)
        assert isinstance(reply["result"], dict), reply
    return reply


def error_of(
    status: int, headers: dict[str, str], body: bytes, modern: bool, code: int, request_id: Any
) -> dict[str, Any]:
    """The JSON-RPC error an answer must be: ``code``, for ``request_id``."""
    reply = answer_of(status, headers, body, modern)
    assert "error" in reply, reply
    assert reply["error"]["code"] == code, reply
    assert reply["id"] == request_id, reply
    error: dict[str, Any] = reply["error"]
    return error


def raw_request(
    server: RunningServer,
    body: bytes,
    fields: list[tuple[str, bytes | str]],
    *,
    method: str = "POST",
) -> Response:
    """One request written line by line (so a header may come twice, or carry any
    byte) on a fresh connection; its response."""
    head = [f"{method} /mcp HTTP/1.1".encode(), b"Host: 127.0.0.1"]
    head += [b"Content-Type: application/json", b"Content-Length: %d" % len(body)]
    for name, value in fields:
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        head.append(name.encode("latin-1") + b": " + raw)
    sock = connect(server.port, WAIT)
    with sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        return RawHttp(sock).read_response()


def raw_answer(response: Response, modern: bool) -> dict[str, Any]:
    headers = {name.lower(): value for name, value in response.head.headers}
    return answer_of(response.status, headers, response.body, modern)


def leave(sock: socket.socket, how: str) -> None:
    """The client goes: ``close`` (FIN), ``half-close`` (FIN, then read until the
    server closes too) or ``reset`` (RST)."""
    if how == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif how == "half-close":
        sock.shutdown(socket.SHUT_WR)
        RawHttp(sock).at_eof()
    sock.close()


def resealed(token: str, *, expires_at: float, secret: bytes = SECRET) -> str:
    """``token`` (a task id) sealed again with another expiry or secret."""
    promise_id = promise_id_of(token)
    assert promise_id is not None
    return TokenSealer(secret).seal(promise_id, expires_at)


def resealed_state(state: str, *, ttl: float, secret: bytes = SECRET) -> str:
    """A ``requestState`` sealed again with another lifetime or secret."""
    data = TokenSealer(SECRET).open_state(state)
    return TokenSealer(secret).seal_state(data, ttl)
