"""Debian's Chromium driven by Selenium through Debian's chromedriver: for the
playground's browser tests and ``scripts/playground_screenshots.py``.

Selenium is told where both binaries are and to stay offline (``SE_OFFLINE``), so
that Selenium Manager never downloads a driver or a browser of its own.
"""

from __future__ import annotations

import os
from typing import Any

from selenium import webdriver
from selenium.webdriver import Chrome
from selenium.webdriver.chrome.service import Service

__all__ = ["CHROMEDRIVER", "CHROMIUM", "ChromiumMissing", "browser_log", "set_viewport", "start"]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # as root, Chromium runs only without its sandbox
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class ChromiumMissing(RuntimeError):
    """Chromium or its driver is not installed."""


def start(profile: str) -> Chrome:
    """Headless Chromium with its profile in ``profile`` (a folder the caller removes).

    Raises :class:`ChromiumMissing` when a binary is not there.
    """
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise ChromiumMissing(f"no {path}: run `bash tests/browser/install.sh` (Debian, root)")
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def set_viewport(driver: Chrome, width: int, height: int, mobile: bool = False) -> None:
    """The page's viewport, exactly (a window's size counts its frame too)."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )


def browser_log(driver: Chrome) -> list[dict[str, Any]]:
    """The console messages since the last call (script errors, CSP violations...)."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return entries
