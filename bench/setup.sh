#!/usr/bin/env sh
# One-time setup for the mcplite benchmark (bench/README.md).
#
# - wrk: the HTTP/1.1 load generator (Lua POST script, latency percentiles).
# - nghttp2-client: h2load, the HTTP/2 load generator that drives gRPC.
# - redis-server: the Redis the promise store phase starts on a port of its own
#   (the package's own service, if the system starts it, is not used).
# - the "bench" extra: mcp (the official SDK, an anchor), uvicorn, grpcio,
#   grpcio-tools (stubs are generated at bench time) and matplotlib (the plot).
#
# Debian/Ubuntu; run as root or with sudo available.  Without wrk or h2load the
# benchmark still runs, with slower Python/grpcio generators (see the README).
set -eu

cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
fi

if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update
    $SUDO apt-get install -y wrk nghttp2-client redis-server valgrind
else
    echo "apt-get not found: install wrk, h2load (nghttp2), redis-server and valgrind with your" \
        "package manager" >&2
fi

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
"$PYTHON" -m pip install -e '.[bench]'

command -v wrk >/dev/null && wrk -v 2>&1 | head -n 1 || true
command -v h2load >/dev/null && h2load --version || true
command -v redis-server >/dev/null && redis-server --version || true
echo "setup done: run '$PYTHON -m bench' (or '$PYTHON -m bench --quick')"
