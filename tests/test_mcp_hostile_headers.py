"""Hostile 2026 headers on ``POST /mcp``: ``Mcp-Method``, ``Mcp-Name``,
``MCP-Protocol-Version`` and ``Mcp-Param-*`` repeated (whichever copy matches
the body), empty, in another case, non-ASCII, oversized, in malformed or
non-canonical base64, or disagreeing with the body; and a 2025 request, which
reads none of them.  Each answer is a well-formed JSON-RPC response with the
status docs/mcp.md gives it; after each test nothing is left on the server and
nothing was logged at ERROR (:func:`mcp_hostile_support.watch`).  The requests
are written line by line on raw sockets: ``http.client`` cannot repeat a header.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_hostile_support import (
    ACCEPT_BOTH,
    LEGACY,
    MODERN,
    VERSION_KEY,
    Hostile,
    b64,
    legacy_message,
    modern_message,
    raw_answer,
    raw_request,
    start_hostile,
    watch,
)


@pytest.fixture(scope="module")
def server() -> Iterator[Hostile]:
    running = start_hostile()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(autouse=True)
def watched(server: Hostile) -> Iterator[None]:
    with watch(server):
        yield


def echo_call(text: str = "a") -> dict[str, Any]:
    return modern_message("tools/call", {"name": "echo", "arguments": {"text": text}})


GOOD_FIELDS: list[tuple[str, bytes | str]] = [
    ("Accept", ACCEPT_BOTH),
    ("MCP-Protocol-Version", MODERN),
    ("Mcp-Method", "tools/call"),
    ("Mcp-Name", "echo"),
]


def with_fields(*changes: tuple[str, bytes | str | None]) -> list[tuple[str, bytes | str]]:
    """:data:`GOOD_FIELDS` with each named header replaced (None: left out)."""
    names = {name.lower() for name, _ in changes}
    kept = [(name, value) for name, value in GOOD_FIELDS if name.lower() not in names]
    return kept + [(name, value) for name, value in changes if value is not None]


@pytest.mark.parametrize(
    "header", ["MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Mcp-Param-Region"]
)
@pytest.mark.parametrize("first", ["same", "other"])
def test_a_repeated_mcp_header_is_a_header_mismatch_whichever_copy_matches(
    server: Hostile, header: str, first: str
) -> None:
    # A proxy may read the first copy and the server the last: two readers must
    # not see two requests, so a repeated header is read as its values joined
    # (RFC 9110 section 5.3), which matches no body.
    message = modern_message("tools/call", {"name": "regional", "arguments": {"region": "eu"}})
    good = {
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "regional",
        "Mcp-Param-Region": "eu",
    }
    other = {
        "MCP-Protocol-Version": LEGACY,
        "Mcp-Method": "tools/list",
        "Mcp-Name": "echo",
        "Mcp-Param-Region": "us",
    }
    fields: list[tuple[str, bytes | str]] = [("Accept", ACCEPT_BOTH)]
    fields += [(name, value) for name, value in good.items() if name != header]
    fields += [(header, good[header] if first == "same" else other[header]), (header, good[header])]
    response = raw_request(server, json.dumps(message).encode(), fields)
    error = raw_answer(response, modern=True)["error"]
    assert error["code"] == -32020, error
    # The same request with the header once is answered.
    single = [f for f in fields if f[0] != header] + [(header, good[header])]
    reply = raw_answer(raw_request(server, json.dumps(message).encode(), single), modern=True)
    assert reply["result"]["content"] == [{"type": "text", "text": "eu"}]


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        pytest.param([("Mcp-Name", "")], -32020, id="empty-name"),
        pytest.param([("Mcp-Method", "")], -32020, id="empty-method"),
        pytest.param([("MCP-Protocol-Version", "")], -32020, id="empty-version"),
        pytest.param([("Mcp-Name", None)], -32020, id="no-name"),
        pytest.param([("Mcp-Method", None)], -32020, id="no-method"),
        pytest.param([("MCP-Protocol-Version", None)], -32020, id="no-version"),
        pytest.param([("Mcp-Name", "ECHO")], -32020, id="name-case"),
        pytest.param([("Mcp-Method", "TOOLS/CALL")], -32020, id="method-case"),
        pytest.param([("Mcp-Name", "\u00e9cho".encode())], -32020, id="name-utf8-bytes"),
        pytest.param([("Mcp-Name", b"ech\xf6")], -32020, id="name-latin1-bytes"),
        pytest.param([("Mcp-Name", "=?base64?!!!!?=")], -32020, id="base64-alphabet"),
        pytest.param([("Mcp-Name", "=?base64?ZWNobw?=")], -32020, id="base64-unpadded"),
        pytest.param([("Mcp-Name", "=?base64?//4=?=")], -32020, id="base64-not-utf8"),
        pytest.param([("Mcp-Name", "=?base64??=")], -32020, id="base64-empty"),
        pytest.param([("Mcp-Name", "=?BASE64?ZWNobw==?=")], -32020, id="base64-upper-tag"),
        pytest.param([("Mcp-Name", b64("ech"))], -32020, id="base64-other-name"),
        pytest.param([("Mcp-Name", "echo" * 3000)], -32020, id="name-12k"),
        pytest.param([("MCP-Protocol-Version", "2099-01-01")], -32020, id="version-unknown"),
        pytest.param([("Mcp-Name", b64("echo"))], 0, id="base64-name"),
        pytest.param([("Mcp-Name", " echo\t")], 0, id="name-with-spaces-around"),
        pytest.param([("mcp-name", "echo")], 0, id="lowercase-header-name"),
    ],
)
def test_mcp_headers_that_are_empty_malformed_or_disagree_are_a_header_mismatch(
    server: Hostile, changes: list[tuple[str, bytes | str | None]], code: int
) -> None:
    body = json.dumps(echo_call()).encode()
    reply = raw_answer(raw_request(server, body, with_fields(*changes)), modern=True)
    if code:
        assert reply["id"] == 1 and reply["error"]["code"] == code, reply
    else:
        assert reply["result"]["content"] == [{"type": "text", "text": "a"}], reply


def test_the_version_header_decides_the_revision_over_the_body(server: Hostile) -> None:
    # A 2025 version header makes it a 2025 request: the 2026 envelope is not read.
    fields = with_fields(("MCP-Protocol-Version", LEGACY), ("Mcp-Method", "x"), ("Mcp-Name", "y"))
    reply = raw_answer(raw_request(server, json.dumps(echo_call()).encode(), fields), False)
    assert reply["result"]["content"] == [{"type": "text", "text": "a"}]
    assert "resultType" not in reply["result"]


def test_a_version_both_header_and_meta_name_but_no_server_speaks_is_unsupported(
    server: Hostile,
) -> None:
    message = echo_call()
    message["params"]["_meta"][VERSION_KEY] = "2099-01-01"
    fields = with_fields(("MCP-Protocol-Version", "2099-01-01"))
    error = raw_answer(raw_request(server, json.dumps(message).encode(), fields), True)["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": [MODERN], "requested": "2099-01-01"}


def test_a_head_over_the_header_limit_is_431_and_closes(server: Hostile) -> None:
    body = json.dumps(echo_call()).encode()
    size = server.dispatcher.config.max_header_size
    response = raw_request(server, body, with_fields(("Mcp-Name", "e" * size)))
    assert response.status == 431
    reply = json.loads(response.body)
    assert reply["id"] is None and reply["error"]["data"] == {"http_status": 431}
    assert (response.head.header("connection") or "").lower() == "close"


@pytest.mark.parametrize(
    ("value", "code"),
    [
        pytest.param(None, -32020, id="missing"),
        pytest.param("us", -32020, id="other-value"),
        pytest.param("", -32020, id="empty"),
        pytest.param("EU", -32020, id="case"),
        pytest.param("=?base64?ZXU=?=", 0, id="base64"),
        pytest.param("=?base64?ZXU?=", -32020, id="base64-unpadded"),
        pytest.param("eu" * 4000, -32020, id="oversized"),
        pytest.param(b"\xe9u", -32020, id="non-ascii"),
    ],
)
def test_an_mcp_param_header_must_repeat_its_argument(
    server: Hostile, value: bytes | str | None, code: int
) -> None:
    message = modern_message("tools/call", {"name": "regional", "arguments": {"region": "eu"}})
    fields = with_fields(("Mcp-Name", "regional"), ("Mcp-Param-Region", value))
    reply = raw_answer(raw_request(server, json.dumps(message).encode(), fields), modern=True)
    if code:
        assert reply["error"]["code"] == code, reply
    else:
        assert reply["result"]["content"] == [{"type": "text", "text": "eu"}], reply


def test_an_mcp_param_header_without_its_argument_or_for_no_such_argument(
    server: Hostile,
) -> None:
    # Sent for an argument the call leaves out: a mismatch; for a name no
    # argument declares: not this server's to read, ignored.
    message = modern_message("tools/call", {"name": "regional", "arguments": {}})
    fields = with_fields(("Mcp-Name", "regional"), ("Mcp-Param-Region", "eu"))
    error = raw_answer(raw_request(server, json.dumps(message).encode(), fields), True)["error"]
    assert error["code"] == -32020
    fields = with_fields(("Mcp-Param-Text", "b"), ("Mcp-Param-Nothing", "\x7f"))
    reply = raw_answer(raw_request(server, json.dumps(echo_call()).encode(), fields), True)
    assert reply["result"]["content"] == [{"type": "text", "text": "a"}]


def test_a_2025_request_reads_no_2026_header(server: Hostile) -> None:
    message = legacy_message("tools/call", {"name": "echo", "arguments": {"text": "a"}})
    fields: list[tuple[str, bytes | str]] = [
        ("Accept", "application/json"),
        ("MCP-Protocol-Version", LEGACY),
        ("Mcp-Method", "tools/list"),
        ("Mcp-Name", b"\xff"),
        ("Mcp-Param-Region", "=?base64?!?="),
    ]
    reply = raw_answer(raw_request(server, json.dumps(message).encode(), fields), modern=False)
    assert reply["result"]["content"] == [{"type": "text", "text": "a"}]
