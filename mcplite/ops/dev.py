"""``mcplite dev MODULE[:ATTR]``: serve a module while it is being written.

It serves as ``mcplite serve`` does (loopback by default), with debug logging,
tool errors shown to the caller and the playground page on, and watches the
module's files (a package: every ``.py`` file under it) and any ``--watch``
path.  On a change it imports the module again and serves what it holds now,
in the same process on the same ports: the served registries stay, their
contents are replaced (MCP clients listening hear ``list_changed``), and calls
already running finish on the code they started with.  A module that does not
import keeps the last good one serving; the error is logged with its traceback
and shown on the playground until a change fixes it.

Watching polls the files' modification times (no dependency); a burst of
saves is taken as one change once the files have been still for a moment.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import os
import secrets
import shlex
import sys
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from .._version import __version__
from ..bindings.base import loop_name
from ..bindings.http.site import HttpSite
from ..core.config import Config, is_loopback
from ..core.prompts import Prompts
from ..core.resources import Resources
from ..core.tools import Tools
from .loading import Served, load_served
from .serve import ServeError, Server, serve

__all__ = ["POLL", "Reloader", "banner", "dev_config", "run_dev", "snapshot", "watched_roots"]

log = logging.getLogger("mcplite.dev")

#: Seconds between two looks at the watched files.
POLL = 0.3
#: Files changed, seconds they must stay still before the module is imported again.
SETTLE = 0.1
#: Directories never walked for files to watch.
_SKIP = {"__pycache__", ".git", ".venv", "venv", "node_modules", ".mypy_cache", ".ruff_cache"}


def dev_config(config: Config, playground_given: bool) -> Config:
    """``config`` as ``mcplite dev`` serves it: the playground on when HTTP is
    bound to loopback (never by default on another address), and a tool's
    exception shown to its caller, and a random promise secret when none is given."""
    updates: dict[str, Any] = {"show_tool_errors": True}
    if config.secret is None and not os.environ.get("MCPLITE_SECRET"):
        # Tokens need only outlive a reload, which keeps the process: no warning.
        updates["secret"] = secrets.token_bytes(32)
    if not playground_given and config.http is not None and is_loopback(config.http[0]):
        updates["playground"] = True
    return replace(config, **updates)


def watched_roots(target: str, extra: Iterable[str] = ()) -> list[Path]:
    """The files and directories whose change reloads ``MODULE[:ATTR]``: the
    module's file (a package: its directories) and ``extra``; raises
    :class:`ServeError` when the module cannot be found."""
    name = target.partition(":")[0]
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # a parent package that does not import
        raise ServeError(f"cannot find module '{name}': {exc}") from None
    if spec is None:
        raise ServeError(f"cannot find module '{name}' (is it on the path? run from its directory)")
    roots: list[Path] = []
    if spec.submodule_search_locations:
        roots += [Path(p).resolve() for p in spec.submodule_search_locations]
    elif spec.origin and spec.has_location:
        roots.append(Path(spec.origin).resolve())
    else:
        raise ServeError(f"module '{name}' has no file to watch")
    for path in extra:
        if not os.path.exists(path):
            raise ServeError(f"--watch {path}: no such file or directory")
        roots.append(Path(path).resolve())
    return roots


def _files(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
            continue
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d not in _SKIP and not d.startswith(".")]
            for file in names:
                yield Path(folder, file)


def snapshot(roots: Iterable[Path], python_only: bool) -> dict[Path, tuple[int, int]]:
    """Each watched file's modification time and size (a file gone is left out)."""
    out: dict[Path, tuple[int, int]] = {}
    for path in _files(roots):
        if python_only and path.suffix != ".py":
            continue
        try:
            st = path.stat()
        except OSError:
            continue
        out[path] = (st.st_mtime_ns, st.st_size)
    return out


@dataclass(slots=True)
class Reloader:
    """What ``mcplite dev`` serves, kept in registries of its own whose contents
    each good import of ``target`` replaces."""

    target: str
    roots: list[Path]
    extra: list[Path]
    tools: Tools
    prompts: Prompts
    resources: Resources
    #: The last import's error (its traceback), or None.
    error: str | None = None
    sites: tuple[HttpSite, ...] = ()
    #: The watched files as they were just before the last import.
    seen: dict[Path, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def create(cls, target: str, watch: Iterable[str] = ()) -> Reloader:
        roots = watched_roots(target)
        extra = watched_roots(target, watch)[len(roots) :]
        return cls(target, roots, extra, Tools(), Prompts(), Resources())

    def load(self) -> Served | None:
        """Import ``target`` afresh (any thread): what it holds, or None when it
        does not import; then :attr:`error` says why and the modules it replaced
        are put back, so that the last good version keeps its imports."""
        purged = self._purge()
        try:
            served = _import(self.target)
        except (Exception, SystemExit) as exc:  # the module's own error, whatever it is
            for name in [n for n in sys.modules if self._ours(sys.modules[n])]:
                del sys.modules[name]
            sys.modules.update(purged)
            self.error = _describe(exc)
            return None
        self.error = None
        return served

    def serve(self, served: Served | None) -> None:
        """Serve what an import gave (on the loop's thread: the registries' listeners
        change what the bindings read), or tell the playground why there is none;
        then the log says why, once the playground does."""
        if served is not None:
            self.tools.replace(served.tools)
            self.prompts.replace(served.prompts or Prompts())
            self.resources.replace(served.resources or Resources())
        for site in self.sites:
            if site.playground is None:
                continue
            if served is None:
                site.playground.error = self.error
            else:
                site.playground.reloaded()
        if served is None:
            log.error("reload failed; still serving the last good version:\n%s", self.error)

    async def reload(self) -> bool:
        """Import ``target`` again in a thread, and serve it; whether it imported.
        The files are looked at first: a change made during the import is seen."""
        self.seen = self.look()
        served = await asyncio.to_thread(self.load)
        self.serve(served)
        return served is not None

    def _ours(self, module: ModuleType | None) -> bool:
        """Whether ``module`` was loaded from a watched file (imported again on a change)."""
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            return False
        path = Path(file).resolve()
        return any(path == root or root in path.parents for root in (*self.roots, *self.extra))

    def _purge(self) -> dict[str, ModuleType]:
        purged = {n: m for n, m in list(sys.modules.items()) if self._ours(m)}
        name = self.target.partition(":")[0]
        if name in sys.modules:
            purged[name] = sys.modules[name]
        for n in purged:
            del sys.modules[n]
        importlib.invalidate_caches()
        return purged

    def look(self) -> dict[Path, tuple[int, int]]:
        """The watched files now: ``.py`` files under a package, any file of a
        ``--watch`` path, and a module's own file."""
        packages = [r for r in self.roots if r.is_dir()]
        others = [r for r in self.roots if not r.is_dir()] + self.extra
        return {**snapshot(packages, python_only=True), **snapshot(others, python_only=False)}

    async def watch(self, stop: asyncio.Event) -> None:
        """Import again after each change to the watched files, until ``stop``."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), POLL)
                return
            except TimeoutError:
                pass
            now = self.look()
            if now == self.seen:
                continue
            while True:  # the burst of writes an editor makes: wait for its end
                await asyncio.sleep(SETTLE)
                later = self.look()
                if later == now:
                    break
                now = later
            seen = self.seen
            changed = sorted(str(p) for p in set(now) | set(seen) if now.get(p) != seen.get(p))
            log.info("changed: %s; importing %s again", ", ".join(changed[:3]), self.target)
            if await self.reload():
                log.info("reloaded: serving %d tools", len(self.tools))


def _import(target: str) -> Served:
    """Import ``MODULE[:ATTR]`` as ``mcplite serve`` does, raising the error itself."""
    try:
        return load_served(target)
    except ServeError as exc:
        cause = exc.__context__
        if cause is not None and not isinstance(cause, ServeError):
            raise cause from None
        raise


def _describe(exc: BaseException) -> str:
    """The error as the module's author needs it: a syntax error's place, or the
    traceback through the module's own lines (not mcplite's or importlib's)."""
    if isinstance(exc, ServeError):
        return str(exc)
    if isinstance(exc, SyntaxError):
        return "".join(traceback.format_exception_only(exc)).rstrip()
    lines = traceback.format_exception(exc)
    ours = f"{os.sep}mcplite{os.sep}ops{os.sep}"
    return "".join(line for line in lines if "importlib" not in line and ours not in line).rstrip()


def banner(target: str, urls: list[str], config: Config, count: int, loop: str) -> str:
    """What ``mcplite dev`` prints once it listens: where to reach it, and how
    to reach the same tools from an MCP host and from the MCP Inspector.  ``loop``:
    what runs (:func:`~mcplite.bindings.base.loop_name`)."""
    stdio = f"{shlex.quote(sys.executable)} -m mcplite stdio {shlex.quote(target)}"
    inspector = "npx @modelcontextprotocol/inspector"
    lines = [f"mcplite {__version__} ({loop}) dev: serving {count} tools on {' and '.join(urls)}"]
    http = next((urlsplit(u) for u in urls if u.startswith(("http:", "https:"))), None)
    if http is not None:
        origin = f"{http.scheme}://{http.netloc}"
        if config.playground:
            lines.append(f"  playground: {origin}/")
        if config.mcp_path is not None:
            lines.append(f"  MCP:        {origin}{config.mcp_path}")
    lines.append(f"  stdio:      {stdio}")
    lines.append(f"  inspector:  {inspector} {stdio}")
    if http is not None and config.mcp_path is not None:
        url = f"{http.scheme}://{http.netloc}{config.mcp_path}"
        lines.append(f"              {inspector} --transport http --server-url {url}")
    lines.append(f"  reloading {target} when its files change (Ctrl-C stops)")
    return "\n".join(lines)


async def run_dev(reloader: Reloader, config: Config) -> None:
    """Serve ``reloader``'s registries as ``mcplite serve`` would, and reload them
    on every change until SIGINT/SIGTERM."""
    # Import from the sources every time: a cached .pyc is trusted by the
    # second of its source's mtime and its size, which an edit may keep.
    sys.dont_write_bytecode = True
    if not await reloader.reload():
        log.warning("serving no tools until %s imports", reloader.target)

    def announce(count: int, urls: list[str]) -> None:
        loop = loop_name(asyncio.get_running_loop())
        print(banner(reloader.target, urls, config, count, loop), file=sys.stderr, flush=True)

    async def beside(server: Server, stop: asyncio.Event) -> None:
        reloader.sites = tuple(b for b in server.bindings if isinstance(b, HttpSite))
        for site in reloader.sites:
            if site.playground is not None:
                site.playground.dev = True
                site.playground.error = reloader.error
        await reloader.watch(stop)

    await serve(
        reloader.tools,
        config,
        prompts=reloader.prompts,
        resources=reloader.resources,
        announce=announce,
        beside=beside,
    )
