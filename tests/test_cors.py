"""CORS: pages of the allowed origins may call the server from a browser.

Off by default.  With ``cors_allow_origins`` (``--cors-allow-origin``): a preflight
from an allowed origin gets ``204`` with the path's methods and the request
headers it asked for that the server reads (``Mcp-Param-*`` echoed by name); every
answer to that origin carries ``Access-Control-Allow-Origin`` (with ``Vary:
Origin``) and exposes the headers a client reads.  Any other origin gets none of
it, and the MCP endpoint's Host/Origin check (DNS rebinding) still refuses a
foreign Host.  The peer is ``http.client``, sending what a browser sends.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE, WAIT, RunningServer, StartServer, call_message, server_factory
from sse_client import RawHttp, connect, request_bytes

from mcplite import Config, Tools
from mcplite.ops.cli import build_parser, config_from_args

APP = "http://app.example:3000"
OTHER = "https://elsewhere.example"
TOKEN = "cors-test-token-0123456789abcdef"
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
ACCEPT_BOTH = "application/json, text/event-stream"


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool
    async def echo(text: str) -> str:
        return text

    return tools


@pytest.fixture
def start() -> Iterator[StartServer]:
    with server_factory(make_tools) as start:
        yield start


@pytest.fixture
def server(start: StartServer) -> RunningServer:
    return start(cors_allow_origins=(APP,))


Answer = tuple[int, dict[str, str], bytes]


def send(
    server: RunningServer,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any = None,
    conn: http.client.HTTPConnection | None = None,
) -> Answer:
    """One request with ``http.client`` (on ``conn`` when given, left open)."""
    own = conn is None
    conn = conn or server.connection()
    try:
        data = None if body is None else json.dumps(body).encode()
        all_headers = dict(headers)
        if data is not None:
            all_headers.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=all_headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        if own:
            conn.close()


def preflight(
    server: RunningServer,
    path: str,
    origin: str,
    asked: str | None = "content-type",
    conn: http.client.HTTPConnection | None = None,
    **extra: str,
) -> Answer:
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST", **extra}
    if asked is not None:
        headers["Access-Control-Request-Headers"] = asked
    return send(server, "OPTIONS", path, headers, conn=conn)


def cors_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith("access-control-")}


def names(value: str) -> list[str]:
    return [name.strip().lower() for name in value.split(",")]


# --- preflights ---------------------------------------------------------------------


def test_a_preflight_to_the_mcp_endpoint_names_its_methods_and_the_headers_asked_for(
    server: RunningServer,
) -> None:
    asked = (
        "content-type, mcp-protocol-version, mcp-method, mcp-name, mcp-param-region, authorization"
    )
    status, headers, body = preflight(server, "/mcp", APP, asked)
    assert (status, body) == (204, b"")
    assert "content-length" not in headers  # RFC 9110 8.6: none on a 204
    assert headers["access-control-allow-origin"] == APP
    assert "origin" in names(headers["vary"])
    assert names(headers["access-control-allow-methods"]) == ["get", "post", "delete"]
    assert names(headers["access-control-allow-headers"]) == names(asked)
    assert int(headers["access-control-max-age"]) > 0


def test_a_preflight_to_the_mcp_lite_endpoints_allows_post(server: RunningServer) -> None:
    for path in (BASE + "/rpc", BASE + "/calltools", BASE + "/tools"):
        status, headers, _ = preflight(server, path, APP, "content-type, accept")
        assert status == 204, path
        assert headers["access-control-allow-origin"] == APP
        assert headers["access-control-allow-methods"] == "POST"
        assert names(headers["access-control-allow-headers"]) == ["content-type", "accept"]


def test_every_mcp_request_header_may_be_asked_for(server: RunningServer) -> None:
    asked = (
        "Mcp-Session-Id, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Mcp-Param-Region, "
        "Mcp-Param-Tenant-Id, Last-Event-ID, Authorization, Content-Type, Accept"
    )
    status, headers, _ = preflight(server, "/mcp", APP, asked)
    assert status == 204
    assert names(headers["access-control-allow-headers"]) == names(asked)


def test_a_header_the_server_does_not_read_is_left_out_of_the_preflight_answer(
    server: RunningServer,
) -> None:
    status, headers, _ = preflight(server, "/mcp", APP, "content-type, x-secret, cookie")
    assert status == 204
    assert names(headers["access-control-allow-headers"]) == ["content-type"]


def test_a_preflight_answer_keeps_the_connection_usable(server: RunningServer) -> None:
    conn = server.connection()
    try:
        assert preflight(server, "/mcp", APP, conn=conn)[0] == 204
        status, headers, body = send(
            server,
            "POST",
            BASE + "/rpc",
            {"Origin": APP},
            call_message("echo", {"text": "hi"}),
            conn,
        )
        assert status == 200 and json.loads(body)["result"]["content"][0]["text"] == "hi"
        assert headers["access-control-allow-origin"] == APP
    finally:
        conn.close()


def test_a_preflight_from_another_origin_gets_no_cors_headers(server: RunningServer) -> None:
    # The MCP endpoint refuses the origin outright (its DNS-rebinding check)...
    status, headers, _ = preflight(server, "/mcp", OTHER)
    assert status == 403 and cors_headers(headers) == {}
    # ...MCP-lite answers the OPTIONS request as any method it does not take.
    status, headers, _ = preflight(server, BASE + "/rpc", OTHER)
    assert status == 405 and headers["allow"] == "POST" and cors_headers(headers) == {}


def test_an_options_request_that_is_no_preflight_is_still_405(server: RunningServer) -> None:
    status, headers, _ = send(server, "OPTIONS", BASE + "/rpc", {"Origin": APP})
    assert status == 405
    assert headers["access-control-allow-origin"] == APP  # an answer to that origin


def test_without_cors_a_preflight_is_answered_as_before(start: StartServer) -> None:
    server = start()
    status, headers, _ = preflight(server, BASE + "/rpc", APP)
    assert status == 405 and cors_headers(headers) == {}
    status, headers, _ = preflight(server, "/mcp", "http://localhost:6274")
    assert status == 405 and cors_headers(headers) == {}
    status, headers, _ = send(server, "POST", "/mcp", {"Origin": APP, "Accept": ACCEPT_BOTH}, PING)
    assert status == 403 and cors_headers(headers) == {}  # a foreign origin, as before


# --- answers -------------------------------------------------------------------------


def test_answers_to_an_allowed_origin_carry_the_origin_and_expose_the_mcp_headers(
    server: RunningServer,
) -> None:
    origin = {"Origin": APP}
    for path, body, extra in (
        ("/mcp", PING, {"Accept": ACCEPT_BOTH}),
        (BASE + "/rpc", call_message("echo", {"text": "x"}), {}),
        (BASE + "/tools", {}, {}),
    ):
        status, headers, _ = send(server, "POST", path, {**origin, **extra}, body)
        assert status == 200, path
        assert headers["access-control-allow-origin"] == APP
        assert "origin" in names(headers["vary"])
        exposed = names(headers["access-control-expose-headers"])
        for name in ("mcp-session-id", "mcp-protocol-version", "www-authenticate", "retry-after"):
            assert name in exposed, (path, exposed)


def test_an_error_answer_to_an_allowed_origin_carries_the_cors_headers(
    server: RunningServer,
) -> None:
    status, headers, _ = send(server, "POST", BASE + "/nowhere", {"Origin": APP}, {})
    assert status == 404 and headers["access-control-allow-origin"] == APP
    status, headers, _ = send(server, "GET", BASE + "/rpc", {"Origin": APP})
    assert status == 405 and headers["access-control-allow-origin"] == APP


def test_an_sse_stream_to_an_allowed_origin_carries_the_cors_headers(
    server: RunningServer,
) -> None:
    sock = connect(server.port, WAIT)
    try:
        headers = {"Accept": "text/event-stream", "Origin": APP}
        sock.sendall(
            request_bytes(BASE + "/rpc", call_message("echo", {"text": "s"}), headers=headers)
        )
        reader = RawHttp(sock)
        head = reader.read_head()
        assert head.status == 200
        assert (head.header("content-type") or "").startswith("text/event-stream")
        assert head.header("access-control-allow-origin") == APP
        assert [event.event for event in reader.events(head)] == ["done"]
    finally:
        sock.close()


def test_answers_to_another_origin_or_without_one_carry_no_cors_headers(
    server: RunningServer,
) -> None:
    body = call_message("echo", {"text": "x"})
    for headers in ({"Origin": OTHER}, {}, {"Origin": "null"}):
        status, got, _ = send(server, "POST", BASE + "/rpc", headers, body)
        assert status == 200 and cors_headers(got) == {}, headers
        assert "vary" not in got


def test_a_401_to_an_allowed_origin_lets_the_page_read_its_challenge(
    start: StartServer, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    server = start(cors_allow_origins=(APP,), auth_tokens=str(tokens))
    # The preflight needs no token (a browser sends none with it)...
    status, headers, _ = preflight(server, "/mcp", APP, "authorization, content-type")
    assert status == 204 and headers["access-control-allow-origin"] == APP
    # ...the request without one gets its 401, readable by the page.
    status, headers, _ = send(server, "POST", "/mcp", {"Origin": APP, "Accept": ACCEPT_BOTH}, PING)
    assert status == 401
    assert headers["access-control-allow-origin"] == APP
    assert "www-authenticate" in headers
    assert "www-authenticate" in names(headers["access-control-expose-headers"])
    good = {"Origin": APP, "Accept": ACCEPT_BOTH, "Authorization": f"Bearer {TOKEN}"}
    status, headers, _ = send(server, "POST", "/mcp", good, PING)
    assert status == 200 and headers["access-control-allow-origin"] == APP


# --- the DNS-rebinding check still holds ----------------------------------------------


def test_an_allowed_origin_passes_the_origin_check_but_a_foreign_host_is_refused(
    server: RunningServer,
) -> None:
    headers = {"Origin": APP, "Accept": ACCEPT_BOTH}
    assert send(server, "POST", "/mcp", headers, PING)[0] == 200
    status, _, body = send(server, "POST", "/mcp", {**headers, "Host": "app.example:3000"}, PING)
    assert status == 403, body
    assert json.loads(body)["error"]["message"] == "Forbidden: Host or Origin not allowed"
    assert preflight(server, "/mcp", APP, Host="rebound.example")[0] == 403


def test_any_origin_with_a_star_but_the_host_is_still_checked(start: StartServer) -> None:
    server = start(cors_allow_origins=("*",))
    for origin in (APP, OTHER):
        status, headers, _ = preflight(server, "/mcp", origin)
        assert status == 204
        assert headers["access-control-allow-origin"] == "*"
        status, headers, _ = send(
            server, "POST", "/mcp", {"Origin": origin, "Accept": ACCEPT_BOTH}, PING
        )
        assert status == 200 and headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in headers
    status, _, _ = send(
        server,
        "POST",
        "/mcp",
        {"Origin": OTHER, "Host": "evil.example", "Accept": ACCEPT_BOTH},
        PING,
    )
    assert status == 403


def test_a_loopback_origin_like_the_inspectors_works_with_cors_on(start: StartServer) -> None:
    inspector = "http://localhost:6274"
    server = start(cors_allow_origins=(inspector,))
    asked = "content-type, accept, mcp-protocol-version"
    status, headers, _ = preflight(server, "/mcp", inspector, asked)
    assert status == 204 and headers["access-control-allow-origin"] == inspector
    status, headers, _ = send(
        server, "POST", "/mcp", {"Origin": inspector, "Accept": ACCEPT_BOTH}, PING
    )
    assert status == 200 and headers["access-control-allow-origin"] == inspector


# --- configuration --------------------------------------------------------------------


def test_origins_are_kept_as_browsers_send_them() -> None:
    config = Config(cors_allow_origins=("HTTPS://App.Example:443/", "http://[::1]:8080", "*"))
    assert config.cors_allow_origins == ("https://app.example", "http://[::1]:8080", "*")


@pytest.mark.parametrize(
    "value",
    ["app.example", "ftp://app.example", "http://app.example/path", "http://u@app.example", ""],
)
def test_something_that_is_not_an_origin_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="not an origin"):
        Config(cors_allow_origins=(value,))


def test_the_flag_is_repeatable_and_off_by_default() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["serve", "mcplite.demo", "--cors-allow-origin", APP, "--cors-allow-origin", OTHER]
    )
    assert config_from_args(args).cors_allow_origins == (APP, OTHER)
    assert config_from_args(parser.parse_args(["serve", "mcplite.demo"])).cors_allow_origins == ()
