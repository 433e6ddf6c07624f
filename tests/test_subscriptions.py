"""List changes while serving, and the 2026 ``subscriptions/listen`` stream.

Over raw sockets (the SSE stream read event by event, every read bounded) and
over stdio (``python -m mcplite stdio`` on pipes): the acknowledgement naming
the filter honoured, change notifications of the requested kinds only, each
tagged with the subscription id, the listener gone when the client goes, and
the final result at shutdown.  Tools added or removed with
``Dispatcher.add_tool`` / ``remove_tool`` show on every binding's list.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import WAIT, RunningServer, make_config, run_in_thread
from grpc_support import protos
from sse_client import Event, RawHttp, connect, request_bytes
from test_stdio import request, stdio_process

from mcplite import Dispatcher, Prompts, Resources, Tools
from mcplite.bindings.http import HttpServer

MODERN = "2026-07-28"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
ACCEPT_BOTH = "application/json, text/event-stream"


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        return text

    return tools


def extra_tool() -> Any:
    """A tool made apart from any server, to be added to one while it serves."""
    registry = Tools()

    @registry.tool
    async def added_later(n: int) -> int:
        """Added while serving."""
        return n

    tool = registry.get("added_later")
    assert tool is not None
    return tool


def make_prompts() -> Prompts:
    prompts = Prompts()

    @prompts.prompt
    def greet() -> str:
        return "Hello"

    return prompts


def make_resources() -> Resources:
    resources = Resources()

    @resources.resource("test://one", mime_type="text/plain")
    def one() -> str:
        return "one"

    return resources


class Served(RunningServer):
    """A running HTTP (and gRPC) server with its prompts and resources."""

    prompts: Prompts
    resources: Resources | None

    @property
    def subscriptions(self) -> int:
        count: int = self.call_soon(lambda: self.http.mcp.subscription_count)
        return count

    def wait_subscriptions(self, expected: int) -> None:
        """Wait (bounded, on the server's loop) until ``expected`` streams are open."""

        async def wait() -> int:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT
            while self.http.mcp.subscription_count != expected and loop.time() < deadline:
                await asyncio.sleep(0.01)  # a bounded poll of the loop's own state
            return self.http.mcp.subscription_count

        assert self.run(wait(), timeout=WAIT + 1) == expected


def start(*, resources: bool = True, grpc_too: bool = False) -> Served:
    config = make_config()
    prompts = make_prompts()
    served_resources = make_resources() if resources else None

    async def boot() -> tuple[Dispatcher, HttpServer, Any]:
        dispatcher = Dispatcher(make_tools(), config)
        http = HttpServer(dispatcher, config, prompts=prompts, resources=served_resources)
        await http.start("127.0.0.1", 0)
        grpc_server = None
        if grpc_too:
            from mcplite.bindings.grpc.service import GrpcServer

            grpc_server = GrpcServer(dispatcher, config)
            await grpc_server.start("127.0.0.1", 0)
        return dispatcher, http, grpc_server

    served = run_in_thread(boot, "mcplite-test-subscriptions", Served)
    assert isinstance(served, Served)
    served.prompts = prompts
    served.resources = served_resources
    return served


@pytest.fixture
def server() -> Iterator[Served]:
    running = start()
    try:
        yield running
    finally:
        running.stop()


def listen_message(request_id: Any, **wanted: Any) -> dict[str, Any]:
    params = {"_meta": META, "notifications": wanted}
    return {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}


def modern_headers(method: str, accept: str = ACCEPT_BOTH) -> dict[str, str]:
    return {"Accept": accept, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}


class Listening:
    """One open ``subscriptions/listen`` over a raw socket, read event by event."""

    def __init__(self, server: Served, request_id: Any, **wanted: Any) -> None:
        self.sock = connect(server.port, WAIT)
        message = listen_message(request_id, **wanted)
        headers = modern_headers("subscriptions/listen")
        self.sock.sendall(request_bytes("/mcp", message, headers=headers))
        self.reader = RawHttp(self.sock)
        self.head = self.reader.read_head()
        self._events: Iterator[Event] = self.reader.events(self.head)

    def next(self) -> Any:
        """The next message on the stream (every read is bounded by WAIT)."""
        return next(self._events).json()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listens() -> Iterator[list[Listening]]:
    opened: list[Listening] = []
    yield opened
    for listening in opened:
        listening.close()


def post_mcp(server: Served, message: dict[str, Any], accept: str = ACCEPT_BOTH) -> Any:
    sock = connect(server.port, WAIT)
    try:
        headers = modern_headers(message["method"], accept)
        sock.sendall(request_bytes("/mcp", message, headers=headers))
        return RawHttp(sock).read_response()
    finally:
        sock.close()


def modern(server: Served, method: str, params: dict[str, Any] | None = None) -> Any:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {**(params or {}), "_meta": META},
    }
    response = post_mcp(server, message)
    assert response.status == 200, response.body
    return response.json()["result"]


# --- the stream over HTTP ----------------------------------------------------------------


def test_discover_advertises_list_changes_for_tools_prompts_and_resources(
    server: Served,
) -> None:
    capabilities = modern(server, "server/discover")["capabilities"]
    for kind in ("tools", "prompts", "resources"):
        assert capabilities[kind]["listChanged"] is True
    assert "subscribe" not in capabilities["resources"]  # no per-resource updates


def test_listen_is_acknowledged_first_then_hears_only_the_kinds_it_asked_for(
    server: Served, listens: list[Listening]
) -> None:
    listening = Listening(server, 1759320000000, toolsListChanged=True)
    listens.append(listening)
    assert listening.head.status == 200
    assert (listening.head.header("content-type") or "").startswith("text/event-stream")
    ack = listening.next()
    assert ack == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {SUBSCRIPTION_ID: 1759320000000},
            "notifications": {"toolsListChanged": True},
        },
    }
    # A prompt change first: not asked for, so the next event is the tool change.
    server.call_soon(lambda: server.prompts.add(lambda: "hi", name="hi"))
    server.call_soon(lambda: server.dispatcher.add_tool(extra_tool()))
    assert listening.next() == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUBSCRIPTION_ID: 1759320000000}},
    }


def test_each_stream_hears_its_own_kinds_tagged_with_its_own_id(
    server: Served, listens: list[Listening]
) -> None:
    prompts_only = Listening(server, "p", promptsListChanged=True)
    everything = Listening(
        server, 7, toolsListChanged=True, promptsListChanged=True, resourcesListChanged=True
    )
    listens += [prompts_only, everything]
    assert prompts_only.next()["params"]["notifications"] == {"promptsListChanged": True}
    assert everything.next()["params"]["notifications"] == {
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "toolsListChanged": True,
    }
    server.call_soon(lambda: server.dispatcher.remove_tool("echo"))
    assert server.resources is not None
    resources = server.resources
    # From a thread that is not the server's (as a sync tool's would be).
    resources.add(lambda: "two", "test://two")
    server.call_soon(lambda: server.prompts.remove("greet"))
    heard = [everything.next() for _ in range(3)]
    assert [m["method"] for m in heard] == [
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    ]
    assert all(m["params"]["_meta"] == {SUBSCRIPTION_ID: 7} for m in heard)
    assert prompts_only.next() == {
        "jsonrpc": "2.0",
        "method": "notifications/prompts/list_changed",
        "params": {"_meta": {SUBSCRIPTION_ID: "p"}},
    }


def test_the_ack_echoes_only_the_part_of_the_filter_that_is_honoured(
    listens: list[Listening],
) -> None:
    running = start(resources=False)
    try:
        listening = Listening(
            running,
            3,
            toolsListChanged=True,
            promptsListChanged=False,
            resourcesListChanged=True,  # no resources served
            resourceSubscriptions=["test://one"],
            taskIds=["t"],
        )
        listens.append(listening)
        assert listening.next()["params"]["notifications"] == {"toolsListChanged": True}
    finally:
        running.stop()


def test_closing_the_connection_ends_the_subscription_and_removes_its_listener(
    server: Served,
) -> None:
    listening = Listening(server, 1, toolsListChanged=True)
    listening.next()
    assert server.subscriptions == 1
    listening.close()
    server.wait_subscriptions(0)
    server.call_soon(lambda: server.dispatcher.add_tool(extra_tool()))  # nobody to tell
    assert server.subscriptions == 0


def test_shutdown_ends_each_stream_with_its_final_complete_result(server: Served) -> None:
    listening = Listening(server, "s-1", promptsListChanged=True)
    listening.next()
    stopping = threading.Thread(target=server.stop, kwargs={"grace": 5.0})
    t0 = time.monotonic()
    stopping.start()
    try:
        final = listening.next()
        assert final["id"] == "s-1"
        assert final["result"]["resultType"] == "complete"
        assert final["result"]["_meta"][SUBSCRIPTION_ID] == "s-1"
        assert listening.reader.at_eof()  # the response ended, then the connection
    finally:
        stopping.join(WAIT)
        listening.close()
    assert time.monotonic() - t0 < 4.0  # it did not wait for the grace period


def test_listen_needs_an_event_stream_accept_header(server: Served) -> None:
    response = post_mcp(server, listen_message(1, toolsListChanged=True), "application/json")
    assert response.status == 406
    assert server.subscriptions == 0


def test_listen_beyond_the_limit_is_refused_with_an_error(
    server: Served, listens: list[Listening]
) -> None:
    server.call_soon(lambda: setattr(server.http.mcp.subscriptions, "limit", 1))
    first = Listening(server, 1, toolsListChanged=True)
    listens.append(first)
    first.next()
    response = post_mcp(server, listen_message(2, toolsListChanged=True))
    assert response.status == 200
    assert (response.head.header("content-type") or "").startswith("application/json")
    reply = response.json()
    assert reply["id"] == 2
    assert reply["error"]["code"] == -32000
    assert "subscriptions" in reply["error"]["message"]
    assert server.subscriptions == 1


def test_listen_is_not_a_method_of_the_2025_revision(server: Served) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {}}
    sock = connect(server.port, WAIT)
    try:
        headers = {"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": "2025-11-25"}
        sock.sendall(request_bytes("/mcp", message, headers=headers))
        response = RawHttp(sock).read_response()
    finally:
        sock.close()
    assert response.status == 200  # 2025: a method's error goes out with 200
    assert response.json()["error"]["code"] == -32601


# --- tools added and removed: every binding's list ---------------------------------------


def mcp_lite_tools(server: Served) -> set[str]:
    status, _, body = server.post("/tools", b"")
    assert status == 200
    return {t["name"] for t in json.loads(body)["tools"]}


def mcp_tools(server: Served) -> set[str]:
    return {t["name"] for t in modern(server, "tools/list")["tools"]}


def grpc_tools(channel: grpc.Channel) -> set[str]:
    proto = protos()["ours"]
    reply = proto.stub(channel).GetTools(proto.cls("Empty")(), timeout=WAIT)
    return {t.name for t in reply.tools}


def test_tools_added_and_removed_while_serving_show_on_every_binding() -> None:
    running = start(grpc_too=True)
    options = [("grpc.enable_http_proxy", 0)]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}", options=options) as chan:
            listed = (mcp_lite_tools(running), mcp_tools(running), grpc_tools(chan))
            assert all("echo" in names and "added_later" not in names for names in listed)
            running.call_soon(lambda: running.dispatcher.add_tool(extra_tool()))
            listed = (mcp_lite_tools(running), mcp_tools(running), grpc_tools(chan))
            assert all("added_later" in names for names in listed)
            assert running.call("added_later", {"n": 4})["result"]["content"][0]["text"] == "4"
            running.call_soon(lambda: running.dispatcher.remove_tool("echo"))
            listed = (mcp_lite_tools(running), mcp_tools(running), grpc_tools(chan))
            assert all("echo" not in names and "added_later" in names for names in listed)
            assert running.call("echo", {"text": "x"})["error"]["code"] == -32601
    finally:
        running.stop()


def test_a_tool_name_is_served_once_and_system_tools_stay() -> None:
    running = start()
    try:

        def add_twice() -> None:
            running.dispatcher.add_tool(extra_tool())
            with pytest.raises(ValueError, match="already registered"):
                running.dispatcher.add_tool(extra_tool())
            with pytest.raises(ValueError, match="system tool"):
                running.dispatcher.remove_tool("redeem")

        running.call_soon(add_twice)
    finally:
        running.stop()


# --- stdio -------------------------------------------------------------------------------

STDIO_MODULE = '''
"""Tools that change the lists of the server they run in."""

from mcplite import Dispatcher, Prompts, Tools

tools = Tools()
prompts = Prompts()
spare = Tools()


@spare.tool
async def spare_tool() -> str:
    return "spare"


@prompts.prompt
def greet() -> str:
    return "Hello"


@tools.tool
async def add_spare_tool() -> str:
    for dispatcher in Dispatcher.serving(tools):
        dispatcher.add_tool(spare.get("spare_tool"))
    return "added"


@tools.tool
def add_prompt(name: str) -> str:
    prompts.add(lambda: "hi", name=name)  # from a worker thread: a sync tool
    return "added"
'''


def stdio_call(name: str, arguments: dict[str, Any], request_id: Any) -> Any:
    params = {"name": name, "arguments": arguments, "_meta": META}
    return request("tools/call", params, request_id)


def test_listen_over_stdio_streams_lines_until_cancelled_or_stopped(tmp_path: Path) -> None:
    (tmp_path / "stdio_list_changes.py").write_text(STDIO_MODULE)
    with stdio_process("stdio_list_changes", extra_path=tmp_path) as proc:
        proc.send(
            request(
                "subscriptions/listen",
                {"_meta": META, "notifications": {"promptsListChanged": True}},
                "listen-1",
            )
        )
        ack = proc.receive()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"] == {
            "_meta": {SUBSCRIPTION_ID: "listen-1"},
            "notifications": {"promptsListChanged": True},
        }
        # A tool change (not asked for), then a prompt change: only the latter is heard.
        proc.send(stdio_call("add_spare_tool", {}, 2))
        before, reply = proc.receive_until(2)
        assert before == [] and reply["result"]["resultType"] == "complete"
        proc.send(stdio_call("add_prompt", {"name": "p1"}, 3))
        before, reply = proc.receive_until(3)
        heard = [m for m in before if m.get("method", "").endswith("list_changed")]
        if not heard:  # written from the worker thread: it may come just after the reply
            heard = [proc.receive()]
        assert heard == [
            {
                "jsonrpc": "2.0",
                "method": "notifications/prompts/list_changed",
                "params": {"_meta": {SUBSCRIPTION_ID: "listen-1"}},
            }
        ]
        # Cancelled by the client: not answered, and it hears nothing more.
        proc.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": "listen-1"},
            }
        )
        proc.send(
            request(
                "subscriptions/listen",
                {"_meta": META, "notifications": {"toolsListChanged": True}},
                9,
            )
        )
        assert proc.receive()["params"]["_meta"] == {SUBSCRIPTION_ID: 9}
        proc.send(stdio_call("add_prompt", {"name": "p2"}, 4))
        _, reply = proc.receive_until(4)
        # End of input: the open stream ends with its final result.
        proc.close_stdin()
        final = proc.receive()
        assert final["id"] == 9
        assert final["result"]["resultType"] == "complete"
        assert final["result"]["_meta"][SUBSCRIPTION_ID] == 9
        assert proc.wait() == 0
        every = [json.loads(line) for line in proc.rest_of_stdout()]
        assert all(m.get("id") != "listen-1" for m in every)  # cancelled: never answered
        changes = [m["method"] for m in every if m.get("method", "").endswith("list_changed")]
        assert changes == ["notifications/prompts/list_changed"]  # p2 went to nobody
