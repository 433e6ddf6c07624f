"""Server-Sent Events framing (WHATWG HTML, "9.2 Server-sent events").

A frame is ``event: NAME`` then one ``data:`` line per line of the payload, then
a blank line.  Payloads are compact JSON, which has no raw newlines, but the
framing splits on any line break so that no payload can end a frame early.
"""

from __future__ import annotations

import re
from typing import Any

from ...protocols.jsoncodec import encode_text

__all__ = ["HEADERS", "frame", "frame_json"]

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # ask nginx-style proxies not to buffer the stream
]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def frame(event: str, data: str) -> bytes:
    lines = _LINE_BREAK.split(data)
    body = "".join(f"data: {line}\n" for line in lines)
    return f"event: {event}\n{body}\n".encode()


def frame_json(event: str, payload: Any) -> bytes:
    return frame(event, encode_text(payload))
