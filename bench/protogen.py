"""Generate gRPC stubs for the benchmark, at bench time, into a temporary directory.

The project proto (``proto/mcplite.proto``) is used when it exists; until it does,
the spec's section 5 proto below stands in.  Either way the wire is the same
package, service and field numbers, so every gRPC server in the run answers the
same request bytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SPEC_PROTO", "GeneratedStubs", "generate_stubs"]

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PROTO = ROOT / "proto" / "mcplite.proto"

# MCP-lite 0.042, sections 5.1 and 5.2, verbatim apart from the header lines.
SPEC_PROTO = """\
syntax = "proto3";
package mcplite;

import "google/protobuf/struct.proto";

service MCPLite {
  rpc GetTools(Empty) returns (ToolsList);
  rpc CallTool(ToolRequest) returns (ToolResponse);
  rpc CallToolStream(ToolRequest) returns (stream ToolResponse);
}

message Empty {}

message Tool {
  string name = 1;
  string type = 2;  // @type field
  string description = 3;
  google.protobuf.Struct input_schema = 4;
}

message ToolsList {
  repeated Tool tools = 1;
}

message ToolRequest {
  string name = 1;
  google.protobuf.Struct arguments = 2;
}

message ToolResponse {
  google.protobuf.Struct result = 1;
  ResponseMeta meta = 2;
}

message ResponseMeta {
  ResponseType response_type = 1;
  string promise_token = 2;  // if response_type == PROMISE
  int64 timestamp = 3;
  int32 processing_time_ms = 4;
}

enum ResponseType {
  ANSWER = 0;
  PROMISE = 1;
  ELICITATION = 2;
  FAILURE = 3;
}
"""

BETTERPROTO_PACKAGE = "mcplite_bp"
"""Where the betterproto output goes, so it never shadows the real ``mcplite``."""


@dataclass(frozen=True, slots=True)
class GeneratedStubs:
    directory: Path  # on sys.path: mcplite_pb2, mcplite_pb2_grpc, mcplite_bp/
    proto_source: str  # "project proto/mcplite.proto" or "spec section 5 (project proto missing)"
    betterproto: bool  # False when the betterproto plugin failed; the note says why
    note: str


def _protoc(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def generate_stubs(out: Path) -> GeneratedStubs:
    """Write grpcio (``*_pb2``) and betterproto stubs under ``out``.

    Raises ``RuntimeError`` when even the grpcio stubs cannot be generated.
    """
    import grpc_tools

    out.mkdir(parents=True, exist_ok=True)
    proto_dir = out / "proto"
    proto_dir.mkdir(exist_ok=True)
    if PROJECT_PROTO.is_file():
        text = PROJECT_PROTO.read_text()
        source = "project proto/mcplite.proto"
    else:
        text = SPEC_PROTO
        source = "spec section 5 (proto/mcplite.proto not found)"
    (proto_dir / "mcplite.proto").write_text(text)
    well_known = str(Path(grpc_tools.__file__).parent / "_proto")
    env = dict(os.environ)
    # The betterproto plugin lives next to the interpreter in the venv.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    base = [f"-I{proto_dir}", f"-I{well_known}"]
    done = _protoc([*base, f"--python_out={out}", f"--grpc_python_out={out}", "mcplite.proto"], env)
    if done.returncode != 0:
        raise RuntimeError(f"grpc_tools.protoc failed: {done.stderr.strip()}")
    bp_tmp = out / "_betterproto"
    bp_tmp.mkdir(exist_ok=True)
    done = _protoc([*base, f"--python_betterproto_out={bp_tmp}", "mcplite.proto"], env)
    generated = bp_tmp / "mcplite"
    if done.returncode != 0 or not generated.is_dir():
        return GeneratedStubs(out, source, False, f"betterproto: {done.stderr.strip()[-300:]}")
    generated.rename(out / BETTERPROTO_PACKAGE)
    return GeneratedStubs(out, source, True, "")
