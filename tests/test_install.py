"""``python -m mcplite install HOST MODULE[:ATTR]``: a server added to an MCP host's file.

Every install is the real CLI in a subprocess, with ``HOME`` pointed at a temporary
directory (``XDG_CONFIG_HOME`` and ``APPDATA`` unset), its working directory a folder
holding a small tools module.  The entry it writes is then started as a host would
start it (its ``command``, ``args`` and ``env``, from another directory, so that its
``PYTHONPATH`` is what finds the module) and driven by the official ``mcp`` client.
Every subprocess and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import PROCESS_WAIT, host_env
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcplite.ops.hosts import HOSTS
from mcplite.ops.install import Entry, read_config, write_entry

WAIT = PROCESS_WAIT  # upper bound of every wait on a subprocess, in seconds
MODULE = "install_forecast"
MODULE_TEXT = '''
"""A tools module for the install tests."""

from mcplite import NEVER, Tools

tools = Tools()


@tools.tool(promise_after=NEVER)
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    return f"sunny in {city}"
'''
TYPED = {"vscode", "claude-code"}  # the hosts whose entries say "type": "stdio"


def user_file(home: Path, host: str) -> Path:
    """Where each host's user file is under ``home``, as the hosts' docs give it."""
    app = home / "Library" / "Application Support" if sys.platform == "darwin" else home / ".config"
    return {
        "claude-desktop": app / "Claude" / "claude_desktop_config.json",
        "cursor": home / ".cursor" / "mcp.json",
        "vscode": app / "Code" / "User" / "mcp.json",
        "claude-code": home / ".claude.json",
    }[host]


def servers_key(host: str) -> str:
    return "servers" if host == "vscode" else "mcpServers"


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """The folder the module is in, and where install runs."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(MODULE_TEXT)
    return folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def install(home: Path, cwd: Path, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """``python -m mcplite install ARGS`` with ``home`` as the user's home (and
    ``environ`` in its environment)."""
    unset = ("XDG_CONFIG_HOME", "APPDATA", "MCPLITE_SECRET")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(HOME=str(home), **environ)
    return subprocess.run(
        [sys.executable, "-m", "mcplite", "install", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=cwd,
        env=env,
    )


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.*.bak"))


async def tools_served_by(entry: dict[str, Any], cwd: Path, errlog: Path) -> dict[str, str]:
    """Start ``entry`` as a host does (the ``mcp`` client adds HOME, PATH and the like
    to its ``env``), list its tools and call each with ``city="Oslo"``."""
    env = host_env()
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env={**env, **entry["env"]}, cwd=cwd
    )
    answers: dict[str, str] = {}
    with errlog.open("w") as log:
        async with (
            asyncio.timeout(WAIT),
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for tool in (await session.list_tools()).tools:
                result = await session.call_tool(tool.name, {"city": "Oslo"})
                assert not result.is_error
                assert result.content[0].type == "text"
                answers[tool.name] = result.content[0].text
    return answers


@pytest.mark.parametrize("host", list(HOSTS))
async def test_install_merges_one_entry_once_and_the_entry_serves_the_module(
    host: str, code: Path, home: Path, tmp_path: Path
) -> None:
    path = user_file(home, host)
    key = servers_key(host)
    path.parent.mkdir(parents=True, exist_ok=True)
    other = {"command": "node", "args": ["server.js"], "env": {"TOKEN": "t"}}
    before = {"aSetting": {"keep": ["me"]}, key: {"other": other}, "zLast": 1}
    path.write_text(json.dumps(before, indent=4))
    path.chmod(0o640)
    original = path.read_bytes()

    first = install(home, code, host, MODULE)
    assert first.returncode == 0, first.stderr
    [backup] = backups(path)
    assert backup.read_bytes() == original
    assert f"Added server '{MODULE}' to {path} (backup: {backup})." in first.stdout
    assert HOSTS[host].reload in first.stdout
    text = path.read_text()
    document = json.loads(text)
    assert list(document) == ["aSetting", key, "zLast"]  # other keys kept, in their order
    assert document["aSetting"] == before["aSetting"] and document["zLast"] == 1
    assert list(document[key]) == ["other", MODULE]
    assert document[key]["other"] == other
    assert '\n    "aSetting"' in text  # the file's own indentation
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    entry = dict(document[key][MODULE])
    assert entry.pop("type", None) == ("stdio" if host in TYPED else None)
    assert list(entry) == ["command", "args", "env"]
    assert entry["command"] == os.path.abspath(sys.executable)  # the venv's, not resolved
    assert entry["args"] == ["-m", "mcplite", "stdio", MODULE]
    assert list(entry["env"]) == ["PYTHONPATH", "MCPLITE_SECRET"]
    assert entry["env"]["PYTHONPATH"] == str(code)
    assert len(entry["env"]["MCPLITE_SECRET"]) >= 40  # token_urlsafe(32)

    again = install(home, code, host, MODULE)
    assert again.returncode == 0, again.stderr
    assert f"Unchanged: {path} already has server '{MODULE}'" in again.stdout
    assert path.read_text() == text
    assert backups(path) == [backup]

    printed = install(home, code, host, MODULE, "--print")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == {key: {MODULE: document[key][MODULE]}}
    assert path.read_text() == text
    assert backups(path) == [backup]

    elsewhere = tmp_path / "elsewhere"  # not where the module is
    elsewhere.mkdir()
    served = await tools_served_by(document[key][MODULE], elsewhere, tmp_path / "server.log")
    assert served == {"forecast": "sunny in Oslo"}


def test_a_reinstall_that_changes_the_entry_keeps_its_secret_and_backs_up_again(
    code: Path, home: Path
) -> None:
    path = user_file(home, "claude-desktop")
    created = install(home, code, "claude-desktop", MODULE)
    assert created.returncode == 0, created.stderr
    assert f"Created {path} with server '{MODULE}'." in created.stdout  # and its folders
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the secret
    assert os.listdir(path.parent) == [path.name]  # nothing to back up
    secret = json.loads(path.read_text())["mcpServers"][MODULE]["env"]["MCPLITE_SECRET"]

    changed = install(
        home,
        code,
        "claude-desktop",
        MODULE,
        "--env",
        "REGION=eu",
        "--",
        "--max-concurrent-calls",
        "8",
    )
    assert changed.returncode == 0, changed.stderr
    assert f"Updated server '{MODULE}' in {path}" in changed.stdout
    entry = json.loads(path.read_text())["mcpServers"][MODULE]
    assert entry["args"] == ["-m", "mcplite", "stdio", MODULE, "--max-concurrent-calls", "8"]
    assert entry["env"] == {"PYTHONPATH": str(code), "MCPLITE_SECRET": secret, "REGION": "eu"}
    assert len(backups(path)) == 1

    given = install(home, code, "claude-desktop", MODULE, "--secret", "s3cret", "--name", "w")
    assert given.returncode == 0, given.stderr
    servers = json.loads(path.read_text())["mcpServers"]
    assert list(servers) == [MODULE, "w"]
    assert servers["w"]["env"]["MCPLITE_SECRET"] == "s3cret"
    assert servers["w"]["args"] == ["-m", "mcplite", "stdio", MODULE]
    assert len(backups(path)) == 2


REFUSED = {
    "JSON with comments": ("vscode", '{\n  // mine\n  "servers": {}\n}\n', "comments"),
    "a list": ("cursor", "[]", "it holds a list, not an object"),
    "servers that are not an object": (
        "claude-code",
        '{"mcpServers": ["x"], "numStartups": 3}',
        '"mcpServers" is a list, not an object',
    ),
}


@pytest.mark.parametrize("host, content, reason", REFUSED.values(), ids=list(REFUSED))
def test_a_file_that_is_not_a_json_object_of_servers_is_refused_and_left_untouched(
    host: str, content: str, reason: str, code: Path, home: Path
) -> None:
    path = user_file(home, host)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    done = install(home, code, host, MODULE)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"mcplite: error: {path} is not plain JSON")
    assert reason in line
    assert line.endswith("nothing was written")
    assert path.read_text() == content
    assert os.listdir(path.parent) == [path.name]  # no backup, no temporary file


def test_print_shows_the_entry_for_a_file_it_could_not_merge_into(code: Path, home: Path) -> None:
    path = user_file(home, "vscode")
    path.parent.mkdir(parents=True)
    path.write_text('{\n  // mine\n  "servers": {}\n}\n')
    done = install(home, code, "vscode", MODULE, "--print")
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["servers"][MODULE]
    assert entry["type"] == "stdio" and entry["env"]["PYTHONPATH"] == str(code)
    assert "the secret below is a new one" in done.stderr
    assert os.listdir(path.parent) == [path.name]


def test_an_entry_that_would_not_start_is_refused_and_nothing_is_written(
    code: Path, home: Path, tmp_path: Path
) -> None:
    path = user_file(home, "claude-code")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    missing = install(home, code, "claude-code", MODULE, "--pythonpath", str(elsewhere))
    assert missing.returncode == 1
    [line] = missing.stderr.splitlines()
    assert f"PYTHONPATH={elsewhere}" in line
    assert f"No module named '{MODULE}'" in line

    refused = install(home, code, "claude-code", MODULE, "--", "--no-such-option")
    assert refused.returncode == 1
    [line] = refused.stderr.splitlines()
    assert "unrecognized arguments: --no-such-option" in line

    # A host passes on HOME, PATH and a few more, not the shell's other variables.
    (code / "needs_region.py").write_text('import os\nREGION = os.environ["REGION"]\n')
    shell_only = install(home, code, "claude-code", "needs_region", REGION="eu")
    assert shell_only.returncode == 1
    [line] = shell_only.stderr.splitlines()
    assert "importing 'needs_region' failed: KeyError: 'REGION'" in line
    assert not path.exists()


def test_project_installs_write_the_hosts_project_file(code: Path, home: Path) -> None:
    project = code
    for host, relative in [
        ("cursor", ".cursor/mcp.json"),
        ("vscode", ".vscode/mcp.json"),
        ("claude-code", ".mcp.json"),
    ]:
        done = install(home, code, "--project", str(project), host, MODULE)
        assert done.returncode == 0, done.stderr
        path = project / relative
        assert f"Created {path} with server '{MODULE}'." in done.stdout
        assert "keep it out of version control" in done.stdout
        assert MODULE in json.loads(path.read_text())[servers_key(host)]
    assert not list(home.iterdir())  # no user file was touched

    desktop = install(home, code, "claude-desktop", MODULE, "--project", str(project))
    assert desktop.returncode == 1
    assert (
        desktop.stderr
        == "mcplite: error: claude-desktop has no project file: leave out --project\n"
    )


async def test_claude_codes_local_scope_is_the_projects_entry_in_its_user_file(
    code: Path, home: Path, tmp_path: Path
) -> None:
    """``--local DIR``: the entry goes in ``~/.claude.json``, under ``projects`` at the
    project's real path (as Claude Code keys it: symlinks resolved), beside that
    project's other settings; the rest of the file, other projects and the user
    scope's servers stay as they were, in their places.  It serves the module, and a
    re-install keeps its secret."""
    project = tmp_path / "project"
    project.mkdir()
    link = tmp_path / "link"
    link.symlink_to(project)
    path = user_file(home, "claude-code")
    before: dict[str, Any] = {
        "numStartups": 3,
        "projects": {
            "/elsewhere": {"mcpServers": {"theirs": {"command": "x", "args": []}}},
            str(project): {"allowedTools": ["Bash"], "hasTrustDialogAccepted": True},
        },
        "mcpServers": {"everywhere": {"command": "y", "args": []}},
    }
    path.write_text(json.dumps(before, indent=2))

    done = install(home, code, "claude-code", MODULE, "--local", str(link))
    assert done.returncode == 0, done.stderr
    assert f"Added server '{MODULE}' to {path} (for the project {project})" in done.stdout
    after = json.loads(path.read_text())
    assert list(after) == ["numStartups", "projects", "mcpServers"]
    assert after["mcpServers"] == before["mcpServers"]  # the user scope: untouched
    projects = after["projects"]
    assert list(projects) == ["/elsewhere", str(project)]
    assert projects["/elsewhere"] == before["projects"]["/elsewhere"]
    mine = projects[str(project)]
    assert list(mine) == ["allowedTools", "hasTrustDialogAccepted", "mcpServers"]
    assert mine["allowedTools"] == ["Bash"]
    entry = mine["mcpServers"][MODULE]
    assert entry["type"] == "stdio"
    served = await tools_served_by(entry, tmp_path, tmp_path / "stderr.log")
    assert served == {"forecast": "sunny in Oslo"}

    again = install(home, code, "claude-code", MODULE, "--local", str(project), "--env", "A=1")
    assert again.returncode == 0, again.stderr
    renewed = json.loads(path.read_text())["projects"][str(project)]["mcpServers"][MODULE]
    assert renewed["env"]["MCPLITE_SECRET"] == entry["env"]["MCPLITE_SECRET"]
    assert renewed["env"]["A"] == "1"

    shown = install(home, code, "claude-code", MODULE, "--local", str(project), "--print")
    assert shown.returncode == 0, shown.stderr
    assert list(json.loads(shown.stdout)["projects"][str(project)]["mcpServers"]) == [MODULE]


LOCAL_REFUSED = {
    "another host": (["cursor", MODULE, "--local", "."], "cursor has no local scope"),
    "with --project": (
        ["claude-code", MODULE, "--local", ".", "--project", "."],
        "--project and --local name two places: give one",
    ),
    "no such directory": (["claude-code", MODULE, "--local", "gone"], "--local gone: no such"),
    "a project that is not an object": (
        ["claude-code", MODULE, "--local", "."],
        '("CODE" of "projects" is a list, not an object)',
    ),
}


@pytest.mark.parametrize("args, reason", LOCAL_REFUSED.values(), ids=list(LOCAL_REFUSED))
def test_a_local_install_that_cannot_be_made_says_why_and_writes_nothing(
    args: list[str], reason: str, code: Path, home: Path
) -> None:
    path = user_file(home, "claude-code")
    content = json.dumps({"projects": {str(code.resolve()): []}})
    path.write_text(content)
    done = install(home, code, *args)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert reason.replace("CODE", str(code.resolve())) in line
    assert path.read_text() == content
    assert os.listdir(home) == [path.name]


def test_a_symlinked_file_is_written_through_and_stays_a_symlink(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "mcp.json"
    target.write_text('{"mcpServers": {}}')
    link = tmp_path / "mcp.json"
    link.symlink_to(target)
    entry: Entry = {"command": "/venv/bin/python", "args": ["-m", "mcplite"], "env": {}}
    keys = ("mcpServers",)
    what, backup = write_entry(read_config(link, keys), keys, "w", entry)
    assert what == "added"
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text()) == {"mcpServers": {"w": entry}}
    assert backup is not None and backup.parent == dotfiles
    assert backup.read_text() == '{"mcpServers": {}}'


def test_an_unknown_host_is_a_usage_error(code: Path, home: Path) -> None:
    done = install(home, code, "emacs", MODULE)
    assert done.returncode == 2
    assert "argument host: invalid choice: 'emacs'" in done.stderr
    assert not list(home.iterdir())


@pytest.mark.parametrize(
    "host, platform, environ, expected",
    [
        ("claude-desktop", "darwin", {"HOME": "/h"}, "/h/Library/Application Support/Claude"),
        ("claude-desktop", "linux", {"HOME": "/h", "XDG_CONFIG_HOME": "/x"}, "/x/Claude"),
        ("claude-desktop", "linux", {"HOME": "/h", "XDG_CONFIG_HOME": "rel"}, "/h/.config/Claude"),
        ("vscode", "darwin", {"HOME": "/h"}, "/h/Library/Application Support/Code/User"),
        ("vscode", "linux", {"HOME": "/h", "XDG_CONFIG_HOME": "/x"}, "/x/Code/User"),
        ("cursor", "linux", {"HOME": "/h", "XDG_CONFIG_HOME": "/x"}, "/h/.cursor"),
        ("claude-code", "darwin", {"HOME": "/h"}, "/h"),
    ],
)
def test_each_hosts_user_file_follows_the_platform_and_environment(
    host: str, platform: str, environ: dict[str, str], expected: str
) -> None:
    assert HOSTS[host].user_file(environ, platform).parent == Path(expected)
