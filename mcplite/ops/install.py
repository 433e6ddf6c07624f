"""``mcplite install HOST MODULE[:ATTR]``: add a server to an MCP host's config.

The entry runs ``python -m mcplite stdio MODULE[:ATTR]`` with this very Python (the
venv's, symlinks kept), ``PYTHONPATH`` set to where the module is, and a promise
secret.  Before anything is written, the entry is tried as a host would start it:
its Python imports the module with the entry's ``env`` (and the few variables hosts
pass on: ``HOME``, ``PATH``...), in an empty directory.

The file is merged, not rewritten: other servers and other top-level keys stay as
they are, in their order.  A change is written atomically (a temporary file, then
``os.replace``) with the file's mode kept, after a timestamped copy of the previous
file; a run that changes nothing writes nothing.  A file that is not plain JSON
(comments included) is refused, untouched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from .hosts import HOSTS, Host
from .loading import DEFAULT_ATTR

__all__ = ["Entry", "register", "run"]

#: Upper bound of the try of the entry (importing the user's module), in seconds.
CHECK_TIMEOUT = 30.0
#: The mode of a file created here: the entry holds a secret.
NEW_FILE_MODE = 0o600
#: The secret's variable, read by ``mcplite stdio`` (mcplite.core.config.resolve_secret).
SECRET_VAR = "MCPLITE_SECRET"
#: Server names: hosts make tool names of them (Claude's ``mcp__NAME__TOOL``), and the
#: model APIs take only letters, digits, ``_`` and ``-`` in a tool name.
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What a host built on an official MCP SDK passes on of its own environment, besides
#: an entry's "env" (DEFAULT_INHERITED_ENV_VARS in the Python SDK's mcp/client/stdio.py,
#: getDefaultEnvironment in the TypeScript SDK's): the try of an entry gets no more.
INHERITED_ENV = (
    (
        "APPDATA",
        "HOMEDRIVE",
        "HOMEPATH",
        "LOCALAPPDATA",
        "PATH",
        "PATHEXT",
        "PROCESSOR_ARCHITECTURE",
        "SYSTEMDRIVE",
        "SYSTEMROOT",
        "TEMP",
        "USERNAME",
        "USERPROFILE",
    )
    if sys.platform == "win32"
    else ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
)
#: How argparse begins an error line ("mcplite stdio: error: "), left out of ours.
ARGPARSE_PREFIX = re.compile(r"^mcplite(?: \w+)?: error: ")

#: Run by the entry's Python, with the environment a host gives it, in an empty directory:
#: what ``mcplite stdio`` does before it serves.  On failure, the last line of stderr
#: says why and the status which step failed (CHECK_FAILURES); on success, the last
#: line of stdout is the mcplite package it imported.
CHECK = """\
import sys

def fail(status, reason):
    print(reason, file=sys.stderr)
    sys.exit(status)

try:
    import mcplite
    from mcplite.ops.cli import build_parser, config_from_args
    from mcplite.ops.loading import load_served
    from mcplite.ops.serve import ServeError
except ImportError as exc:
    fail(4, exc)
try:
    args = build_parser().parse_args(["stdio", *sys.argv[1:]])
    config_from_args(args)
except SystemExit as exc:
    fail(2, "" if exc.code else "they make it exit at once")
except ValueError as exc:
    fail(2, exc)
try:
    load_served(args.target)
except ServeError as exc:
    fail(3, exc)
print(mcplite.__file__)
"""
#: What each status of CHECK means, for ``str.format(reason=..., pythonpath=...)``.
CHECK_FAILURES = {
    2: "mcplite stdio refuses the options after `--`: {reason}",
    3: "the server would not start with PYTHONPATH={pythonpath}: {reason} "
    "(--pythonpath DIR says where the module is)",
    4: "this Python cannot import mcplite with PYTHONPATH={pythonpath}: {reason} "
    "(--pythonpath DIR can add the directory that holds it)",
}


class InstallError(Exception):
    """One line for the user; nothing was written."""


class Entry(TypedDict):
    """A stdio server as the hosts list it."""

    type: NotRequired[str]
    command: str
    args: list[str]
    env: dict[str, str]


@dataclass(frozen=True, slots=True)
class HostFile:
    """A host's config file as read: its bytes and mode, and what it holds."""

    path: Path  # the file to replace (a symlink's target)
    raw: bytes | None  # None: no file yet
    mode: int
    document: dict[str, Any]


#: What installing did to the file.
Outcome = Literal["created", "added", "updated", "unchanged"]


USAGE = "mcplite install [options] HOST MODULE[:ATTR] [options] [-- STDIO_OPTION ...]"
DESCRIPTION = (
    "Add MODULE[:ATTR] to HOST's MCP config as a stdio server run by this Python. "
    f"HOST is one of: {', '.join(HOSTS)}. The file is merged (other entries kept), "
    "backed up first as FILE.YYYYmmdd-HHMMSS.bak, and left alone when nothing changes. "
    "Options of `mcplite stdio` for the server go last, after `--`. "
    "Example: mcplite install claude-desktop weather -- --max-concurrent-calls 8"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``install`` command to the CLI."""
    sub = subparsers.add_parser(
        "install", help="add a server to an MCP host's config", usage=USAGE, description=DESCRIPTION
    )
    sub.add_argument("host", choices=HOSTS, help="the MCP host")
    # nargs=PARSER: MODULE[:ATTR] and every word after it, `--` included, for
    # _split_target.  A '*' positional for the stdio options would be filled (empty)
    # at MODULE already, leaving `--name N -- --opt` after it unparsed.
    sub.add_argument(
        "target",
        nargs=argparse.PARSER,
        metavar="MODULE[:ATTR]",
        help="where the Tools registry lives; then install's options, and after `--` "
        "the options of `mcplite stdio` for the server",
    )
    _add_options(sub)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", help="the server's name in the config (default: the module's)")
    parser.add_argument(
        "--pythonpath",
        action="append",
        metavar="DIR",
        help="where the module is imported from, set as the server's PYTHONPATH; "
        "repeatable (default: the current directory)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable for the server; repeatable",
    )
    parser.add_argument(
        "--secret",
        help=f"the promise secret ({SECRET_VAR}) (default: the entry's, on a re-install; "
        "else a new random one)",
    )
    parser.add_argument(
        "--project",
        metavar="DIR",
        help="write the project's file in DIR (cursor: .cursor/mcp.json, vscode: "
        ".vscode/mcp.json, claude-code: .mcp.json) instead of the user's",
    )
    parser.add_argument(
        "--local",
        metavar="DIR",
        help="claude-code: its local scope, the entry in ~/.claude.json for the project "
        "in DIR alone (yours only, not shared as .mcp.json is)",
    )
    parser.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="print the entry as it would be merged, and write nothing",
    )


def _split_target(args: argparse.Namespace) -> None:
    """``args.target`` is MODULE[:ATTR] and what followed it: install's options,
    parsed here into ``args``, then ``--`` and the stdio options."""
    target, *rest = args.target
    stdio_options: list[str] = []
    if "--" in rest:
        cut = rest.index("--")
        rest, stdio_options = rest[:cut], rest[cut + 1 :]
    args.target = target
    args.stdio_options = stdio_options
    options = argparse.ArgumentParser(prog="mcplite install", usage=USAGE, description=DESCRIPTION)
    _add_options(options)
    options.parse_args(rest, namespace=args)


def run(args: argparse.Namespace) -> int:
    """Run ``install``: the exit status (1: refused, nothing written).  A usage error
    exits 2 from argparse."""
    _split_target(args)
    try:
        return _install(args)
    except InstallError as exc:
        print(f"mcplite: error: {exc}", file=sys.stderr)
        return 1


def _install(args: argparse.Namespace) -> int:
    host = HOSTS[args.host]
    path, keys = _config_place(host, args.project, args.local)
    name = args.name if args.name is not None else default_name(args.target)
    if not NAME.fullmatch(name):
        raise InstallError(
            f"server name {name!r}: use 1 to 64 letters, digits, '_' or '-' (--name NAME)"
        )
    pythonpath = _pythonpath(args.pythonpath)
    extra_env = _extra_env(args.env)
    try:
        config: HostFile | None = read_config(path, keys)
    except InstallError as exc:
        if not args.print_only:
            advice = "fix it, or add the entry by hand (--print shows it); nothing was written"
            raise InstallError(f"{exc}; {advice}") from None
        print(f"mcplite: note: {exc}; the secret below is a new one", file=sys.stderr)
        config = None
    kept = _kept_secret(config, keys, name) if config is not None else None
    secret = args.secret or kept or secrets.token_urlsafe(32)
    entry = build_entry(host, args.target, args.stdio_options, pythonpath, secret, extra_env)
    check_entry(entry, args.target, args.stdio_options)
    if args.print_only:
        print(json.dumps(_merged({}, keys, name, entry), indent=2, ensure_ascii=False))
        return 0
    assert config is not None
    what, backup = write_entry(config, keys, name, entry)
    where = f"{path} (for the project {keys[1]})" if args.local is not None else str(path)
    _report(host, where, name, what, backup, args.project)
    return 0


def default_name(target: str) -> str:
    """``pkg.weather`` -> ``weather``; ``pkg.weather:alerts`` -> ``weather-alerts``."""
    module, _, attr = target.partition(":")
    last = module.rpartition(".")[2]
    return f"{last}-{attr}" if attr and attr != DEFAULT_ATTR else last


#: Where the servers are in a host's file: the keys from the top, one per level.
Keys = tuple[str, ...]


def _config_place(host: Host, project: str | None, local: str | None) -> tuple[Path, Keys]:
    """The file to write, and where in it the servers are."""
    if project is not None and local is not None:
        raise InstallError("--project and --local name two places: give one")
    if local is not None:
        if host.projects_key is None:
            raise InstallError(f"{host.name} has no local scope: leave out --local")
        # The path the host runs in: symlinks resolved, as a process's working directory is.
        root = os.path.realpath(local)
        if not os.path.isdir(root):
            raise InstallError(f"--local {local}: no such directory")
        path = host.user_file(os.environ, sys.platform)
        return path, (host.projects_key, root, host.servers_key)
    if project is None:
        return host.user_file(os.environ, sys.platform), (host.servers_key,)
    if host.project_file is None:
        raise InstallError(f"{host.name} has no project file: leave out --project")
    root_dir = Path(os.path.abspath(project))
    if not root_dir.is_dir():
        raise InstallError(f"--project {project}: no such directory")
    return root_dir / host.project_file, (host.servers_key,)


def _pythonpath(given: list[str] | None) -> list[str]:
    dirs = [os.path.abspath(d) for d in given or [os.curdir]]
    for d in dirs:
        if not os.path.isdir(d):
            raise InstallError(f"--pythonpath {d}: no such directory")
    return dirs


def _extra_env(given: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not ENV_KEY.fullmatch(key):
            raise InstallError(f"--env {item!r}: expected KEY=VALUE")
        if key in ("PYTHONPATH", SECRET_VAR):
            option = "--pythonpath DIR" if key == "PYTHONPATH" else "--secret SECRET"
            raise InstallError(f"--env {key}=...: use {option}")
        env[key] = value
    return env


def build_entry(
    host: Host,
    target: str,
    stdio_options: list[str],
    pythonpath: list[str],
    secret: str,
    extra_env: dict[str, str],
) -> Entry:
    """The entry that starts ``mcplite stdio`` on ``target`` with this Python."""
    # abspath, not resolve(): a venv's python is a symlink, and it is the venv's
    # path that makes the venv's packages importable.
    command = os.path.abspath(sys.executable)
    args = ["-m", "mcplite", "stdio", target, *stdio_options]
    env = {"PYTHONPATH": os.pathsep.join(pythonpath), SECRET_VAR: secret, **extra_env}
    if host.typed:
        return {"type": "stdio", "command": command, "args": args, "env": env}
    return {"command": command, "args": args, "env": env}


def check_entry(entry: Entry, target: str, stdio_options: list[str]) -> None:
    """Raise InstallError unless the entry's Python, with the environment a host
    gives it and in an empty directory, imports mcplite and ``target`` and takes
    the options."""
    if target.endswith(".py"):
        raise InstallError(f"{target}: name a module (as for import), not a file")
    env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    env.update(entry["env"])
    # -P: no directory of ours on sys.path, only PYTHONPATH's (and mcplite's cwd, empty).
    command = [entry["command"], "-P", "-c", CHECK, target, *stdio_options]
    with tempfile.TemporaryDirectory(prefix="mcplite-install-") as empty:
        try:
            done = subprocess.run(
                command, env=env, cwd=empty, capture_output=True, text=True, timeout=CHECK_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            raise InstallError(
                f"importing {target} took over {CHECK_TIMEOUT:g} s; nothing was written"
            ) from None
        except OSError as exc:
            raise InstallError(f"cannot run {entry['command']}: {exc.strerror}") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        reason = ARGPARSE_PREFIX.sub("", lines[-1]) if lines else f"status {done.returncode}"
        failure = CHECK_FAILURES.get(done.returncode, "the server would not start: {reason}")
        message = failure.format(reason=reason, pythonpath=entry["env"]["PYTHONPATH"])
        raise InstallError(f"{message}; nothing was written")
    _note_other_mcplite(done.stdout)


def _note_other_mcplite(stdout: str) -> None:
    """Say so when the entry's Python imports another copy of mcplite than this one."""
    lines = stdout.splitlines()
    if not lines:
        return
    theirs = os.path.realpath(os.path.dirname(lines[-1]))
    ours = os.path.realpath(Path(__file__).resolve().parents[1])
    if theirs != ours:
        print(
            f"mcplite: note: the server will import mcplite from {theirs}, not from {ours}; "
            "--pythonpath DIR adds the directory that holds the one you want",
            file=sys.stderr,
        )


def read_config(path: Path, keys: Keys) -> HostFile:
    """The host's file as it is; raises InstallError when it is not a JSON object
    in which each level of ``keys`` that is present is an object."""
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        raw = target.read_bytes()
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        return HostFile(target, None, NEW_FILE_MODE, {})
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc.strerror}") from None
    refusal = f"{path} is not plain JSON mcplite can merge into"
    try:
        text = raw.decode("utf-8-sig")
        document = json.loads(text) if text.strip() else {}
    except UnicodeDecodeError:
        raise InstallError(f"{refusal} (not UTF-8)") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}: {exc.msg}"
        raise InstallError(
            f"{refusal} ({where}; comments and trailing commas are not supported)"
        ) from None
    if not isinstance(document, dict):
        raise InstallError(f"{refusal} (it holds a {_kind(document)}, not an object)")
    level: Any = document
    for depth, key in enumerate(keys):
        level = level.get(key, {})
        if not isinstance(level, dict):
            where = " of ".join(f'"{k}"' for k in reversed(keys[: depth + 1]))
            raise InstallError(f"{refusal} ({where} is a {_kind(level)}, not an object)")
    return HostFile(target, raw, mode, document)


def _servers(document: dict[str, Any], keys: Keys) -> dict[str, Any]:
    """The servers at ``keys`` (checked by :func:`read_config`); none: empty."""
    level = document
    for key in keys:
        level = level.get(key, {})
    return level


def _merged(document: dict[str, Any], keys: Keys, name: str, entry: Entry) -> dict[str, Any]:
    """``document`` with ``entry`` under ``name`` at ``keys``, every other key kept in
    its place (an existing name too)."""
    key, inner = keys[0], document.get(keys[0], {})
    if len(keys) == 1:
        return {**document, key: {**inner, name: entry}}
    return {**document, key: _merged(inner, keys[1:], name, entry)}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return kinds.get(type(value), type(value).__name__)


def _kept_secret(config: HostFile, keys: Keys, name: str) -> str | None:
    """The secret of the entry already installed under ``name``, if it has one."""
    old = _servers(config.document, keys).get(name)
    env = old.get("env") if isinstance(old, dict) else None
    secret = env.get(SECRET_VAR) if isinstance(env, dict) else None
    return secret if isinstance(secret, str) and secret else None


def write_entry(
    config: HostFile, keys: Keys, name: str, entry: Entry
) -> tuple[Outcome, Path | None]:
    """Merge ``entry`` into the file under ``name`` at ``keys``: ``created``,
    ``added``, ``updated`` or ``unchanged``, and the backup of the previous file
    when there was one."""
    what: Outcome = "updated" if name in _servers(config.document, keys) else "added"
    document = _merged(config.document, keys, name, entry)
    if config.raw is not None and document == config.document:
        return "unchanged", None
    indent = _indent(config.raw.decode("utf-8-sig") if config.raw is not None else "")
    text = json.dumps(document, indent=indent, ensure_ascii=False) + "\n"
    try:
        if config.raw is None:
            config.path.parent.mkdir(parents=True, exist_ok=True)
            _replace(config.path, text, config.mode)
            return "created", None
        backup = _backup(config.path, config.raw, config.mode)
        _replace(config.path, text, config.mode)
    except OSError as exc:
        raise InstallError(f"cannot write {config.path}: {exc.strerror or exc}") from None
    return what, backup


def _indent(text: str) -> str | int:
    """The file's own indentation (that of its first indented line), else 2 spaces."""
    for line in text.splitlines():
        body = line.lstrip(" \t")
        if body and len(body) < len(line):
            lead = line[: len(line) - len(body)]
            return "\t" if lead.startswith("\t") else len(lead)
    return 2


def _backup(path: Path, raw: bytes, mode: int) -> Path:
    """A copy of the file as it was read, beside it, never over an earlier one; its
    mode no wider than the file's."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(100):
        suffix = f".{stamp}.bak" if n == 0 else f".{stamp}-{n}.bak"
        backup = path.with_name(path.name + suffix)
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o777)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        return backup
    raise InstallError(f"cannot find a free name for a backup of {path}")


def _replace(path: Path, text: str, mode: int) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, then rename."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _report(
    host: Host, path: str, name: str, what: Outcome, backup: Path | None, project: str | None
) -> None:
    if what == "unchanged":
        print(f"Unchanged: {path} already has server '{name}' as given; nothing written.")
    elif what == "created":
        print(f"Created {path} with server '{name}'.")
    else:
        where = "to" if what == "added" else "in"
        print(f"{what.capitalize()} server '{name}' {where} {path} (backup: {backup}).")
    if project is not None and what != "unchanged":
        print(f"{path} holds this machine's paths and a secret: keep it out of version control.")
    print(f"{host.title}: {host.reload}.")
