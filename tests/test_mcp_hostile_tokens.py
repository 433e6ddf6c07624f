"""Forged, replayed and expired ``taskId``s and ``requestState``s on ``POST /mcp``.

A task id is a sealed promise token and a ``requestState`` a sealed round: every
single-character change of a genuine one, one sealed under another server's
secret, one past its expiry (sealed again with the server's own secret, so no
test waits for a clock; one test also lets a short ``promise_ttl`` run out), one
truncated, one made for another tool or prompt: each is -32602, naming the id,
and the genuine one still works after.  ``tasks/update`` answers for a round
nobody asked, and a round answered twice (2026 ``tasks/update``, a 2026
``requestState`` sent again, a 2025 answer POSTed twice), run the tool no more
than once per round.  Nothing is left on the server and nothing logged at ERROR
(:func:`mcp_hostile_support.watch`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import SECRET, WAIT, make_config, single_changes
from mcp_hostile_support import (
    LEGACY_HEADERS,
    OTHER_SECRET,
    Client,
    Hostile,
    answer_of,
    client,
    error_of,
    legacy_message,
    modern_headers,
    modern_message,
    resealed,
    resealed_state,
    start_hostile,
    watch,
)
from sse_client import RawHttp, connect, request_bytes

from mcplite import Dispatcher, Promised, Tools
from mcplite.core.context import RequestContext, binding_of
from mcplite.core.tokens import TokenSealer
from mcplite.protocols.mcp.tasks import TaskTable

#: Bound of the polls that wait for a task to leave a status (each a tasks/get).
POLLS = 400
POLL_INTERVAL = 0.005


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


def modern(c: Client, method: str, params: dict[str, Any], request_id: Any = 1) -> dict[str, Any]:
    """A 2026 request: its JSON-RPC reply (checked by answer_of)."""
    message = modern_message(method, params, request_id)
    return answer_of(*c.post(message, modern_headers(message)), modern=True)


def start_task(c: Client, name: str, arguments: dict[str, Any] | None = None) -> str:
    reply = modern(c, "tools/call", {"name": name, "arguments": arguments or {}}, "start")
    assert reply["result"]["resultType"] == "task", reply
    task_id: str = reply["result"]["taskId"]
    return task_id


def status_of(c: Client, task_id: str) -> dict[str, Any]:
    reply = modern(c, "tasks/get", {"taskId": task_id}, "get")
    result: dict[str, Any] = reply["result"]
    assert result["taskId"] == task_id
    return result


def wait_status(c: Client, task_id: str, status: str) -> dict[str, Any]:
    """tasks/get until the task reaches ``status`` (bounded)."""
    for _ in range(POLLS):
        result = status_of(c, task_id)
        if result["status"] == status:
            return result
        time.sleep(POLL_INTERVAL)
    pytest.fail(f"task {task_id} never reached {status!r}")


def unknown_task(c: Client, method: str, task_id: Any, **params: Any) -> str:
    """``method`` for ``task_id`` must be -32602 naming it; the error's message."""
    message = modern_message(method, {"taskId": task_id, **params}, "forged")
    error = error_of(*c.post(message, modern_headers(message)), True, -32602, "forged")
    assert error["data"] == {"taskId": task_id}, error
    message_text: str = error["message"]
    assert message_text.startswith("Unknown task"), error
    return message_text


# --- task ids --------------------------------------------------------------------------


def test_every_single_character_change_of_a_task_id_names_no_task(server: Hostile) -> None:
    with client(server) as c:
        task_id = start_task(c, "quick")
        changed = list(single_changes(task_id))
        assert len(changed) > 1000
        for i, forged in enumerate(changed):
            unknown_task(c, "tasks/get", forged)
            if i % 10 == 0:  # the other methods, on a sample
                unknown_task(c, "tasks/cancel", forged)
                unknown_task(c, "tasks/update", forged, inputResponses={})
        # The genuine task is untouched: still there, still completed.
        assert wait_status(c, task_id, "completed")["result"]["content"] == [
            {"type": "text", "text": "done"}
        ]
    assert server.runs.counts["quick"] >= 1


def test_a_task_id_sealed_elsewhere_expired_or_cut_names_no_task(server: Hostile) -> None:
    with client(server) as c:
        task_id = start_task(c, "quick")
        far = time.time() + 3600
        other_secret = resealed(task_id, expires_at=far, secret=OTHER_SECRET)
        expired = resealed(task_id, expires_at=time.time() - 1)
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            extra: dict[str, Any] = {"inputResponses": {}} if method == "tasks/update" else {}
            unknown_task(c, method, other_secret, **extra)
            assert "expired" in unknown_task(c, method, expired, **extra)
            for cut in (task_id[:-1], task_id[: len(task_id) // 2], "prom_", task_id + task_id):
                unknown_task(c, method, cut, **extra)
        # A promise id that was never issued, sealed properly: no such promise.
        never = TokenSealer(SECRET).seal(b"\x00" * 16, far)
        unknown_task(c, "tasks/get", never)
        assert status_of(c, task_id)["status"] in ("working", "completed")


def test_a_task_is_kept_exactly_as_long_as_its_id_opens() -> None:
    # Its id is a token, whose expiry is whole milliseconds: the table keeps the
    # task until then, not until the promise's own (finer) expiry, so a request
    # told "expired" is never followed by one that still finds it.
    dispatcher = Dispatcher(Tools(), make_config())
    table = TaskTable(dispatcher, 10)
    expires = time.time() + 60.0004567
    token = dispatcher.sealer.seal(b"p" * 16, expires, binding_of(None))
    task = table.add(Promised(token, expires), "quick", {}, RequestContext("mcp"))
    _, opens_until = dispatcher.sealer.open(task.task_id, binding_of(None))
    assert task.expires_at == opens_until < expires


def test_a_task_whose_promise_ttl_ran_out_names_no_task_and_leaves_the_table() -> None:
    short = start_hostile(make_config(promise_ttl=0.3))
    try:
        with watch(short), client(short) as c:
            task_id = start_task(c, "quick")
            assert len(short.http.mcp.tasks) == 1
            deadline = time.monotonic() + WAIT
            while True:  # tasks/get until the token's expiry passes (bounded)
                message = modern_message("tasks/get", {"taskId": task_id}, "get")
                reply = answer_of(*c.post(message, modern_headers(message)), modern=True)
                if "error" in reply:
                    break
                assert time.monotonic() < deadline, reply
                time.sleep(POLL_INTERVAL)
            assert reply["error"]["code"] == -32602 and "expired" in reply["error"]["message"]
            unknown_task(c, "tasks/update", task_id, inputResponses={"elicitation": {}})
            assert len(short.http.mcp.tasks) == 0  # swept as it was asked for
    finally:
        short.stop()


# --- tasks/update ----------------------------------------------------------------------


def update(c: Client, task_id: str, responses: Any) -> dict[str, Any]:
    return modern(c, "tasks/update", {"taskId": task_id, "inputResponses": responses}, "upd")


def test_answers_to_a_task_that_asked_nothing_are_acknowledged_and_change_nothing(
    server: Hostile,
) -> None:
    with client(server) as c:
        task_id = start_task(c, "quick")
        done = wait_status(c, task_id, "completed")
        runs = server.runs.counts["quick"]
        for responses in [{}, {"elicitation": {"action": "accept"}}, {"x": 1}]:
            ack = update(c, task_id, responses)["result"]
            assert set(ack) - {"_meta"} == {"resultType"}, ack
        assert status_of(c, task_id) == {**done, "lastUpdatedAt": done["lastUpdatedAt"]}
        assert server.runs.counts["quick"] == runs


def test_answers_of_the_wrong_shape_are_invalid_params_naming_the_key(server: Hostile) -> None:
    with client(server) as c:
        task_id = start_task(c, "confirm")
        waiting = wait_status(c, task_id, "input_required")
        assert set(waiting["inputRequests"]) == {"elicitation"}
        for answer in ["yes", 1, None, [], {"action": "maybe"}, {"action": "accept", "content": 1}]:
            message = modern_message(
                "tasks/update", {"taskId": task_id, "inputResponses": {"elicitation": answer}}, 9
            )
            error = error_of(*c.post(message, modern_headers(message)), True, -32602, 9)
            assert error["data"] == {"field": "inputResponses.elicitation"}, error
        # Keys nobody asked for are ignored; the round stays open.
        update(c, task_id, {"confirm": {"action": "accept"}, "": None})
        assert status_of(c, task_id)["status"] == "input_required"
        update(c, task_id, {"elicitation": {"action": "decline"}})
        assert wait_status(c, task_id, "completed")["result"]["isError"] is True


def test_a_round_answered_twice_runs_the_tool_again_once(server: Hostile) -> None:
    with client(server) as c:
        task_id = start_task(c, "confirm")
        wait_status(c, task_id, "input_required")
        before = server.runs.counts["confirm"]
        accept = {"elicitation": {"action": "accept", "content": {"ok": True}}}
        decline = {"elicitation": {"action": "accept", "content": {"ok": False}}}
        update(c, task_id, accept)
        update(c, task_id, decline)  # the round is answered: this one is too late
        done = wait_status(c, task_id, "completed")
        update(c, task_id, decline)  # and after the end: nothing changes
        assert status_of(c, task_id)["result"] == done["result"]
    assert done["result"]["content"] == [{"type": "text", "text": "went on"}]
    assert server.runs.counts["confirm"] == before + 1


# --- requestState -------------------------------------------------------------------------


ADA = {"elicitation": {"action": "accept", "content": {"name": "Ada"}}}


def greet(c: Client, request_id: Any = 1, **params: Any) -> dict[str, Any]:
    return modern(c, "tools/call", {"name": "greet", "arguments": {}, **params}, request_id)


def first_state(c: Client) -> str:
    result = greet(c)["result"]
    assert result["resultType"] == "input_required", result
    state: str = result["requestState"]
    return state


def refused_state(c: Client, state: Any, method: str = "tools/call", name: str = "greet") -> str:
    params = {"name": name, "arguments": {}, "inputResponses": ADA, "requestState": state}
    message = modern_message(method, params, "state")
    error = error_of(*c.post(message, modern_headers(message)), True, -32602, "state")
    text: str = error["message"]
    assert "requestState" in text, error
    return text


def test_every_single_character_change_of_a_request_state_is_refused(server: Hostile) -> None:
    with client(server) as c:
        state = first_state(c)
        runs = server.runs.counts["greet"]
        changed = list(single_changes(state))
        assert len(changed) > 500
        for forged in changed:
            refused_state(c, forged)
        assert server.runs.counts["greet"] == runs  # refused before the tool runs
        done = greet(c, 2, inputResponses=ADA, requestState=state)["result"]
        assert done["content"] == [{"type": "text", "text": "Hello, Ada!"}]


def test_a_request_state_sealed_elsewhere_expired_cut_or_for_another_target_is_refused(
    server: Hostile,
) -> None:
    with client(server) as c:
        state = first_state(c)
        refused_state(c, resealed_state(state, ttl=60, secret=OTHER_SECRET))
        assert "expired" in refused_state(c, resealed_state(state, ttl=-1))
        for cut in (state[:-1], state.split(".")[0], "st_", state + "." + state):
            refused_state(c, cut)
        # Sealed by this server, but not as a round: refused, not run.
        for data in ["not json", "[]", '"greet"', "[1, 2, 3, 4]", '["echo", null, {}, false]']:
            refused_state(c, TokenSealer(SECRET).seal_state(data, 60))
        # A tool's round given to a prompt, and a prompt's to a tool.
        assert "prompt:ask" in refused_state(c, state, "prompts/get", "ask")
        asked = modern(c, "prompts/get", {"name": "ask"}, "p")["result"]
        assert asked["resultType"] == "input_required", asked
        assert "greet" in refused_state(c, asked["requestState"])


def test_a_request_state_sent_again_answers_again(server: Hostile) -> None:
    # The server keeps no record of rounds (a state is sealed, not stored): the
    # same answer to the same round is the same call, run again.
    with client(server) as c:
        state = first_state(c)
        runs = server.runs.counts["greet"]
        for request_id in (1, 2, 3):
            result = greet(c, request_id, inputResponses=ADA, requestState=state)["result"]
            assert result["content"] == [{"type": "text", "text": "Hello, Ada!"}]
        assert server.runs.counts["greet"] == runs + 3


# --- the 2025 back-channel ------------------------------------------------------------------


def test_a_2025_answer_posted_twice_or_to_nothing_is_taken_once(server: Hostile) -> None:
    message = legacy_message("tools/call", {"name": "greet", "arguments": {}}, 51)
    runs = server.runs.counts.get("greet", 0)
    with client(server) as c:
        for stray in [
            {"jsonrpc": "2.0", "id": "mcplite-not-asked", "result": {"action": "accept"}},
            {"jsonrpc": "2.0", "id": 7, "result": {}},
            {"jsonrpc": "2.0", "id": {"a": 1}, "error": {"code": 1, "message": "x"}},
            {"jsonrpc": "2.0", "result": {}},
            {"id": "mcplite-x", "result": None},
        ]:
            assert c.post(stray, LEGACY_HEADERS)[:3:2] == (202, b"")
        sock = connect(server.port, WAIT)
        with sock:
            sock.sendall(request_bytes("/mcp", message, headers=LEGACY_HEADERS))
            reader = RawHttp(sock)
            head = reader.read_head()
            events = reader.events(head)
            asked = next(events).json()
            assert asked["method"] == "elicitation/create"
            answer = {"jsonrpc": "2.0", "id": asked["id"], "result": ADA["elicitation"]}
            assert c.post(answer, LEGACY_HEADERS)[:3:2] == (202, b"")
            late = {**answer, "result": {"action": "accept", "content": {"name": "Bo"}}}
            assert c.post(late, LEGACY_HEADERS)[:3:2] == (202, b"")
            response = [event.json() for event in events][-1]
        # Sent as 2026, an answer is refused: that revision has no requests to answer.
        modern_answer = {"jsonrpc": "2.0", "id": asked["id"], "result": {}}
        headers = modern_headers(modern_message("tools/list"))
        error_of(*c.post(modern_answer, headers), True, -32600, None)
    assert response["id"] == 51
    assert response["result"]["content"] == [{"type": "text", "text": "Hello, Ada!"}]
    assert server.runs.counts["greet"] == runs + 2  # asked, then answered once


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"result": "yes"}, id="result-not-an-object"),
        pytest.param({"result": {"action": "maybe"}}, id="result-not-an-elicitation"),
        pytest.param({"error": "no"}, id="error-not-an-object"),
        pytest.param({"error": {"code": "x"}}, id="error-without-message"),
    ],
)
def test_a_2025_answer_of_the_wrong_shape_ends_the_call_as_a_tool_error(
    server: Hostile, answer: dict[str, Any]
) -> None:
    message = legacy_message("tools/call", {"name": "greet", "arguments": {}}, 52)
    with client(server) as c:
        sock = connect(server.port, WAIT)
        with sock:
            sock.sendall(request_bytes("/mcp", message, headers=LEGACY_HEADERS))
            reader = RawHttp(sock)
            events = reader.events(reader.read_head())
            asked = next(events).json()
            reply = {"jsonrpc": "2.0", "id": asked["id"], **answer}
            assert c.post(reply, LEGACY_HEADERS)[:3:2] == (202, b"")
            response = [event.json() for event in events][-1]
    assert response["id"] == 52
    assert response["result"]["isError"] is True, response
