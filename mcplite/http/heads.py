"""A faster reader for the common request head, inside h11.

h11 reads a request head line by line: it splits the head into lines, runs an
obsolete-line-folding pass and one regex per header line through generators,
then normalises the headers.  For the head almost every client sends (HTTP/1.1,
CRLF line ends, no folding, no ``Transfer-Encoding``, at most one plain
``Content-Length``) :func:`read_request` checks the whole head with one regex
built from h11's own grammar (``h11._abnf``) and builds the same ``Request``
event, with h11's own constructor (which still checks ``Host``, the method and
the target).  Any other head, a head still incomplete, or anything the regex
does not match is left to h11's reader, untouched: every error comes from h11,
as before.  ``tests/test_http_heads.py`` checks, on generated heads, that both
readers give the same event, the same error or the same wait for more data,
and leave the same bytes in the buffer.

h11 internals used (h11 is pinned below 0.17): ``Connection._get_io_object``
(where h11 picks the reader for a state), ``ReceiveBuffer._data``,
``_multiple_lines_search`` and ``_extract``, the ``Headers`` constructor, and
``h11._readers.maybe_read_from_IDLE_client``.
"""

from __future__ import annotations

import re
from typing import Any

import h11
from h11 import _abnf
from h11._headers import Headers
from h11._readers import maybe_read_from_IDLE_client
from h11._receivebuffer import ReceiveBuffer

__all__ = ["ServerConnection", "read_request"]

#: The most digits h11 takes in a Content-Length (h11._headers.CONTENT_LENGTH_MAX_DIGITS).
_MAX_LENGTH_DIGITS = 20

#: A whole head: the request line, header lines, the blank line (h11's grammar,
#: with HTTP/1.1 only and no capture inside a header line).
_LINE = f"{_abnf.field_name}:{_abnf.OWS}(?:{_abnf.field_content})?{_abnf.OWS}\r\n"
_HEAD = re.compile(
    f"({_abnf.method}) ({_abnf.request_target}) HTTP/1\\.1\r\n((?:{_LINE})*)\r\n".encode("ascii")
)


def fast_request(buf: ReceiveBuffer) -> h11.Request | None:
    """The common head's ``Request``, taken out of ``buf``; None (and ``buf``
    untouched) for any other head, for h11's reader to take."""
    data = buf._data
    # Only a head h11 has not started to search: one that arrives in pieces is
    # h11's (which resumes its search where it stopped, instead of rescanning).
    if buf._multiple_lines_search != 0:
        return None
    end = data.find(b"\r\n\r\n")
    if end <= 0:
        return None
    match = _HEAD.fullmatch(data, 0, end + 4)
    if match is None:
        return None
    method, target, lines = match.groups()  # copies: the buffer changes below
    items: list[tuple[bytes, bytes, bytes]] = []
    length = None
    for line in lines.split(b"\r\n")[:-1]:
        raw, _, value = line.partition(b":")
        name = raw.lower()
        value = value.strip(b" \t")
        if name == b"content-length":
            # h11 also takes "5, 5" and repeated equal lengths: those are its to read.
            if length is not None or not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                return None
            length = value
        elif name == b"transfer-encoding":
            return None
        items.append((raw, name, value))
    buf._extract(end + 4)  # before the checks below, as h11's reader does
    # h11's constructor: raises, as h11's reader would, for a missing or repeated Host.
    return h11.Request(
        method=method, target=target, headers=Headers(items), http_version=b"1.1", _parsed=True
    )


def read_request(buf: ReceiveBuffer) -> h11.Request | None:
    """h11's reader for an idle client's bytes, the common head read faster."""
    request = fast_request(buf)
    if request is not None:
        return request
    return maybe_read_from_IDLE_client(buf)


class ServerConnection(h11.Connection):
    """An ``h11.Connection`` that reads request heads with :func:`read_request`."""

    def _get_io_object(self, role: Any, event: Any, io_dict: Any) -> Any:
        io = super()._get_io_object(role, event, io_dict)
        return read_request if io is maybe_read_from_IDLE_client else io
