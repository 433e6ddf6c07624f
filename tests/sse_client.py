"""Byte-level peers for the HTTP tests: a raw HTTP/1.1 response reader and an SSE parser.

Written from the specifications, not from the server's code, so that the tests read
what the server actually put on the wire:

- :class:`SseParser` follows WHATWG HTML "9.2.6 Interpreting an event stream": lines
  end with CRLF, LF or CR; ``data`` lines of one event are joined with ``\\n``; a
  blank line dispatches; ``:`` starts a comment.
- :class:`RawHttp` reads responses (RFC 9112: Content-Length, chunked, or until
  close) from a plain socket whose timeout bounds every ``recv``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Event",
    "Head",
    "RawHttp",
    "Response",
    "SseParser",
    "connect",
    "parse_events",
    "read_all",
    "request_bytes",
]


@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched server-sent event."""

    event: str
    data: str
    lines: tuple[bytes, ...] = ()  # the raw lines of the frame, for framing checks

    def json(self) -> Any:
        return json.loads(self.data)


class SseParser:
    """Incremental event-stream parser: :meth:`feed` bytes, get complete events."""

    def __init__(self) -> None:
        self._buffer = b""
        self._skip_lf = False  # the last chunk ended in CR: a leading LF belongs to it
        self._event = ""
        self._data: list[str] = []
        self._lines: list[bytes] = []

    def feed(self, chunk: bytes) -> list[Event]:
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        self._buffer += chunk
        events: list[Event] = []
        while True:
            ends = [i for i in (self._buffer.find(b"\r"), self._buffer.find(b"\n")) if i >= 0]
            if not ends:
                return events
            end = min(ends)
            line = self._buffer[:end]
            width = 1
            if self._buffer[end : end + 1] == b"\r":
                if end + 1 == len(self._buffer):
                    self._skip_lf = True  # maybe CRLF split across two chunks
                elif self._buffer[end + 1 : end + 2] == b"\n":
                    width = 2
            self._buffer = self._buffer[end + width :]
            event = self._line(line)
            if event is not None:
                events.append(event)

    def _line(self, raw: bytes) -> Event | None:
        if not raw:
            lines, self._lines = tuple(self._lines), []
            data, self._data = self._data, []
            name, self._event = self._event or "message", ""
            if not data:
                return None
            return Event(name, "\n".join(data), lines)
        self._lines.append(raw)
        line = raw.decode("utf-8")
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None  # id and retry are not used by mcplite

    @property
    def pending(self) -> bytes:
        """Bytes of a frame not yet ended by a blank line (plus unsplit input)."""
        return b"\n".join(self._lines) + self._buffer


def parse_events(stream: bytes) -> list[Event]:
    """Every complete event of a whole stream."""
    return SseParser().feed(stream)


@dataclass(slots=True)
class Head:
    version: bytes
    status: int
    reason: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` (case-insensitive), or None."""
        found = None
        for key, value in self.headers:
            if key.lower() == name.lower():
                found = value
        return found


@dataclass(slots=True)
class Response:
    head: Head
    body: bytes

    @property
    def status(self) -> int:
        return self.head.status

    def json(self) -> Any:
        return json.loads(self.body)


def request_bytes(
    path: str,
    body: bytes | dict[str, Any] | list[Any] = b"",
    *,
    method: str = "POST",
    version: str = "HTTP/1.1",
    headers: dict[str, str] | None = None,
    content_length: bool = True,
) -> bytes:
    """One HTTP request, byte for byte; a dict or list body is JSON-encoded."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    all_headers = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    all_headers.update(headers or {})
    if content_length:
        all_headers["Content-Length"] = str(len(body))
    head = f"{method} {path} {version}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in all_headers.items()
    )
    return head.encode("latin-1") + b"\r\n" + body


def connect(port: int, timeout: float, *, rcvbuf: int | None = None) -> socket.socket:
    """A TCP connection to 127.0.0.1 whose every recv is bounded by ``timeout``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.connect(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


class RawHttp:
    """Reads HTTP/1.1 responses from ``sock``; a connection reset counts as the end."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.eof = False
        self.reset = False

    def _fill(self) -> bool:
        """Read once more; False at the end of the stream.  Raises TimeoutError."""
        if self.eof:
            return False
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
            self.reset = True
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    def _take_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            if not self._fill():
                raise EOFError(f"connection closed before {marker!r}; got {self.buffer[:200]!r}")
        part, _, self.buffer = self.buffer.partition(marker)
        return part

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._fill():
                raise EOFError(f"connection closed {size - len(self.buffer)} bytes short")
        part, self.buffer = self.buffer[:size], self.buffer[size:]
        return part

    def read_head(self) -> Head:
        raw = self._take_until(b"\r\n\r\n")
        status_line, *lines = raw.split(b"\r\n")
        version, status, *reason = status_line.split(b" ", 2)
        head = Head(version, int(status), reason[0] if reason else b"")
        for line in lines:
            name, _, value = line.partition(b":")
            head.headers.append((name.decode("latin-1").strip(), value.decode("latin-1").strip()))
        return head

    def body_parts(self, head: Head) -> Iterator[bytes]:
        """The body of a response whose head was read, piece by piece as it arrives."""
        if head.status < 200 or head.status in (204, 304):
            return
        if (head.header("transfer-encoding") or "").lower() == "chunked":
            while True:
                size_line = self._take_until(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                if size == 0:
                    self._take_until(b"\r\n")  # no trailers from this server
                    return
                yield self._take(size)
                if self._take(2) != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
        length = head.header("content-length")
        if length is not None:
            yield self._take(int(length))
            return
        while self.buffer or self._fill():
            part, self.buffer = self.buffer, b""
            yield part

    def read_response(self) -> Response:
        """The next response (a 1xx interim response comes back on its own)."""
        head = self.read_head()
        return Response(head, b"".join(self.body_parts(head)))

    def events(self, head: Head) -> Iterator[Event]:
        """The events of an SSE response body, each as soon as it is complete."""
        parser = SseParser()
        for part in self.body_parts(head):
            yield from parser.feed(part)

    def at_eof(self) -> bool:
        """True when the peer has closed (reads what is left; raises TimeoutError)."""
        while self._fill():
            pass
        return self.eof


def read_all(sock: socket.socket) -> bytes:
    """Everything until the peer closes (bounded by the socket's timeout)."""
    reader = RawHttp(sock)
    reader.at_eof()
    return reader.buffer
