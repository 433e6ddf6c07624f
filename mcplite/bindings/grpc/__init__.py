"""The gRPC binding (spec section 5) on grpclib.

``create_server(dispatcher)`` gives a ``grpclib.server.Server`` serving
``mcplite.MCPLite``; ``services(dispatcher)`` the services alone, for a grpclib
server of your own; :mod:`mcplite.protocols.protobuf` reads and writes the messages; the
betterproto classes generated from ``proto/mcplite.proto`` (by ``scripts/gen_proto.sh``)
are in ``mcplite.protocols.generated.mcplite``, where the codec takes its field numbers.
Beside it every server serves the standard health service (:mod:`.health`) and
server reflection (:mod:`.reflection`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...protocols.protobuf import CodecError
    from .service import (
        DEFAULT_MAX_MESSAGE_SIZE,
        ErrorDetailsCodec,
        MCPLiteService,
        create_server,
        services,
    )

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "CodecError",
    "ErrorDetailsCodec",
    "MCPLiteService",
    "create_server",
    "services",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: mcplite.protocols.protobuf reads its field numbers from .generated,
    # whose import runs this file first, so importing .service here would be circular.
    if name == "CodecError":
        from ...protocols.protobuf import CodecError

        return CodecError
    if name in __all__:
        from . import service

        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
