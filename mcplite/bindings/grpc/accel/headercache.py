"""HPACK with memory: a header block seen before is not decoded or encoded again.

A gRPC client sends the same header block for every call of a method on a
connection once its HPACK table holds the headers (``:path``, ``content-type``,
``te``... all indexed), and a server answers every successful unary call with
the same headers and the same trailers.  hpack decodes and encodes each of them
again in pure Python, field by field: about a sixth of a unary call's CPU.

:class:`CachingDecoder` and :class:`CachingEncoder` are hpack's own, remembering
the last few blocks they turned around.  A remembered result is reused only
while the HPACK table it was worked out against is unchanged: the table counts
its changes (:class:`VersionedTable`), a block whose decoding or encoding
changed the table is never remembered, nor is an encoding that carried a table
size update.  So a cached result is byte for byte what hpack would produce, and
a block that adds to the table, or follows one that did, takes hpack's own path.
Each connection has its own pair (as HPACK requires), holding at most
:data:`BLOCKS_KEPT` blocks of at most :data:`LARGEST_BLOCK` bytes each way
(and, decoded, of at most :data:`MOST_HEADERS` headers): about 10 KiB a
connection at the very most, well under 1 KiB for a usual client.

The encoder remembers only lists of plain ``(name, value)`` tuples: a
``NeverIndexedHeaderTuple`` equals the plain tuple with the same fields, and
whether the two may be encoded alike is hpack's call, not a cache's.
tests/test_grpc_headercache.py checks the byte for byte claim against hpack.
"""

from __future__ import annotations

from typing import Any

from hpack import Decoder, Encoder
from hpack.table import HeaderTable

__all__ = [
    "BLOCKS_KEPT",
    "LARGEST_BLOCK",
    "MOST_HEADERS",
    "CachingDecoder",
    "CachingEncoder",
    "VersionedTable",
]

#: Header blocks remembered per connection and direction (the oldest goes first).
BLOCKS_KEPT = 4
#: Blocks longer than this (bytes encoded) are not remembered.
LARGEST_BLOCK = 256
#: Nor are blocks of more headers than this (a gRPC call's request has about 9).
MOST_HEADERS = 16


class VersionedTable(HeaderTable):
    """hpack's ``HeaderTable`` counting its changes in ``version``."""

    version = 0

    def add(self, name: bytes, value: bytes) -> None:
        self.version += 1
        super().add(name, value)

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, newmax: int) -> None:
        self.version += 1
        HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]


def _remember(cache: dict[Any, Any], key: Any, entry: Any) -> None:
    if len(cache) >= BLOCKS_KEPT:
        del cache[next(iter(cache))]
    cache[key] = entry


class CachingDecoder(Decoder):
    """hpack's ``Decoder``, answering a block decoded before against the same table
    with the same headers (a new list each time)."""

    header_table: VersionedTable

    def __init__(self, max_header_list_size: int, max_allowed_table_size: int) -> None:
        super().__init__(max_header_list_size)
        self.header_table = VersionedTable()
        self.max_allowed_table_size = max_allowed_table_size
        self._blocks: dict[bytes, tuple[int, tuple[int, int], list[Any]]] = {}

    def decode(self, data: bytes, raw: bool = False) -> Any:
        if not raw or type(data) is not bytes:  # h2 always asks for raw bytes
            return super().decode(data, raw)
        table = self.header_table
        version = table.version
        limits = (self.max_header_list_size, self.max_allowed_table_size)
        hit = self._blocks.get(data)
        if hit is not None and hit[0] == version and hit[1] == limits:
            return list(hit[2])
        headers: Any = super().decode(data, raw)  # a list, though typed Iterable
        if table.version == version and len(data) <= LARGEST_BLOCK and len(headers) <= MOST_HEADERS:
            _remember(self._blocks, data, (version, limits, headers))
            return list(headers)
        return headers


class CachingEncoder(Encoder):
    """hpack's ``Encoder``, answering headers encoded before against the same table
    with the same bytes."""

    header_table: VersionedTable

    def __init__(self) -> None:
        super().__init__()
        self.header_table = VersionedTable()
        self._blocks: dict[tuple[Any, ...], tuple[int, bool, bytes]] = {}

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        table = self.header_table
        key = None
        if type(headers) is list and not table.resized:
            for header in headers:
                if type(header) is not tuple or len(header) != 2:
                    break
            else:
                key = tuple(headers)
                hit = self._blocks.get(key)
                if hit is not None and hit[0] == table.version and hit[1] == huffman:
                    return hit[2]
        version = table.version
        encoded = super().encode(headers, huffman)
        if key is not None and table.version == version and len(encoded) <= LARGEST_BLOCK:
            _remember(self._blocks, key, (version, huffman, encoded))
        return encoded
