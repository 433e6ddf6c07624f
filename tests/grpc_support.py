"""Real protobuf classes and grpcio stubs, generated at test time by grpcio-tools.

Peers we did not write: :func:`protos` runs ``grpc_tools.protoc`` (once per
session, into a temporary directory) on our ``proto/mcplite.proto`` and on the
spec's own proto (``tests/spec_mcplite.proto``), and builds the official
protobuf message classes of each.

Both files declare the same package ``mcplite`` (they must: the gRPC method paths
are ``/mcplite.MCPLite/...``), so their generated ``_pb2`` modules cannot be
imported into one process: protobuf's default descriptor pool refuses the
duplicate symbols.  So protoc writes each file's descriptor set (what a
``_pb2`` module embeds) and each gets its own ``DescriptorPool``; the message
classes come from ``message_factory`` exactly as a ``_pb2`` module makes them,
and :meth:`Protos.stub` builds the multi-callables a ``_pb2_grpc`` stub would.

``google.rpc.Status`` and ``google.rpc.ErrorInfo`` (for ``grpc-status-details-bin``)
are built the same way from their published definitions below, as
googleapis-common-protos is not a dependency.

:data:`ACCEL` says whether this run takes the binding's speed paths (the gate in
``mcplite.bindings.grpc.accel``; ``MCPLITE_ACCEL=0`` turns them off): a test of
what only they do is marked :data:`accel_only`, and the plain path's own answer
to the same case is asserted beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib.resources
import os
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_tools import protoc
from grpclib.protocol import H2Protocol

from mcplite.bindings.grpc import accel
from mcplite.protocols.protobuf import encode_tool_request

#: Whether the gRPC speed paths are on in this run (and in the servers it starts).
ACCEL = accel.on()
#: A test of what the speed paths do and grpclib's public API cannot.
accel_only = pytest.mark.skipif(
    not ACCEL,
    reason="asserts what only the gRPC speed paths do; they are off in this run "
    "(MCPLITE_ACCEL=0, or grpclib/h2/hpack versions their gate does not list)",
)
#: A test of what the plain path does in the place of a speed path.
plain_only = pytest.mark.skipif(ACCEL, reason="asserts the plain path; the speed paths are on")

ROOT = Path(__file__).resolve().parent.parent
OUR_PROTO = ROOT / "proto" / "mcplite.proto"
SPEC_PROTO = Path(__file__).resolve().parent / "spec_mcplite.proto"

# google/rpc/status.proto and the ErrorInfo message of google/rpc/error_details.proto
# (github.com/googleapis/googleapis), trimmed of options and comments.
_RPC_PROTOS = {
    "google/rpc/status.proto": """
syntax = "proto3";
package google.rpc;
import "google/protobuf/any.proto";
message Status {
  int32 code = 1;
  string message = 2;
  repeated google.protobuf.Any details = 3;
}
""",
    "google/rpc/error_details.proto": """
syntax = "proto3";
package google.rpc;
message ErrorInfo {
  string reason = 1;
  string domain = 2;
  map<string, string> metadata = 3;
}
""",
}

_METHODS = {
    "GetTools": ("unary_unary", "Empty", "ToolsList"),
    "CallTool": ("unary_unary", "ToolRequest", "ToolResponse"),
    "CallToolStream": ("unary_stream", "ToolRequest", "ToolResponse"),
}


class Stub:
    """What grpcio-tools' ``MCPLiteStub`` is: one multi-callable per method."""

    def __init__(self, channel: grpc.Channel, messages: Protos) -> None:
        for method, (kind, request, response) in _METHODS.items():
            factory = getattr(channel, kind)
            callable_ = factory(
                f"/mcplite.MCPLite/{method}",
                request_serializer=messages.cls(request).SerializeToString,
                response_deserializer=messages.cls(response).FromString,
            )
            setattr(self, method, callable_)

    GetTools: Any
    CallTool: Any
    CallToolStream: Any


@dataclass(frozen=True)
class Protos:
    """The official protobuf classes of one compiled proto file."""

    name: str
    pool: descriptor_pool.DescriptorPool

    def cls(self, message: str) -> Any:
        """The message class ``mcplite.<message>`` (or a full name with a dot)."""
        full = message if "." in message else f"mcplite.{message}"
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full))

    def enum_value(self, enum: str, name: str) -> int:
        return int(self.pool.FindEnumTypeByName(f"mcplite.{enum}").values_by_name[name].number)

    def stub(self, channel: grpc.Channel) -> Stub:
        return Stub(channel, self)

    def request(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """A ``ToolRequest`` built the ordinary protobuf way."""
        request = self.cls("ToolRequest")(name=name)
        if arguments is not None:
            json_format.ParseDict(arguments, request.arguments)
        return request


def _compile(source_dir: Path, relatives: list[str], out: Path) -> descriptor_pool.DescriptorPool:
    """protoc the files into one descriptor set, loaded into a pool of their own."""
    include = importlib.resources.files("grpc_tools") / "_proto"
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{source_dir}",
            f"-I{include}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            *relatives,
        ]
    )
    if status != 0:
        raise RuntimeError(f"protoc failed on {relatives} (exit {status})")
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:  # dependencies first, as --include_imports writes them
        pool.Add(file)
    return pool


@functools.cache
def protos() -> dict[str, Protos]:
    """``{"ours": ..., "spec": ..., "rpc": ...}``, compiled once per session."""
    with tempfile.TemporaryDirectory(prefix="mcplite-protos-") as tmp:
        work = Path(tmp)
        sources = {"ours": (OUR_PROTO, "mcplite.proto"), "spec": (SPEC_PROTO, "mcplite.proto")}
        result: dict[str, Protos] = {}
        for name, (path, relative) in sources.items():
            source_dir = work / name
            source_dir.mkdir()
            (source_dir / relative).write_bytes(path.read_bytes())
            result[name] = Protos(name, _compile(source_dir, [relative], work / f"{name}.pb"))
        rpc_dir = work / "rpc"
        for relative, text in _RPC_PROTOS.items():
            (rpc_dir / relative).parent.mkdir(parents=True, exist_ok=True)
            (rpc_dir / relative).write_text(text)
        result["rpc"] = Protos("rpc", _compile(rpc_dir, list(_RPC_PROTOS), work / "rpc.pb"))
    return result


@contextlib.asynccontextmanager
async def served(dispatcher: Any) -> AsyncIterator[tuple[Any, grpc.aio.Channel]]:
    """``dispatcher``'s gRPC server on an ephemeral 127.0.0.1 port, and a
    ``grpc.aio`` channel to it (no proxy); closed, and the dispatcher too, after."""
    from mcplite.bindings.grpc import create_server
    from mcplite.bindings.grpc.service import listen_socket

    server = create_server(dispatcher)
    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    await server.start(sock=sock)
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.enable_http_proxy", 0)]
        ) as channel:
            yield server, channel
    finally:
        server.close()
        close_connections_left_open()  # before waiting: from Python 3.12 on, it waits for them
        await asyncio.wait_for(server.wait_closed(), 10.0)
        await dispatcher.close()


def close_connections_left_open() -> None:
    """Close the connections grpclib's own server (the plain path) left open on close.

    It does not close them (grpclib issue #107; docs/grpc.md), and grpcio keeps a
    channel's connection open while anything holds one of its calls: a server
    whose loop then closes would leave them to be collected, open, later (a
    ResourceWarning in some other test).  Call it on the closed server's loop.
    Private on purpose: the plain path has no view of its connections, so they are
    found among all objects, as those whose ``Handler`` was closed (``closing``)
    while their connection was not.  Nothing to do on the speed paths.
    """
    if ACCEL:
        return
    for protocol in gc.get_objects():
        if (
            isinstance(protocol, H2Protocol)
            and getattr(protocol.handler, "closing", False)
            and hasattr(protocol, "connection")
            and not protocol.connection.is_closing()
        ):
            try:
                protocol.processor.close("the test server closed")
            except RuntimeError:  # another harness's, whose loop is closed: not ours to close
                continue


def to_python(value: Any) -> Any:
    """An official ``Struct``/``Value``/``ListValue`` as plain Python, walked by hand
    (json_format would refuse NaN and infinities)."""
    full_name = value.DESCRIPTOR.full_name
    if full_name == "google.protobuf.Struct":
        return {key: to_python(item) for key, item in value.fields.items()}
    if full_name == "google.protobuf.ListValue":
        return [to_python(item) for item in value.values]
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind in ("struct_value", "list_value"):
        return to_python(getattr(value, kind))
    return getattr(value, kind)


#: The path of CallTool, and the bound in seconds of every wait of :class:`RawH2`.
CALL_TOOL = "/mcplite.MCPLite/CallTool"
RAW_WAIT = 10.0


class RawH2:
    """An HTTP/2 client over a plain socket, frame by frame, with h2's default (strict)
    validation of the headers it receives."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=RAW_WAIT)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.flush()

    def close(self) -> None:
        self.sock.close()

    def flush(self) -> None:
        self.sock.sendall(self.h2.data_to_send())

    def headers(self, path: str = CALL_TOOL) -> list[tuple[str, str]]:
        return [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]

    def call(self, name: str, arguments: dict[str, Any]) -> int:
        """Start a CallTool request (its one message, then the end of the stream)."""
        stream_id = self.h2.get_next_available_stream_id()
        message = encode_tool_request(name, arguments)
        self.h2.send_headers(stream_id, self.headers())
        self.h2.send_data(stream_id, b"\0" + len(message).to_bytes(4, "big") + message)
        self.h2.end_stream(stream_id)
        self.flush()
        return stream_id

    def events_until(
        self, done: Callable[[h2.events.Event], bool], timeout: float = RAW_WAIT
    ) -> list[h2.events.Event]:
        """Events received until one satisfies ``done`` (that one last)."""
        events: list[h2.events.Event] = []
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no awaited HTTP/2 event within {timeout}s; got {events}")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                pytest.fail(f"the server closed the connection; got {events}")
            for event in self.h2.receive_data(data):
                events.append(event)
                if done(event):
                    self.flush()
                    return events
            self.flush()

    def ping(self) -> None:
        """A PING and its ACK: the server has processed every frame sent before it."""
        payload = os.urandom(8)
        self.h2.ping(payload)
        self.flush()
        self.events_until(
            lambda e: isinstance(e, h2.events.PingAckReceived) and e.ping_data == payload
        )

    def trailers(self, stream_id: int) -> dict[str, str]:
        """The headers that end ``stream_id`` (a trailers-only response's, or its trailers)."""
        events = self.events_until(
            lambda e: isinstance(e, h2.events.StreamEnded) and e.stream_id == stream_id
        )
        last = [
            e
            for e in events
            if isinstance(e, h2.events.ResponseReceived | h2.events.TrailersReceived)
            and e.stream_id == stream_id
        ][-1]
        return {k.decode(): v.decode() for k, v in last.headers}
