"""The gRPC binding (spec section 5) on grpclib.

``create_server(dispatcher)`` gives a ``grpclib.server.Server`` serving
``mcplite.MCPLite``; :mod:`.codec` reads and writes the messages; the betterproto
classes generated from ``proto/mcplite.proto`` (by ``scripts/gen_proto.sh``) are in
``mcplite.grpc._proto.mcplite`` for clients that want them.
"""

from ..protobuf import CodecError
from .service import DEFAULT_MAX_MESSAGE_SIZE, MCPLiteService, create_server

__all__ = ["DEFAULT_MAX_MESSAGE_SIZE", "CodecError", "MCPLiteService", "create_server"]
