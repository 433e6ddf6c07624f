"""Messages as bytes: requests read under a size limit, and a result's ``ResponseMeta``.

Our handlers declare :class:`RawMessage` as their message types, so grpclib's
default ``ProtoCodec`` passes the bytes through untouched and each service
decodes them itself (the hot ones with :mod:`mcplite.protocols.protobuf`).

:func:`read_message` is the plain path's, on grpclib's public
``Stream.recv_message``: grpclib reads the whole message before it returns it,
so one over the limit is refused only once it is in (the speed paths'
:func:`.accel.messages.read_message` refuses it by its length prefix).  Both
answer every case with the same status.
"""

from __future__ import annotations

import datetime
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from ..._version import __version__
from ...core.envelope import Result
from ...core.wire import RESPONSE_TYPE_CODES
from ...protocols.protobuf import ResponseMeta

__all__ = [
    "RawMessage",
    "compressed",
    "read_message",
    "response_meta",
    "too_large",
    "truncated",
]


class RawMessage:
    """Serialized message bytes that grpclib's ``ProtoCodec`` passes through as they are
    (it only calls ``FromString`` and ``SerializeToString``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    @classmethod
    def FromString(cls, data: bytes) -> RawMessage:
        return cls(data)

    def SerializeToString(self) -> bytes:
        return self.data


async def read_message(stream: Stream[RawMessage, Any], limit: int) -> bytes | None:
    """The next request message's bytes; None when the client's stream ended first.

    Raises GRPCError: RESOURCE_EXHAUSTED for a message over ``limit`` bytes,
    UNIMPLEMENTED for a compressed one, INVALID_ARGUMENT for one cut short.
    """
    try:
        message = await stream.recv_message()
    except NotImplementedError:  # grpclib reads no compressed message
        raise compressed() from None
    except AssertionError:  # grpclib's Buffer: the stream ended mid-message
        raise truncated() from None
    if message is None:
        return None
    data = message.data
    if len(data) > limit:
        raise too_large(len(data), limit)
    return data


def compressed() -> GRPCError:
    return GRPCError(Status.UNIMPLEMENTED, "compressed messages are not supported")


def too_large(size: int, limit: int) -> GRPCError:
    return GRPCError(
        Status.RESOURCE_EXHAUSTED,
        f"request message is {size} bytes, more than the limit of {limit}",
    )


def truncated() -> GRPCError:
    return GRPCError(Status.INVALID_ARGUMENT, "truncated request message")


def response_meta(result: Result) -> ResponseMeta:
    """The ``ResponseMeta`` of a result (the gRPC form of ``Result.meta()``).

    ``extra_meta["promise_token"]`` and ``["expires_at"]`` (ISO 8601, datetime or
    epoch seconds) get their typed fields; every other entry goes to ``extra``.
    """
    token = ""
    expires_at = 0
    extra: dict[str, Any] | None = None
    if result.extra_meta:
        extra = dict(result.extra_meta)
        token = str(extra.pop("promise_token", "") or "")
        if "expires_at" in extra:
            millis = _epoch_ms(extra["expires_at"])
            if millis is not None:
                expires_at = millis
                del extra["expires_at"]
    elapsed = round(result.processing_time_ms)
    return ResponseMeta(
        response_type=RESPONSE_TYPE_CODES[result.response_type.value],
        promise_token=token,
        timestamp=int(result.timestamp * 1000),
        processing_time_ms=min(max(elapsed, 0), 2**31 - 1),
        server_version=__version__,
        expires_at=expires_at,
        extra=extra or None,
    )


def _epoch_ms(moment: Any) -> int | None:
    """Epoch milliseconds of an ISO 8601 string, a datetime or epoch seconds, else None."""
    if isinstance(moment, str):
        try:
            moment = datetime.datetime.fromisoformat(moment)
        except ValueError:
            return None
    if isinstance(moment, datetime.datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return int(moment.timestamp() * 1000)
    if isinstance(moment, int | float) and not isinstance(moment, bool):
        return int(moment * 1000)
    return None
