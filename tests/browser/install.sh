#!/usr/bin/env bash
# Headless Chromium for the browser tests (tests/browser, run with -m browser), from
# Debian's packages: chromium-headless-shell (test_cors_browser.py runs it with
# --dump-dom), and chromium with chromium-driver (test_playground.py drives it with
# Selenium through /usr/bin/chromedriver; no browser is ever downloaded).  Does
# nothing when they are already there.
set -euo pipefail
if command -v chromium-headless-shell >/dev/null 2>&1 \
    && command -v chromium >/dev/null 2>&1 \
    && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends \
    chromium-headless-shell chromium chromium-driver
command -v chromium-headless-shell
command -v chromium
command -v chromedriver
