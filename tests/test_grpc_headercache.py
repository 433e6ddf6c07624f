"""HPACK with memory (``mcplite.bindings.grpc.accel.headercache``): byte for byte what hpack itself
produces, never a plain header's encoding for a sensitive one, bounded, and right
with a real grpcio client whose metadata changes from call to call on one connection.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import pytest
from grpc_support import ACCEL, protos, served, to_python
from hpack import Decoder, Encoder, HeaderTuple, NeverIndexedHeaderTuple
from hpack.exceptions import HPACKError
from hypothesis import given, settings
from hypothesis import strategies as st

from mcplite import Config, Dispatcher, Tools
from mcplite.bindings.grpc.accel.headercache import (
    BLOCKS_KEPT,
    LARGEST_BLOCK,
    MOST_HEADERS,
    CachingDecoder,
    CachingEncoder,
)
from mcplite.core.tools import Context

TIMEOUT = 10.0  # seconds: the bound of every wait in this file

NAMES = [b":status", b"content-type", b"grpc-status", b"grpc-message", b"x-tag", b"authorization"]
VALUES = [b"200", b"0", b"application/grpc", b"a", b"b", b"c" * 40, b"secret"]

_plain = st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES))
_sensitive = _plain.map(lambda h: NeverIndexedHeaderTuple(*h))
_block = st.lists(st.one_of(_plain, _plain, _plain, _sensitive), min_size=1, max_size=5)
# A step is a header list to send (twice: the second time is the remembered one),
# or an int: the encoder's table size changes (as SETTINGS_HEADER_TABLE_SIZE does).
_step = st.one_of(_block, _block, _block, st.integers(0, 4096))


def _fields(headers: Any) -> list[tuple[type, bytes, bytes]]:
    return [(type(h), bytes(h[0]), bytes(h[1])) for h in headers]


@settings(max_examples=300, deadline=None)
@given(st.lists(_step, max_size=30))
def test_blocks_are_what_hpack_makes_and_decode_to_what_hpack_decodes(steps: list[Any]) -> None:
    ours, theirs = CachingEncoder(), Encoder()
    our_decoder, their_decoder = CachingDecoder(64 * 1024, 4096), Decoder()
    for step in steps:
        if isinstance(step, int):
            ours.header_table_size = theirs.header_table_size = step
            continue
        for _ in range(2):
            block = ours.encode(list(step))
            assert block == theirs.encode(list(step))
            try:
                expected = their_decoder.decode(block, raw=True)
            except HPACKError as refused:
                # hpack's encoder can lose a size update (the table set twice to one
                # value), and its decoder then refuses what follows: so must ours.
                with pytest.raises(type(refused)):
                    our_decoder.decode(block, raw=True)
                return
            decoded = our_decoder.decode(block, raw=True)
            assert _fields(decoded) == _fields(expected)
            assert [tuple(h) for h in decoded] == [tuple(h) for h in step]


def test_each_decoding_is_a_list_of_its_own() -> None:
    block = Encoder().encode([(b":path", b"/mcplite.MCPLite/CallTool"), (b"te", b"trailers")])
    decoder = CachingDecoder(64 * 1024, 4096)
    first = decoder.decode(block, raw=True)
    first.append(HeaderTuple(b"x-added", b"by the caller"))
    again = decoder.decode(block, raw=True)
    assert _fields(again) == [
        (HeaderTuple, b":path", b"/mcplite.MCPLite/CallTool"),
        (HeaderTuple, b"te", b"trailers"),
    ]


def test_what_is_remembered_is_bounded() -> None:
    encoder, decoder = CachingEncoder(), CachingDecoder(64 * 1024, 4096)
    sender = Encoder()
    for n in range(BLOCKS_KEPT * 4):
        # Added to the table the first time (so not remembered), indexed the second.
        plain = [(b"x-n", str(n).encode())]
        encoder.encode(plain)
        encoder.encode(plain)
        # Never indexed: each block differs, and none changes the table.
        block = sender.encode([NeverIndexedHeaderTuple(b"x-n", str(n).encode())])
        for _ in range(2):
            assert decoder.decode(block, raw=True) == plain
    assert len(encoder._blocks) == len(decoder._blocks) == BLOCKS_KEPT


def test_what_a_client_can_make_a_connection_remember_is_about_10_kib_at_most() -> None:
    # The costliest blocks that are remembered: as many headers as may be, each a
    # literal never indexed (so nothing changes the table), as long as fits.
    blocks = []
    sender = Encoder()
    for n in range(BLOCKS_KEPT):
        headers = [NeverIndexedHeaderTuple(b"x%d" % i, b"%d" % n * 8) for i in range(MOST_HEADERS)]
        blocks.append(sender.encode(headers, huffman=False))
    assert all(len(block) <= LARGEST_BLOCK for block in blocks)
    tracemalloc.start()
    try:
        decoder = CachingDecoder(64 * 1024, 4096)
        before = tracemalloc.take_snapshot()
        for block in blocks:
            decoder.decode(block, raw=True)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert len(decoder._blocks) == BLOCKS_KEPT
    kept = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert kept <= 12 * 1024


def _tag_tools() -> Tools:
    tools = Tools()

    @tools.tool
    def tag(ctx: Context) -> str:
        """The call's x-tag metadata."""
        assert ctx.request is not None
        return str(ctx.request.headers.get("x-tag", "none"))

    return tools


async def test_a_client_changing_its_metadata_on_one_connection_is_heard_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decoded_by_hpack = 0
    hpack_decode = Decoder.decode

    def counted(self: Decoder, data: bytes, raw: bool = False) -> Any:
        nonlocal decoded_by_hpack
        decoded_by_hpack += 1
        return hpack_decode(self, data, raw)

    monkeypatch.setattr(Decoder, "decode", counted)
    proto = protos()["ours"]
    async with served(Dispatcher(_tag_tools(), Config(secret=b"k" * 32))) as (_, channel):
        call = channel.unary_unary(
            "/mcplite.MCPLite/CallTool",
            request_serializer=proto.cls("ToolRequest").SerializeToString,
            response_deserializer=proto.cls("ToolResponse").FromString,
        )
        tags = ["a", "b", "a", "a", "b", None, "c" * 300, "a", None, "b"] * 3
        for tag in tags:
            metadata = () if tag is None else (("x-tag", tag),)
            # No gRPC deadline: grpc-timeout would say the time left, a
            # header that changes with the machine's speed. The wait is
            # bounded here instead.
            response = await asyncio.wait_for(
                call(proto.request("tag"), metadata=metadata), TIMEOUT
            )
            text = to_python(response.result)["content"][0]["text"]
            assert text == (tag or "none")
    if ACCEL:  # most blocks were the client's earlier ones, answered from memory
        assert 0 < decoded_by_hpack < len(tags) / 2
    else:  # the plain path's stock hpack decodes every block
        assert decoded_by_hpack >= len(tags)
