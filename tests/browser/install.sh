#!/usr/bin/env bash
# Headless Chromium for the browser tests (tests/browser, run with -m browser):
# Debian's chromium-headless-shell package. Does nothing when it is already there.
set -euo pipefail
if command -v chromium-headless-shell >/dev/null 2>&1; then
    exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends chromium-headless-shell
command -v chromium-headless-shell
