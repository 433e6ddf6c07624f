"""Trailers whose ``grpc-message`` has a space at either end, sent as ``%20``.

grpclib's ``Stream.send_trailing_metadata`` leaves such a space bare, a header
value RFC 9113 section 8.2.1 calls malformed (strict HTTP/2 clients then lose the
status), and its public API has no other way to write ``grpc-message``.
:func:`send_trailers` is that method (grpclib 0.4.9) with the value written by
:func:`..status.grpc_message`; the stream's state is grpclib's, kept as grpclib
keeps it.  grpclib internals used: ``Stream._send_initial_metadata_done``,
``_send_trailing_metadata_done``, ``_content_type``, ``_status_details_codec``,
``_dispatch`` and ``_stream`` (tests/test_grpc_hardening.py).
"""

from __future__ import annotations

from typing import Any

from grpclib.exceptions import ProtocolError
from grpclib.metadata import encode_bin_value, encode_metadata
from grpclib.server import Stream
from multidict import MultiDict

from ..status import Trailers, grpc_message

__all__ = ["send_trailers"]


async def send_trailers(stream: Stream[Any, Any], trailers: Trailers) -> None:
    """End the call with ``trailers`` (spaces at the message's ends as ``%20``).

    Raises grpclib's ProtocolError when the trailers were sent already."""
    status, message, details = trailers.status, trailers.message, trailers.details
    if stream._send_trailing_metadata_done:
        raise ProtocolError("Trailing metadata was already sent")
    if stream._send_initial_metadata_done:
        headers: list[tuple[str, str]] = []
    else:  # a trailers-only response
        headers = [(":status", "200"), ("content-type", stream._content_type)]
    headers.append(("grpc-status", str(status.value)))
    headers.append(("grpc-message", grpc_message(message)))
    codec = stream._status_details_codec
    if details is not None and codec is not None:
        encoded = encode_bin_value(codec.encode(status, message, details)).decode("ascii")
        headers.append(("grpc-status-details-bin", encoded))
    (sent,) = await stream._dispatch.send_trailing_metadata(
        MultiDict(trailers.metadata), status=status, status_message=message, status_details=details
    )
    headers.extend(encode_metadata(sent))
    h2_stream = stream._stream
    await h2_stream.send_headers(headers, end_stream=True)
    stream._send_trailing_metadata_done = True
    if h2_stream.closable:
        h2_stream.reset_nowait()
