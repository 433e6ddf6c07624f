"""The soak's clients: one function per kind of traffic, each checking its answer.

Every scenario drives the server with a peer we did not write (``http.client``, a raw
socket, grpcio built from ``proto/mcplite.proto``) and raises :class:`Malformed` when
an answer is not exactly what the documentation promises.  A scenario that ends in
an exception of any other kind is a transport failure; the soak counts both and
fails on either.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SCENARIOS", "Client", "Malformed", "StdioClient", "Target"]

BASE = "/mcp-lite/v1"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
TIMEOUT = 10.0  # seconds: any single exchange


class Malformed(AssertionError):
    """An answer that is not what the documentation says it is."""


def expect(condition: bool, what: str, got: Any) -> None:
    if not condition:
        raise Malformed(f"{what}: got {str(got)[:300]}")


@dataclass(frozen=True)
class Target:
    """Where the server under soak listens, and the token it accepts."""

    http_port: int
    grpc_port: int
    token: str


@dataclass
class Client:
    """One simulated client: a keep-alive HTTP connection, a gRPC stub, a random
    sequence of its own (seeded, so a run is repeatable)."""

    target: Target
    grpc: Any  # stubs.Stub, with .messages (the generated module)
    rng: random.Random
    conn: http.client.HTTPConnection | None = None
    ids: int = 0
    seen: dict[str, int] = field(default_factory=dict)

    def next_id(self) -> int:
        self.ids += 1
        return self.ids

    def connection(self) -> http.client.HTTPConnection:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.target.http_port, TIMEOUT)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def exchange(
        self, path: str, body: bytes, headers: dict[str, str], *, token: str | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on the keep-alive connection; status, headers, body."""
        conn = self.connection()
        sent = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token or self.target.token}",
            **headers,
        }
        try:
            conn.request("POST", path, body=body, headers=sent)
            response = conn.getresponse()
            data = response.read()
        except BaseException:
            self.close()
            raise
        got = {k.lower(): v for k, v in response.getheaders()}
        if got.get("connection", "").lower() == "close":
            self.close()
        return response.status, got, data

    def rpc(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A JSON-RPC request to the MCP-lite ``/rpc``: status and decoded reply."""
        request_id = self.next_id()
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        status, _, body = self.exchange(f"{BASE}/rpc", json.dumps(message).encode(), {})
        reply = json.loads(body)
        expect(reply.get("id") == request_id, "reply id", reply)
        return status, reply

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """An MCP-lite ``tools/call`` that must succeed: its result."""
        status, reply = self.rpc("tools/call", {"name": name, "arguments": arguments})
        expect(status == 200 and "result" in reply, f"{name} result", reply)
        result: dict[str, Any] = reply["result"]
        return result

    def mcp(
        self,
        method: str,
        params: dict[str, Any],
        *,
        version: str = MODERN,
        capabilities: dict[str, Any] | None = None,
        name: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """A request to ``POST /mcp`` in ``version``: status and the JSON-RPC reply
        (read from an SSE answer too)."""
        request_id = self.next_id()
        params = dict(params)
        sent = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": version}
        if version == MODERN:
            params["_meta"] = {VERSION_KEY: version, CAPABILITIES_KEY: capabilities or {}}
            sent["Mcp-Method"] = method
            if name is not None:
                sent["Mcp-Name"] = name
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        status, got, body = self.exchange(
            "/mcp", json.dumps(message).encode(), {**sent, **(headers or {})}
        )
        if got.get("content-type", "").startswith("text/event-stream"):
            replies = [
                json.loads(line[5:])
                for line in body.decode().splitlines()
                if line.startswith("data:") and line[5:].strip()
            ]
            answers = [r for r in replies if r.get("id") == request_id]
            expect(len(answers) == 1, "one SSE answer", replies)
            return status, answers[0]
        reply = json.loads(body)
        expect(reply.get("id") == request_id, "MCP reply id", reply)
        return status, reply


def text_of(result: dict[str, Any]) -> str:
    content = result.get("content")
    expect(
        isinstance(content, list) and len(content) == 1 and content[0].get("type") == "text",
        "one text content",
        result,
    )
    assert isinstance(content, list)
    text: str = content[0]["text"]
    return text


# --- MCP-lite over HTTP ----------------------------------------------------------------


def lite_call(client: Client) -> None:
    text = f"hello {client.rng.randrange(10**6)}"
    result = client.call("echo", {"text": text})
    expect(text_of(result) == text, "echo", result)
    expect(result["_meta"]["response_type"] == "answer", "answer", result)


def lite_stream(client: Client) -> None:
    n = client.rng.randrange(1, 8)
    message = {
        "jsonrpc": "2.0",
        "id": client.next_id(),
        "method": "tools/call",
        "params": {"name": "count", "arguments": {"n": n}},
    }
    status, got, body = client.exchange(
        f"{BASE}/rpc", json.dumps(message).encode(), {"Accept": "text/event-stream"}
    )
    sse = got.get("content-type", "").startswith("text/event-stream")
    expect(status == 200 and sse, "SSE", got)
    events = parse_sse(body)
    parts = [data["partial"] for event, data in events if event == "message"]
    expect(parts == list(range(n)), "stream parts", events)
    expect(events[-1][0] == "done", "done last", events)
    expect(events[-1][1]["content"] == list(range(n)), "done content", events[-1])


def parse_sse(body: bytes) -> list[tuple[str, Any]]:
    events = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        event, data = "message", []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        events.append((event, json.loads("\n".join(data)) if data else None))
    return events


def promise_token(result: dict[str, Any]) -> str:
    meta = result.get("_meta", {})
    expect(meta.get("response_type") == "promise", "a promise", result)
    token: str = meta["promise_token"]
    expect(token.startswith("prom_"), "promise token", meta)
    return token


def promise_redeemed(client: Client) -> None:
    ms = client.rng.randrange(5, 60)
    token = promise_token(client.call("job", {"ms": ms}))
    for _ in range(5):  # a long poll of 5 s, a few times at most
        result = client.call("redeem", {"promise": token, "wait": 5})
        if result["_meta"]["response_type"] != "promise":
            break
    expect(text_of(result) == f"job of {ms} ms done", "redeemed answer", result)


def promise_cancelled(client: Client) -> None:
    token = promise_token(client.call("job", {"ms": 60_000}))
    client.call("cancel", {"promise": token})
    result = client.call("redeem", {"promise": token, "wait": 5})
    expect(result["_meta"]["response_type"] == "failure", "failure after cancel", result)
    expect(result["failure"]["reason"] == "cancelled", "reason cancelled", result)


# --- full MCP --------------------------------------------------------------------------


def mcp_modern_call(client: Client) -> None:
    text = f"modern {client.rng.randrange(10**6)}"
    status, reply = client.mcp(
        "tools/call", {"name": "echo", "arguments": {"text": text}}, name="echo"
    )
    expect(status == 200 and "result" in reply, "2026 tools/call", reply)
    expect(text_of(reply["result"]) == text, "2026 echo", reply)
    expect(reply["result"]["resultType"] == "complete", "resultType", reply)


def mcp_legacy_call(client: Client) -> None:
    status, reply = client.mcp(
        "initialize",
        {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "soak", "version": "0"},
        },
        version=LEGACY,
    )
    expect(status == 200 and reply["result"]["protocolVersion"] == LEGACY, "initialize", reply)
    text = f"legacy {client.rng.randrange(10**6)}"
    status, reply = client.mcp(
        "tools/call", {"name": "echo", "arguments": {"text": text}}, version=LEGACY
    )
    expect(status == 200 and text_of(reply["result"]) == text, "2025 echo", reply)


def mcp_task(client: Client) -> None:
    ms = client.rng.randrange(5, 60)
    status, reply = client.mcp(
        "tools/call", {"name": "job", "arguments": {"ms": ms}}, name="job", capabilities=TASKS
    )
    expect(status == 200 and reply["result"]["resultType"] == "task", "a task", reply)
    task_id = reply["result"]["taskId"]
    deadline = time.monotonic() + TIMEOUT
    while True:
        status, reply = client.mcp("tasks/get", {"taskId": task_id}, capabilities=TASKS)
        expect(status == 200 and "result" in reply, "tasks/get", reply)
        state = reply["result"]["status"]
        if state != "working":
            break
        expect(time.monotonic() < deadline, "task ends in time", reply)
        time.sleep(reply["result"].get("pollIntervalMs", 50) / 1000)  # the server's pace
    expect(state == "completed", "task completed", reply)
    expect(text_of(reply["result"]["result"]) == f"job of {ms} ms done", "task result", reply)


# --- gRPC ------------------------------------------------------------------------------


def grpc_metadata(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def grpc_call(client: Client) -> None:
    stub = client.grpc
    text = f"grpc {client.rng.randrange(10**6)}"
    response = stub.CallTool(
        stub.request("echo", {"text": text}),
        timeout=TIMEOUT,
        metadata=grpc_metadata(client.target.token),
    )
    content = stub.to_python(response.result)["content"]
    expect(content == [{"type": "text", "text": text}], "gRPC echo", content)


def grpc_stream(client: Client) -> None:
    stub = client.grpc
    n = client.rng.randrange(1, 8)
    responses = list(
        stub.CallToolStream(
            stub.request("count", {"n": n}),
            timeout=TIMEOUT,
            metadata=grpc_metadata(client.target.token),
        )
    )
    expect(len(responses) >= 1, "gRPC stream messages", responses)
    final = stub.to_python(responses[-1].result)
    expect(final["content"] == list(range(n)), "gRPC stream result", final)


# --- hostile clients -------------------------------------------------------------------


def bad_input(client: Client) -> None:
    """One of several mistakes a client makes; each has its documented answer."""
    kind = client.rng.randrange(6)
    if kind == 0:
        status, _, body = client.exchange(f"{BASE}/rpc", b'{"jsonrpc": "2.0", "id": 1,', {})
        reply = json.loads(body)
        expect(status == 200 and reply["error"]["code"] == -32700, "parse error", reply)
    elif kind == 1:
        status, reply = client.rpc("tools/call", {"name": "no_such_tool", "arguments": {}})
        expect(reply["error"]["code"] == -32601, "unknown tool", reply)
    elif kind == 2:
        status, reply = client.rpc("tools/call", {"name": "echo", "arguments": {"text": 5}})
        expect(reply["error"]["code"] == -32602, "invalid arguments", reply)
    elif kind == 3:
        forged = "prom_" + "A" * client.rng.randrange(10, 90)
        status, reply = client.rpc(
            "tools/call", {"name": "redeem", "arguments": {"promise": forged}}
        )
        expect(reply["error"]["code"] == -32602, "forged token", reply)
    elif kind == 4:
        status, reply = client.mcp(
            "tools/call", {"name": "echo", "arguments": {"text": "x"}}, name="count"
        )
        expect(status == 400 and reply["error"]["code"] == -32020, "header mismatch", reply)
    else:
        import grpc

        stub = client.grpc
        try:
            stub.CallTool(
                stub.request("echo", {"text": 5}),
                timeout=TIMEOUT,
                metadata=grpc_metadata(client.target.token),
            )
        except grpc.RpcError as exc:
            expect(exc.code() == grpc.StatusCode.INVALID_ARGUMENT, "gRPC invalid", exc)
        else:
            raise Malformed("gRPC invalid arguments answered")


def auth_refused(client: Client) -> None:
    if client.rng.randrange(2):
        status, got, body = client.exchange(
            f"{BASE}/rpc",
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
            {},
            token="not-the-token-at-all-0000",
        )
        expect(status == 401 and "www-authenticate" in got, "401 with a challenge", got)
        expect(json.loads(body)["error"]["code"] == -32041, "401 body", body)
        return
    import grpc

    stub = client.grpc
    try:
        stub.CallTool(
            stub.request("echo", {"text": "x"}),
            timeout=TIMEOUT,
            metadata=grpc_metadata("not-the-token-at-all-0000"),
        )
    except grpc.RpcError as exc:
        expect(exc.code() == grpc.StatusCode.UNAUTHENTICATED, "gRPC unauthenticated", exc)
    else:
        raise Malformed("gRPC call with a wrong token answered")


def vanish(client: Client) -> None:
    """A client that leaves: mid-SSE (reset or FIN), mid-gRPC stream, mid-body."""
    kind = client.rng.randrange(4)
    if kind == 3:
        stub = client.grpc
        call = stub.CallToolStream(
            stub.request("drip", {"n": 50, "ms": 20}),
            timeout=TIMEOUT,
            metadata=grpc_metadata(client.target.token),
        )
        next(call)
        call.cancel()
        return
    sock = socket.create_connection(("127.0.0.1", client.target.http_port), TIMEOUT)
    try:
        if kind == 2:  # a body promised, a tenth of it sent, then gone
            sock.sendall(
                b"POST " + BASE.encode() + b"/rpc HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n"
                b"Authorization: Bearer " + client.target.token.encode() + b"\r\n\r\n{}{}{}{}{}"
            )
            sock.shutdown(socket.SHUT_WR)
            return
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "drip", "arguments": {"n": 50, "ms": 20}},
            }
        ).encode()
        sock.sendall(
            b"POST " + BASE.encode() + b"/rpc HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            b"Authorization: Bearer " + client.target.token.encode() + b"\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        seen = b""
        while b"event: message" not in seen:
            chunk = sock.recv(4096)
            expect(bool(chunk), "the stream starts before the server closes", seen)
            seen += chunk
        if kind == 0:  # reset
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()


#: name -> (scenario, weight)
SCENARIOS: dict[str, tuple[Callable[[Client], None], int]] = {
    "lite_call": (lite_call, 30),
    "lite_stream": (lite_stream, 10),
    "promise_redeemed": (promise_redeemed, 6),
    "promise_cancelled": (promise_cancelled, 3),
    "mcp_2026_call": (mcp_modern_call, 12),
    "mcp_2025_call": (mcp_legacy_call, 5),
    "mcp_task": (mcp_task, 4),
    "grpc_call": (grpc_call, 12),
    "grpc_stream": (grpc_stream, 6),
    "bad_input": (bad_input, 6),
    "auth_refused": (auth_refused, 3),
    "vanish": (vanish, 3),
}


# --- stdio ------------------------------------------------------------------------------


class StdioClient:
    """An MCP client of ``mcplite stdio`` over its pipes, one request at a time: the
    stdio binding is a process of its own, soaked beside the served one."""

    def __init__(self, proc: Any, rng: random.Random) -> None:
        self.proc = proc
        self.rng = rng
        self.ids = 0

    def exchange(self, line: bytes, request_id: int | None) -> dict[str, Any]:
        """Write ``line``; the answer whose id is ``request_id`` (None: a parse error's)."""
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        while True:
            answer = self.proc.stdout.readline()
            expect(bool(answer), "an answer before stdout ends", line)
            reply: dict[str, Any] = json.loads(answer)
            if "id" in reply and reply["id"] == request_id:
                return reply

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        message = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}
        reply = self.exchange(json.dumps(message).encode(), self.ids)
        expect("result" in reply, f"stdio {method}", reply)
        result: dict[str, Any] = reply["result"]
        return result

    def initialize(self) -> None:
        params = {"protocolVersion": LEGACY, "capabilities": {}}
        result = self.request("initialize", {**params, "clientInfo": {"name": "soak"}})
        expect(result["protocolVersion"] == LEGACY, "stdio initialize", result)

    def one(self) -> str:
        """One exchange of a kind picked at random; the kind's name."""
        kind = self.rng.choices(["echo", "count", "job", "garbage"], [70, 10, 10, 10])[0]
        if kind == "echo":
            text = f"stdio {self.rng.randrange(10**6)}"
            result = self.request("tools/call", {"name": "echo", "arguments": {"text": text}})
            expect(text_of(result) == text, "stdio echo", result)
        elif kind == "count":
            n = self.rng.randrange(1, 8)
            result = self.request("tools/call", {"name": "count", "arguments": {"n": n}})
            expect(result["structuredContent"] == {"result": list(range(n))}, "count", result)
        elif kind == "job":
            ms = self.rng.randrange(5, 30)
            result = self.request("tools/call", {"name": "job", "arguments": {"ms": ms}})
            expect(text_of(result) == f"job of {ms} ms done", "stdio job", result)
        else:
            reply = self.exchange(b"\x00not json\xff", None)
            expect(reply["error"]["code"] == -32700, "stdio parse error", reply)
        return f"stdio_{kind}"
