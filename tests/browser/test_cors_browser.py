"""CORS in a real browser: headless Chromium (Debian's ``chromium-headless-shell``,
installed by ``install.sh``) opens a page served from one origin, and the page calls
mcplite servers on another (same host, another port) with ``fetch``, as the MCP
TypeScript SDK does from a web app such as the MCP Inspector.

One server allows the page's origin (``--cors-allow-origin``): a 2026-07-28
``tools/call`` (custom headers, so a preflight first), a 2026-07-28 error answer,
a 2025-11-25 ``initialize``, ``notifications/initialized`` and ``tools/list``, and
an MCP-lite listing must all reach the page.  The other allows only
``http://localhost:PAGEPORT`` (the page's port under another host name): the
browser must refuse those answers to the page (a ``TypeError``).

The page (``cors_page.html``) writes what it read as JSON into ``<pre id="out">``;
Chromium prints the DOM once the page is idle (``--dump-dom`` with a virtual-time
budget, which waits for pending fetches).  Marked ``browser``: the default run
leaves it out; ``bash tests/browser/install.sh && python -m pytest -m browser
tests/browser`` runs it.
"""

from __future__ import annotations

import functools
import html
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import PROCESS_WAIT, ServeProcess, serve_process

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parent
PAGE = "cors_page.html"
#: Upper bound of the browser's run, in seconds (it takes about 1).
BROWSER_WAIT = 60.0
#: Virtual milliseconds the page may run once idle; fetches in flight pause the clock.
VIRTUAL_TIME_BUDGET = 30_000
MODERN = "2026-07-28"
OUT = re.compile(r'<pre id="out">(.*?)</pre>', re.DOTALL)
#: Chromium's console line when CORS keeps an answer from the page.
REFUSAL = re.compile(
    r"Access to fetch at 'http://127\.0\.0\.1:(\d+)(/[^']*)' from origin '([^']*)'"
)
ACCESS = re.compile(r"mcplite\.access: (\S+) (\S+) \S+ (\d{3}) ")


def chromium() -> str:
    """The headless Chromium binary; fails (never skips) when it is not installed."""
    for name in ("chromium-headless-shell", "chromium"):
        path = shutil.which(name)
        if path is not None:
            return path
    pytest.fail("no headless Chromium: run `bash tests/browser/install.sh` (Debian, root)")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves this folder (the page), without a log line per request."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class BrowserRun:
    """What one browser run left: the page's results, the browser's stderr (console
    messages included), the access lines of each server as (method, path, status),
    and the ``MCP-Protocol-Version`` the allowed server sends, read without a browser."""

    page_origin: str
    results: dict[str, Any]
    browser_log: str
    allowed_port: int
    refused_port: int
    allowed_access: list[tuple[str, str, int]]
    refused_access: list[tuple[str, str, int]]
    wire_protocol_version: str | None

    def console_refusals(self) -> list[str]:
        """The browser's console lines saying CORS kept an answer from the page."""
        return [line for line in self.browser_log.splitlines() if "blocked by CORS" in line]


@pytest.fixture(scope="module")
def page_server() -> Iterator[int]:
    """The page on a stdlib HTTP server (127.0.0.1, an ephemeral port): its port."""
    handler = functools.partial(QuietHandler, directory=str(HERE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="cors-page", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(PROCESS_WAIT)


def serve_demo(origin: str) -> AbstractContextManager[ServeProcess]:
    return serve_process(
        "mcplite.demo", "--no-grpc", "--http", "127.0.0.1:0", "--cors-allow-origin", origin
    )


def access_lines(server: ServeProcess) -> list[tuple[str, str, int]]:
    """Stop the server; its access log as (method, path, status)."""
    lines = server.stop()
    return [(m.group(1), m.group(2), int(m.group(3))) for m in map(ACCESS.search, lines) if m]


def open_page(url: str) -> tuple[str, str]:
    """Chromium's DOM of ``url`` once the page is idle, and its stderr (bounded)."""
    with tempfile.TemporaryDirectory(prefix="mcplite-chromium-") as profile:
        command = [
            chromium(),
            "--headless",
            "--no-sandbox",  # as root, Chromium runs only without its sandbox
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            f"--virtual-time-budget={VIRTUAL_TIME_BUDGET}",
            "--dump-dom",
            url,
        ]
        # Its own process group: on a timeout, the browser's helpers go with it.
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            dom, log = proc.communicate(timeout=BROWSER_WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            dom, log = proc.communicate(timeout=PROCESS_WAIT)
            pytest.fail(f"Chromium did not finish in {BROWSER_WAIT}s; stderr:\n{log}")
    assert proc.returncode == 0, f"Chromium exited {proc.returncode}; stderr:\n{log}"
    return dom, log


@pytest.fixture(scope="module")
def run(page_server: int) -> BrowserRun:
    page_origin = f"http://127.0.0.1:{page_server}"
    # The page's port under another name: another origin, which must not pass for it.
    with (
        serve_demo(page_origin) as allowed,
        serve_demo(f"http://localhost:{page_server}") as refused,
    ):
        url = f"{page_origin}/{PAGE}?allowed={allowed.http_port}&refused={refused.http_port}"
        dom, log = open_page(url)
        wire_version = protocol_version_on_the_wire(allowed.http_port, page_origin)
        allowed_access = access_lines(allowed)
        refused_access = access_lines(refused)
    found = OUT.search(dom)
    assert found and found.group(1), f"the page wrote no results; DOM:\n{dom}\nstderr:\n{log}"
    results: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert "fatal" not in results, (results, log)
    return BrowserRun(
        page_origin,
        results,
        log,
        allowed.http_port,
        refused.http_port,
        allowed_access,
        refused_access,
        wire_version,
    )


def step(run: BrowserRun, name: str) -> dict[str, Any]:
    """One step of the page; it must have succeeded."""
    outcome: dict[str, Any] = run.results[name]
    assert outcome["ok"], (outcome, run.browser_log)
    return outcome


def only_message(answer: dict[str, Any]) -> dict[str, Any]:
    assert len(answer["messages"]) == 1, answer
    message: dict[str, Any] = answer["messages"][0]
    return message


def protocol_version_on_the_wire(port: int, origin: str) -> str | None:
    """The ``MCP-Protocol-Version`` the server answers the page's 2026-07-28 call
    with, read without a browser (None: it sends none)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": "from the browser"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Origin": origin,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROCESS_WAIT)
    try:
        conn.request("POST", "/mcp", body=json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        return response.getheader("mcp-protocol-version")
    finally:
        conn.close()


# --- the origin allowed ---------------------------------------------------------------


def test_a_2026_tools_call_from_an_allowed_origin_is_preflighted_and_read_by_the_page(
    run: BrowserRun,
) -> None:
    answer = step(run, "modern")
    assert answer["status"] == 200
    assert answer["contentType"].startswith(("application/json", "text/event-stream"))
    result = only_message(answer)["result"]
    assert result["content"] == [{"type": "text", "text": "from the browser"}]
    assert result["isError"] is False
    assert result["resultType"] == "complete"
    assert answer["sessionId"] is None  # the endpoint is stateless
    # The custom headers needed a preflight, answered 204, before the POST.
    assert run.allowed_access.index(("OPTIONS", "/mcp", 204)) < run.allowed_access.index(
        ("POST", "/mcp", 200)
    )


def test_the_page_reads_the_protocol_version_header_exactly_when_the_server_sends_it(
    run: BrowserRun,
) -> None:
    # Exposed (Access-Control-Expose-Headers): the browser hides nothing the server sends.
    assert step(run, "modern")["protocolVersion"] == run.wire_protocol_version


def test_a_2026_error_answer_reaches_the_page_with_its_status_and_body(run: BrowserRun) -> None:
    # Mcp-Name disagrees with the body's tool name: 400, -32020, readable by the page.
    answer = step(run, "modernError")
    assert answer["status"] == 400
    assert only_message(answer)["error"]["code"] == -32020


def test_a_2025_initialize_then_tools_list_from_an_allowed_origin_reach_the_page(
    run: BrowserRun,
) -> None:
    session = step(run, "legacy")
    initialize = session["initialize"]
    assert initialize["status"] == 200
    assert only_message(initialize)["result"]["protocolVersion"] == "2025-11-25"
    assert initialize["sessionId"] is None
    assert session["initialized"]["status"] == 202
    listed = session["list"]
    assert listed["status"] == 200
    names = {tool["name"] for tool in only_message(listed)["result"]["tools"]}
    assert {"echo", "search_documents"} <= names


def test_an_mcp_lite_listing_from_an_allowed_origin_reaches_the_page(run: BrowserRun) -> None:
    answer = step(run, "lite")
    assert answer["status"] == 200
    names = {tool["name"] for tool in only_message(answer)["tools"]}
    assert {"echo", "redeem"} <= names
    assert ("OPTIONS", "/mcp-lite/v1/tools", 204) in run.allowed_access


def test_the_browser_refuses_nothing_from_the_server_that_allows_the_origin(
    run: BrowserRun,
) -> None:
    allowed = f"http://127.0.0.1:{run.allowed_port}/"
    assert not [line for line in run.console_refusals() if allowed in line]


# --- another origin -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["refusedModern", "refusedLite", "refusedSimple"])
def test_the_browser_keeps_the_answer_of_a_server_that_does_not_allow_the_origin(
    run: BrowserRun, name: str
) -> None:
    outcome = run.results[name]
    assert outcome["ok"] is False, outcome
    assert outcome["error"] == "TypeError", outcome


def test_the_console_says_which_answers_cors_kept_from_the_page_and_why(run: BrowserRun) -> None:
    said = [
        (m.group(1), m.group(2), m.group(3), "preflight" in line)
        for line in run.console_refusals()
        if (m := REFUSAL.search(line))
    ]
    # (port, path, page origin, refused at the preflight), in the page's order.
    refused = str(run.refused_port)
    assert said == [
        (refused, "/mcp", run.page_origin, True),
        (refused, "/mcp-lite/v1/tools", run.page_origin, True),
        (refused, "/mcp-lite/v1/tools", run.page_origin, False),  # text/plain: no preflight
    ], run.console_refusals()


def test_a_server_that_does_not_allow_the_origin_answers_no_preflight_with_204(
    run: BrowserRun,
) -> None:
    preflights = [line for line in run.refused_access if line[0] == "OPTIONS"]
    assert preflights, run.refused_access
    assert all(status != 204 for _, _, status in preflights), preflights
    # A request with no preflight (text/plain) reaches the server, which refuses a
    # body that is not JSON (415: a page cannot run a tool without a preflight);
    # the browser keeps even that answer from the page.
    assert ("POST", "/mcp-lite/v1/tools", 415) in run.refused_access
