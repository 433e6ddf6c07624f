"""The playground's screenshots in the docs, taken again: the demo served with
``--playground``, a tool called in headless Chromium, at 1280x900
(``docs/images/playground-desktop.png``) and at 360x800
(``docs/images/playground-phone.png``).

Needs what the browser tests need (``bash tests/browser/install.sh``, and the
``test`` extra for Selenium)::

    python scripts/playground_screenshots.py
"""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser.chromium import set_viewport, start  # noqa: E402

IMAGES = ROOT / "docs" / "images"
#: Upper bound of every wait, in seconds.
WAIT = 20.0
READY = re.compile(r"serving \d+ tools on http://127\.0\.0\.1:(\d+)")


def serve_demo() -> tuple[subprocess.Popen[str], int]:
    """``mcplite serve mcplite.demo --playground`` on an ephemeral port: the process
    and its port, read from its log (bounded)."""
    command = ["serve", "mcplite.demo", "--playground", "--no-grpc", "--http", "127.0.0.1:0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcplite", *command],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=WAIT)
        except queue.Empty:
            proc.kill()
            raise SystemExit("the demo server did not start") from None
        found = READY.search(line)
        if found:
            return proc, int(found.group(1))


def open_tool(driver: Chrome, port: int, name: str) -> None:
    driver.get(f"http://127.0.0.1:{port}/#tool:{name}")
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".view > header h2")
    )


def wait_done(driver: Chrome) -> None:
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".run[data-state=done]")
    )


def desktop(driver: Chrome, port: int) -> None:
    set_viewport(driver, 1280, 900)
    open_tool(driver, port, "search_documents")
    query = driver.find_element(By.CSS_SELECTOR, 'form.call [data-field="query"] input')
    limit = driver.find_element(By.CSS_SELECTOR, 'form.call [data-field="limit"] input')
    limit.clear()
    limit.send_keys("2")
    query.send_keys("promise token", Keys.ENTER)
    wait_done(driver)
    driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    driver.save_screenshot(str(IMAGES / "playground-desktop.png"))


def phone(driver: Chrome, port: int) -> None:
    set_viewport(driver, 360, 800, mobile=True)
    open_tool(driver, port, "generate_report")
    driver.find_element(By.CSS_SELECTOR, "form.call .actions input[type=checkbox]").click()
    topic = driver.find_element(By.CSS_SELECTOR, 'form.call [data-field="topic"] input')
    topic.send_keys("quarterly results", Keys.ENTER)
    wait_done(driver)
    driver.execute_script(
        "document.activeElement.blur();"
        "document.querySelector('.view').scrollIntoView(); window.scrollBy(0, -12)"
    )
    driver.save_screenshot(str(IMAGES / "playground-phone.png"))


def main() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    proc, port = serve_demo()
    try:
        with tempfile.TemporaryDirectory(prefix="mcplite-chromium-") as profile:
            driver = start(profile)
            try:
                desktop(driver, port)
                phone(driver, port)
            finally:
                driver.quit()
    finally:
        proc.terminate()
        proc.wait(WAIT)
    for name in ("playground-desktop.png", "playground-phone.png"):
        print(IMAGES / name)


if __name__ == "__main__":
    main()
