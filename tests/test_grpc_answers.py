"""A unary call end to end on the wire: its request message read however it is cut
into frames, and its answer (headers, one message, OK trailers) as grpclib sends
it, whether the speed paths send it in one step or grpclib in three; on the
speed paths, the whole answer is on the wire before the call is logged.

Peers we did not write: a strict HTTP/2 client written with the ``h2`` package
over a real socket (frame by frame, so that the request can be cut and the
client's window kept small), grpcio, and grpclib's own event listeners (its
public ``grpclib.events.listen``).  Every test runs on both paths; what differs
between them is asserted where it differs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import h2.events
import h2.settings
import pytest
from conftest import RunningServer, make_config, start_server
from grpc_support import ACCEL, RawH2, accel_only, protos, served, to_python
from grpclib.events import SendMessage, SendTrailingMetadata, listen

from mcplite import Dispatcher, Tools
from mcplite.protocols.protobuf import encode_tool_request

TIMEOUT = 10.0  # seconds: the bound of every wait in this file
LIMIT = 1024  # bytes: the request message limit of the servers here


def make_tools() -> Tools:
    tools = Tools()

    @tools.tool
    def echo(text: str) -> str:
        """Say it back."""
        return text

    return tools


@contextmanager
def serving(**overrides: Any) -> Iterator[RawH2]:
    config = make_config(grpc_max_message_size=LIMIT, **overrides)
    server: RunningServer = start_server(make_tools(), config, grpc=True)
    client = RawH2(server.grpc_port or 0)
    try:
        yield client
    finally:
        client.close()
        server.stop()


Answer = tuple[list[Any], bytes, dict[str, str]]


def answers(client: RawH2, stream_ids: list[int]) -> list[Answer]:
    """The response headers, the message bytes (framing included) and the trailers
    of each of ``stream_ids``, read until all have ended (in whatever order their
    frames come); their flow control acknowledged as read."""
    waiting = set(stream_ids)

    def ended(event: h2.events.Event) -> bool:
        if isinstance(event, h2.events.StreamEnded):
            waiting.discard(event.stream_id)
        return not waiting

    events = client.events_until(ended)
    found = []
    for stream_id in stream_ids:
        heads = [
            e.headers
            for e in events
            if isinstance(e, h2.events.ResponseReceived | h2.events.TrailersReceived)
            and e.stream_id == stream_id
        ]
        data = b"".join(
            e.data
            for e in events
            if isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id
        )
        trailers = {k.decode(): v.decode() for k, v in heads[-1]}
        found.append((heads[0] if len(heads) == 2 else [], data, trailers))
    return found


def answer(client: RawH2, stream_id: int) -> Answer:
    """:func:`answers` of one stream."""
    (found,) = answers(client, [stream_id])
    return found


def echoed(data: bytes) -> str:
    """The text of an echo answer's one framed message."""
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == len(data) - 5
    response = protos()["ours"].cls("ToolResponse").FromString(data[5:])
    return str(to_python(response.result)["content"][0]["text"])


def send_request(client: RawH2, cuts: list[bytes]) -> int:
    """A CallTool request whose message bytes are sent as these DATA frames."""
    stream_id = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream_id, client.headers())
    for piece in cuts:
        client.h2.send_data(stream_id, piece)
    client.h2.end_stream(stream_id)
    client.flush()
    return stream_id


def framed(message: bytes, compressed: int = 0) -> bytes:
    return bytes([compressed]) + len(message).to_bytes(4, "big") + message


def test_a_unary_answer_is_its_headers_one_message_and_ok_trailers() -> None:
    with serving() as client:
        head, data, trailers = answer(client, client.call("echo", {"text": "hi"}))
    assert head == [(b":status", b"200"), (b"content-type", b"application/grpc+proto")]
    assert echoed(data) == "hi"
    assert trailers == {"grpc-status": "0"}  # no grpc-message on OK, as grpclib sends it


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda m: [m], id="one-frame"),
        pytest.param(lambda m: [m[:5], m[5:]], id="prefix-then-body"),
        pytest.param(lambda m: [m[:2], m[2:9], m[9:]], id="three-pieces"),
        pytest.param(lambda m: [m[:-1], m[-1:]], id="last-byte-apart"),
    ],
)
def test_a_request_message_is_read_however_it_is_cut_into_frames(cut: Any) -> None:
    message = framed(encode_tool_request("echo", {"text": "cut"}))
    with serving() as client:
        first = answer(client, send_request(client, cut(message)))
        # ... and the connection's next call is read as well.
        second = answer(client, send_request(client, [message]))
    for _, data, trailers in (first, second):
        assert trailers == {"grpc-status": "0"} and echoed(data) == "cut"


def test_a_compressed_request_message_is_unimplemented() -> None:
    message = framed(encode_tool_request("echo", {"text": "z"}), compressed=1)
    with serving() as client:
        _, _, one_frame = answer(client, send_request(client, [message]))
        _, _, two_frames = answer(client, send_request(client, [message[:5], message[5:]]))
        _, data, after = answer(client, client.call("echo", {"text": "still"}))
    for trailers in (one_frame, two_frames):
        assert trailers["grpc-status"] == str(grpc.StatusCode.UNIMPLEMENTED.value[0])
        assert trailers["grpc-message"] == "compressed messages are not supported"
    assert after == {"grpc-status": "0"} and echoed(data) == "still"


def test_a_request_message_over_the_limit_is_resource_exhausted_in_one_frame_or_many() -> None:
    message = framed(encode_tool_request("echo", {"text": "x" * LIMIT}))
    with serving() as client:
        _, _, one_frame = answer(client, send_request(client, [message]))
        _, _, two_frames = answer(client, send_request(client, [message[:5], message[5:]]))
    for trailers in (one_frame, two_frames):
        assert trailers["grpc-status"] == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
        assert f"more than the limit of {LIMIT}" in trailers["grpc-message"]


def test_an_answer_larger_than_the_clients_window_is_sent_as_the_window_opens() -> None:
    text = "w" * 300
    with serving() as client:
        client.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 64})
        client.flush()
        client.events_until(lambda e: isinstance(e, h2.events.SettingsAcknowledged))
        stream_id = client.call("echo", {"text": text})
        # The headers and the first 64 bytes, then nothing until the window opens.
        events = client.events_until(
            lambda e: isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id
        )
        first = [e for e in events if isinstance(e, h2.events.DataReceived)]
        assert sum(len(e.data) for e in first) == 64
        client.ping()  # the server has read every frame sent so far, and sent no more
        client.h2.increment_flow_control_window(1 << 16, stream_id)
        client.flush()
        _, rest, trailers = answer(client, stream_id)
    assert trailers == {"grpc-status": "0"}
    assert echoed(b"".join(e.data for e in first) + rest) == text


async def test_grpclibs_event_listeners_hear_the_answer_and_its_trailers() -> None:
    heard: list[tuple[str, Any]] = []

    async def message_sent(event: SendMessage) -> None:
        heard.append(("message", event.message))

    async def trailers_sent(event: SendTrailingMetadata) -> None:
        heard.append(("trailers", event.status))

    proto = protos()["ours"]
    async with served(Dispatcher(make_tools(), make_config())) as (server, channel):
        listen(server, SendMessage, message_sent)
        listen(server, SendTrailingMetadata, trailers_sent)
        stub = proto.stub(channel)
        response = await asyncio.wait_for(
            stub.CallTool(proto.request("echo", {"text": "heard"})), TIMEOUT
        )
    assert to_python(response.result)["content"][0]["text"] == "heard"
    (kind, message), (later, status) = heard
    assert kind == "message" and later == "trailers" and status.name == "OK"
    sent = proto.cls("ToolResponse").FromString(message.SerializeToString())
    assert to_python(sent.result)["content"][0]["text"] == "heard"


@contextmanager
def access_lines(handler: logging.Handler) -> Iterator[None]:
    """The server's access lines (``mcplite.access``, at INFO) go to ``handler`` too."""
    access = logging.getLogger("mcplite.access")
    level = access.level
    access.setLevel(logging.INFO)
    access.addHandler(handler)
    try:
        yield
    finally:
        access.removeHandler(handler)
        access.setLevel(level)


class _Held(logging.Handler):
    """Holds the server's loop at its access line (bounded) until the client says
    it has the whole answer, and notes whether it had."""

    def __init__(self, bound: float) -> None:
        super().__init__()
        self.bound = bound
        self.answered = threading.Event()
        self.logged = threading.Event()
        self.had_answer: bool | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.had_answer = self.answered.wait(self.bound)
        self.logged.set()


def test_the_whole_answer_reaches_the_client_before_the_call_is_logged() -> None:
    # On the speed paths the answer, trailers included, is written as it is made;
    # grpclib sends the trailers once the handler (which logs the call) returns.
    held = _Held(TIMEOUT if ACCEL else 1.0)
    with access_lines(held), serving(access_log=True) as client:
        stream_id = client.call("echo", {"text": "first"})
        _, data, trailers = answer(client, stream_id)
        held.answered.set()
        assert held.logged.wait(TIMEOUT)
    assert trailers == {"grpc-status": "0"} and echoed(data) == "first"
    assert held.had_answer is ACCEL


class _Lines(logging.Handler):
    """Notes, for each access line, whether the client had its answers by then
    (waiting for that at most ``bound`` seconds, the server's loop held)."""

    def __init__(self, bound: float) -> None:
        super().__init__()
        self.bound = bound
        self.answered = threading.Event()
        self.had_answer: list[bool] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.had_answer.append(self.answered.wait(self.bound))


@accel_only
def test_answers_to_calls_that_start_together_leave_together() -> None:
    # Two calls started in one turn of the loop: their answers wait for the turn's
    # end (after both are logged) rather than going one by one.
    lines = _Lines(0.5)
    message = framed(encode_tool_request("echo", {"text": "together"}))
    with access_lines(lines), serving(access_log=True) as client:
        calls = []
        for _ in range(2):  # both requests in one write
            stream_id = client.h2.get_next_available_stream_id()
            client.h2.send_headers(stream_id, client.headers())
            client.h2.send_data(stream_id, message, end_stream=True)
            calls.append(stream_id)
        client.flush()
        both = answers(client, calls)
        lines.answered.set()
    assert [trailers for _, _, trailers in both] == [{"grpc-status": "0"}] * 2
    assert [echoed(data) for _, data, _ in both] == ["together"] * 2
    assert lines.had_answer == [False, False]
