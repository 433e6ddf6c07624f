"""``mcplite dev``: a module edited while it is served.

Each test writes a tools module into a temporary directory, runs ``python -m
mcplite dev`` there as a user does (a real process, ports on 127.0.0.1), edits
the module and waits for the server's own log line saying it imported it again
(bounded), then asks over HTTP what is served.  The process and its ports stay
the same across every reload.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PROCESS_WAIT, WAIT, ServeProcess, subprocess_env
from sse_client import RawHttp, connect, request_bytes

from mcplite.core.config import Config
from mcplite.ops.dev import dev_config

RELOADED = r"mcplite\.dev: reloaded: serving (\d+) tools"
FAILED = r"mcplite\.dev: reload failed"

TOOLS = '''
from mcplite import Tools

tools = Tools()


@tools.tool
def hello(name: str) -> str:
    """Say hello."""
    return f"hello {name}"
'''
MORE = '''

@tools.tool
def goodbye(name: str) -> str:
    """Say goodbye."""
    return f"goodbye {name}"
'''


def write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text).lstrip())


def dev(folder: Path, *args: str, extra_path: Path | None = None) -> ServeProcess:
    return ServeProcess(
        *args,
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        command_name="dev",
        cwd=folder,
        extra_path=extra_path,
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServeProcess, Path]]:
    write(tmp_path / "mytools.py", TOOLS)
    server = dev(tmp_path, "mytools")
    try:
        yield server, tmp_path / "mytools.py"
    finally:
        server.kill()


def names(server: ServeProcess) -> list[str]:
    status, reply = server.post("/tools", {})
    assert status == 200, reply
    return [t["name"] for t in reply["tools"] if t.get("@type") != "system"]


def state(server: ServeProcess) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=PROCESS_WAIT)
    try:
        conn.request("GET", "/playground/state")
        response = conn.getresponse()
        assert response.status == 200
        body = json.loads(response.read())
        assert isinstance(body, dict)
        return body
    finally:
        conn.close()


def text_of(reply: dict[str, Any]) -> str:
    content = reply["result"]["content"]
    assert content[0]["type"] == "text", reply
    text = content[0]["text"]
    assert isinstance(text, str)
    return text


def test_a_new_tool_appears_without_a_restart(served: tuple[ServeProcess, Path]) -> None:
    server, module = served
    pid, port = server.proc.pid, server.http_port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROCESS_WAIT)
    assert text_of(server.call("hello", {"name": "a"}, conn)) == "hello a"

    module.write_text(module.read_text() + MORE)
    server.wait_for(RELOADED)

    assert names(server) == ["hello", "goodbye"]
    # The same process, the same port, even the same keep-alive connection.
    assert text_of(server.call("goodbye", {"name": "b"}, conn)) == "goodbye b"
    assert server.proc.poll() is None and server.proc.pid == pid
    conn.close()
    assert state(server)["generation"] == 1  # one reload since it started serving


def test_a_changed_tool_answers_with_its_new_code(served: tuple[ServeProcess, Path]) -> None:
    server, module = served
    module.write_text(module.read_text().replace('f"hello {name}"', 'f"hi {name}!"'))
    server.wait_for(RELOADED)
    assert text_of(server.call("hello", {"name": "c"})) == "hi c!"


def test_a_syntax_error_keeps_the_last_good_tools_and_shows_the_error(
    served: tuple[ServeProcess, Path],
) -> None:
    server, module = served
    good = module.read_text()
    module.write_text(good + MORE + "\ndef broken(:\n")
    server.wait_for(FAILED)
    server.wait_for(r"^SyntaxError: ")
    error = "\n".join(server.lines[-5:])
    assert 'mytools.py", line 17' in error

    assert names(server) == ["hello"]  # the last good version, still answering
    assert text_of(server.call("hello", {"name": "d"})) == "hello d"
    shown = state(server)
    assert shown["dev"] is True
    assert "SyntaxError" in shown["error"] and "mytools.py" in shown["error"]

    module.write_text(good + MORE)
    server.wait_for(RELOADED)
    assert names(server) == ["hello", "goodbye"]
    assert state(server)["error"] is None


def test_an_exception_at_import_shows_the_module_s_own_line(
    served: tuple[ServeProcess, Path],
) -> None:
    server, module = served
    module.write_text(module.read_text() + '\nraise RuntimeError("no config yet")\n')
    server.wait_for(FAILED)
    error = state(server)["error"]
    assert "RuntimeError: no config yet" in error
    assert 'mytools.py", line 11' in error
    assert "importlib" not in error  # the module's lines, not the import machinery's
    assert names(server) == ["hello"]


def test_mcp_clients_listening_hear_that_the_lists_changed(
    served: tuple[ServeProcess, Path],
) -> None:
    server, module = served
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    wanted = {"toolsListChanged": True, "promptsListChanged": True}
    listen = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {"_meta": meta, "notifications": wanted},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    sock = connect(server.http_port, WAIT)
    try:
        sock.sendall(request_bytes("/mcp", listen, headers=headers))
        reader = RawHttp(sock)
        events = reader.events(reader.read_head())
        assert next(events).json()["method"] == "notifications/subscriptions/acknowledged"
        prompt = "from mcplite import Prompts\n\nprompts = Prompts()\n"
        prompt += 'prompts.add(lambda: "Hi", name="hi")\n'
        module.write_text(module.read_text() + MORE + "\n" + prompt)
        server.wait_for(RELOADED)
        heard = {next(events).json()["method"] for _ in range(2)}
        assert heard == {
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
        }
    finally:
        sock.close()


def test_a_package_reloads_when_any_of_its_modules_changes(tmp_path: Path) -> None:
    package = tmp_path / "shop"
    package.mkdir()
    write(
        package / "__init__.py",
        """
        from mcplite import Tools

        from .prices import price_of

        tools = Tools()


        @tools.tool
        def price(item: str) -> float:
            return price_of(item)
        """,
    )
    write(package / "prices.py", "def price_of(item: str) -> float:\n    return 1.0\n")
    server = dev(tmp_path, "shop")
    try:
        assert text_of(server.call("price", {"item": "tea"})) == "1.0"
        write(package / "prices.py", "def price_of(item: str) -> float:\n    return 2.5\n")
        server.wait_for(RELOADED)
        assert text_of(server.call("price", {"item": "tea"})) == "2.5"
    finally:
        server.kill()


def test_a_watched_path_reloads_too(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "greeting.txt").write_text("hello")
    write(
        tmp_path / "greeter.py",
        """
        from pathlib import Path

        from mcplite import Tools

        GREETING = (Path(__file__).parent / "data" / "greeting.txt").read_text()
        tools = Tools()


        @tools.tool
        def greet(name: str) -> str:
            return f"{GREETING} {name}"
        """,
    )
    server = dev(tmp_path, "greeter", "--watch", "data")
    try:
        assert text_of(server.call("greet", {"name": "e"})) == "hello e"
        (data / "greeting.txt").write_text("howdy")
        server.wait_for(RELOADED)
        assert text_of(server.call("greet", {"name": "e"})) == "howdy e"
    finally:
        server.kill()


def test_a_call_running_across_a_reload_finishes_on_its_own_code(tmp_path: Path) -> None:
    # The event lives in a module outside the watched files: both versions see it.
    shared = tmp_path / "shared"
    shared.mkdir()
    write(shared / "gate.py", "import threading\n\nOPEN = threading.Event()\n")
    work = tmp_path / "work"
    work.mkdir()
    slow = """
        import sys

        from gate import OPEN
        from mcplite import Tools

        tools = Tools()


        @tools.tool(promise_after=float("inf"))
        def slow() -> str:
            print("slow started", file=sys.stderr, flush=True)
            OPEN.wait(30)
            return "{version}"


        @tools.tool
        def release() -> str:
            OPEN.set()
            return "released"
        """
    write(work / "held.py", slow.replace("{version}", "old"))
    server = dev(work, "held", extra_path=shared)
    try:
        answers: list[dict[str, Any]] = []
        caller = threading.Thread(target=lambda: answers.append(server.call("slow")))
        caller.start()
        server.wait_for("^slow started$")
        write(work / "held.py", slow.replace("{version}", "new"))
        server.wait_for(RELOADED)
        assert text_of(server.call("release")) == "released"
        caller.join(PROCESS_WAIT)
        assert not caller.is_alive()
        assert [text_of(a) for a in answers] == ["old"]
        assert text_of(server.call("slow")) == "new"  # the gate is open now
    finally:
        server.kill()


def test_a_module_broken_at_start_serves_nothing_until_it_imports(tmp_path: Path) -> None:
    module = tmp_path / "later.py"
    write(module, TOOLS + "\nraise ValueError('not yet')\n")
    server = dev(tmp_path, "later")
    try:
        assert server.tool_count == 2  # redeem and cancel only
        assert "ValueError: not yet" in state(server)["error"]
        write(module, TOOLS)
        server.wait_for(RELOADED)
        assert names(server) == ["hello"]
    finally:
        server.kill()


def test_the_banner_says_where_and_how_to_connect(served: tuple[ServeProcess, Path]) -> None:
    server, _ = served
    origin = f"http://127.0.0.1:{server.http_port}"
    server.wait_for("reloading mytools when its files change")
    banner = "\n".join(server.lines)
    assert f"playground: {origin}/" in banner
    assert f"MCP:        {origin}/mcp" in banner
    stdio = f"{sys.executable} -m mcplite stdio mytools"
    assert f"stdio:      {stdio}" in banner
    assert f"npx @modelcontextprotocol/inspector {stdio}" in banner
    assert f"--transport http --server-url {origin}/mcp" in banner


def dev_refused(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``mcplite dev ARGS`` run in ``folder`` as one that does not start."""
    return subprocess.run(
        [sys.executable, "-m", "mcplite", "dev", *args],
        cwd=folder,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
    )


def test_a_module_that_does_not_exist_is_one_error(tmp_path: Path) -> None:
    done = dev_refused(tmp_path, "no_such_module_here")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "mcplite: error: cannot find module 'no_such_module_here' "
        "(is it on the path? run from its directory)"
    )


def test_a_watch_path_that_does_not_exist_is_one_error(tmp_path: Path) -> None:
    write(tmp_path / "mytools.py", TOOLS)
    done = dev_refused(tmp_path, "mytools", "--watch", "nowhere")
    assert done.returncode == 2
    assert "--watch nowhere: no such file or directory" in done.stderr


def test_the_playground_is_on_by_default_only_on_loopback() -> None:
    assert dev_config(Config(http=("127.0.0.1", 8080)), playground_given=False).playground
    assert dev_config(Config(http=("::1", 8080)), playground_given=False).playground
    assert not dev_config(Config(http=("0.0.0.0", 8080)), playground_given=False).playground
    asked = Config(http=("0.0.0.0", 8080), playground=True)
    assert dev_config(asked, playground_given=True).playground
