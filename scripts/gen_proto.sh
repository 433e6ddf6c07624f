#!/bin/sh
# Regenerate the committed code in mcplite/protocols/generated/ from the files under proto/:
# betterproto classes of proto/mcplite.proto and of the standard health and
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
# Classes for these; reflection v1alpha is v1's messages under another package
# name (the binding serves both with v1's classes), so only its descriptor is made.
PROTOS="proto/mcplite.proto proto/grpc/health/v1/health.proto
proto/grpc/reflection/v1/reflection.proto"
ALSO_DESCRIBED="proto/grpc/reflection/v1alpha/reflection.proto"
rm -rf "$OUT"
mkdir -p "$OUT"
SET="$(mktemp)"
trap 'rm -f "$SET"' EXIT
# betterproto's plugin is found on PATH as protoc-gen-python_betterproto.
# $PROTOS unquoted: a list of paths without spaces.
PATH="$(dirname "$PYTHON"):$PATH" "$PYTHON" -m grpc_tools.protoc -I proto \
    --python_betterproto_out="$OUT" $PROTOS
"$PYTHON" -m grpc_tools.protoc -I proto \
    --descriptor_set_out="$SET" --include_imports $PROTOS $ALSO_DESCRIBED
"$PYTHON" scripts/gen_descriptors.py "$SET" "$OUT/descriptors.py"
