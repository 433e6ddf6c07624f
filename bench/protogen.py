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

__all__ = ["GeneratedStubs", "generate_stubs"]

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PROTO = ROOT / "proto" / "mcplite.proto"


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
    # Every server runs the same proto: the project's (additive to the spec's).
    (proto_dir / "mcplite.proto").write_text(PROJECT_PROTO.read_text())
    source = "project proto/mcplite.proto"
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
