"""A 2026 result's reply: the fields every result repeats, and its JSON.

``McpReply.json()`` is what the HTTP endpoint, its SSE streams and stdio send.
For a result those fields go at the end of, it is made from the handler's
result and the server's own encoding of them; it must be the bytes encoding the
reply's body gives, for any result a handler may return.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcplite import Tools
from mcplite.core.dispatch import Dispatcher
from mcplite.protocols.jsoncodec import encode
from mcplite.protocols.mcp.protocol import SERVER_INFO_KEY
from mcplite.protocols.mcp.server import McpServer

SERVER = McpServer(Dispatcher(Tools()), name="replies")
IDENTITY = {"name": "replies", "version": SERVER.server_info["version"]}

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
keys = st.text(max_size=8).filter(lambda key: key not in ("_meta", "resultType"))


@st.composite
def results(draw: st.DrawFn) -> dict[str, Any]:
    """A handler's result: any fields; a ``_meta`` (an object, empty or not, or
    something else) anywhere among them, or none; a ``resultType`` or none."""
    result: dict[str, Any] = draw(st.dictionaries(keys, values, max_size=4))
    fields = list(result.items())
    if draw(st.booleans()):
        meta = draw(st.dictionaries(st.text(max_size=8), values, max_size=3) | st.none() | scalars)
        fields.insert(draw(st.integers(0, len(fields))), ("_meta", meta))
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["complete", "input_required", "task"]))
        fields.insert(draw(st.integers(0, len(fields))), ("resultType", kind))
    return dict(fields)


@settings(max_examples=400, deadline=None)
@given(results(), st.integers() | st.text(max_size=6))
def test_a_modern_reply_is_its_body_as_json_with_the_fields_every_result_repeats(
    result: dict[str, Any], request_id: int | str
) -> None:
    sent = json.loads(json.dumps(result))  # what the handler returned, before the reply
    reply = SERVER._modern_reply(request_id, result)

    assert reply.status == 200
    assert reply.json() == encode(reply.body)
    answered = json.loads(reply.json())
    assert answered["id"] == request_id
    got = answered["result"]
    assert got["resultType"] == sent.get("resultType", "complete")
    assert got["_meta"][SERVER_INFO_KEY] == IDENTITY
    meta = sent.get("_meta")
    if isinstance(meta, dict):  # the handler's own _meta is kept beside the identity
        assert {k: v for k, v in got["_meta"].items() if k != SERVER_INFO_KEY} == {
            k: v for k, v in meta.items() if k != SERVER_INFO_KEY
        }
    assert {k: v for k, v in got.items() if k not in ("_meta", "resultType")} == {
        k: v for k, v in sent.items() if k not in ("_meta", "resultType")
    }


@pytest.mark.parametrize(
    "result",
    [
        {"content": [], "isError": False, "_meta": {"mcplite/response_type": "answer"}},
        {"tools": [{"name": "echo"}], "nextCursor": "x"},
    ],
    ids=["a tool's answer", "a listing"],
)
def test_the_common_results_are_encoded_once_without_the_repeated_fields(
    result: dict[str, Any],
) -> None:
    # The two shapes handlers give: an answer (its _meta last), and a result
    # with no _meta.  Their JSON is made with the reply, the same bytes.
    reply = SERVER._modern_reply(7, result)
    assert reply.encoded is not None
    assert reply.encoded == encode(reply.body)


def test_a_result_json_cannot_hold_is_left_for_the_sender_to_refuse() -> None:
    reply = SERVER._modern_reply(1, {"value": float("nan")})
    assert reply.encoded is None
    with pytest.raises(ValueError):
        reply.json()
