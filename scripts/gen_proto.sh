#!/bin/sh
# Regenerate the committed code in mcplite/protocols/generated/ from the files under proto/:
# betterproto message classes of proto/mcplite.proto and of the standard health and
# reflection protos (proto/grpc/...), and descriptors.py, every file's serialized
# FileDescriptorProto with its imports (what server reflection sends; written by
# scripts/gen_descriptors.py from protoc's descriptor set).
# Run from anywhere; uses the project's venv when present.
# Needs grpcio-tools and betterproto[compiler]==2.0.0b7 (both in the test extra).
# mcplite/protocols/protobuf.py takes its field numbers from this code at import.
# OUT=DIR writes elsewhere (tests/test_grpc_codec.py compares a fresh copy).
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
OUT="${OUT:-mcplite/protocols/generated}"
case "$PYTHON" in */*) PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")" ;; esac
# Classes for these; reflection v1alpha is v1's messages under another package
# name (the binding serves both with v1's classes), so only its descriptor is made.
PROTOS="proto/mcplite.proto proto/grpc/health/v1/health.proto
proto/grpc/reflection/v1/reflection.proto"
ALSO_DESCRIBED="proto/grpc/reflection/v1alpha/reflection.proto"
rm -rf "$OUT"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SET="$(mktemp)"
MESSAGES="$(mktemp -d)"
trap 'rm -rf "$SET" "$MESSAGES"' EXIT
# Messages only: the binding and the client serve and call these services with
# their own handlers, so betterproto's service stubs and bases would be dead code.
# The copies under $MESSAGES lose their service blocks; descriptors.py (below)
# still describes the services, from the files as they are.
"$PYTHON" - proto "$MESSAGES" $PROTOS <<'STRIP'
import re, sys
from pathlib import Path
root, out = Path(sys.argv[1]), Path(sys.argv[2])
for name in sys.argv[3:]:
    source = Path(name).read_text()
    target = out / Path(name).relative_to(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(re.sub(r"^service \w+ \{.*?^\}\n", "", source, flags=re.S | re.M))
STRIP
# betterproto's plugin is found on PATH as protoc-gen-python_betterproto.
# $PROTOS unquoted: a list of paths without spaces.
PATH="$(dirname "$PYTHON"):$PATH" "$PYTHON" -m grpc_tools.protoc -I "$MESSAGES" \
    --python_betterproto_out="$OUT" $(echo "$PROTOS" | sed "s#proto/#$MESSAGES/#g")
"$PYTHON" -m grpc_tools.protoc -I proto \
    --descriptor_set_out="$SET" --include_imports $PROTOS $ALSO_DESCRIBED
"$PYTHON" scripts/gen_descriptors.py "$SET" "$OUT/descriptors.py"
