#!/bin/sh
# Regenerate the committed betterproto code in mcplite/grpc/_proto/ from
# proto/mcplite.proto.  Run from anywhere; uses the project's venv when present.
# Needs grpcio-tools and betterproto[compiler]==2.0.0b7 (the test extra has grpcio-tools).
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
rm -rf mcplite/grpc/_proto
mkdir -p mcplite/grpc/_proto
# betterproto's plugin is found on PATH as protoc-gen-python_betterproto.
PATH="$(dirname "$PYTHON"):$PATH" "$PYTHON" -m grpc_tools.protoc -I proto \
    --python_betterproto_out=mcplite/grpc/_proto proto/mcplite.proto
