"""Where each MCP host keeps the stdio servers it starts: the file, the key, the entry.

One row per host in :data:`HOSTS`, each fact with the page it comes from.  Paths
are computed from the environment and platform given (``HOME``, ``USERPROFILE``,
``XDG_CONFIG_HOME``, ``APPDATA``), never cached, so that a test can point them at
a temporary directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HOSTS", "Host", "app_data", "home"]


def home(environ: Mapping[str, str], platform: str) -> Path:
    """The user's home directory: ``%USERPROFILE%`` on Windows, ``$HOME`` elsewhere."""
    value = environ.get("USERPROFILE" if platform == "win32" else "HOME")
    return Path(value) if value else Path.home()


def app_data(environ: Mapping[str, str], platform: str) -> Path:
    """The per-user application folder an Electron app (Claude Desktop, VS Code) keeps
    its settings in: ``%APPDATA%`` on Windows, ``~/Library/Application Support`` on
    macOS, ``$XDG_CONFIG_HOME`` or ``~/.config`` elsewhere.  This is VS Code's own
    rule (microsoft/vscode, src/vs/platform/environment/node/userDataPath.js)."""
    if platform == "win32":
        appdata = environ.get("APPDATA")
        return Path(appdata) if appdata else home(environ, platform) / "AppData" / "Roaming"
    if platform == "darwin":
        return home(environ, platform) / "Library" / "Application Support"
    xdg = environ.get("XDG_CONFIG_HOME", "")
    # The XDG Base Directory spec: a relative path in the variable is invalid, ignored.
    return Path(xdg) if xdg.startswith("/") else home(environ, platform) / ".config"


#: Where a host's user-scope file is, from the environment and the platform.
UserFile = Callable[[Mapping[str, str], str], Path]


@dataclass(frozen=True, slots=True)
class Host:
    """An MCP host that starts stdio servers listed in a JSON file."""

    name: str  #: on the command line
    title: str  #: as people call it
    servers_key: str  #: the top-level object of the file holding the servers by name
    typed: bool  #: whether an entry says ``"type": "stdio"``
    user_file: UserFile  #: the file every project of this user sees
    project_file: str | None  #: relative to a project's root, when the host reads one
    reload: str  #: how the host comes to start the new server
    #: The top-level object of the user file holding each project's own settings by
    #: the project's path, servers among them, when the host has such a scope.
    projects_key: str | None = None


HOSTS: dict[str, Host] = {
    host.name: host
    for host in (
        # https://modelcontextprotocol.io/quickstart/user: claude_desktop_config.json,
        # "mcpServers" of {command, args, env}, in ~/Library/Application Support/Claude
        # on macOS and %APPDATA%\Claude on Windows; restart the app to load it.  There is
        # no official Linux build; the Linux builds people run read $XDG_CONFIG_HOME/Claude
        # (~/.config/Claude), as fastmcp's `install claude-desktop` assumes too.
        Host(
            name="claude-desktop",
            title="Claude Desktop",
            servers_key="mcpServers",
            typed=False,
            user_file=lambda env, p: app_data(env, p) / "Claude" / "claude_desktop_config.json",
            project_file=None,
            reload="quit Claude Desktop completely (closing its window is not enough) "
            "and start it again",
        ),
        # https://cursor.com/docs/mcp ("Configuration locations"): ~/.cursor/mcp.json for
        # every project, .cursor/mcp.json in a project; "mcpServers" of {command, args,
        # env}; the transport follows from `command` (stdio) or `url`.
        Host(
            name="cursor",
            title="Cursor",
            servers_key="mcpServers",
            typed=False,
            user_file=lambda env, p: home(env, p) / ".cursor" / "mcp.json",
            project_file=".cursor/mcp.json",
            reload="restart Cursor, then check that the server is enabled in its MCP settings",
        ),
        # https://code.visualstudio.com/docs/copilot/reference/mcp-configuration: mcp.json
        # in the workspace (.vscode/mcp.json) or in the user profile; "servers" of {type:
        # "stdio", command, args, env}.  The default profile's folder is <app data>/Code/User
        # (userDataPath.js, above): ~/.config/Code/User on Linux.
        Host(
            name="vscode",
            title="VS Code",
            servers_key="servers",
            typed=True,
            user_file=lambda env, p: app_data(env, p) / "Code" / "User" / "mcp.json",
            project_file=".vscode/mcp.json",
            reload="run 'MCP: List Servers' from the Command Palette and start it there",
        ),
        # https://code.claude.com/docs/en/mcp ("MCP installation scopes"): the user scope is
        # the top-level "mcpServers" of ~/.claude.json, the project scope .mcp.json at the
        # project's root, whose servers Claude Code asks to approve on first use, and the
        # local scope (`claude mcp add`'s default: yours, in one project) the "mcpServers"
        # of that project's object in the "projects" of ~/.claude.json, keyed by its
        # absolute path.  `claude mcp add` writes {type: "stdio", command, args, env}.
        Host(
            name="claude-code",
            title="Claude Code",
            servers_key="mcpServers",
            typed=True,
            user_file=lambda env, p: home(env, p) / ".claude.json",
            project_file=".mcp.json",
            reload="start a new Claude Code session; /mcp lists its servers",
            projects_key="projects",
        ),
    )
}
