"""Auth from outside (issue 14): bearer tokens, scopes, promises bound to their caller,
rate limits and OAuth, on both bindings, with peers we did not write.

The servers run the tools of :mod:`auth_tools` with a token file of the test's own
(``ALICE`` and ``BOB`` hold no scope, ``ADMIN`` holds ``admin``), in-process over TLS
(certificates from ``trustme``) on HTTP and gRPC; one runs as a subprocess at debug
log level so that its whole stderr can be searched for the tokens.  Peers:
``http.client`` and raw sockets, the official ``mcp`` client, and ``grpcio`` with
TLS channel credentials composed with access-token call credentials.

What is proved: every route of both endpoints refuses a request without a token,
with a malformed ``Authorization`` or with an unknown token (401 +
``WWW-Authenticate: Bearer``; gRPC ``UNAUTHENTICATED``), and no other method, path,
batch or stream gets around it; ``--open-discovery`` opens listing only; a tool
needing a scope answers 403 ``insufficient_scope`` (gRPC ``PERMISSION_DENIED``) and is
listed only to those who may call it; a promise made by one subject is, to any
other, exactly a forged token (HTTP system tools, MCP tasks, gRPC); the rate limit
answers 429 + Retry-After (``RESOURCE_EXHAUSTED``) per identity; no token reaches a
log line; and JWTs from a throw-away issuer are checked (expired, wrong audience or
issuer, ``alg: none``, HS256 keyed with the public key, unknown ``kid``, a rotated
key) with the RFC 9728 metadata the 401s point at.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import re
import secrets
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import auth_tools
import grpc
import httpx2
import pytest
import trustme
from conftest import (
    BASE,
    WAIT,
    RunningServer,
    ServeProcess,
    call_message,
    make_config,
    rpc_message,
    run_in_thread,
)
from cryptography.hazmat.primitives import serialization
from grpc_support import Protos, Stub, protos, to_python
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from oauth_support import LocalIssuer, new_rsa_key
from test_mcp_http import LEGACY, WITH_TASKS, modern_headers, modern_message

from mcplite import Config, Dispatcher
from mcplite.auth import Auth
from mcplite.bindings.grpc.service import GrpcServer
from mcplite.bindings.http import HttpServer
from mcplite.core.wire import ERROR_DATA_KEY
from mcplite.ops.serve import start_auth
from mcplite.protocols.mcp.protocol import NAME_PARAMS

ALICE = "alice-" + secrets.token_urlsafe(24)  # no scope
BOB = "bob-" + secrets.token_urlsafe(24)  # no scope
ADMIN = "admin-" + secrets.token_urlsafe(24)  # scope "admin"
CAROL = "carol-" + secrets.token_urlsafe(24)  # the rate-limit tests' own identities
DAVE = "dave-" + secrets.token_urlsafe(24)
ERIN = "erin-" + secrets.token_urlsafe(24)
UNKNOWN = "unknown-" + secrets.token_urlsafe(24)  # in no file
KNOWN_TOKENS = (ALICE, BOB, ADMIN, CAROL, DAVE, ERIN)

UNAUTHENTICATED = -32041
FORBIDDEN = -32043
INSUFFICIENT_SCOPE = 'Bearer error="insufficient_scope", scope="admin"'
OPEN_TOOLS = {"echo", "whoami", "later", "hold", "count"}
MCP = "/mcp"
ECHOED = "echo-text-7f3a"  # what the echo calls send: never in a refusal


def token_file(folder: Path) -> Path:
    path = folder / "tokens.txt"
    lines = [
        "# who may call (test tokens)",
        f"{ALICE}",
        f"{BOB}   # a comment after a token",
        f"{ADMIN} admin",
        "",
        *(f"{token}" for token in (CAROL, DAVE, ERIN)),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


# --- certificates --------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A throw-away CA and a server certificate for 127.0.0.1 and localhost."""

    ca: trustme.CA
    ca_file: Path
    certfile: Path
    keyfile: Path

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem.bytes()

    def client_context(self) -> ssl.SSLContext:
        """What a client that trusts this CA (and only it) uses."""
        return ssl.create_default_context(cafile=str(self.ca_file))


def make_pki(folder: Path, name: str = "server") -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, certfile, keyfile = (folder / f"{name}-{n}.pem" for n in ("ca", "cert", "key"))
    ca.cert_pem.write_to_path(str(ca_file))
    certfile.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(keyfile))
    return Pki(ca, ca_file, certfile, keyfile)


# --- servers in-process ----------------------------------------------------------------


@dataclass
class Served:
    """A server of :mod:`auth_tools` with auth on: its ports, and ``tls`` trusting its
    CA (None: plaintext); ``running`` when it runs in this process."""

    port: int
    grpc_port: int
    tls: ssl.SSLContext | None = None
    ca_pem: bytes | None = None
    running: RunningServer | None = None

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def connection(self, timeout: float = WAIT) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection(
                "127.0.0.1", self.port, timeout=timeout, context=self.tls
            )
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def stop(self) -> None:
        if self.running is not None:
            self.running.stop()


def start_served(
    config: Config,
    pki: Pki | None,
    *,
    prepare: Callable[[Dispatcher], None] | None = None,
) -> Served:
    """HTTP and gRPC of :mod:`auth_tools` on ephemeral ports, auth as ``config`` says
    (started by the same :func:`start_auth` as ``mcplite serve``)."""

    async def boot() -> tuple[Dispatcher, HttpServer, GrpcServer]:
        auth = await start_auth(config)
        dispatcher = Dispatcher(auth_tools.tools, config, auth=auth)
        if prepare is not None:
            prepare(dispatcher)
        http_server = HttpServer(
            dispatcher, config, prompts=auth_tools.prompts, resources=auth_tools.resources
        )
        await http_server.start("127.0.0.1", 0)
        grpc_server = GrpcServer(dispatcher, config, prompts=auth_tools.prompts)
        await grpc_server.start("127.0.0.1", 0)
        return dispatcher, http_server, grpc_server

    running = run_in_thread(boot, "mcplite-auth-test-server")
    assert running.grpc_port is not None
    if pki is None:
        return Served(running.port, running.grpc_port, running=running)
    return Served(running.port, running.grpc_port, pki.client_context(), pki.ca_pem, running)


def tls_config(pki: Pki, **overrides: Any) -> Config:
    return make_config(certfile=str(pki.certfile), keyfile=str(pki.keyfile), **overrides)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auth")


@pytest.fixture(scope="module")
def pki(folder: Path) -> Pki:
    return make_pki(folder / "pki")


@pytest.fixture(scope="module")
def tokens(folder: Path) -> Path:
    return token_file(folder)


@pytest.fixture(scope="module")
def server(pki: Pki, tokens: Path) -> Iterator[Served]:
    """Tokens required for everything, over TLS."""
    served = start_served(tls_config(pki, auth_tokens=str(tokens)), pki)
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def open_server(pki: Pki, tokens: Path) -> Iterator[Served]:
    """Tokens required for calls; discovery open to anyone (``--open-discovery``)."""
    served = start_served(tls_config(pki, auth_tokens=str(tokens), open_discovery=True), pki)
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def limited(pki: Pki, tokens: Path) -> Iterator[Served]:
    """``--rate-limit 2 --rate-burst 2``."""
    config = tls_config(pki, auth_tokens=str(tokens), rate_limit=2.0, rate_burst=2.0)
    served = start_served(config, pki)
    try:
        yield served
    finally:
        served.stop()


# --- HTTP with http.client -------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def challenge(self) -> str | None:
        return self.headers.get("www-authenticate")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def send(
    served: Served,
    path: str,
    payload: Any = b"",
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    method: str = "POST",
    conn: http.client.HTTPConnection | None = None,
) -> Answer:
    """One request; ``token`` goes in ``Authorization: Bearer`` (``headers`` may set
    any ``Authorization`` instead).  ``conn``, when given, is left open."""
    own = conn is None
    conn = conn or served.connection()
    try:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        all_headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            all_headers.update(bearer(token))
        all_headers.update(headers or {})
        conn.request(method, path, body=body if method != "HEAD" else None, headers=all_headers)
        response = conn.getresponse()
        answer_headers = {k.lower(): v for k, v in response.getheaders()}
        return Answer(response.status, answer_headers, response.read())
    finally:
        if own:
            conn.close()


def mcp_headers(message: Any) -> dict[str, str]:
    """The 2026 headers of ``message`` (``Mcp-Name`` for every method that has one)."""
    headers = modern_headers(message)
    name_param = NAME_PARAMS.get(message["method"])
    if name_param is not None:
        headers["Mcp-Name"] = str(message["params"][name_param])
    return headers


def modern_send(served: Served, message: dict[str, Any], token: str | None = None) -> Answer:
    return send(served, MCP, message, token=token, headers=mcp_headers(message))


def legacy_send(served: Served, message: dict[str, Any], token: str | None = None) -> Answer:
    headers = {} if message["method"] == "initialize" else {"MCP-Protocol-Version": LEGACY}
    return send(served, MCP, message, token=token, headers=headers)


def initialize_message() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "auth-test", "version": "1.0"},
        },
    }


def assert_unauthenticated(answer: Answer, *tokens: str) -> dict[str, Any]:
    """401, ``WWW-Authenticate: Bearer``, a JSON-RPC error -32041; no token echoed."""
    assert answer.status == 401, (answer.status, answer.body)
    assert answer.challenge is not None and answer.challenge.startswith("Bearer"), answer.headers
    for token in tokens:
        assert token.encode() not in answer.body
        assert token not in answer.challenge
    reply: dict[str, Any] = answer.json()
    assert reply["error"]["code"] == UNAUTHENTICATED, reply
    assert "result" not in reply
    return reply


def assert_insufficient_scope(answer: Answer) -> dict[str, Any]:
    assert answer.status == 403, (answer.status, answer.body)
    assert answer.challenge == INSUFFICIENT_SCOPE
    reply: dict[str, Any] = answer.json()
    assert reply["error"]["code"] == FORBIDDEN, reply
    assert reply["error"]["data"]["reason"] == "insufficient_scope"
    assert reply["error"]["data"]["scopes"] == ["admin"]
    assert b"the admin report" not in answer.body
    return reply


def listed_names(answer: Answer) -> set[str]:
    assert answer.status == 200, (answer.status, answer.body)
    reply = answer.json()
    tools = reply["tools"] if "tools" in reply else reply["result"]["tools"]
    return {tool["name"] for tool in tools}


def whoami_of(reply: Any) -> dict[str, Any]:
    """What ``whoami`` answered: from an MCP-lite reply (its one content item), an
    MCP result (``structuredContent``) or a gRPC ``ToolResponse``."""
    if not isinstance(reply, dict):
        reply = {"result": to_python(reply.result)}
    result = reply["result"]
    seen: dict[str, Any] = result.get("structuredContent") or result["content"][0]
    return seen


def echo_call(text: str = ECHOED) -> dict[str, Any]:
    return call_message("echo", {"text": text})


# Every request that reaches a tool or a list, on every route: (id, path, body, headers).
ROUTES: list[tuple[str, str, Any, dict[str, str]]] = [
    ("lite tools", f"{BASE}/tools", b"", {}),
    ("lite listtools", f"{BASE}/listtools", b"", {}),
    ("lite rpc call", f"{BASE}/rpc", echo_call(), {}),
    ("lite rpc list", f"{BASE}/rpc", rpc_message("tools/list"), {}),
    ("lite calltools", f"{BASE}/calltools", echo_call(), {}),
    ("lite prompts", f"{BASE}/prompts", b"", {}),
    (
        "lite rpc sse",
        f"{BASE}/rpc",
        call_message("count", {"steps": 2}),
        {"Accept": "text/event-stream"},
    ),
    (
        "mcp 2026 call",
        MCP,
        modern_message("tools/call", {"name": "echo", "arguments": {"text": ECHOED}}),
        mcp_headers(modern_message("tools/call", {"name": "echo", "arguments": {"text": ECHOED}})),
    ),
    (
        "mcp 2026 discover",
        MCP,
        modern_message("server/discover"),
        mcp_headers(modern_message("server/discover")),
    ),
    (
        "mcp 2026 list",
        MCP,
        modern_message("tools/list"),
        mcp_headers(modern_message("tools/list")),
    ),
    ("mcp 2025 initialize", MCP, initialize_message(), {}),
    (
        "mcp 2025 call",
        MCP,
        call_message("echo", {"text": ECHOED}),
        {"MCP-Protocol-Version": LEGACY, "Accept": "application/json, text/event-stream"},
    ),
]

# Every way to present no usable credentials.
BAD_CREDENTIALS: list[tuple[str, str | None]] = [
    ("no header", None),
    ("basic scheme", "Basic " + base64.b64encode(b"alice:secret").decode()),
    ("bare token", ALICE),
    ("bearer alone", "Bearer"),
    ("bearer with two words", f"Bearer {ALICE} extra"),
    ("unknown token", f"Bearer {UNKNOWN}"),
    (
        "known token with a character changed",
        f"Bearer {ALICE[:-1]}{'A' if ALICE[-1] != 'A' else 'B'}",
    ),
    ("known token as a prefix", f"Bearer {ALICE}x"),
]


@pytest.mark.parametrize(
    ("route", "path", "payload", "headers"), ROUTES, ids=[r[0] for r in ROUTES]
)
@pytest.mark.parametrize(
    "authorization", [c[1] for c in BAD_CREDENTIALS], ids=[c[0] for c in BAD_CREDENTIALS]
)
def test_every_route_refuses_missing_malformed_and_unknown_tokens_with_401(
    server: Served,
    route: str,
    path: str,
    payload: Any,
    headers: dict[str, str],
    authorization: str | None,
) -> None:
    extra = dict(headers)
    if authorization is not None:
        extra["Authorization"] = authorization
    answer = send(server, path, payload, headers=extra)
    assert_unauthenticated(answer, ALICE, UNKNOWN)
    assert ECHOED.encode() not in answer.body and b"part 1" not in answer.body


@pytest.mark.parametrize(
    ("route", "path", "payload", "headers"), ROUTES, ids=[r[0] for r in ROUTES]
)
def test_every_route_answers_a_known_token(
    server: Served, route: str, path: str, payload: Any, headers: dict[str, str]
) -> None:
    answer = send(server, path, payload, token=ALICE, headers=headers)
    assert answer.status == 200, (answer.status, answer.body)
    assert "www-authenticate" not in answer.headers


def test_a_token_in_the_query_string_is_not_a_credential(server: Served) -> None:
    for path in (f"{BASE}/tools?access_token={ALICE}", f"{MCP}?access_token={ALICE}"):
        message = modern_message("tools/list")
        headers = mcp_headers(message) if path.startswith(MCP) else {}
        assert_unauthenticated(send(server, path, message, headers=headers), ALICE)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
@pytest.mark.parametrize("path", [f"{BASE}/tools", f"{BASE}/rpc", f"{BASE}/prompts", MCP])
def test_no_other_method_gets_past_auth(server: Served, method: str, path: str) -> None:
    answer = send(server, path, echo_call(), method=method)
    assert answer.status in (401, 404, 405), (answer.status, answer.body)
    assert b'"tools"' not in answer.body and b"admin_report" not in answer.body
    assert b'"result"' not in answer.body


@pytest.mark.parametrize(
    "path",
    [
        f"{BASE}/tools/",
        f"{BASE}/tools?x=1",
        f"{BASE}//tools",
        f"/{BASE}/tools",
        f"{BASE}/./tools",
        f"{BASE}/%74ools",
        f"{BASE.upper()}/TOOLS",
        f"{BASE}/rpc/",
        f"{BASE}/rpc;x",
        "/mcp/",
        "/MCP",
        "/mcp?x=1",
        "/mcp/../mcp",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ],
)
def test_no_other_path_gets_past_auth(server: Served, path: str) -> None:
    message = modern_message("tools/call", {"name": "echo", "arguments": {"text": ECHOED}})
    headers = mcp_headers(message) if "mcp-lite" not in path.lower() else {}
    body: Any = message if "mcp-lite" not in path.lower() else echo_call()
    answer = send(server, path, body, headers=headers)
    assert answer.status in (401, 404, 405), (answer.status, answer.body)
    assert b'"result"' not in answer.body and b'"tools"' not in answer.body


def test_an_absolute_form_target_gets_no_further(server: Served) -> None:
    answer = send(server, f"{server.origin}{BASE}/tools", b"")
    assert answer.status in (400, 401, 404), (answer.status, answer.body)
    assert b'"tools"' not in answer.body


def test_expect_100_continue_with_a_bad_token_is_refused_before_the_body(server: Served) -> None:
    """The client holds its (large) body back; the server answers 401 at once instead
    of asking for it."""
    assert server.tls is not None
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
    with server.tls.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        head = (
            f"POST {BASE}/rpc HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{server.port}\r\n"
            "Content-Type: application/json\r\n"
            "Content-Length: 500000\r\n"
            "Expect: 100-continue\r\n"
            f"Authorization: Bearer {UNKNOWN}\r\n\r\n"
        )
        sock.sendall(head.encode())
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    status_line = received.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 401"), received
    assert re.search(rb"(?im)^www-authenticate: Bearer", received), received


# --- open discovery ------------------------------------------------------------------------


def test_open_discovery_lists_to_anyone_but_only_what_needs_no_scope(open_server: Served) -> None:
    for path in (f"{BASE}/tools", f"{BASE}/listtools"):
        assert listed_names(send(open_server, path)) == OPEN_TOOLS | {"redeem", "cancel"}
    assert listed_names(send(open_server, f"{BASE}/rpc", rpc_message("tools/list"))) == (
        OPEN_TOOLS | {"redeem", "cancel"}
    )
    assert listed_names(modern_send(open_server, modern_message("tools/list"))) == OPEN_TOOLS
    assert send(open_server, f"{BASE}/prompts").json()["prompts"][0]["name"] == "greeting"


def test_open_discovery_lets_the_handshakes_through(open_server: Served) -> None:
    discover = modern_send(open_server, modern_message("server/discover"))
    assert discover.status == 200, discover.body
    assert "result" in discover.json()
    initialize = legacy_send(open_server, initialize_message())
    assert initialize.status == 200, initialize.body
    assert initialize.json()["result"]["protocolVersion"] == LEGACY
    for message in (
        modern_message("prompts/list"),
        modern_message("resources/list"),
    ):
        answer = modern_send(open_server, message)
        assert answer.status == 200, (message["method"], answer.body)
    ping = legacy_send(open_server, rpc_message("ping"))
    assert ping.status == 200, ping.body


FORGED_PROMISE = "prom_" + base64.urlsafe_b64encode(
    struct.pack(">B16sQ", 1, os.urandom(16), int((time.time() + 3600) * 1000)) + os.urandom(32)
).decode().rstrip("=")


def anonymous_lite_methods() -> list[tuple[str, dict[str, Any]]]:
    return [
        ("tools/call", {"name": "echo", "arguments": {"text": ECHOED}}),
        ("tools/call", {"name": "redeem", "arguments": {"promise": FORGED_PROMISE}}),
        ("tools/call", {"name": "cancel", "arguments": {"promise": FORGED_PROMISE}}),
        ("tools/call", {"name": "later", "arguments": {}}),
        ("prompts/get", {"name": "greeting", "arguments": {"name": "x"}}),
        ("resources/read", {"uri": "notes://secret"}),
    ]


@pytest.mark.parametrize(
    ("method", "params"),
    anonymous_lite_methods(),
    ids=["call", "redeem", "cancel", "promise", "prompt", "resource"],
)
def test_open_discovery_never_lets_an_anonymous_call_through_mcp_lite(
    open_server: Served, method: str, params: dict[str, Any]
) -> None:
    for path in (f"{BASE}/rpc", f"{BASE}/calltools"):
        answer = send(open_server, path, rpc_message(method, params, 7))
        reply = assert_unauthenticated(answer)
        assert reply["id"] == 7
        assert b"secret note" not in answer.body and b"Hello" not in answer.body
    if method == "tools/call":  # and not as a stream either
        stream = send(
            open_server,
            f"{BASE}/rpc",
            rpc_message(method, params, 8),
            headers={"Accept": "text/event-stream"},
        )
        assert_unauthenticated(stream)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        *anonymous_lite_methods(),
        ("tasks/get", {"taskId": FORGED_PROMISE}),
        ("tasks/cancel", {"taskId": FORGED_PROMISE}),
        (
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "greeting"},
                "argument": {"name": "name", "value": "a"},
            },
        ),
    ],
    ids=[
        "call",
        "redeem",
        "cancel",
        "promise",
        "prompt",
        "resource",
        "tasks-get",
        "tasks-cancel",
        "complete",
    ],
)
def test_open_discovery_never_lets_an_anonymous_call_through_mcp(
    open_server: Served, method: str, params: dict[str, Any]
) -> None:
    message = modern_message(method, params, 9, capabilities=WITH_TASKS)
    modern_answer = modern_send(open_server, message)
    assert assert_unauthenticated(modern_answer)["id"] == 9
    if not method.startswith("tasks/"):  # 2026 only
        legacy_message = rpc_message(method, params, 10)
        assert assert_unauthenticated(legacy_send(open_server, legacy_message))["id"] == 10


def test_an_anonymous_mcp_call_that_accepts_only_a_stream_is_refused_with_401(
    open_server: Served,
) -> None:
    message = modern_message("tools/call", {"name": "count", "arguments": {}}, 11)
    headers = {**mcp_headers(message), "Accept": "text/event-stream"}
    answer = send(open_server, MCP, message, headers=headers)
    assert answer.status == 401, (answer.status, answer.headers, answer.body)
    assert (answer.challenge or "").startswith("Bearer")
    assert b"part 1" not in answer.body


def test_a_batch_cannot_smuggle_a_call_past_open_discovery(open_server: Served) -> None:
    batch = [
        rpc_message("tools/list", None, 1),
        call_message("echo", {"text": "smuggled"}, 2),
        rpc_message("tools/call", {"name": "later", "arguments": {}}, 3),
    ]
    answer = send(open_server, f"{BASE}/rpc", batch)
    assert b"smuggled" not in answer.body and b"promise_token" not in answer.body
    if answer.status == 200:
        replies = {reply["id"]: reply for reply in answer.json()}
        assert "result" in replies[1]
        for request_id in (2, 3):
            assert replies[request_id]["error"]["code"] == UNAUTHENTICATED
    else:
        assert_unauthenticated(answer)
    # MCP has no batches; one there gets nothing called either.
    mcp_batch = send(open_server, MCP, batch[1:], headers={"MCP-Protocol-Version": LEGACY})
    assert mcp_batch.status != 200 or b"smuggled" not in mcp_batch.body
    assert b"smuggled" not in mcp_batch.body


def test_a_bad_token_is_refused_even_where_discovery_is_open(open_server: Served) -> None:
    assert_unauthenticated(send(open_server, f"{BASE}/tools", token=UNKNOWN), UNKNOWN)
    assert_unauthenticated(modern_send(open_server, modern_message("tools/list"), UNKNOWN))


# --- scopes ----------------------------------------------------------------------------------


def test_a_tool_needing_a_scope_answers_403_insufficient_scope_on_mcp_lite(
    server: Served,
) -> None:
    for path in (f"{BASE}/rpc", f"{BASE}/calltools"):
        answer = send(server, path, call_message("admin_report", {}, 3), token=ALICE)
        assert assert_insufficient_scope(answer)["id"] == 3
    stream = send(
        server,
        f"{BASE}/rpc",
        call_message("admin_report", {}, 4),
        token=ALICE,
        headers={"Accept": "text/event-stream"},
    )
    assert_insufficient_scope(stream)


def test_a_tool_needing_a_scope_answers_403_insufficient_scope_on_mcp(server: Served) -> None:
    message = modern_message("tools/call", {"name": "admin_report", "arguments": {}}, 5)
    assert assert_insufficient_scope(modern_send(server, message, ALICE))["id"] == 5
    legacy_message = call_message("admin_report", {}, 6)
    assert assert_insufficient_scope(legacy_send(server, legacy_message, ALICE))["id"] == 6


def test_the_admin_calls_the_admin_tool_everywhere(server: Served) -> None:
    lite = send(server, f"{BASE}/rpc", call_message("admin_report"), token=ADMIN)
    assert lite.json()["result"]["content"] == [{"type": "text", "text": "the admin report"}]
    message = modern_message("tools/call", {"name": "admin_report", "arguments": {}})
    modern = modern_send(server, message, ADMIN)
    assert modern.status == 200, modern.body
    assert modern.json()["result"]["content"] == [{"type": "text", "text": "the admin report"}]


def test_tools_list_shows_only_what_the_caller_may_call(server: Served) -> None:
    for path, payload in ((f"{BASE}/tools", b""), (f"{BASE}/rpc", rpc_message("tools/list"))):
        assert "admin_report" not in listed_names(send(server, path, payload, token=ALICE))
        assert "admin_report" in listed_names(send(server, path, payload, token=ADMIN))
    modern = modern_message("tools/list")
    assert listed_names(modern_send(server, modern, ALICE)) == OPEN_TOOLS
    assert listed_names(modern_send(server, modern, ADMIN)) == OPEN_TOOLS | {"admin_report"}
    legacy = rpc_message("tools/list")
    assert "admin_report" not in listed_names(legacy_send(server, legacy, ALICE))


def test_a_tools_list_that_depends_on_the_caller_is_not_marked_shareable(
    server: Served,
) -> None:
    """MCP 2026 ``cacheScope: public`` lets a client cache share the list across
    authorization contexts: the admin's list would reach others (and theirs the admin)."""
    result = modern_send(server, modern_message("tools/list"), ADMIN).json()["result"]
    assert "admin_report" in {tool["name"] for tool in result["tools"]}
    assert result.get("cacheScope") != "public", result.get("cacheScope")


def test_an_unknown_tool_error_lists_no_hidden_tool(server: Served) -> None:
    for name in ("admin_reprt", "nothing_like_it"):
        reply = send(server, f"{BASE}/rpc", call_message(name), token=ALICE).json()
        data = reply["error"]["data"]
        assert "admin_report" not in data["available_tools"], data
        assert set(data["available_tools"]) >= {"echo", "whoami"}
        assert data.get("suggestion") != "admin_report"
        assert "admin_report" not in json.dumps(reply)
        message = modern_message("tools/call", {"name": name, "arguments": {}})
        modern = modern_send(server, message, ALICE)
        assert b"admin_report" not in modern.body, modern.body
    admin = send(server, f"{BASE}/rpc", call_message("admin_reprt"), token=ADMIN).json()
    assert "admin_report" in admin["error"]["data"]["available_tools"]


def test_a_tool_sees_its_caller_and_never_the_token(server: Served) -> None:
    seen = {}
    for token in (ALICE, ADMIN):
        reply = send(server, f"{BASE}/rpc", call_message("whoami"), token=token).json()
        seen[token] = whoami_of(reply)
        assert token not in json.dumps(reply)
    assert seen[ALICE]["scopes"] == [] and seen[ADMIN]["scopes"] == ["admin"]
    assert seen[ALICE]["subject"] != seen[ADMIN]["subject"]
    assert seen[ALICE]["subject"].startswith("token:")
    # The same subject whatever the endpoint.
    message = modern_message("tools/call", {"name": "whoami", "arguments": {}})
    modern = modern_send(server, message, ALICE).json()["result"]["structuredContent"]
    assert modern["subject"] == seen[ALICE]["subject"]


# --- the official mcp client -----------------------------------------------------------------


async def mcp_session(served: Served, mode: str, token: str | None) -> list[str]:
    """Connect the official client with ``token``; list, call echo; the tool names."""
    headers = bearer(token) if token is not None else {}
    async with httpx2.AsyncClient(
        headers=headers, verify=served.tls or True, timeout=WAIT
    ) as http_client:
        transport = streamable_http_client(f"{served.origin}{MCP}", http_client=http_client)
        async with Client(transport, mode=mode, read_timeout_seconds=WAIT) as client:
            listed = await client.list_tools()
            result = await client.call_tool("echo", {"text": "through the official client"})
            assert result.is_error is False
            block = result.content[0]
            assert getattr(block, "text", None) == "through the official client"
            return sorted(tool.name for tool in listed.tools)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_mcp_client_lists_and_calls_with_a_token(
    server: Served, mode: str
) -> None:
    async with asyncio.timeout(WAIT):
        names = await mcp_session(server, mode, ALICE)
    assert set(names) == OPEN_TOOLS
    async with asyncio.timeout(WAIT):
        assert "admin_report" in await mcp_session(server, mode, ADMIN)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("token", [None, UNKNOWN], ids=["no token", "unknown token"])
async def test_the_official_mcp_client_fails_without_a_good_token_and_does_not_hang(
    server: Served, mode: str, token: str | None
) -> None:
    started = time.monotonic()
    with pytest.raises(Exception) as caught:  # whatever the client raises
        async with asyncio.timeout(WAIT):
            await mcp_session(server, mode, token)
    assert not isinstance(caught.value, TimeoutError), "the client hung"
    assert time.monotonic() - started < WAIT


# --- gRPC with grpcio over TLS ---------------------------------------------------------------

GRPC_OPTIONS = [("grpc.enable_http_proxy", 0)]


def ours() -> Protos:
    return protos()["ours"]


@dataclass
class GrpcPeer:
    channel: grpc.Channel
    stub: Stub
    get_prompts: Any


def grpc_peer(served: Served, token: str | None = None) -> GrpcPeer:
    assert served.ca_pem is not None
    credentials = grpc.ssl_channel_credentials(root_certificates=served.ca_pem)
    if token is not None:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token)
        )
    channel = grpc.secure_channel(f"127.0.0.1:{served.grpc_port}", credentials, GRPC_OPTIONS)
    proto = ours()
    get_prompts = channel.unary_unary(
        "/mcplite.MCPLite/GetPrompts",
        request_serializer=proto.cls("Empty").SerializeToString,
        response_deserializer=lambda data: data,
    )
    return GrpcPeer(channel, proto.stub(channel), get_prompts)


@pytest.fixture
def grpc_peers(server: Served) -> Iterator[Callable[[str | None], GrpcPeer]]:
    opened: list[GrpcPeer] = []

    def open_peer(token: str | None) -> GrpcPeer:
        peer = grpc_peer(server, token)
        opened.append(peer)
        return peer

    yield open_peer
    for peer in opened:
        peer.channel.close()


def grpc_error(call: Callable[..., Any], *args: Any, **kwargs: Any) -> grpc.RpcError:
    """The error ``call(*args, **kwargs)`` fails with."""
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    return caught.value


def grpc_calls(peer: GrpcPeer) -> dict[str, Callable[[], Any]]:
    proto = ours()
    return {
        "GetTools": lambda: peer.stub.GetTools(proto.cls("Empty")(), timeout=WAIT),
        "CallTool": lambda: peer.stub.CallTool(proto.request("echo", {"text": "hi"}), timeout=WAIT),
        "CallToolStream": lambda: list(
            peer.stub.CallToolStream(proto.request("count", {"steps": 2}), timeout=WAIT)
        ),
        "GetPrompts": lambda: peer.get_prompts(proto.cls("Empty")(), timeout=WAIT),
    }


@pytest.mark.parametrize("token", [None, UNKNOWN], ids=["no token", "unknown token"])
def test_grpc_refuses_every_method_without_a_good_token(
    grpc_peers: Callable[[str | None], GrpcPeer], token: str | None
) -> None:
    peer = grpc_peers(token)
    for method, call in grpc_calls(peer).items():
        error = grpc_error(call)
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, (method, error)
        details = error.details() or ""
        assert details.startswith("Unauthenticated"), details
        assert UNKNOWN not in details + repr(error.trailing_metadata())


@pytest.mark.parametrize(
    "authorization",
    [f"Basic {ALICE}", ALICE, "Bearer", f"Bearer {ALICE} extra", f"Bearer {ALICE}x"],
    ids=["basic", "bare", "empty", "two words", "prefix"],
)
def test_grpc_refuses_malformed_authorization_metadata(
    grpc_peers: Callable[[str | None], GrpcPeer], authorization: str
) -> None:
    peer = grpc_peers(None)
    proto = ours()
    error = grpc_error(
        lambda: peer.stub.CallTool(
            proto.request("echo", {"text": "hi"}),
            timeout=WAIT,
            metadata=[("authorization", authorization)],
        )
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


def test_grpc_answers_every_method_with_a_good_token(
    grpc_peers: Callable[[str | None], GrpcPeer],
) -> None:
    peer = grpc_peers(ALICE)
    for method, call in grpc_calls(peer).items():
        assert call() is not None, method


def test_grpc_denies_the_admin_tool_to_a_caller_without_the_scope(
    grpc_peers: Callable[[str | None], GrpcPeer],
) -> None:
    proto = ours()
    alice = grpc_peers(ALICE)
    error = grpc_error(lambda: alice.stub.CallTool(proto.request("admin_report", {}), timeout=WAIT))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "admin" in (error.details() or "")
    data = json.loads(dict(error.trailing_metadata())[ERROR_DATA_KEY])
    assert data == {"reason": "insufficient_scope", "scopes": ["admin"]}
    stream_error = grpc_error(
        lambda: list(alice.stub.CallToolStream(proto.request("admin_report", {}), timeout=WAIT))
    )
    assert stream_error.code() == grpc.StatusCode.PERMISSION_DENIED
    admin = grpc_peers(ADMIN)
    answer = admin.stub.CallTool(proto.request("admin_report", {}), timeout=WAIT)
    assert to_python(answer.result)["content"] == [{"type": "text", "text": "the admin report"}]


def test_grpc_get_tools_is_filtered_by_scope(
    grpc_peers: Callable[[str | None], GrpcPeer],
) -> None:
    empty = ours().cls("Empty")()
    alice = {t.name for t in grpc_peers(ALICE).stub.GetTools(empty, timeout=WAIT).tools}
    admin = {t.name for t in grpc_peers(ADMIN).stub.GetTools(empty, timeout=WAIT).tools}
    assert alice == OPEN_TOOLS | {"redeem", "cancel"}
    assert admin == alice | {"admin_report"}


def test_grpc_sees_the_same_caller_as_http(
    server: Served, grpc_peers: Callable[[str | None], GrpcPeer]
) -> None:
    answer = grpc_peers(ALICE).stub.CallTool(ours().request("whoami", {}), timeout=WAIT)
    over_grpc = whoami_of(answer)
    over_http = send(server, f"{BASE}/rpc", call_message("whoami"), token=ALICE).json()
    assert over_grpc == whoami_of(over_http)


def test_grpc_with_open_discovery_lists_to_anyone_but_never_calls(open_server: Served) -> None:
    peer = grpc_peer(open_server)
    try:
        proto = ours()
        names = {t.name for t in peer.stub.GetTools(proto.cls("Empty")(), timeout=WAIT).tools}
        assert names == OPEN_TOOLS | {"redeem", "cancel"}
        for name, arguments in (
            ("echo", {"text": "hi"}),
            ("redeem", {"promise": FORGED_PROMISE}),
            ("cancel", {"promise": FORGED_PROMISE}),
        ):
            error = grpc_error(peer.stub.CallTool, proto.request(name, arguments), timeout=WAIT)
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED, name
        stream = grpc_error(
            lambda: list(peer.stub.CallToolStream(proto.request("count", {}), timeout=WAIT))
        )
        assert stream.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        peer.channel.close()


# --- promises bound to their caller ----------------------------------------------------------


def promise_of(served: Served, token: str, name: str = "later", **arguments: Any) -> str:
    reply = send(served, f"{BASE}/rpc", call_message(name, arguments), token=token).json()
    meta = reply["result"]["_meta"]
    assert meta["response_type"] == "promise", reply
    promise: str = meta["promise_token"]
    return promise


def system_call(served: Served, token: str, tool: str, promise: str) -> Answer:
    arguments: dict[str, Any] = {"promise": promise}
    if tool == "redeem":
        arguments["wait"] = 5
    return send(served, f"{BASE}/rpc", call_message(tool, arguments, 21), token=token)


def test_a_promise_is_refused_to_another_subject_exactly_as_a_forged_one_over_http(
    server: Served,
) -> None:
    promise = promise_of(server, ALICE, text="mine")
    hold = promise_of(server, ALICE, "hold")
    for tool, token in (("redeem", promise), ("cancel", hold)):
        by_bob = system_call(server, BOB, tool, token)
        by_admin = system_call(server, ADMIN, tool, token)
        forged = system_call(server, BOB, tool, FORGED_PROMISE)
        assert (by_bob.status, by_bob.json()) == (forged.status, forged.json()), tool
        assert (by_admin.status, by_admin.json()) == (forged.status, forged.json()), tool
        assert "error" in forged.json()
    # Its maker still redeems it, and cancels the other.
    redeemed = system_call(server, ALICE, "redeem", promise).json()
    assert redeemed["result"]["content"] == [{"type": "text", "text": "later: mine"}]
    cancelled = system_call(server, ALICE, "cancel", hold).json()
    assert cancelled["result"]["structuredContent"] == {"cancelled": True}


def test_a_task_is_refused_to_another_subject_exactly_as_a_forged_one_over_mcp(
    server: Served,
) -> None:
    def create(name: str) -> str:
        message = modern_message(
            "tools/call", {"name": name, "arguments": {}}, 30, capabilities=WITH_TASKS
        )
        result = modern_send(server, message, ALICE).json()["result"]
        assert result["resultType"] == "task", result
        task_id: str = result["taskId"]
        return task_id

    def task_call(method: str, task_id: str, token: str) -> tuple[int, Any]:
        message = modern_message(method, {"taskId": task_id}, 31, capabilities=WITH_TASKS)
        answer = modern_send(server, message, token)
        reply = answer.json()
        # The request's own id is echoed back: the only difference allowed.
        if isinstance(reply.get("error", {}).get("data"), dict):
            data = reply["error"]["data"]
            if data.get("taskId") == task_id:
                data["taskId"] = "<the requested id>"
        return answer.status, reply

    done, running = create("later"), create("hold")
    for method, task_id in (("tasks/get", done), ("tasks/cancel", running)):
        forged = task_call(method, FORGED_PROMISE, BOB)
        assert forged[0] != 200 and "error" in forged[1], forged
        assert task_call(method, task_id, BOB) == forged, method
        assert task_call(method, task_id, ADMIN) == forged, method
    status, reply = task_call("tasks/get", done, ALICE)
    assert status == 200 and reply["result"]["taskId"] == done, reply
    status, reply = task_call("tasks/cancel", running, ALICE)
    assert status == 200 and "error" not in reply, reply


def test_a_promise_is_refused_to_another_subject_exactly_as_a_forged_one_over_grpc(
    server: Served, grpc_peers: Callable[[str | None], GrpcPeer]
) -> None:
    proto = ours()
    alice, bob = grpc_peers(ALICE), grpc_peers(BOB)
    made = alice.stub.CallTool(proto.request("later", {"text": "grpc"}), timeout=WAIT)
    promise = made.meta.promise_token
    assert promise

    def refusal(peer: GrpcPeer, tool: str, token: str) -> tuple[Any, ...]:
        error = grpc_error(
            lambda: peer.stub.CallTool(proto.request(tool, {"promise": token}), timeout=WAIT)
        )
        metadata = sorted(
            (k, v) for k, v in error.trailing_metadata() or () if not k.startswith("grpc-")
        )
        return error.code(), error.details(), metadata

    for tool in ("redeem", "cancel"):
        forged = refusal(bob, tool, FORGED_PROMISE)
        assert forged[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert refusal(bob, tool, promise) == forged, tool
    # A promise made over HTTP is the same subject's over gRPC too.
    over_http = promise_of(server, ALICE, text="crossed")
    assert refusal(bob, "redeem", over_http) == refusal(bob, "redeem", FORGED_PROMISE)
    for token, text in ((promise, "later: grpc"), (over_http, "later: crossed")):
        answer = alice.stub.CallTool(
            proto.request("redeem", {"promise": token, "wait": 5}), timeout=WAIT
        )
        assert to_python(answer.result)["content"] == [{"type": "text", "text": text}]


# --- rate limits -----------------------------------------------------------------------------


def test_past_its_rate_a_caller_gets_429_with_retry_after_and_others_do_not(
    limited: Served,
) -> None:
    conn = limited.connection()
    try:
        statuses = []
        for _ in range(3):
            answer = send(limited, f"{BASE}/rpc", echo_call(), token=CAROL, conn=conn)
            statuses.append(answer.status)
        assert statuses == [200, 200, 429], statuses
        assert int(answer.headers["retry-after"]) >= 1
        assert "www-authenticate" not in answer.headers
        assert CAROL.encode() not in answer.body
    finally:
        conn.close()
    other = send(limited, f"{BASE}/rpc", echo_call(), token=DAVE)
    assert other.status == 200, other.body
    # The MCP endpoint counts against the same bucket.
    answer = modern_send(limited, modern_message("tools/list"), CAROL)
    assert answer.status == 429 and int(answer.headers["retry-after"]) >= 1


def test_past_its_rate_a_grpc_caller_gets_resource_exhausted(limited: Served) -> None:
    peer = grpc_peer(limited, ERIN)
    try:
        proto = ours()
        request = proto.request("echo", {"text": "hi"})
        peer.stub.CallTool(request, timeout=WAIT)
        peer.stub.CallTool(request, timeout=WAIT)
        error = grpc_error(lambda: peer.stub.CallTool(request, timeout=WAIT))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        data = json.loads(dict(error.trailing_metadata())[ERROR_DATA_KEY])
        assert data["retry_after"] >= 1
    finally:
        peer.channel.close()


# --- no token in any log line ----------------------------------------------------------------


def test_no_token_appears_in_any_log_line(folder: Path, tokens: Path) -> None:
    """A subprocess server at debug level, access log on, sent good and bad tokens on
    every endpoint (in the header, malformed, and in the query string), promise
    tokens included: none of them appears anywhere on its stderr."""
    server = ServeProcess(
        "tests.auth_tools:tools",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--auth-tokens",
        str(tokens),
        "--log-level",
        "debug",
    )
    secrets_sent = [*KNOWN_TOKENS, UNKNOWN, FORGED_PROMISE]
    try:
        served = Served(server.http_port, server.grpc_port)
        for token in (ALICE, ADMIN, UNKNOWN):
            for path, payload, headers in (
                (f"{BASE}/tools", b"", {}),
                (f"{BASE}/rpc", echo_call(), {}),
                (f"{BASE}/rpc", call_message("admin_report"), {}),
                (f"{BASE}/calltools", echo_call(), {}),
                (f"{BASE}/rpc", call_message("count"), {"Accept": "text/event-stream"}),
                (MCP, initialize_message(), {}),
            ):
                send(served, path, payload, token=token, headers=headers)
                send(served, f"{path}?access_token={token}&token={token}", payload)
                send(served, path, payload, headers={"Authorization": f"Bearer {token} x"})
                send(served, path, payload, headers={"Authorization": token})
            message = modern_message("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            modern_send(served, message, token)
        promise = promise_of(served, ALICE)
        secrets_sent.append(promise)
        for token in (ALICE, BOB):
            system_call(served, token, "redeem", promise)
            system_call(served, token, "redeem", FORGED_PROMISE)
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", GRPC_OPTIONS) as channel:
            stub = ours().stub(channel)
            request = ours().request("echo", {"text": "hi"})
            stub.CallTool(request, timeout=WAIT, metadata=[("authorization", f"Bearer {ALICE}")])
            for bad in (f"Bearer {UNKNOWN}", f"Bearer {ALICE} x", ADMIN):
                grpc_error(stub.CallTool, request, timeout=WAIT, metadata=[("authorization", bad)])
        lines = server.stop()
    finally:
        server.kill()
    text = "\n".join(lines)
    assert "access" in text or "POST" in text, "the access log is expected at debug level"
    for secret in secrets_sent:
        assert secret not in text, f"a token appears in the log: {secret[:8]}..."
    for secret in KNOWN_TOKENS:  # nor any long piece of one
        assert secret[-16:] not in text


# --- OAuth 2.1 resource server ------------------------------------------------------------------

AUDIENCE = "https://tools.example/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource"


@pytest.fixture(scope="module")
def issuer() -> Iterator[Any]:
    with LocalIssuer(audience=AUDIENCE) as running:
        yield running


@pytest.fixture(scope="module")
def oauth_server(issuer: Any) -> Iterator[Served]:
    """OAuth only (no token file), plaintext HTTP (so ``http://`` metadata URLs)."""
    config = make_config(oauth_issuer=issuer.url, oauth_audience=AUDIENCE)
    served = start_served(config, None)
    try:
        yield served
    finally:
        served.stop()


def plain_grpc_call(served: Served, token: str, name: str = "whoami") -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}", GRPC_OPTIONS) as channel:
        return (
            ours()
            .stub(channel)
            .CallTool(
                ours().request(name, {}),
                timeout=WAIT,
                metadata=[("authorization", f"Bearer {token}")],
            )
        )


def test_a_good_jwt_works_on_http_and_grpc(oauth_server: Served, issuer: Any) -> None:
    token = issuer.mint(scope="admin tools:read", sub="alice@example")
    reply = send(oauth_server, f"{BASE}/rpc", call_message("whoami"), token=token).json()
    seen = whoami_of(reply)
    assert seen["subject"] == "alice@example"
    assert seen["scopes"] == ["admin", "tools:read"]
    assert seen["claims"]["aud"] == AUDIENCE
    message = modern_message("tools/call", {"name": "admin_report", "arguments": {}})
    assert modern_send(oauth_server, message, token).status == 200
    over_grpc = whoami_of(plain_grpc_call(oauth_server, token))
    assert over_grpc["subject"] == "alice@example"
    ec_token = issuer.mint(kid="ec-1", sub="bob@example")
    assert send(oauth_server, f"{BASE}/tools", token=ec_token).status == 200


def test_a_jwt_without_the_scope_gets_403_with_the_metadata_url(
    oauth_server: Served, issuer: Any
) -> None:
    token = issuer.mint(scope="tools:read")
    message = modern_message("tools/call", {"name": "admin_report", "arguments": {}})
    answer = modern_send(oauth_server, message, token)
    assert answer.status == 403
    expected = f'resource_metadata="{oauth_server.origin}{METADATA_PATH}{MCP}"'
    assert answer.challenge is not None
    assert expected in answer.challenge
    assert 'error="insufficient_scope"' in answer.challenge and 'scope="admin"' in answer.challenge


def refused_tokens(issuer: Any) -> dict[str, str]:
    now = int(time.time())
    public_pem = (
        issuer.keys["rsa-1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return {
        "expired": issuer.mint(iat=now - 7200, exp=now - 3600),
        "not yet valid": issuer.mint(nbf=now + 3600),
        "wrong audience": issuer.mint(aud="https://other.example/mcp"),
        "wrong issuer": issuer.mint(iss="http://127.0.0.1:1/elsewhere"),
        "alg none": issuer.mint(alg="none"),
        "HS256 keyed with the public key": issuer.mint(alg="HS256", key=public_pem),
        "unknown kid": issuer.mint(kid="rsa-99", key=new_rsa_key()),
        "known kid, another key": issuer.mint(kid="rsa-1", key=new_rsa_key()),
        "no subject": issuer.mint(sub=None),
        "garbage": "not.a.jwt",
    }


def test_bad_jwts_are_refused_with_401_pointing_at_the_metadata(
    oauth_server: Served, issuer: Any
) -> None:
    origin = oauth_server.origin
    for why, token in refused_tokens(issuer).items():
        lite = send(oauth_server, f"{BASE}/rpc", echo_call(), token=token)
        assert_unauthenticated(lite, token)
        assert lite.challenge == f'Bearer resource_metadata="{origin}{METADATA_PATH}{BASE}"', (
            why,
            lite.challenge,
        )
        modern = modern_send(oauth_server, modern_message("tools/list"), token)
        assert_unauthenticated(modern, token)
        assert modern.challenge == f'Bearer resource_metadata="{origin}{METADATA_PATH}{MCP}"', why
        with pytest.raises(grpc.RpcError) as caught:
            plain_grpc_call(oauth_server, token)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, why
    no_token = modern_send(oauth_server, modern_message("tools/list"))
    assert no_token.challenge == f'Bearer resource_metadata="{origin}{METADATA_PATH}{MCP}"'


def test_the_protected_resource_metadata_follows_rfc_9728(
    oauth_server: Served, issuer: Any
) -> None:
    origin = oauth_server.origin
    for suffix in (MCP, BASE, ""):
        answer = send(oauth_server, f"{METADATA_PATH}{suffix}", method="GET")
        assert answer.status == 200, (suffix, answer.body)
        assert answer.headers["content-type"].startswith("application/json")
        document = answer.json()
        assert document["resource"] == f"{origin}{suffix}"
        assert document["authorization_servers"] == [issuer.url]
        assert "admin" in document["scopes_supported"]
        assert "header" in document.get("bearer_methods_supported", ["header"])
    post = send(oauth_server, f"{METADATA_PATH}{MCP}", b"", method="POST")
    assert post.status == 405


def test_a_key_rotated_in_after_start_is_fetched_and_accepted(issuer: Any) -> None:
    """The issuer starts signing with a new key; the server refetches the key set on
    the unknown ``kid``.  (The verifier refetches at most every 30 s by default and
    the CLI has no knob for it, so this server's interval is set to 0.)"""

    def no_refetch_interval(dispatcher: Dispatcher) -> None:
        assert isinstance(dispatcher.auth, Auth)
        for verifier in dispatcher.auth.authenticators:
            if hasattr(verifier, "min_refresh_interval"):
                verifier.min_refresh_interval = 0.0

    config = make_config(oauth_issuer=issuer.url, oauth_audience=AUDIENCE)
    served = start_served(config, None, prepare=no_refetch_interval)
    try:
        before = issuer.jwks_fetches
        assert send(served, f"{BASE}/tools", token=issuer.mint()).status == 200
        kid = issuer.rotate()
        rotated = issuer.mint(kid=kid, sub="rotated")
        answer = send(served, f"{BASE}/rpc", call_message("whoami"), token=rotated)
        assert answer.status == 200, answer.body
        assert whoami_of(answer.json())["subject"] == "rotated"
        assert issuer.jwks_fetches > before
        assert whoami_of(plain_grpc_call(served, rotated))["subject"] == "rotated"
    finally:
        served.stop()


def test_a_promise_made_with_one_jwt_subject_is_refused_to_another(
    oauth_server: Served, issuer: Any
) -> None:
    alice, mallory = issuer.mint(sub="alice"), issuer.mint(sub="mallory")
    promise = promise_of(oauth_server, alice, text="jwt")
    by_mallory = system_call(oauth_server, mallory, "redeem", promise)
    forged = system_call(oauth_server, mallory, "redeem", FORGED_PROMISE)
    assert (by_mallory.status, by_mallory.json()) == (forged.status, forged.json())
    again = issuer.mint(sub="alice")  # a new token, the same subject
    redeemed = system_call(oauth_server, again, "redeem", promise).json()
    assert redeemed["result"]["content"] == [{"type": "text", "text": "later: jwt"}]


def test_no_jwt_appears_in_the_log(issuer: Any, folder: Path) -> None:
    """An OAuth subprocess server at debug level: good and bad JWTs never logged."""
    server = ServeProcess(
        "tests.auth_tools:tools",
        "--http",
        "127.0.0.1:0",
        "--no-grpc",
        "--oauth-issuer",
        issuer.url,
        "--oauth-audience",
        AUDIENCE,
        "--log-level",
        "debug",
    )
    sent = [*refused_tokens(issuer).values(), issuer.mint(scope="admin")]
    try:
        served = Served(server.http_port, 0)
        for token in sent:
            send(served, f"{BASE}/rpc", echo_call(), token=token)
            modern_send(served, modern_message("tools/list"), token)
            send(served, f"{BASE}/tools?access_token={token}")
        lines = server.stop()
    finally:
        server.kill()
    text = "\n".join(lines)
    for token in sent:
        if len(token) > 20:
            signature = token.rsplit(".", 1)[-1]
            assert token not in text
            assert len(signature) < 8 or signature not in text
