"""h2 writing a response's frames directly (``mcplite.bindings.grpc.accel.framing``): byte for byte
and state for state what h2 itself does, the same errors where h2 refuses, h2's
own path for everything but the plain case, and every served connection lean.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import struct
from typing import Any

import grpc
import h2.connection
import pytest
from grpc_support import accel_only, protos, served, to_python
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ResponseReceived, TrailersReceived
from h2.exceptions import FlowControlError
from h2.settings import SettingCodes
from hpack import Encoder, HeaderTuple, NeverIndexedHeaderTuple
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mcplite import Config, Dispatcher, Tools
from mcplite.bindings.grpc.accel.framing import LeanH2Connection
from mcplite.bindings.grpc.accel.headercache import CachingEncoder

TIMEOUT = 10.0  # seconds: the bound of every wait in this file


def _server_config(**overrides: Any) -> H2Configuration:
    """grpclib's server configuration (grpclib.server.Server.__init__)."""
    options: dict[str, Any] = {
        "client_side": False,
        "header_encoding": "ascii",
        "validate_inbound_headers": False,
        "validate_outbound_headers": False,
        "normalize_inbound_headers": False,
        "normalize_outbound_headers": False,
    }
    options.update(overrides)
    return H2Configuration(**options)


REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/mcplite.MCPLite/CallTool"),
    (":authority", "127.0.0.1"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]


class _Kind(str, enum.Enum):  # noqa: UP042  (not StrEnum: its str() is its value)
    GRPC = "application/grpc"


_RESPONSES: list[list[Any]] = [
    [(":status", "200"), ("content-type", "application/grpc+proto")],
    [(b":status", b"200"), (b"content-type", b"application/grpc+proto")],
    [("grpc-status", "0")],
    [("grpc-status", "13"), ("grpc-message", "boom"), ("x-tag", "t" * 40)],
    [(":status", "100")],  # informational: h2's own path
    [(":status", "200"), ("x-big", "b" * 40_000)],  # over one frame: CONTINUATION
    [(":status", "200"), (":method", "GET")],  # h2 remembers a :method it sends
    [(":status", b"101"), (b"x-mixed", "str and bytes")],
    [],
    # Not what grpclib sends: h2's own path, with h2's results and errors.
    [(":status", "200"), HeaderTuple("x-a", "b"), NeverIndexedHeaderTuple("x-secret", "s")],
    [(":status", "200"), ("content-type", _Kind.GRPC)],  # a str subclass: h2 sends its text
    [(":status", "200"), ("x-count", 3)],
    [(":status", "200"), ("x-none", None)],
    [(":status", "200"), ("x-bytes", bytearray(b"ba"))],
    [(":status", "200"), ("x-three", "v", True)],
    [(":status",)],
    [(":status", "200"), ("x-new", "ok"), ("x-bad", "\ud800")],  # not UTF-8: h2 refuses
    [(b":method", "GET"), (":status", "200")],
    [(":status", "200"), ["x-list", "v"]],
]
_headers = st.tuples(
    st.just("headers"), st.sampled_from(range(len(_RESPONSES))), st.booleans(), st.booleans()
)
_data = st.tuples(
    st.just("data"),
    st.sampled_from([0, 1, 17, 16_384, 16_385, 70_000]),
    st.booleans(),
    st.sampled_from(["bytes", "memoryview", "padded"]),
)
# The client grows the connection's or the stream's window, changes a setting
# (the window new streams start with, the largest frame, the HPACK table), resets
# the stream, or opens a new one (ending it or not).
_settings = st.one_of(
    st.tuples(st.just(SettingCodes.INITIAL_WINDOW_SIZE), st.sampled_from([0, 10, 20_000, 100_000])),
    st.tuples(st.just(SettingCodes.MAX_FRAME_SIZE), st.sampled_from([16_384, 16_385, 20_000])),
    st.tuples(st.just(SettingCodes.HEADER_TABLE_SIZE), st.sampled_from([0, 100, 4_096])),
)
_client = st.one_of(
    st.tuples(st.just("window"), st.integers(1, 100_000), st.booleans()),
    st.tuples(st.just("settings"), _settings),
    st.tuples(st.just("reset")),
    st.tuples(st.just("open"), st.booleans()),
)
_step = st.one_of(_headers, _headers, _data, _data, _client)


class _Pair:
    """A client, and two server connections it talks to: h2's own and a lean one."""

    def __init__(self, config: H2Configuration) -> None:
        self.client = H2Connection(H2Configuration(client_side=True))
        self.client.initiate_connection()
        self.theirs = H2Connection(config)
        self.theirs.encoder = Encoder()
        self.ours = H2Connection(config)
        self.ours.encoder = CachingEncoder()
        assert LeanH2Connection.adopt(self.ours)
        self.stream_id = 0
        for server in (self.theirs, self.ours):
            server.initiate_connection()
        self._to_servers()
        self.client.receive_data(self.theirs.data_to_send())
        self.ours.data_to_send()
        self._to_servers()

    def _to_servers(self) -> None:
        sent = self.client.data_to_send()
        heard = [_heard(server, sent) for server in (self.theirs, self.ours)]
        assert heard[1] == heard[0]
        self.client.receive_data(heard[0][1])

    def open(self, end_stream: bool) -> None:
        self.stream_id = self.client.get_next_available_stream_id()
        self.client.send_headers(self.stream_id, REQUEST, end_stream=end_stream)
        self._to_servers()

    def window(self, increment: int, of_stream: bool) -> None:
        stream_id = self.stream_id if of_stream else None
        if of_stream:
            stream = self.client.streams.get(self.stream_id)
            if stream is None or stream.closed:
                return
        self.client.increment_flow_control_window(increment, stream_id=stream_id)
        self._to_servers()

    def settings(self, code: SettingCodes, value: int) -> None:
        self.client.update_settings({code: value})
        self._to_servers()

    def reset(self) -> None:
        stream = self.client.streams.get(self.stream_id)
        if stream is not None and not stream.closed:
            self.client.reset_stream(self.stream_id)
            self._to_servers()

    def both(self, method: str, *args: Any, **kwargs: Any) -> tuple[type | None, bytes]:
        """Call ``method`` on both servers: the same outcome, bytes and state.
        Returns the type of the error both raised (or None), and the bytes."""
        outcomes = []
        for server in (self.theirs, self.ours):
            try:
                getattr(server, method)(*args, **kwargs)
                error = None
            except Exception as exc:
                error = (type(exc), str(exc))
            outcomes.append((error, server.data_to_send(), _state(server)))
        assert outcomes[1] == outcomes[0]
        error, sent, _ = outcomes[1]
        return (None if error is None else error[0]), sent


def _heard(server: H2Connection, data: bytes) -> tuple[list[str], bytes, Any]:
    """What ``server`` makes of ``data``: its events (or the error it raised),
    what it then has to send, and its state."""
    try:
        events = [repr(event) for event in server.receive_data(data)]
    except Exception as exc:
        events = [f"raised {type(exc).__name__}: {exc}"]
    return events, server.data_to_send(), _state(server)


def _state(server: H2Connection) -> Any:
    streams = {
        stream_id: (
            stream.state_machine.state,
            stream.state_machine.headers_sent,
            stream.state_machine.trailers_sent,
            stream.outbound_flow_control_window,
            stream.request_method,
            stream.closed_by,
            stream.state_machine.client,
            stream._authority,
            stream.max_outbound_frame_size,
        )
        for stream_id, stream in server.streams.items()
    }
    return (
        server.state_machine.state,
        server.outbound_flow_control_window,
        server.encoder.header_table_size,
        server.encoder.header_table.resized,
        list(server.encoder.header_table.dynamic_entries),
        streams,
    )


def _payload(size: int, kind: str) -> dict[str, Any]:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    if kind == "memoryview":
        return {"data": memoryview(data)}
    if kind == "padded":
        return {"data": data, "pad_length": 3}
    return {"data": data}


@settings(max_examples=200, deadline=None)
@given(st.lists(_step, max_size=25))
def test_a_lean_connection_sends_what_h2_sends_and_ends_where_h2_ends(steps: list[Any]) -> None:
    pair = _Pair(_server_config())
    pair.open(end_stream=False)
    for step in steps:
        kind = step[0]
        if kind == "open":
            pair.open(step[1])
        elif kind == "window":
            pair.window(step[1], step[2])
        elif kind == "settings":
            pair.settings(*step[1])
        elif kind == "reset":
            pair.reset()
        elif kind == "headers":
            _, which, end_stream, priority = step
            extra = {"priority_weight": 16} if priority else {}
            pair.both("send_headers", pair.stream_id, list(_RESPONSES[which]), end_stream, **extra)
        else:
            _, size, end_stream, payload = step
            pair.both("send_data", pair.stream_id, end_stream=end_stream, **_payload(size, payload))


#: What a client may send once its streams have opened, closed or been reset,
#: as raw frames (an h2 client would refuse to send some): a stream's HEADERS
#: (ending it or not; padded, with priority, its block split over a
#: CONTINUATION, or left without its CONTINUATION), DATA (ending it or not;
#: padded; on stream 0; over the frame size), RST_STREAM, WINDOW_UPDATE, PING,
#: PRIORITY.
#: ``answer``: the server ends the stream (its response headers, END_STREAM).
_FRAME_KINDS = (
    "headers",
    "headers-end",
    "headers-padded",
    "headers-priority",
    "headers-split",
    "headers-unended",
    "data",
    "data-end",
    "data-padded",
    "data-stream-0",
    "data-oversize",
    "reset",
    "window",
    "ping",
    "priority",
    "answer",
)
_frames = st.lists(
    st.tuples(st.sampled_from(_FRAME_KINDS), st.sampled_from([1, 3, 5, 7])), max_size=12
)
_MESSAGE = b"\x00\x00\x00\x00\x01x"


def _raw_frame(kind: str, stream_id: int, encoder: Encoder) -> bytes:
    end = ["END_STREAM"] if kind.endswith("-end") else []
    if kind == "headers-split":
        block = encoder.encode(REQUEST)
        first = HeadersFrame(stream_id, block[:3], flags=end)
        rest = ContinuationFrame(stream_id, block[3:], flags=["END_HEADERS"])
        return bytes(first.serialize()) + bytes(rest.serialize())
    if kind == "headers-unended":  # the next frame should be its CONTINUATION
        return bytes(HeadersFrame(stream_id, encoder.encode(REQUEST)[:3]).serialize())
    if kind == "data-stream-0":  # hyperframe will not build it
        return struct.pack(">HBBBL", 0, len(_MESSAGE), 0, 0, 0) + _MESSAGE
    frame: Any
    if kind.startswith("headers"):
        frame = HeadersFrame(stream_id, encoder.encode(REQUEST), flags=["END_HEADERS", *end])
        if kind == "headers-padded":
            frame.flags.add("PADDED")
            frame.pad_length = 3
        elif kind == "headers-priority":
            frame.flags.add("PRIORITY")
            frame.depends_on, frame.stream_weight = 0, 16
    elif kind.startswith("data"):
        data = bytes(16_385) if kind == "data-oversize" else _MESSAGE
        frame = DataFrame(stream_id, data, flags=end)
        if kind == "data-padded":
            frame.flags.add("PADDED")
            frame.pad_length = 2
    elif kind == "reset":
        frame = RstStreamFrame(stream_id, error_code=8)
    elif kind == "window":
        frame = WindowUpdateFrame(stream_id, window_increment=10)
    elif kind == "ping":
        frame = PingFrame(0, opaque_data=b"12345678")
    else:
        frame = PriorityFrame(stream_id, depends_on=0, stream_weight=16)
    return bytes(frame.serialize())


def _answer(server: H2Connection, stream_id: int) -> tuple[str, bytes, Any]:
    try:
        server.send_headers(stream_id, [(":status", "200")], end_stream=True)
        error = ""
    except Exception as exc:
        error = f"raised {type(exc).__name__}: {exc}"
    return error, server.data_to_send(), _state(server)


@settings(max_examples=300, deadline=None)
@given(_frames)
# A stream reset, or ended both ways, then forgotten as a new one opens: a frame
# on it is refused with RST_STREAM, or is a connection error (h2's two branches).
@example([("headers", 1), ("reset", 1), ("headers", 3), ("headers", 1)])
@example([("headers-end", 1), ("answer", 1), ("headers", 3), ("headers", 1)])
@example([("headers", 3), ("headers", 1)])
def test_a_lean_connection_reads_frames_as_h2_reads_them(frames: list[tuple[str, int]]) -> None:
    # Each frame on its own, to both: the same events, or the same error (a
    # stream closed by END_STREAM, a stream id gone back), the same RST_STREAM
    # back for a stream reset, and the same state.
    theirs, ours = _fresh_pair()
    encoder = Encoder()
    for kind, stream_id in frames:
        if kind == "answer":
            assert _answer(ours, stream_id) == _answer(theirs, stream_id)
            continue
        raw = _raw_frame(kind, stream_id, encoder)
        heard = _heard(theirs, raw)
        assert _heard(ours, raw) == heard, (kind, stream_id)
        if heard[0] and heard[0][0].startswith("raised"):
            break  # a connection error: h2 would close the connection


def _fresh_pair() -> tuple[H2Connection, H2Connection]:
    """h2's server connection and a lean one, each past the client's preface."""
    theirs, ours = H2Connection(_server_config()), H2Connection(_server_config())
    assert LeanH2Connection.adopt(ours)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(SettingsFrame(0).serialize())
    for server in (theirs, ours):
        server.initiate_connection()
    assert _heard(ours, preface) == _heard(theirs, preface)
    return theirs, ours


@settings(max_examples=200, deadline=None)
@given(_frames, st.lists(st.integers(1, 40), min_size=1, max_size=30))
def test_frames_in_pieces_are_read_as_h2_reads_them(
    frames: list[tuple[str, int]], cuts: list[int]
) -> None:
    # The same frames as one stream of bytes cut anywhere (a frame's header or
    # payload split across reads): the same events at every read.
    theirs, ours = _fresh_pair()
    encoder = Encoder()
    sent = b"".join(
        _raw_frame(kind, stream_id, encoder) for kind, stream_id in frames if kind != "answer"
    )
    at = 0
    for cut in cuts * (len(sent) // max(1, sum(cuts)) + 1):
        if at >= len(sent):
            break
        piece = sent[at : at + cut]
        at += cut
        heard = _heard(theirs, piece)
        assert _heard(ours, piece) == heard
        if heard[0] and heard[0][0].startswith("raised"):
            break


def test_a_plain_request_is_read_without_hyperframes_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The frames every unary call brings (HEADERS, then DATA ending the stream)
    # must take the lean reading, not h2's FrameBuffer.
    theirs, ours = _fresh_pair()
    encoder = Encoder()
    request = _raw_frame("headers", 1, encoder) + _raw_frame("data-end", 1, encoder)

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("hyperframe parsed a frame")

    with monkeypatch.context() as patched:
        patched.setattr(Frame, "parse_frame_header", refused)
        events = ours.receive_data(request)
    assert [type(e).__name__ for e in events] == ["RequestReceived", "DataReceived", "StreamEnded"]
    assert [repr(e) for e in theirs.receive_data(request)] == [repr(e) for e in events]


def test_frames_are_read_without_being_formatted_for_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pair = _Pair(_server_config())

    def formatted(self: Frame) -> str:
        raise AssertionError("a received frame was formatted")

    with monkeypatch.context() as patched:
        patched.setattr(Frame, "__repr__", formatted)
        pair.client.send_headers(pair.client.get_next_available_stream_id(), REQUEST)
        events = pair.ours.receive_data(pair.client.data_to_send())
    assert [type(e).__name__ for e in events] == ["RequestReceived"]


@functools.cache
def _encoding_to(size: int) -> list[tuple[str, str]]:
    """Response headers whose HPACK block, on a new table, is ``size`` bytes."""

    def block(n: int) -> int:
        return len(Encoder().encode([(":status", "200"), ("x-big", "b" * n)]))

    low, high = 0, 2 * size  # a "b" is 6 bits: the block grows by 0 or 1 byte a step
    while low < high:
        middle = (low + high) // 2
        if block(middle) < size:
            low = middle + 1
        else:
            high = middle
    assert block(low) == size
    return [(":status", "200"), ("x-big", "b" * low)]


@pytest.mark.parametrize("size", [16_383, 16_384, 16_385, 32_768, 32_769])
def test_a_header_block_is_split_into_frames_where_h2_splits_it(size: int) -> None:
    pair = _Pair(_server_config())
    pair.open(end_stream=True)
    headers = _encoding_to(size)
    error, sent = pair.both("send_headers", pair.stream_id, headers, end_stream=True)
    assert error is None
    frames = -(-size // 16_384)  # HEADERS, then CONTINUATION for the rest
    assert len(sent) == size + 9 * frames
    (response, ended) = pair.client.receive_data(sent)
    assert isinstance(response, ResponseReceived)
    assert response.headers == [(n.encode(), v.encode()) for n, v in headers]
    assert type(ended).__name__ == "StreamEnded"


def test_streams_the_server_opened_are_answered_as_h2_answers_them() -> None:
    pair = _Pair(_server_config())
    pair.open(end_stream=True)
    promised = [
        (":method", "GET"),
        (":path", "/p"),
        (":authority", "a.example"),
        (":scheme", "http"),
    ]
    assert pair.both("push_stream", pair.stream_id, 2, promised)[0] is None
    # A push that fails midway (h2 cannot encode an int) leaves its stream IDLE.
    pair.both("push_stream", pair.stream_id, 4, [*promised, ("x-bad", 1)])
    for stream_id in (2, 4):
        # Headers that name an authority, which h2 remembers for a stream it opens.
        pair.both("send_headers", stream_id, list(promised))
        pair.both("send_headers", stream_id, [(":status", "200")])
        pair.both("send_data", stream_id, b"xyz", end_stream=True)


@pytest.mark.parametrize("which", range(len(_RESPONSES)))
def test_after_a_goaway_sends_are_refused_as_h2_refuses_them(which: int) -> None:
    pair = _Pair(_server_config())
    pair.open(end_stream=False)
    pair.client.close_connection()
    pair._to_servers()
    pair.both("send_headers", pair.stream_id, list(_RESPONSES[which]))
    pair.both("send_data", pair.stream_id, b"x", end_stream=True)


@pytest.mark.parametrize("binding", ["connection", "stream"])
def test_data_over_a_window_is_refused_as_h2_refuses_it(binding: str) -> None:
    pair = _Pair(_server_config())
    # One window stays at 65,535 bytes, the other is made larger.
    if binding == "connection":
        pair.settings(SettingCodes.INITIAL_WINDOW_SIZE, 100_000)
        pair.open(end_stream=False)
    else:
        pair.open(end_stream=False)
        pair.window(100_000, of_stream=False)
    assert pair.both("send_headers", pair.stream_id, list(_RESPONSES[0]))[0] is None
    chunk = bytes(16_384)
    for _ in range(3):
        assert pair.both("send_data", pair.stream_id, chunk)[0] is None
    assert pair.both("send_data", pair.stream_id, chunk[:16_383])[0] is None  # the last byte
    assert pair.both("send_data", pair.stream_id, b"")[0] is None
    assert pair.both("send_data", pair.stream_id, b"x")[0] is FlowControlError


def test_a_unary_answer_is_written_without_h2s_frame_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The case every unary call takes must be the lean one, not h2's.
    pair = _Pair(_server_config())
    pair.open(end_stream=True)
    sent = pair.both("send_headers", pair.stream_id, list(_RESPONSES[0]))[1]
    sent += pair.both("send_data", pair.stream_id, b"\x00\x00\x00\x00\x02hi")[1]
    sent += pair.both("send_headers", pair.stream_id, list(_RESPONSES[2]), end_stream=True)[1]
    pair.client.receive_data(sent)

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("h2's own path was taken")

    pair.open(end_stream=True)
    with monkeypatch.context() as patched:
        patched.setattr(H2Connection, "send_headers", refused)
        patched.setattr(H2Connection, "send_data", refused)
        pair.ours.send_headers(pair.stream_id, list(_RESPONSES[0]))
        pair.ours.send_data(pair.stream_id, b"\x00\x00\x00\x00\x02hi")
        pair.ours.send_headers(pair.stream_id, list(_RESPONSES[2]), end_stream=True)
    assert pair.ours.streams[pair.stream_id].closed
    # The client reads the lean bytes as the response h2 would have sent.
    events = pair.client.receive_data(pair.ours.data_to_send())
    assert [type(e).__name__ for e in events] == [
        "ResponseReceived",
        "DataReceived",
        "TrailersReceived",
        "StreamEnded",
    ]
    heads = [e.headers for e in events if isinstance(e, (ResponseReceived, TrailersReceived))]
    assert heads == [
        [(b":status", b"200"), (b"content-type", b"application/grpc+proto")],
        [(b"grpc-status", b"0")],
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        {"validate_outbound_headers": True},
        {"normalize_outbound_headers": True},
        {"logger": h2.config.DummyLogger()},  # a logger of h2's own kind is still no logger
    ],
)
def test_what_h2_would_check_or_tell_goes_through_h2(overrides: dict[str, Any]) -> None:
    pair = _Pair(_server_config(**overrides))
    pair.open(end_stream=True)
    lean = "logger" in overrides
    assert isinstance(pair.ours, LeanH2Connection) and pair.ours.lean is lean
    pair.both("send_headers", pair.stream_id, [(":status", "200"), ("Content-Type", "x")])
    pair.both("send_data", pair.stream_id, b"abc", end_stream=True)


def test_only_a_connection_of_h2s_own_class_is_adopted() -> None:
    client = H2Connection(H2Configuration(client_side=True))
    assert LeanH2Connection.adopt(client) is True
    assert isinstance(client, LeanH2Connection) and client.lean is False  # h2 sends for a client
    assert LeanH2Connection.adopt(client) is False  # already one: left as it is

    class Other(H2Connection):
        pass

    other = Other(_server_config())
    assert LeanH2Connection.adopt(other) is False and type(other) is Other


async def test_a_served_connection_answers_grpcio_in_one_frame_or_many() -> None:
    tools = Tools()

    @tools.tool
    def echo(text: str) -> str:
        """Say it twice."""
        return text * 2

    proto = protos()["ours"]
    async with served(Dispatcher(tools, Config(secret=b"k" * 32))) as (_, channel):
        stub = proto.stub(channel)
        for text in ("a", "b" * 40_000):  # the second answer spans DATA frames
            response = await asyncio.wait_for(
                stub.CallTool(proto.request("echo", {"text": text})), TIMEOUT
            )
            assert to_python(response.result)["content"][0]["text"] == text * 2
        with pytest.raises(grpc.aio.AioRpcError) as failed:  # a trailers-only answer
            await asyncio.wait_for(stub.CallTool(proto.request("nope", {})), TIMEOUT)
        assert failed.value.code() is grpc.StatusCode.NOT_FOUND
        assert failed.value.details() == "Tool not found: nope"


@accel_only
async def test_a_served_connection_is_lean() -> None:
    async with served(Dispatcher(Tools(), Config(secret=b"k" * 32))) as (server, channel):
        await asyncio.wait_for(channel.channel_ready(), TIMEOUT)
        # Private on purpose: the class of grpclib's h2 connection is the subject.
        (connection,) = server.connections
        assert type(connection.connection._connection) is LeanH2Connection
