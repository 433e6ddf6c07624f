"""The playground page (``--playground``) in a real browser: headless Chromium (Debian's
``chromium`` and ``chromium-driver``, installed by ``install.sh``) driven by Selenium
through ``/usr/bin/chromedriver``, against ``mcplite serve`` of ``playground_tools``.

Each test opens the page, acts as a person would (clicks, types, Tab and Enter) and
waits, bounded, for what the page must then show.  Tools that wait are moved on by
``release(job)`` over HTTP once the test has seen what it looks for.  One browser and
one server serve the whole module.  Marked ``browser``: ``bash tests/browser/install.sh
&& python -m pytest -m browser tests/browser`` runs it.
"""

from __future__ import annotations

import http.client
import itertools
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from conftest import PROCESS_WAIT, ServeProcess, make_config, serve_process, start_server
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from mcplite import Tools

from .chromium import ChromiumMissing, browser_log, set_viewport, start

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parent
#: Upper bound of every wait on the page, in seconds.
PAGE_WAIT = 10.0
TOKEN = "playground-test-token-0123456789"
T = TypeVar("T")
#: Numbers each page load, so that each is a load and not a move within the page.
LOADS = itertools.count()


class Page:
    """The playground in the browser, with the waits a test needs."""

    def __init__(self, driver: Chrome) -> None:
        self.driver = driver

    def open(self, port: int, key: str = "", path: str = "/") -> None:
        """Load the page at ``path`` afresh (a new query each time: a change of hash
        alone would not reload it), open ``key`` (``tool:NAME``...) and wait until it
        has listed."""
        url = f"http://127.0.0.1:{port}{path}?load={next(LOADS)}" + (f"#{key}" if key else "")
        self.driver.get(url)
        self.wait(lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))
        if key:
            self.wait(
                lambda d: self.find('.item[aria-current="true"]').get_attribute("data-key") == key
            )
            self.find(".view > header h2")

    def wait(self, condition: Callable[[Chrome], T], message: str = "") -> T:
        def check(driver: Chrome) -> T:
            try:
                return condition(driver)
            except StaleElementReferenceException:  # the page re-rendered: ask again
                return None  # type: ignore[return-value]

        found: T = WebDriverWait(self.driver, PAGE_WAIT).until(check, message)
        return found

    def find(self, css: str) -> WebElement:
        return self.wait(lambda d: d.find_element(By.CSS_SELECTOR, css), css)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return self.find(css).text

    def heading(self) -> str | None:
        found = self.all(".view > header h2")
        return found[0].text if found else None

    def field(self, *path: str) -> WebElement:
        """The control of a field, by the labels from the form down."""
        css = " ".join(f'[data-field="{name}"]' for name in path)
        return self.find(f"form.call {css} :is(input, select, textarea)")

    def field_error(self, *path: str) -> str:
        css = " ".join(f'[data-field="{name}"]' for name in path)
        return self.text(f"form.call {css} > .error")

    def call(self, stream: bool = False) -> None:
        if stream:
            box = self.find("form.call .actions input[type=checkbox]")
            if not box.is_selected():
                box.click()
        self.find("form.call button[type=submit]").click()

    def run(self, state: str = "done") -> WebElement:
        """The newest call's last run, once it is in ``state``."""
        css = f".conversation:first-child .run:last-child[data-state={state}]"
        return self.find(css)

    def response_type(self) -> str | None:
        return self.run().get_attribute("data-response-type")

    def console_errors(self) -> list[str]:
        """Script errors and policy violations since the last look (a refused request,
        which some tests make on purpose, is the network's, not the page's)."""
        entries = browser_log(self.driver)
        return [
            e["message"] for e in entries if e["level"] == "SEVERE" and e["source"] != "network"
        ]


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    with tempfile.TemporaryDirectory(prefix="mcplite-chromium-") as profile:
        try:
            driver = start(profile)
        except ChromiumMissing as missing:
            pytest.fail(str(missing))
        try:
            set_viewport(driver, 1280, 900)
            yield driver
        finally:
            driver.quit()


@pytest.fixture
def page(browser: Chrome) -> Iterator[Page]:
    """The browser, for one test; the page must have raised no error and broken no
    rule of its Content-Security-Policy by the end of it."""
    page = Page(browser)
    page.console_errors()  # what earlier tests left
    yield page
    assert page.console_errors() == []


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with serve_process(
        "playground_tools",
        "--playground",
        "--no-grpc",
        "--http",
        "127.0.0.1:0",
        "--heartbeat",
        "0.3",
        extra_path=HERE,
    ) as running:
        yield running


def count_is(page: Page, css: str, n: int) -> Callable[[Chrome], bool]:
    return lambda driver: len(page.all(css)) == n


def release(server: ServeProcess, job: str) -> None:
    """Let a waiting tool of ``playground_tools`` take its next step."""
    reply = server.call("release", {"job": job})
    assert reply["result"]["content"] == [{"type": "text", "text": f"released {job}"}], reply


# --- the list --------------------------------------------------------------------------


def test_the_list_shows_tools_prompts_and_resources_with_descriptions_and_annotations(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port)
    trip = page.text('.item[data-key="tool:plan_trip"]')
    for shown in ("plan_trip", "Plan a trip", "@type query", "read-only", "idempotent"):
        assert shown in trip
    assert "closed world" in trip
    assert "every kind of argument the form builds" in trip
    assert "non-destructive" in page.text('.item[data-key="tool:echo"]')
    assert "Write a greeting." in page.text('.item[data-key="prompt:greet"]')
    memo = page.text('.item[data-key="resource:memo://today"]')
    assert "Today's memo" in memo and "What to do today." in memo and "text/plain" in memo
    # The system tools are apart, and hidden until asked for.
    assert not page.all('.item[data-key="tool:redeem"]')
    page.find("#show-system").click()
    system = page.text('section[aria-labelledby="group-system"]')
    assert "redeem" in system and "cancel" in system
    assert "@type system" in system


def test_a_prompt_and_a_resource_open_and_answer(page: Page, server: ServeProcess) -> None:
    page.open(server.http_port, "prompt:greet")
    page.field("who").send_keys("the team", Keys.ENTER)
    assert "Write a short greeting for the team." in page.run().text
    page.open(server.http_port, "resource:memo://today")
    assert "memo://today" in page.text(".view > header")
    page.find("form.call button[type=submit]").click()
    assert "Water the plants." in page.run().text


# --- forms and validation ---------------------------------------------------------------


def test_values_out_of_bounds_show_the_servers_messages_next_to_their_fields(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port, "tool:plan_trip")
    page.field("destination").send_keys("Paris")
    page.field("traveller", "name").send_keys("Ada")
    page.field("traveller", "age").send_keys("200")
    page.find('[data-field="stops"] .actions button').click()
    page.field("stops", "stops[0]").send_keys("Lyon")
    nights = page.field("nights")
    nights.clear()
    nights.send_keys("30")
    page.call()
    assert page.response_type() == "error"
    assert "-32602" in page.run().text
    # The server's words, each beside its own field (traveller.age: a nested path).
    assert page.field_error("traveller", "age").startswith("200 is greater than the maximum of 120")
    assert page.field_error("nights").startswith("30 is greater than the maximum of 14")
    assert page.field("nights").get_attribute("aria-invalid") == "true"
    assert page.field_error("destination") == ""
    # Within bounds, the same form is answered, with every kind of field in the arguments.
    nights.clear()
    nights.send_keys("4")
    age = page.field("traveller", "age")
    age.clear()
    age.send_keys("36")
    Select(page.field("travel_by")).select_by_visible_text("boat")
    page.field("insured").click()
    page.call()
    answer = json.loads(page.text(".conversation:first-child .run:last-child .content pre"))
    assert answer == {
        "destination": "Paris",
        "traveller": "Ada",
        "stops": ["Lyon"],
        "nights": 4,
        "budget": None,
        "travel_by": "boat",
        "insured": True,
    }
    assert page.field_error("nights") == ""


def test_the_raw_json_of_a_call_is_one_click_away(page: Page, server: ServeProcess) -> None:
    page.open(server.http_port, "tool:echo")
    page.field("text").send_keys("raw", Keys.ENTER)
    run = page.run()
    summary = run.find_element(By.CSS_SELECTOR, "details.raw > summary")
    raw = run.find_element(By.CSS_SELECTOR, "details.raw pre")
    assert not raw.is_displayed()
    summary.click()
    page.wait(lambda d: raw.is_displayed())
    request = json.loads(raw.text)
    assert request["method"] == "tools/call"
    assert request["params"] == {"name": "echo", "arguments": {"text": "raw"}}
    answer = run.find_elements(By.CSS_SELECTOR, "details.raw pre")[1].text
    assert json.loads(answer)["result"]["_meta"]["response_type"] == "answer"
    # Escape closes it again.
    summary.send_keys(Keys.ESCAPE)
    page.wait(lambda d: not raw.is_displayed())


# --- outcomes ---------------------------------------------------------------------------


def test_an_answer_shows_text_json_and_an_image(page: Page, server: ServeProcess) -> None:
    page.open(server.http_port, "tool:snapshot")
    page.call()
    assert page.response_type() == "answer"
    content = page.find(".conversation:first-child .run .content")
    assert content.find_element(By.CSS_SELECTOR, ".text").text == "one red pixel"
    assert json.loads(content.find_element(By.CSS_SELECTOR, "pre").text) == {
        "width": 1,
        "height": 1,
    }
    image = content.find_element(By.CSS_SELECTOR, "img")
    assert (image.get_attribute("src") or "").startswith("data:image/png;base64,")
    assert page.wait(lambda d: d.execute_script("return arguments[0].naturalWidth", image)) == 1


def test_a_stream_shows_its_parts_one_by_one_then_the_result(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port, "tool:countdown")
    page.field("job").send_keys("stream-1")
    page.call(stream=True)
    parts = ".conversation:first-child .run ol.parts li"
    seen: list[list[str]] = []
    for expected in (["3..."], ["3...", "2..."], ["3...", "2...", "1..."]):
        page.wait(count_is(page, parts, len(expected)))
        seen.append([li.text for li in page.all(parts)])
        assert page.all(".conversation:first-child .run[data-state=running]")
        if len(expected) == 1:  # the tool is quiet until released: the stream beats
            page.wait(lambda d: "heartbeat" in page.text(".run .heartbeats"))
        release(server, "stream-1")
    run = page.run()
    assert seen == [["3..."], ["3...", "2..."], ["3...", "2...", "1..."]]
    assert [li.text for li in page.all(parts)] == ["3...", "2...", "1...", "lift-off"]
    assert run.get_attribute("data-response-type") == "answer"
    assert run.find_element(By.CSS_SELECTOR, ".outcome .text").text == "3...2...1...lift-off"
    events = run.find_elements(By.CSS_SELECTOR, "details.raw pre")[1].get_attribute("textContent")
    assert events is not None and "event: heartbeat" in events and "event: done" in events


def test_a_promise_shows_its_progress_and_is_redeemed_by_itself(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port, "tool:long_job")
    page.field("job").send_keys("promise-1", Keys.ENTER)
    promise = page.find(".conversation:first-child .run .promise")
    assert page.find(".conversation:first-child .run").get_attribute("data-response-type") == (
        "promise"
    )
    assert "1 of 4 — waiting for the go" in promise.text
    bar = promise.find_element(By.CSS_SELECTOR, "progress")
    assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("1", "4")
    assert "prom_" in promise.text
    release(server, "promise-1")
    run = page.run()
    assert run.get_attribute("data-response-type") == "answer"
    assert json.loads(run.find_element(By.CSS_SELECTOR, ".content pre").text) == {
        "job": "promise-1",
        "status": "done",
    }
    assert "promise resolved" in run.find_element(By.CSS_SELECTOR, ".status").text


def test_a_promise_cancelled_with_its_button_shows_the_cancelled_failure(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port, "tool:long_job")
    page.field("job").send_keys("promise-2", Keys.ENTER)
    page.find(".conversation:first-child .run .promise button.danger").click()
    run = page.run()
    assert run.get_attribute("data-response-type") == "failure"
    failure = run.find_element(By.CSS_SELECTOR, ".failure").text
    assert "cancelled" in failure
    labels = [a.text for a in run.find_elements(By.CSS_SELECTOR, "details.raw > summary")]
    assert "Raw JSON: cancel" in labels


def test_an_elicitation_is_answered_in_a_form_and_the_call_goes_on(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port, "tool:book_table")
    page.field("guests").send_keys("2", Keys.ENTER)
    asked = page.find(".conversation:first-child .run form.elicitation")
    assert "Under which name?" in asked.text
    assert page.response_type() == "elicitation"
    name = asked.find_element(By.CSS_SELECTOR, '[data-field="name"] input')
    page.wait(lambda d: d.switch_to.active_element == name)  # the question takes the focus
    name.send_keys("Ada", Keys.ENTER)
    runs = ".conversation:first-child .run"
    page.wait(lambda d: len(page.all(runs)) == 2)
    continued = page.run()
    assert "(continued)" in continued.text
    assert continued.find_element(By.CSS_SELECTOR, ".text").text == "table for 2 booked under Ada"
    request = json.loads(
        continued.find_element(By.CSS_SELECTOR, "details.raw pre").get_attribute("textContent")
        or "{}"
    )
    assert request["params"]["arguments"] == {"guests": 2, "name": "Ada"}


def test_a_failure_shows_its_message_reason_and_whether_to_retry(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port, "tool:open_report")
    page.field("report_id").send_keys("r7", Keys.ENTER)
    assert page.response_type() == "failure"
    failure = page.text(".conversation:first-child .run .failure")
    assert "report r7 is archived" in failure
    assert "archived" in failure.split("reason", 1)[1]
    assert "retryable\nno" in failure


def test_a_tool_gone_since_the_listing_shows_the_error_and_its_suggestion(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port, "tool:echo_loud")
    assert server.call("retire", {"name": "echo_loud"})["result"]["_meta"]["response_type"] == (
        "answer"
    )
    page.field("text").send_keys("hi", Keys.ENTER)
    problem = page.text(".conversation:first-child .run .problem")
    assert "-32601 Tool not found" in problem
    assert "Did you mean 'echo'?" in page.text(".run .problem .suggestion")
    page.find(".run .problem button.link").click()  # list again
    page.wait(lambda d: not page.all('.item[data-key="tool:echo_loud"]'))
    assert "no longer served" in page.text("#detail")


# --- keyboard and small screens ---------------------------------------------------------


def test_a_tool_opens_with_tab_and_enter_and_its_form_submits_with_enter(
    page: Page, server: ServeProcess
) -> None:
    page.open(server.http_port)
    echo = page.find('.item[data-key="tool:echo"]')
    body = page.find("body")
    body.click()
    for _ in range(30):
        if page.driver.switch_to.active_element == echo:
            break
        page.driver.switch_to.active_element.send_keys(Keys.TAB)
    assert page.driver.switch_to.active_element == echo
    echo.send_keys(Keys.ENTER)
    page.wait(lambda d: page.heading() == "echo")
    assert page.driver.switch_to.active_element.tag_name == "h2"
    text = page.field("text")
    for _ in range(5):
        if page.driver.switch_to.active_element == text:
            break
        page.driver.switch_to.active_element.send_keys(Keys.TAB)
    assert page.driver.switch_to.active_element == text
    text.send_keys("typed", Keys.ENTER)
    assert page.run().find_element(By.CSS_SELECTOR, ".text").text == "typed"
    # Escape goes back to the open tool in the list.
    text.send_keys(Keys.ESCAPE)
    assert page.driver.switch_to.active_element == page.find('.item[data-key="tool:echo"]')


def test_at_360_px_the_page_does_not_scroll_sideways(
    page: Page, server: ServeProcess, tmp_path: Path
) -> None:
    set_viewport(page.driver, 360, 800, mobile=True)
    try:
        page.open(server.http_port, "tool:plan_trip")
        page.open(server.http_port, "tool:echo")
        page.field("text").send_keys("x" * 400, Keys.ENTER)  # one long word
        page.run().find_element(By.CSS_SELECTOR, "details.raw > summary").click()
        width = page.driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= 360
        page.driver.save_screenshot(str(tmp_path / "phone.png"))
    finally:
        set_viewport(page.driver, 1280, 900)


# --- auth, and the Host check -----------------------------------------------------------


def test_with_auth_on_a_call_without_a_token_says_to_enter_one_and_with_it_succeeds(
    page: Page, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    with serve_process(
        "playground_tools",
        "--playground",
        "--no-grpc",
        "--http",
        "127.0.0.1:0",
        "--auth-tokens",
        str(tokens),
        "--open-discovery",
        extra_path=HERE,
    ) as server:
        page.open(server.http_port, "tool:echo")
        assert "needs a token" in page.text("#server-line")
        page.field("text").send_keys("secret", Keys.ENTER)
        run = page.run()
        assert "HTTP 401" in run.text
        assert "needs a bearer token: enter it in the Token field" in run.text
        token = page.find("#token")
        token.send_keys(TOKEN, Keys.ENTER)  # Use token: lists again, with it
        page.call()
        page.wait(lambda d: page.response_type() == "answer")
        assert page.run().find_element(By.CSS_SELECTOR, ".text").text == "secret"
        # Kept in memory only, unless asked for.
        stored = page.driver.execute_script("return sessionStorage.length")
        assert stored == 0


def get(port: int, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROCESS_WAIT)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def test_the_page_and_its_state_refuse_another_host_or_origin(server: ServeProcess) -> None:
    port = server.http_port
    status, headers, body = get(port, "/", {})
    assert status == 200 and b"mcplite playground" in body
    policy = headers["content-security-policy"]
    assert "script-src 'sha256-" in policy and "default-src 'none'" in policy
    assert get(port, "/", {"Host": "evil.example"})[0] == 403
    assert get(port, "/playground/state", {"Host": f"evil.example:{port}"})[0] == 403
    assert get(port, "/playground/state", {"Origin": "http://evil.example"})[0] == 403
    status, _, body = get(port, "/playground/state", {"Origin": f"http://localhost:{port}"})
    assert status == 200 and json.loads(body)["base_path"] == "/mcp-lite/v1"


# --- mcplite dev: reloads and their errors ----------------------------------------------


def test_under_dev_a_failed_reload_shows_its_error_and_a_good_one_lists_again(
    page: Page,
) -> None:
    tools = Tools()

    @tools.tool
    def first() -> str:
        """The first tool."""
        return "1"

    running = start_server(tools, make_config(playground=True))
    try:
        playground = running.http.playground
        assert playground is not None

        async def dev_on() -> None:
            playground.dev = True

        running.run(dev_on())
        page.open(running.port)
        assert "dev: reload 0" in page.text("#dev-line")
        assert not page.find("#dev-error").is_displayed()

        async def failed() -> None:
            playground.error = 'Traceback (most recent call last):\n  File "tools.py"\nSyntaxError'

        running.run(failed())
        banner = page.find("#dev-error")
        page.wait(lambda d: banner.is_displayed())
        assert "SyntaxError" in page.text("#dev-error-text")
        assert page.find("#dev-error-text").value_of_css_property("font-family").find("mono") >= 0

        def second() -> str:
            """The second tool."""
            return "2"

        async def reloaded() -> None:
            tools.add(second)
            playground.reloaded()

        running.run(reloaded())
        page.find('.item[data-key="tool:second"]')
        page.wait(lambda d: not banner.is_displayed())
        assert "dev: reload 1" in page.text("#dev-line")
    finally:
        running.stop()


def test_under_mcplite_dev_an_edit_shows_on_the_page_without_reloading_it(
    page: Page, tmp_path: Path
) -> None:
    module = tmp_path / "edited.py"
    first = "from mcplite import Tools\n\ntools = Tools()\n\n\n"
    first += '@tools.tool\ndef first() -> str:\n    return "1"\n'
    module.write_text(first)
    dev = ServeProcess(
        "edited", "--http", "127.0.0.1:0", "--no-grpc", command_name="dev", cwd=tmp_path
    )
    try:
        page.open(dev.http_port, "tool:first")
        banner = page.find("#dev-error")
        assert not banner.is_displayed()

        module.write_text(first + "\ndef broken(:\n")
        page.wait(lambda d: banner.is_displayed(), "the error banner")
        assert "SyntaxError" in page.text("#dev-error-text")
        assert "edited.py" in page.text("#dev-error-text")

        second = (
            '\n\n@tools.tool\ndef second() -> str:\n    """Added while served."""\n    return "2"\n'
        )
        module.write_text(first + second)
        page.find('.item[data-key="tool:second"]')
        page.wait(lambda d: not banner.is_displayed(), "the banner gone")
        page.find('.item[data-key="tool:second"]').click()
        page.call()
        assert page.response_type() == "answer"
        assert page.text(".conversation:first-child .run .content") == "2"
    finally:
        dev.kill()


def test_under_an_asgi_mount_the_page_lists_and_calls_under_the_mount(page: Page) -> None:
    from fastapi import FastAPI
    from test_asgi import served

    from mcplite.asgi import App

    tools = Tools()

    @tools.tool
    def shout(text: str) -> str:
        """Upper case."""
        return text.upper()

    app = App(tools, config=make_config(playground=True))
    api = FastAPI(lifespan=app.lifespan)
    api.mount("/tools", app)
    with served(api) as running:
        for path in ("/tools/", "/tools"):
            page.open(running.port, "tool:shout", path=path)
            page.field("text").send_keys("mounted")
            page.call()
            assert page.response_type() == "answer"
            assert page.text(".conversation:first-child .run .content") == "MOUNTED"
