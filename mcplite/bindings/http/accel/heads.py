"""A faster reader for the common request head, inside h11.

h11 reads a request head line by line: it splits the head into lines, runs an
obsolete-line-folding pass and one regex per header line through generators,
then normalises the headers.  For the head almost every client sends,
:func:`fast_request` reads the whole head at once and builds the ``Request``
h11's reader would build.  It builds it without a constructor
(``object.__new__``): h11's reader calls ``Request(..., _parsed=True)``, which
lowercases the names, reads ``Content-Length`` and ``Transfer-Encoding`` and
counts ``Host``; h11's public constructor would also re-validate every name and
value and cost more than h11's whole reader.  So what this module validates
itself, exactly, is:

- the head, from the first byte of the buffer through the first blank line,
  matches one regex (``_HEAD``) built from h11's own grammar (``h11._abnf``):
  a request line ``method SP request-target SP HTTP/1.1 CRLF`` (h11's
  ``method`` and ``request_target``; HTTP/1.1 only), then header lines
  ``field-name ":" value CRLF`` (h11's ``field_name``; a value of any bytes but
  NUL, CR, LF, VT and FF, which is h11's ``OWS [field-content] OWS``), then CRLF;
- exactly one ``Host`` line (h11's ``Request`` refuses none or two);
- no ``Transfer-Encoding`` line, at most one ``Content-Length`` line, and that
  one all ASCII digits, at most 20 of them (h11's
  ``CONTENT_LENGTH_MAX_DIGITS``);
- no value ends in a space or a tab (h11 strips those).

A head that fails any of these, a head still incomplete, or one h11 has
started to search is left to h11's reader, untouched: every error comes from
h11, as before.  Names are lowercased as h11 does; the method, target and
values are the bytes sent.  ``tests/test_http_heads.py`` checks, on generated
heads (valid, nearly valid and hostile), that both readers give the same event,
the same error or the same wait for more data, and leave the same bytes in the
buffer, and that the value class matches h11's grammar on every byte.

:class:`mcplite.bindings.http.accel.cycle.ServerConnection` plugs it in where
h11 picks the reader for an idle client.  h11 internals used (only on the
versions :mod:`mcplite.bindings.http.accel` lists): ``ReceiveBuffer._data``,
``_multiple_lines_search`` and ``_extract``, the ``Headers`` constructor and
``_full_items``, ``h11._abnf`` and ``h11._readers.maybe_read_from_IDLE_client``.
"""

from __future__ import annotations

import re

import h11
from h11 import _abnf
from h11._headers import Headers
from h11._readers import maybe_read_from_IDLE_client
from h11._receivebuffer import ReceiveBuffer

from ..messages import header_dict

__all__ = [
    "FIELD_VALUE",
    "KeptHead",
    "common_head",
    "fast_request",
    "header_fields",
    "read_request",
    "request_event",
]

#: The most digits h11 takes in a Content-Length (h11._headers.CONTENT_LENGTH_MAX_DIGITS).
_MAX_LENGTH_DIGITS = 20

#: What may follow "name:" on a header line.  h11's grammar says
#: ``OWS [field-content] OWS`` with field-content =
#: ``field-vchar+ ([ \t]+ field-vchar+)*`` and field-vchar = ``[^\x00\s]``: any
#: run of field-vchars, spaces and tabs, which this one class says (and the
#: regex engine checks without backtracking).  ``tests/test_http_heads.py``
#: checks both on every byte.
FIELD_VALUE = "[^\x00\n\r\x0b\x0c]*"
#: A whole head: the request line, header lines, the blank line (h11's grammar,
#: with HTTP/1.1 only and no capture inside a header line).
_LINE = f"{_abnf.field_name}:{FIELD_VALUE}\r\n"
_HEAD = re.compile(
    f"({_abnf.method}) ({_abnf.request_target}) HTTP/1\\.1\r\n((?:{_LINE})*)\r\n".encode("ascii")
)
#: One header line of a head _HEAD matched: the name and the value (which keeps
#: any whitespace after it).
_FIELD = re.compile(b"([^:]+):[ \t]*([^\r]*)\r\n")
_new_request = object.__new__
_set = object.__setattr__


def common_head(
    data: bytearray,
) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes, bytes]], int] | None:
    """The common head at the start of ``data`` (see the module docstring): its
    size through the blank line, method, target, header items (raw name,
    lowercase name, value) and Content-Length (-1: none); None for any other
    head, or one not all in."""
    end = data.find(b"\r\n\r\n")
    if end <= 0:
        return None
    match = _HEAD.fullmatch(data, 0, end + 4)
    if match is None:
        return None
    method, target, lines = match.groups()  # copies: the buffer changes after
    # Names at line starts, lowercased, to count: each line is "name:" then a
    # value without CR or LF (the match above), so "\r\nname:" finds exactly
    # the header lines of that name.
    names = b"\r\n" + lines.lower()
    # (bytes.find rather than "in", which on bytes costs a TypeError built and dropped.)
    if names.count(b"\r\nhost:") != 1 or names.find(b"\r\ntransfer-encoding:") >= 0:
        return None  # h11's to refuse (no Host, two) or to frame (chunked)
    fields = _FIELD.findall(lines)
    if (lines.find(b" \r\n") >= 0 or lines.find(b"\t\r\n") >= 0) and any(
        value.endswith((b" ", b"\t")) for _, value in fields
    ):
        return None  # whitespace after a value (rare): h11 strips it
    lengths = names.count(b"\r\ncontent-length:")
    items = [(raw, raw.lower(), value) for raw, value in fields]
    length = -1
    if lengths:
        # h11 also takes "5, 5" and repeated equal lengths: those are its to read.
        if lengths > 1:
            return None
        for _, name, value in items:
            if name == b"content-length":
                if not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                    return None
                length = int(value)
                break
    return end + 4, method, target, items, length


def request_event(
    method: bytes, target: bytes, items: list[tuple[bytes, bytes, bytes]]
) -> h11.Request:
    """The event h11's reader would build for a common head
    (``Request(..., _parsed=True)``), without a constructor: what that one
    checks (Host, Content-Length, Transfer-Encoding) :func:`common_head` has
    checked (see the module docstring)."""
    request = _new_request(h11.Request)
    _set(request, "method", method)
    _set(request, "target", target)
    _set(request, "headers", Headers(items))
    _set(request, "http_version", b"1.1")
    return request


class KeptHead:
    """A common head a connection read, kept to read the next one by comparison.

    A keep-alive client sends the same head again and again; only its
    ``Content-Length`` changes with its body.  So the head is kept with where
    that value sits: a head equal to it before the value and after it (through
    the blank line), with only digits between, differs from the one read only
    in that value, and is read without the regexes.  Its event is the one
    kept, or, for other digits, that event with them in its
    ``Content-Length`` (what :func:`common_head` would have read: the value as
    sent, at most :data:`_MAX_LENGTH_DIGITS` digits).  A head
    without a ``Content-Length`` must come again byte for byte."""

    __slots__ = ("event", "head", "index", "length", "start", "stop")

    def __init__(self, head: bytes, event: h11.Request, length: int) -> None:
        """``head``: the bytes of a head :func:`common_head` took, through its blank
        line; ``event`` and ``length``: what was read of it."""
        self.head, self.event, self.length = head, event, length
        self.index = self.start = self.stop = -1
        for index, (_, name, _) in enumerate(event.headers._full_items):
            if name == b"content-length":
                self.index = index
        if self.index >= 0:
            # The one Content-Length line (common_head saw exactly one), and its
            # value after the spaces or tabs that follow the colon.
            start = head.lower().find(b"\r\ncontent-length:") + len(b"\r\ncontent-length:")
            while head[start] in b" \t":
                start += 1
            self.start, self.stop = start, head.index(b"\r\n", start)

    def read(self, data: bytearray) -> tuple[h11.Request, int, int] | None:
        """The event, body length and head size of the head at the start of
        ``data`` when it is this one (with any Content-Length digits); None when
        it may not be (then read it afresh)."""
        head = self.head
        if data.startswith(head):  # the same head, byte for byte
            return self.event, self.length, len(head)
        start = self.start
        if start < 0 or not data.startswith(head[:start]):
            return None
        end = data.find(b"\r\n", start, start + _MAX_LENGTH_DIGITS + 2)
        after = head[self.stop :]
        if end < 0 or not data.startswith(after, end):
            return None
        digits = bytes(data[start:end])
        if not digits.isdigit():  # (none, a sign, a space: read afresh, by h11 if need be)
            return None
        event = self.event
        items = list(event.headers._full_items)
        raw, name, _ = items[self.index]
        items[self.index] = (raw, name, digits)
        self.event = event = request_event(event.method, event.target, items)
        self.head = head = head[:start] + digits + after
        self.stop, self.length = end, int(digits)
        return event, self.length, len(head)


def fast_request(buf: ReceiveBuffer) -> h11.Request | None:
    """The common head's ``Request``, taken out of ``buf``; None (and ``buf``
    untouched) for any other head, for h11's reader to take."""
    # Only a head h11 has not started to search: one that arrives in pieces is
    # h11's (which resumes its search where it stopped, instead of rescanning).
    if buf._multiple_lines_search != 0:
        return None
    head = common_head(buf._data)
    if head is None:
        return None
    size, method, target, items, _ = head
    buf._extract(size)
    return request_event(method, target, items)


def read_request(buf: ReceiveBuffer) -> h11.Request | None:
    """h11's reader for an idle client's bytes, the common head read faster."""
    if not buf._data:
        return None  # what h11's reader makes of nothing, asked after every cycle
    request = fast_request(buf)
    if request is not None:
        return request
    return maybe_read_from_IDLE_client(buf)


def header_fields(request: h11.Request) -> dict[bytes, bytes]:
    """A request's headers by lowercase name (a repeated one's values joined, as
    :func:`~mcplite.bindings.http.messages.header_dict` does), read from h11's own
    list: iterating the public ``Headers`` sequence builds a tuple per header
    through the Sequence ABC, ~0.25 µs each."""
    items = request.headers._full_items
    fields = {name: value for _, name, value in items}
    if len(fields) == len(items):
        return fields
    return header_dict([(name, value) for _, name, value in items])
