"""What the HTTP tests share, over the byte-level peers of ``sse_client.py`` and the
stdlib ``http.client``: one exchange on a new raw connection, an SSE stream opened on
one, a call held in the server, and the checks every HTTP test makes (an HTTP-level
error's JSON-RPC body; a connection, or a server, that still serves).

The servers are the in-process ones of ``conftest.py``; each needs an ``echo(text)``
tool for the "still serving" checks.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from http.client import HTTPConnection
from typing import Any

from conftest import BASE, WAIT, RunningServer, call_message
from sse_client import Head, RawHttp, Response, connect, request_bytes

RECV = 5.0  # bound of every recv on a raw socket
JSON_HEADERS = {"Content-Type": "application/json"}
SSE_HEADERS = {"Accept": "text/event-stream"}


def exchange(server: RunningServer, data: bytes) -> tuple[Response, RawHttp]:
    """Send raw bytes on a new connection and read one response (close ``reader.sock``)."""
    sock = connect(server.port, RECV)
    reader = RawHttp(sock)
    try:
        sock.sendall(data)
        return reader.read_response(), reader
    except BaseException:
        sock.close()
        raise


def stream_request(name: str, arguments: Any = None, request_id: Any = 1) -> bytes:
    """A ``tools/call`` to /rpc that accepts an SSE stream, byte for byte."""
    return request_bytes(
        BASE + "/rpc", call_message(name, arguments, request_id), headers=SSE_HEADERS
    )


def open_stream(
    server: RunningServer,
    name: str,
    arguments: Any = None,
    *,
    timeout: float = RECV,
    rcvbuf: int | None = None,
) -> tuple[socket.socket, RawHttp, Head]:
    """Call ``name`` asking for SSE on a new raw connection: the socket (the caller
    closes it), its reader, and the head of the response."""
    sock = connect(server.port, timeout, rcvbuf=rcvbuf)
    try:
        sock.sendall(stream_request(name, arguments))
        reader = RawHttp(sock)
        return sock, reader, reader.read_head()
    except BaseException:
        sock.close()
        raise


def assert_http_error(response: Response, status: int) -> dict[str, Any]:
    """The response is ``status`` with a JSON-RPC error body saying so; returns the error."""
    assert response.status == status, response
    assert (response.head.header("content-type") or "").startswith("application/json")
    reply = response.json()
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] is None
    error: dict[str, Any] = reply["error"]
    assert isinstance(error["code"], int)
    assert isinstance(error["message"], str) and error["message"]
    assert error["data"]["http_status"] == status
    return error


def assert_still_serving(server: RunningServer) -> None:
    reply = server.call("echo", {"text": "still serving"})
    assert reply["result"]["content"] == [{"type": "text", "text": "still serving"}], reply


def echo_on(conn: HTTPConnection, text: str) -> str:
    """An ``echo`` call on an open ``http.client`` connection; the text it answered."""
    body = json.dumps(call_message("echo", {"text": text})).encode()
    conn.request("POST", BASE + "/rpc", body=body, headers=JSON_HEADERS)
    response = conn.getresponse()
    raw = response.read()
    assert response.status == 200, raw
    reply = json.loads(raw)
    assert "error" not in reply, reply
    return str(reply["result"]["content"][0]["text"])


@contextmanager
def call_held(
    server: RunningServer, name: str, entered: threading.Event, release: threading.Event
) -> Iterator[Future[dict[str, Any]]]:
    """Call the tool ``name`` from a thread and hold it in the server for the block:
    the tool sets ``entered`` when it runs and waits for ``release``, set at the end."""
    with ThreadPoolExecutor(1) as pool:
        try:
            held = pool.submit(server.call, name)
            assert entered.wait(WAIT)
            yield held
        finally:
            release.set()


def mcp_tools_call(
    server: RunningServer,
    name: str,
    arguments: dict[str, Any],
    *,
    meta: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """``tools/call`` over MCP 2026-07-28 with ``http.client`` (``meta`` added to
    its ``_meta``, ``headers`` to the 2026 ones): the status and the JSON-RPC reply."""
    from mcplite.protocols.mcp.protocol import CAPABILITIES_KEY, VERSION_KEY

    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {VERSION_KEY: "2026-07-28", CAPABILITIES_KEY: {}, **(meta or {})},
        },
    }
    sent = {
        **JSON_HEADERS,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
        **(headers or {}),
    }
    conn = server.connection()
    try:
        conn.request("POST", "/mcp", body=json.dumps(message).encode(), headers=sent)
        response = conn.getresponse()
        status, body = response.status, response.read()
    finally:
        conn.close()
    reply: dict[str, Any] = json.loads(body)
    return status, reply
