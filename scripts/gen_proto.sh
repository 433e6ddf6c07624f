#!/bin/sh
# Regenerate the committed betterproto code in mcplite/grpc/_proto/ from
# proto/mcplite.proto.  Run from anywhere; uses the project's venv when present.
# Needs grpcio-tools and betterproto[compiler]==2.0.0b7 (both in the test extra).
# mcplite/protobuf.py takes its field numbers from this code at import.
# OUT=DIR writes elsewhere (tests/test_grpc_codec.py compares a fresh copy).
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
OUT="${OUT:-mcplite/grpc/_proto}"
rm -rf "$OUT"
mkdir -p "$OUT"
# betterproto's plugin is found on PATH as protoc-gen-python_betterproto.
PATH="$(dirname "$PYTHON"):$PATH" "$PYTHON" -m grpc_tools.protoc -I proto \
    --python_betterproto_out="$OUT" proto/mcplite.proto
