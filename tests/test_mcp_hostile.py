"""Hostile bodies on ``POST /mcp``, in both revisions.

Every method the endpoint knows (walked from its method table, not listed by
hand) gets every field of ``params`` and of ``params._meta`` in every wrong JSON
type, deep nesting included, and every field of the JSON-RPC envelope too; then
ids of every wrong type, roots that are not one object, batches, bytes that are
not JSON or not UTF-8, duplicate keys, bodies at the size limit and one byte
over it, strings near it in every name, and the transport's own refusals (405,
406, 415).  Each answer is a well-formed JSON-RPC response with the status
docs/mcp.md gives it (:func:`mcp_hostile_support.answer_of`); after each test
nothing is left on the server and nothing was logged at ERROR
(:func:`mcp_hostile_support.watch`).  Headers: test_mcp_hostile_headers.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import make_config
from mcp_hostile_support import (
    CAPABILITIES_KEY,
    CLIENT_CODES,
    LEGACY,
    LEGACY_HEADERS,
    MODERN,
    VERSION_KEY,
    Hostile,
    answer_of,
    client,
    error_of,
    legacy_message,
    modern_headers,
    modern_message,
    raw_request,
    start_hostile,
    watch,
)

from mcplite.protocols.requests import MCP_2025, MCP_2026

#: The body limit of the server these tests run (small: the limit tests send it).
LIMIT = 256 * 1024
#: A nesting depth the parser takes (a deeper one is a parse error, tested apart).
DEEP = 900
#: Stands for a DEEP-nested array in a message; replaced in its bytes.
DEEP_VALUE = "\x00deep\x00"
#: One value of every JSON type, none of them what any field wants.
WRONG: list[Any] = [
    None,
    True,
    0,
    -1,
    1.5,
    10**30,
    "",
    "x" * 64,
    [],
    [1],
    {},
    {"a": 1},
    DEEP_VALUE,
]
#: Every field of params any method reads, in either revision.
PARAM_FIELDS = [
    "name",
    "arguments",
    "cursor",
    "uri",
    "taskId",
    "task",
    "inputResponses",
    "requestState",
    "protocolVersion",
    "capabilities",
    "clientInfo",
    "level",
    "ref",
    "argument",
    "context",
    "notifications",
    "_meta",
]
#: Every field of params._meta the server reads.
META_FIELDS = [
    "progressToken",
    VERSION_KEY,
    CAPABILITIES_KEY,
    "io.modelcontextprotocol/logLevel",
    "io.modelcontextprotocol/clientInfo",
]


@pytest.fixture(scope="module")
def server() -> Iterator[Hostile]:
    running = start_hostile(make_config(page_size=2, max_body_size=LIMIT))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(autouse=True)
def watched(server: Hostile) -> Iterator[None]:
    with watch(server):
        yield


def encoded(message: Any) -> bytes:
    """``message`` as bytes, each :data:`DEEP_VALUE` a :data:`DEEP`-nested array."""
    deep = b"[" * DEEP + b"]" * DEEP
    return json.dumps(message).encode().replace(json.dumps(DEEP_VALUE).encode(), deep)


def good_params(method: str, task_id: str) -> dict[str, Any]:
    """Params every method of either revision answers with a result."""
    params: dict[str, Any] = {
        "name": "echo",
        "arguments": {"text": "a"},
        "uri": "test://one",
        "taskId": task_id,
        "inputResponses": {},
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "hostile", "version": "0"},
        "level": "info",
        "ref": {"type": "ref/prompt", "name": "hello"},
        "argument": {"name": "who", "value": "w"},
    }
    if method == "prompts/get":
        params.update(name="hello", arguments={})
    return params


def new_task(server: Hostile) -> str:
    with client(server) as c:
        message = modern_message("tools/call", {"name": "quick"}, "task")
        reply = answer_of(*c.post(message, modern_headers(message)), modern=True)
    assert reply["result"]["resultType"] == "task", reply
    task_id: str = reply["result"]["taskId"]
    return task_id


# --- every field of every method, in every wrong type ---------------------------------


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_every_field_of_every_method_in_every_wrong_type_gets_a_json_rpc_answer(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    view = server.http.mcp.methods.view(MCP_2026 if modern else MCP_2025)
    methods = sorted(set(view) - {"subscriptions/listen"})  # a stream: tested apart
    assert {"tools/call", "tools/list", "resources/read", "completion/complete"} <= set(methods)
    task_id = new_task(server)
    errors: dict[int, int] = {}
    with client(server) as c:
        for method in methods:
            # The base request is answered with a result: what fails is the field.
            base = good_params(method, task_id)
            message = modern_message(method, base) if modern else legacy_message(method, base)
            headers = modern_headers(message) if modern else LEGACY_HEADERS
            reply = answer_of(*c.post(message, headers), modern=modern)
            assert "result" in reply, (method, reply)
            for name in PARAM_FIELDS + [f"_meta.{key}" for key in META_FIELDS]:
                for value in WRONG:
                    params = dict(base)
                    meta = dict(message["params"].get("_meta", {}))
                    if name.startswith("_meta."):
                        meta[name[len("_meta.") :]] = value
                    else:
                        params[name] = value
                    if name != "_meta":
                        params["_meta"] = meta
                    wrong = {**message, "params": params}
                    headers = modern_headers(wrong) if modern else LEGACY_HEADERS
                    reply = answer_of(*c.post(encoded(wrong), headers), modern=modern)
                    assert reply["id"] == 1, (method, name, value, reply)
                    if "error" in reply:
                        code = reply["error"]["code"]
                        assert code in CLIENT_CODES, (method, name, value, reply)
                        errors[code] = errors.get(code, 0) + 1
    # The walk reached the checks of each stage, not only the first one.
    expected = {-32602, -32020, -32021} if modern else {-32602}
    assert expected <= set(errors), errors


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_an_envelope_field_of_a_wrong_type_is_an_invalid_request_for_every_method(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    view = server.http.mcp.methods.view(MCP_2026 if modern else MCP_2025)
    with client(server) as c:
        for method in sorted(view):
            message = modern_message(method) if modern else legacy_message(method, {})
            headers = modern_headers(message) if modern else LEGACY_HEADERS
            envelope: list[tuple[str, list[Any]]] = [
                ("jsonrpc", [None, "1.0", "2", 2.0, 2, "", ["2.0"], {"v": "2.0"}]),
                ("method", [None, 1, True, [method], {"name": method}]),
                ("params", ["", "x", 0, 1.5, True]),
            ]
            for name, values in envelope:
                for value in values:
                    wrong = {**message, name: value}
                    error_of(*c.post(wrong, headers), modern, -32600, 1)
            for name in ("jsonrpc", "method"):
                left_out = {key: value for key, value in message.items() if key != name}
                error_of(*c.post(left_out, headers), modern, -32600, 1)
            # params that are an array: not an object, as MCP wants them.
            for value in [[], [1], [{"name": "echo"}]]:
                error_of(*c.post({**message, "params": value}, headers), modern, -32602, 1)


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_a_method_of_the_other_revision_or_of_no_revision_is_method_not_found(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    table = server.http.mcp.methods
    view = table.view(MCP_2026 if modern else MCP_2025)
    foreign = sorted(set(table.methods) - set(view))
    assert foreign, "each revision lacks some of the other's methods"
    with client(server) as c:
        for method in [*foreign, "", "tools/call/", "TOOLS/LIST", "x" * 1000, "rpc.discover"]:
            message = modern_message(method) if modern else legacy_message(method, {})
            headers = modern_headers(message) if modern else LEGACY_HEADERS
            error = error_of(*c.post(message, headers), modern, -32601, 1)
            assert error["data"]["method"] == method


def test_subscriptions_listen_with_a_filter_that_is_not_an_object_is_invalid_params(
    server: Hostile,
) -> None:
    with client(server) as c:
        for value in [None, True, 1, "tools", [], [{"toolsListChanged": True}]]:
            message = modern_message("subscriptions/listen", {"notifications": value}, "listen")
            error_of(*c.post(message, modern_headers(message)), True, -32602, "listen")
        # A stream or nothing: a client that takes only JSON is refused at once.
        message = modern_message("subscriptions/listen", {"notifications": {}}, "listen")
        headers = {**modern_headers(message), "Accept": "application/json"}
        status, _, body = c.post(message, headers)
        assert status == 406, body


# --- ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_an_id_of_a_wrong_type_is_an_invalid_request_answered_with_a_null_id(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    with client(server) as c:
        for request_id in [{"a": 1}, [1], [], True, False, None, 1.5, -0.0, 1.0, 1e300]:
            message = modern_message("tools/list") if modern else legacy_message("tools/list")
            headers = modern_headers(message) if modern else LEGACY_HEADERS
            wrong = {**message, "id": request_id}
            error_of(*c.post(wrong, headers), modern, -32600, None)


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_string_and_integer_ids_of_any_size_are_echoed_exactly(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    with client(server) as c:
        for request_id in [0, -1, 10**30, -(10**30), 10**4000, "", "x" * 10000, "\u00e9\U0001f600"]:
            message = modern_message("tools/list") if modern else legacy_message("tools/list")
            headers = modern_headers(message) if modern else LEGACY_HEADERS
            reply = answer_of(*c.post({**message, "id": request_id}, headers), modern=modern)
            assert reply["id"] == request_id and "result" in reply
        # Beyond the interpreter's digit limit an integer is not read at all.
        body = b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"tools/list"}'
        error = error_of(*c.post(body, LEGACY_HEADERS), False, -32700, None)
        assert "integer too large" in error["message"]


# --- roots, batches, bytes ----------------------------------------------------------


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_a_root_that_is_not_one_request_object_is_an_invalid_request_and_runs_nothing(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    call = {"name": "greet", "arguments": {"name": "Ada"}}
    one = modern_message("tools/call", call) if modern else legacy_message("tools/call", call)
    note = {k: v for k, v in one.items() if k != "id"}
    headers = modern_headers(one) if modern else LEGACY_HEADERS
    before = dict(server.runs.counts)
    with client(server) as c:
        for root in [b"1", b'"tools/call"', b"null", b"true", b"{}", b"[]", b"[[]]", b"[1]"]:
            error_of(*c.post(root, headers), modern, -32600, None)
        for batch in [[one], [one, one], [note], [one, note]]:
            error = error_of(*c.post(batch, headers), modern, -32600, None)
            assert "batch" in error["message"]
    assert server.runs.counts == before  # no member of a batch ran


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_bytes_that_are_not_json_or_not_utf8_are_a_parse_error(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    headers = modern_headers(modern_message("tools/list")) if modern else LEGACY_HEADERS
    start = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"'
    bodies = [
        b"",
        b" ",
        b"{",
        b'{"jsonrpc":"2.0","id":1,',
        b"NaN",
        b'{"id":Infinity}',
        b"\xef\xbb\xbf{}",  # a byte order mark: not JSON text (RFC 8259 section 8.1)
        start + b"\xff" + b'"}}',
        start + b"\xc0\xaf" + b'"}}',  # an overlong encoding of "/"
        start + b"\xed\xa0\x80" + b'"}}',  # a UTF-16 surrogate encoded in UTF-8
        start + b"\xe2\x82" + b'"}}',  # a truncated sequence
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 25_000 + b"1" + b"}" * 25_000,
    ]
    with client(server) as c:
        for body in bodies:
            error_of(*c.post(body, headers), modern, -32700, None)


def test_a_lone_surrogate_escape_is_read_and_answered_as_valid_json(server: Hostile) -> None:
    # "\ud800" is valid JSON text but no Unicode character: the answer that
    # echoes it must still be valid JSON (escaped), in both revisions.
    with client(server) as c:
        message = legacy_message("tools/call", {"name": "echo", "arguments": {"text": "\ud800"}})
        reply = answer_of(*c.post(message, LEGACY_HEADERS), modern=False)
        assert reply["result"]["content"] == [{"type": "text", "text": "\ud800"}]
        message = legacy_message("tools/call", {"name": "\udfff", "arguments": {}}, "bad")
        error = error_of(*c.post(message, LEGACY_HEADERS), False, -32602, "bad")
        assert "\udfff" in error["message"]
        message = modern_message("tools/call", {"name": "echo", "arguments": {"text": "\ud800"}})
        reply = answer_of(*c.post(message, modern_headers(message)), modern=True)
        assert reply["result"]["content"] == [{"type": "text", "text": "\ud800"}]


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_of_duplicate_keys_the_last_one_counts(server: Hostile, revision: str) -> None:
    # As JSON.parse and most parsers read them; the 2026 headers must repeat
    # the last one too (a proxy routing on them sees what the server runs).
    meta = (
        f',"_meta":{{"{VERSION_KEY}":"1999-01-01","{VERSION_KEY}":"{MODERN}",'
        f'"{CAPABILITIES_KEY}":{{}}}}'
    )
    body = (
        '{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","method":"tools/list",'
        f'"params":{{"cursor":5,"cursor":null{meta if revision == MODERN else ""}}}}}'
    ).encode()
    modern = revision == MODERN
    headers = modern_headers(modern_message("tools/list")) if modern else LEGACY_HEADERS
    with client(server) as c:
        reply = answer_of(*c.post(body, headers), modern=modern)
    assert reply["id"] == 2
    assert [tool["name"] for tool in reply["result"]["tools"]] == ["echo", "count"]


# --- sizes ---------------------------------------------------------------------------


def padded(message: dict[str, Any], size: int) -> bytes:
    """``message`` grown to exactly ``size`` bytes by a string in params."""
    message = {**message, "params": {**message["params"], "padding": ""}}
    body = json.dumps(message).encode()
    message["params"]["padding"] = "p" * (size - len(body))
    body = json.dumps(message).encode()
    assert len(body) == size
    return body


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_a_body_of_exactly_the_limit_is_answered_and_one_byte_more_is_413(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    message = modern_message("tools/list", {}) if modern else legacy_message("tools/list", {})
    headers = modern_headers(message) if modern else LEGACY_HEADERS
    with client(server) as c:
        reply = answer_of(*c.post(padded(message, LIMIT), headers), modern=modern)
        assert "tools" in reply["result"]
        status, response_headers, body = c.post(padded(message, LIMIT + 1), headers)
    assert status == 413
    assert response_headers["content-type"].startswith("application/json")
    reply = json.loads(body)
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert reply["error"]["data"] == {"http_status": 413}


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_strings_near_the_limit_in_every_name_are_refused_with_a_bounded_answer(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    huge = "n" * (LIMIT - 1000)
    cases: list[tuple[str, dict[str, Any]]] = [
        ("tools/call", {"name": huge}),
        ("prompts/get", {"name": huge}),
        ("resources/read", {"uri": huge}),
        ("tools/list", {"cursor": huge}),
        ("tools/call", {"name": "greet", "requestState": huge}),
        ("completion/complete", {"ref": {"type": huge}, "argument": {"name": "a", "value": ""}}),
    ]
    if modern:
        cases.append(("tasks/get", {"taskId": huge}))
    with client(server) as c:
        for method, params in cases:
            message = modern_message(method, params) if modern else legacy_message(method, params)
            headers = dict(modern_headers(message) if modern else LEGACY_HEADERS)
            headers.pop("Mcp-Name", None)  # no header holds it: left out (optional for tasks)
            status, response_headers, body = c.post(message, headers)
            reply = answer_of(status, response_headers, body, modern)
            assert "error" in reply and reply["error"]["code"] in CLIENT_CODES, reply
            assert len(body) < 4 * LIMIT


# --- the transport's own refusals --------------------------------------------------------


@pytest.mark.parametrize("revision", [MODERN, LEGACY])
def test_a_body_that_is_not_utf8_json_by_its_content_type_is_415_and_an_unacceptable_answer_406(
    server: Hostile, revision: str
) -> None:
    modern = revision == MODERN
    message = modern_message("tools/list") if modern else legacy_message("tools/list")
    headers = modern_headers(message) if modern else LEGACY_HEADERS
    with client(server) as c:
        for content_type in [
            "text/plain",
            "",
            "application/jsonx",
            "application/json; charset=latin-1",
        ]:
            status, response_headers, body = c.post(
                message, {**headers, "Content-Type": content_type}
            )
            assert status == 415, body
            assert response_headers["content-type"].startswith("application/json")
            reply = json.loads(body)
            assert reply["error"]["code"] == -32600 and reply["id"] is None
            assert reply["error"]["data"] == {"http_status": 415}
        # raw_request sends a Content-Type of its own: this one makes it two.
        fields: list[tuple[str, bytes | str]] = [
            *headers.items(),
            ("Content-Type", "application/json"),
        ]
        response = raw_request(server, json.dumps(message).encode(), fields)
        assert response.status == 415, response
        for accept in ["text/html", "", "image/*"]:
            status, _, body = c.post(message, {**headers, "Accept": accept})
            assert status == 406, body
            assert json.loads(body)["error"]["data"] == {"http_status": 406}


def test_other_methods_than_post_are_405_with_allow_post(server: Hostile) -> None:
    with client(server) as c:
        for method in ["GET", "DELETE", "PUT", "PATCH", "OPTIONS"]:
            status, headers, body = c.post(b"", {"Accept": "text/event-stream"}, method=method)
            assert status == 405, (method, body)
            assert headers["allow"] == "POST"
            assert json.loads(body)["error"]["data"] == {"http_status": 405}
