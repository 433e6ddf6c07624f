"""gRPC's standard health service, ``grpc.health.v1.Health``, for one server.

What probes ask (Kubernetes' ``grpc:`` probe, ``grpc_health_probe``, grpcurl, load
balancers), as gRPC's doc/health-checking.md says:

* ``Check``: ``SERVING`` for ``""`` (the server as a whole) and for each service
  the server serves, until a drain starts; ``NOT_SERVING`` from then on, so that a
  balancer stops sending calls while those in flight finish.  An unknown service
  name ends the call with ``NOT_FOUND``.
* ``List``: every known name with its status.
* ``Watch``: the status now, then each change; ``SERVICE_UNKNOWN`` for an unknown
  name, without ending the call.  The call ends when the server closes
  (``UNAVAILABLE``, "Server is shutting down", which clients retry), or when the
  client goes away: grpclib then cancels the handler's task, the only task a
  watch has.

The messages are betterproto's, generated from ``proto/grpc/health/v1/health.proto``.
No authentication: probes carry no token, and a status tells nothing of the tools.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from ...core.errors import ShuttingDown
from ...core.wire import DEFAULT_MAX_MESSAGE_SIZE
from ...protocols.generated.grpc.health import v1 as messages
from .messages import RawMessage
from .paths import chosen

__all__ = ["SERVICE_NAME", "HealthService", "ServingStatus"]

#: The health service's own name.
SERVICE_NAME = "grpc.health.v1.Health"
ServingStatus = messages.HealthCheckResponseServingStatus

_PATH = f"/{SERVICE_NAME}/"
#: Seconds :meth:`HealthService.close` lets open watches take to end.
_CLOSE_WAIT = 1.0


class HealthService:
    """``grpc.health.v1.Health`` for ``""`` and ``services``, for ``grpclib.server.Server``.

    ``SERVING`` until :meth:`drain`; ``NOT_SERVING`` after it.  :meth:`close` ends
    the open watches.  ``max_message_size`` bounds a request message in bytes.
    """

    def __init__(
        self, services: Iterable[str], *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    ) -> None:
        self.services = frozenset(("", *services))
        self._max_message_size = max_message_size
        self._read_message = chosen().read_message
        self._status: int = ServingStatus.SERVING
        self._changed = asyncio.Event()  # set, and replaced, on every change
        self._closed = False
        self._watches: set[asyncio.Task[Any]] = set()

    def __mapping__(self) -> dict[str, Handler]:
        return {
            _PATH + "Check": Handler(
                self._check,
                Cardinality.UNARY_UNARY,
                RawMessage,  # read by _request
                messages.HealthCheckResponse,
            ),
            _PATH + "List": Handler(
                self._list,
                Cardinality.UNARY_UNARY,
                RawMessage,
                messages.HealthListResponse,
            ),
            _PATH + "Watch": Handler(
                self._watch,
                Cardinality.UNARY_STREAM,
                RawMessage,  # read by _request
                messages.HealthCheckResponse,
            ),
        }

    @property
    def status(self) -> ServingStatus:
        """The status of every known service."""
        return ServingStatus(self._status)

    @property
    def watches(self) -> int:
        """How many ``Watch`` calls are open."""
        return len(self._watches)

    def drain(self) -> None:
        """Say ``NOT_SERVING`` from now on, to checks and to every watch."""
        self._set(ServingStatus.NOT_SERVING)

    async def close(self) -> None:
        """End every watch (after its last status), waiting up to a second for them."""
        self._closed = True
        self._set(ServingStatus.NOT_SERVING)
        self._notify()  # even if the status was already NOT_SERVING
        if self._watches:
            await asyncio.wait(set(self._watches), timeout=_CLOSE_WAIT)

    def _set(self, status: int) -> None:
        if status != self._status:
            self._status = status
            self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _status_of(self, service: str) -> int:
        return self._status if service in self.services else ServingStatus.SERVICE_UNKNOWN

    async def _request(self, stream: Stream[Any, Any]) -> messages.HealthCheckRequest:
        data = await self._read_message(stream, self._max_message_size)
        if data is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "missing request message")
        try:
            return messages.HealthCheckRequest().parse(data)
        except Exception:
            raise GRPCError(Status.INVALID_ARGUMENT, "malformed HealthCheckRequest") from None

    # --- handlers ---------------------------------------------------------------

    async def _check(self, stream: Stream[Any, Any]) -> None:
        service = (await self._request(stream)).service
        status = self._status_of(service)
        if status == ServingStatus.SERVICE_UNKNOWN:
            raise GRPCError(Status.NOT_FOUND, f"unknown service {service[:200]!r}")
        await stream.send_message(_response(status))

    async def _list(self, stream: Stream[Any, Any]) -> None:
        data = await self._read_message(stream, self._max_message_size)
        if data is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "missing request message")
        status = _response(self._status)
        listed = messages.HealthListResponse(statuses=dict.fromkeys(sorted(self.services), status))
        await stream.send_message(listed)

    async def _watch(self, stream: Stream[Any, Any]) -> None:
        service = (await self._request(stream)).service
        task = asyncio.current_task()
        assert task is not None
        self._watches.add(task)
        try:
            sent: int | None = None
            while True:
                changed = self._changed
                status = self._status_of(service)
                if status != sent:
                    await stream.send_message(_response(status))
                    sent = status
                if self._closed:
                    break
                await changed.wait()
        finally:
            self._watches.discard(task)
        closing = ShuttingDown()
        raise GRPCError(Status(closing.grpc_status), closing.message)


def _response(status: int) -> messages.HealthCheckResponse:
    return messages.HealthCheckResponse(status=ServingStatus(status))
