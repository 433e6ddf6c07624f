"""The MCP-lite endpoint's answer format when the client accepts both JSON and
SSE (as every MCP client does): JSON, unless the tool streams by nature."""

from __future__ import annotations

import json

from conftest import RunningServer, call_message

BOTH = {"Accept": "application/json, text/event-stream"}


def test_a_client_taking_json_and_sse_gets_json_for_a_plain_tool(
    demo_server: RunningServer,
) -> None:
    status, headers, body = demo_server.post("/rpc", call_message("echo", {"text": "hi"}), BOTH)
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    reply = json.loads(body)
    assert reply["result"]["content"] == [{"type": "text", "text": "hi"}]


def test_a_client_taking_json_and_sse_gets_sse_for_a_streaming_tool(
    demo_server: RunningServer,
) -> None:
    message = call_message("generate_report", {"topic": "sales"})
    status, headers, body = demo_server.post("/rpc", message, BOTH)
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert b"event: done" in body


def test_a_client_taking_only_sse_still_gets_sse_for_a_plain_tool(
    demo_server: RunningServer,
) -> None:
    message = call_message("echo", {"text": "hi"})
    status, headers, body = demo_server.post("/rpc", message, {"Accept": "text/event-stream"})
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert b"event: done" in body


def test_errors_before_a_stream_starts_are_json_whichever_is_accepted(
    demo_server: RunningServer,
) -> None:
    message = call_message("no_such_tool", {})
    status, headers, body = demo_server.post("/rpc", message, BOTH)
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"]["code"] == -32601
