"""The tools of the big-payload and many-streams phases (``bench.payload``, ``bench.streams``).

- ``big_text(text)`` answers its one long string;
- ``big_records(records)`` answers ``{"records": records}``, a list of small
  objects whose schema (:class:`Record`) is checked on the way in;
- ``hold_stream(seconds)`` streams one part, then stays silent for ``seconds``
  (heartbeats flow on SSE meanwhile);
- ``echo(text)``, the call measured beside the open streams.

The official SDK's anchor (``bench/anchors/mcp_sdk.py --payload``) and the grpcio
anchor serve the same tools under the same names and arguments.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, TypedDict

from mcplite import NEVER, Tools

__all__ = ["PAYLOAD_BYTES", "Record", "record_list", "text_of", "tools"]

#: The size of the JSON each big tool takes (and answers), about 1 MiB.
PAYLOAD_BYTES = 1 << 20

tools = Tools()


class Record(TypedDict):
    """One small record of ``big_records``."""

    id: int
    name: str
    email: str
    score: float
    active: bool
    tags: list[str]
    note: str


@tools.tool(promise_after=NEVER)
async def big_text(text: str) -> str:
    """Answer ``text`` (one long string)."""
    return text


@tools.tool(promise_after=NEVER)
async def big_records(records: list[Record]) -> dict[str, Any]:
    """Answer the records, checked against their schema, as ``{"records": [...]}``."""
    return {"records": records}


@tools.tool(promise_after=NEVER)
async def hold_stream(seconds: float = 3600.0) -> AsyncIterator[str]:
    """Stream one part, then wait ``seconds`` (the client closes the stream first)."""
    yield "open"
    await asyncio.sleep(seconds)


@tools.tool(promise_after=NEVER)
async def echo(text: str) -> str:
    """Answer ``text``."""
    return text


def text_of(size: int = PAYLOAD_BYTES) -> str:
    """An ASCII string of ``size`` characters (its JSON string adds two quotes)."""
    line = "The quick brown fox jumps over the lazy dog. 0123456789 "
    return (line * (size // len(line) + 1))[:size]


def record_list(size: int = PAYLOAD_BYTES) -> list[dict[str, Any]]:
    """Records whose compact JSON list is about ``size`` bytes (about 5,000 of them
    for 1 MiB, seven fields each)."""
    out: list[dict[str, Any]] = []
    total = 2
    while total < size:
        i = len(out)
        record = {
            "id": i,
            "name": f"Record {i:06d}",
            "email": f"user{i:06d}@example.com",
            "score": round(i * 0.731 % 100, 3),
            "active": i % 3 != 0,
            "tags": ["alpha" if i % 2 else "beta", f"group-{i % 37}", f"region-{i % 11}"],
            "note": f"Item {i} of the sample set, kept for the payload benchmark only.",
        }
        total += len(json.dumps(record, separators=(",", ":"))) + 1
        out.append(record)
    return out
