"""Promises over the wire, on both bindings, with peers we did not write.

HTTP through the stdlib ``http.client``; gRPC through the official ``grpcio``
client built from our proto.  Each test runs the same scenario on both: a
promise, the promise again (same token) while pending, a long-poll redeem that
returns as soon as the outcome is ready, the same answer on a repeat redeem, a
tool that raises after its deadline, and 1,000 promises pending at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from conftest import WAIT, RunningServer, call_message, make_config, start_server
from grpc_support import Protos, protos, to_python

from mcplite import ALWAYS, Context, Tools


@dataclass
class Outcome:
    """One answer, whichever binding gave it."""

    response_type: str
    token: str | None
    body: dict[str, Any]  # the result without its meta
    meta: dict[str, Any]
    error: tuple[str, str] | None = None  # (JSON-RPC code or gRPC status, message)


class Wire:
    """Calls a tool over one binding and reads the answer back as an :class:`Outcome`."""

    def __init__(self, server: RunningServer, binding: str) -> None:
        self.server = server
        self.binding = binding
        self.messages: Protos | None = None
        self.channel: grpc.Channel | None = None
        if binding == "grpc":
            self.messages = protos()["ours"]
            self.channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
            self.stub = self.messages.stub(self.channel)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> Outcome:
        if self.binding == "http":
            reply = self.server.call(name, arguments)
            if "error" in reply:
                error = reply["error"]
                return Outcome("error", None, {}, {}, (str(error["code"]), error["message"]))
            result = dict(reply["result"])
            meta = result.pop("_meta")
            return Outcome(meta["response_type"], meta.get("promise_token"), result, meta)
        assert self.messages is not None
        try:
            response = self.stub.CallTool(self.messages.request(name, arguments), timeout=WAIT)
        except grpc.RpcError as exc:
            return Outcome("error", None, {}, {}, (exc.code().name, exc.details()))
        return self.outcome(response)

    def promise(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """Call a tool that answers with a promise; the promise's token."""
        outcome = self.call(name, arguments)
        assert outcome.response_type == "promise" and outcome.token is not None, outcome
        return outcome.token

    def outcome(self, response: Any) -> Outcome:
        assert self.messages is not None
        kinds = {
            self.messages.enum_value("ResponseType", name): text
            for name, text in [
                ("ANSWER", "answer"),
                ("PROMISE", "promise"),
                ("FAILURE", "failure"),
                ("ELICITATION", "elicitation"),
            ]
        }
        meta = response.meta
        kind = kinds[meta.response_type]
        return Outcome(
            kind,
            meta.promise_token or None,
            to_python(response.result),
            {"extra": to_python(meta.extra), "expires_at": meta.expires_at},
        )

    def progress(self, outcome: Outcome) -> Any:
        if self.binding == "http":
            return outcome.meta.get("progress")
        return outcome.meta["extra"].get("progress")


def long_tools(gate: asyncio.Event) -> Tools:
    tools = Tools()

    @tools.tool(promise_after=ALWAYS)
    async def slow(n: int, ctx: Context) -> str:
        ctx.report_progress(1, 2, "half way")
        await gate.wait()
        return f"done {n}"

    @tools.tool(promise_after=ALWAYS)
    async def breaks() -> str:
        await gate.wait()
        raise RuntimeError("secret internals")

    return tools


@pytest.fixture(params=["http", "grpc"])
def wire(request: pytest.FixtureRequest) -> Iterator[tuple[Wire, asyncio.Event]]:
    # An asyncio.Event binds to the loop that first waits on it: the server's.
    # It is only ever set from that loop too (open_gate, _later).
    gate = asyncio.Event()
    config = make_config(max_promises=2000)
    server = start_server(long_tools(gate), config, grpc=request.param == "grpc")
    w = Wire(server, request.param)
    try:
        yield w, gate
    finally:
        w.close()
        server.stop()


def open_gate(wire: Wire, gate: asyncio.Event) -> None:
    wire.server.call_soon(gate.set)


def test_a_pending_promise_is_promised_again_with_the_same_token_and_progress(
    wire: tuple[Wire, asyncio.Event],
) -> None:
    w, gate = wire
    first = w.call("slow", {"n": 1})
    assert first.response_type == "promise"
    assert first.token is not None and first.token.startswith("prom_")
    again = w.call("redeem", {"promise": first.token})
    assert again.response_type == "promise"
    assert again.token == first.token
    assert w.progress(again) == {"progress": 1, "total": 2, "message": "half way"}
    open_gate(w, gate)


def test_a_long_poll_redeem_returns_as_soon_as_the_outcome_is_ready(
    wire: tuple[Wire, asyncio.Event],
) -> None:
    w, gate = wire
    token = w.promise("slow", {"n": 2})
    # Open the gate a little after the redeem starts waiting, from the server loop.
    w.server.run(_later(0.2, gate))
    started = time.monotonic()
    answer = w.call("redeem", {"promise": token, "wait": WAIT})
    elapsed = time.monotonic() - started
    assert answer.response_type == "answer"
    assert answer.body["content"] == [{"type": "text", "text": "done 2"}]
    assert elapsed < WAIT / 2, f"the long poll held on for {elapsed:.1f}s after the outcome"


async def _later(delay: float, gate: asyncio.Event) -> None:
    asyncio.get_running_loop().call_later(delay, gate.set)


def test_a_finished_promise_gives_the_same_answer_on_every_redeem(
    wire: tuple[Wire, asyncio.Event],
) -> None:
    w, gate = wire
    token = w.promise("slow", {"n": 3})
    open_gate(w, gate)
    first = w.call("redeem", {"promise": token, "wait": WAIT})
    second = w.call("redeem", {"promise": token})
    assert first.response_type == second.response_type == "answer"
    assert first.body == second.body == {"content": [{"type": "text", "text": "done 3"}]}


def test_a_tool_that_raises_after_its_deadline_gives_an_internal_error_on_redeem(
    wire: tuple[Wire, asyncio.Event],
) -> None:
    w, gate = wire
    token = w.promise("breaks")
    open_gate(w, gate)
    failed = w.call("redeem", {"promise": token, "wait": WAIT})
    assert failed.error is not None
    code, message = failed.error
    assert code in ("-32603", "INTERNAL")
    assert "error id" in message
    assert "secret internals" not in message  # no traceback or exception text on the wire


def test_cancel_over_the_wire_makes_redeem_say_cancelled(wire: tuple[Wire, asyncio.Event]) -> None:
    w, _ = wire
    token = w.promise("slow", {"n": 4})
    cancelled = w.call("cancel", {"promise": token})
    assert cancelled.response_type == "answer"
    outcome = w.call("redeem", {"promise": token, "wait": WAIT})
    assert outcome.response_type == "failure"
    assert outcome.body["failure"]["reason"] == "cancelled"


def test_a_thousand_promises_pending_at_once_are_all_redeemed(
    wire: tuple[Wire, asyncio.Event],
) -> None:
    w, gate = wire
    count = 1000
    if w.binding == "grpc":
        assert w.messages is not None
        futures = [
            w.stub.CallTool.future(w.messages.request("slow", {"n": n}), timeout=WAIT)
            for n in range(count)
        ]
        promises = [w.outcome(f.result(timeout=WAIT)) for f in futures]
    else:
        promises = [w.call("slow", {"n": n}) for n in range(count)]
    assert all(p.response_type == "promise" for p in promises)
    tokens = [p.token for p in promises]
    assert len(set(tokens)) == count  # globally unique
    assert w.server.run(_table_size(w.server)) == count
    open_gate(w, gate)
    answers = [w.call("redeem", {"promise": t, "wait": WAIT}) for t in tokens]
    texts = [a.body["content"][0]["text"] for a in answers]
    assert texts == [f"done {n}" for n in range(count)]


async def _table_size(server: RunningServer) -> int:
    return len(server.dispatcher.promises)  # type: ignore[arg-type]


def test_json_over_http_and_struct_over_grpc_give_the_same_promise_shape() -> None:
    # The promise of spec A.3 on HTTP: content [] and _meta with token and expiry.
    gate = asyncio.Event()
    server = start_server(long_tools(gate), make_config())
    try:
        status, _, raw = server.post("/rpc", call_message("slow", {"n": 0}, "a"))
        result = json.loads(raw)["result"]
        assert status == 200
        assert result["content"] == []
        assert result["_meta"]["response_type"] == "promise"
        assert result["_meta"]["expires_at"].endswith("Z")
        server.call_soon(gate.set)
    finally:
        server.stop()
