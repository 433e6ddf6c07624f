"""gRPC's standard server reflection, ``grpc.reflection.v1`` and ``v1alpha``.

What lets ``grpcurl list``, ``grpcurl describe`` and calls by name, Postman,
Evans and grpcui work without a copy of our proto.  Both versions are the same
messages under two package names (grpcurl 1.8 and grpcio-reflection ask v1alpha;
newer clients v1), so one handler serves both with v1's generated classes (the
same fields and numbers: the same bytes on the wire).

The answers come from ``mcplite/protocols/generated/descriptors.py``: each proto file's
serialized ``FileDescriptorProto`` with the tables of its symbols, written by
``scripts/gen_proto.sh`` from protoc's descriptor set, so no protobuf runtime is
needed here.  Each request of the stream gets one response, in order:

* ``list_services``: the services this server serves.
* ``file_by_filename``, ``file_containing_symbol`` (a service, method, message,
  field, enum or enum value): the file, then every file it imports, directly or
  not (clients need them all to build the descriptors).
* ``file_containing_extension``, ``all_extension_numbers_of_type``: from the
  extensions our files declare (none today: the first answers ``NOT_FOUND``, the
  second an empty list for any message type).

What is not found is an ``error_response`` with ``NOT_FOUND`` (5), and the stream
goes on, as gRPC's doc/server-reflection.md says.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from types import ModuleType
from typing import Any

import betterproto
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from ...core.wire import DEFAULT_MAX_MESSAGE_SIZE
from ...protocols.generated import descriptors
from ...protocols.generated.grpc.reflection import v1
from .messages import RawMessage
from .paths import chosen

__all__ = ["SERVICE_NAMES", "ReflectionService"]

#: The reflection service's names, one per version.
SERVICE_NAMES = ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection")


def _with_imports(name: str) -> list[bytes]:
    """The file ``name`` and every file it imports, directly or not, each once."""
    order: list[str] = []
    pending = [name]
    while pending:
        file = pending.pop(0)
        if file not in order:
            order.append(file)
            pending.extend(descriptors.DEPENDENCIES[file])
    return [descriptors.FILES[file] for file in order]


class ReflectionService:
    """Both reflection services over our descriptors, for ``grpclib.server.Server``.

    ``services`` are the names ``list_services`` answers (those served);
    ``max_message_size`` bounds a request message in bytes.
    """

    def __init__(
        self, services: Iterable[str], *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    ) -> None:
        self.services = tuple(sorted(set(services)))
        self._max_message_size = max_message_size
        self._read_message = chosen().read_message

    def __mapping__(self) -> dict[str, Handler]:
        return {
            f"/{name}/ServerReflectionInfo": Handler(
                self._handler(v1),
                Cardinality.STREAM_STREAM,
                RawMessage,  # parsed by the handler
                v1.ServerReflectionResponse,
            )
            for name in SERVICE_NAMES
        }

    def _handler(self, version: ModuleType) -> Callable[[Stream[Any, Any]], Awaitable[None]]:
        async def info(stream: Stream[Any, Any]) -> None:
            while (data := await self._read_message(stream, self._max_message_size)) is not None:
                try:
                    request = version.ServerReflectionRequest().parse(data)
                except Exception:
                    raise GRPCError(
                        Status.INVALID_ARGUMENT, "malformed ServerReflectionRequest"
                    ) from None
                await stream.send_message(self.answer(version, request))

        return info

    def answer(self, version: ModuleType, request: Any) -> Any:
        """The ``ServerReflectionResponse`` to a ``ServerReflectionRequest`` of the
        generated module ``version`` (v1's, for both names)."""
        response = version.ServerReflectionResponse(
            valid_host=request.host, original_request=request
        )
        found: tuple[str, Any] = betterproto.which_one_of(request, "message_request")
        kind, value = found
        file: str | None = None
        if kind == "list_services":
            response.list_services_response = version.ListServiceResponse(
                service=[version.ServiceResponse(name=name) for name in self.services]
            )
            return response
        if kind == "all_extension_numbers_of_type":
            numbers = descriptors.EXTENSIONS.get(value)
            if numbers is None:
                return _not_found(version, response, f"type not found: {value[:200]}")
            response.all_extension_numbers_response = version.ExtensionNumberResponse(
                base_type_name=value, extension_number=sorted(numbers)
            )
            return response
        if kind == "file_by_filename":
            file = value if value in descriptors.FILES else None
            missing = f"file not found: {value[:200]}"
        elif kind == "file_containing_symbol":
            file = descriptors.SYMBOLS.get(value)
            missing = f"symbol not found: {value[:200]}"
        elif kind == "file_containing_extension":
            extendee, number = value.containing_type, value.extension_number
            file = descriptors.EXTENSIONS.get(extendee, {}).get(number)
            missing = f"extension not found: {extendee[:200]} {number}"
        else:
            response.error_response = version.ErrorResponse(
                error_code=Status.INVALID_ARGUMENT.value, error_message="no request in the message"
            )
            return response
        if file is None:
            return _not_found(version, response, missing)
        response.file_descriptor_response = version.FileDescriptorResponse(
            file_descriptor_proto=_with_imports(file)
        )
        return response


def _not_found(version: ModuleType, response: Any, message: str) -> Any:
    response.error_response = version.ErrorResponse(
        error_code=Status.NOT_FOUND.value, error_message=message
    )
    return response
