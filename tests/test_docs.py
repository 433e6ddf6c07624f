"""Every command and example in README.md and docs/*.md runs as written.

The conventions a doc follows (also in docs/development.md, "The documentation
is tested"):

- Every fenced ``sh`` or ``bash`` block runs, as one ``bash -e -o pipefail``
  script, against a live ``mcplite serve mcplite.demo`` that this module starts
  on ephemeral ports; it must exit 0.  Docs are written with the default ports:
  ``127.0.0.1:8080`` and ``127.0.0.1:50051`` are rewritten to the live ones.
  The venv's ``bin`` comes first on ``PATH`` (so ``mcplite`` and ``python``
  are ours), the working directory is a temporary one holding the docs' Python
  modules, and ``MCPLITE_SECRET``/``MCPLITE_TOKEN`` are unset.
- A block that cannot run here has ``<!-- not run: REASON -->`` on the line
  right before its fence.  Nothing is skipped silently: a shell block neither
  runnable nor marked is run, and fails if it cannot.
- ``<!-- output -->`` right before a ``text`` block that follows a command block
  is what that block prints (stdout and stderr together): ``...`` matches
  anything, a run of whitespace any whitespace.
- A ``python`` block whose first line is ``# NAME.py`` is a module: written to
  the temporary directory (so commands and other blocks can use it) and
  imported; its ``test_*`` coroutines, if any, are run.  Any other ``python``
  block is a script run against the live server (ports rewritten), or, marked
  not run, only compiled.
- ``json`` blocks must parse; every relative link (and ``#anchor``) must name an
  existing file (and heading).

The blocks run concurrently (a few at a time), so the whole module takes about
as long as its longest example (a promise redeemed: ~12 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ServeProcess
from docs_support import DOCS, ROOT, SHELL, Block, anchors_of, blocks_of, links_of, output_pattern

#: Upper bound of one example's run, in seconds (the longest takes ~12 s).
BLOCK_TIMEOUT = 40.0
#: Examples run at once (the machine has 2 cores; most examples wait on the server).
PARALLEL = 6
DEFAULT_HTTP = "127.0.0.1:8080"
DEFAULT_GRPC = "127.0.0.1:50051"

BLOCKS = [block for path in DOCS for block in blocks_of(path)]
COMMANDS = [b for b in BLOCKS if not b.is_output and b.lang in SHELL | {"python"} and not b.module]
RUNNABLE = [b for b in COMMANDS if b.not_run is None]
MODULES = [b for b in BLOCKS if b.module]


@dataclass
class Ran:
    returncode: int
    output: str  # stdout and stderr, interleaved


@dataclass
class Live:
    http_port: int
    grpc_port: int
    workdir: Path
    results: dict[str, Ran]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MCPLITE_SECRET", "MCPLITE_TOKEN")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _rewrite(text: str, http_port: int, grpc_port: int) -> str:
    """``text`` with the default ports replaced by the live server's."""
    return text.replace(DEFAULT_HTTP, f"127.0.0.1:{http_port}").replace(
        DEFAULT_GRPC, f"127.0.0.1:{grpc_port}"
    )


def _run(block: Block, server: ServeProcess, workdir: Path) -> Ran:
    text = _rewrite(block.text, server.http_port, server.grpc_port)
    if block.lang == "python":
        command = [sys.executable, "-c", text]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", text]
    try:
        done = subprocess.run(
            command,
            cwd=workdir,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.output if isinstance(exc.output, str) else ""
        return Ran(-1, f"timed out after {BLOCK_TIMEOUT} s; output so far:\n{partial}")
    return Ran(done.returncode, done.stdout)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """The demo server, the docs' modules in a working directory, and every
    runnable example already run (concurrently) against them."""
    workdir = tmp_path_factory.mktemp("docs")
    for block in MODULES:
        (workdir / f"{block.module}.py").write_text(block.text, encoding="utf-8")
    server = ServeProcess(
        "mcplite.demo",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--secret",
        "docs-test-secret-0123456789",
        "--no-access-log",
    )
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            # The longest first, so that they overlap with everything else.
            ordered = sorted(RUNNABLE, key=lambda b: "comprehensive" not in b.text)
            futures = {b.name: pool.submit(_run, b, server, workdir) for b in ordered}
            results = {name: future.result() for name, future in futures.items()}
        yield Live(server.http_port, server.grpc_port, workdir, results)
    finally:
        server.kill()


def test_the_docs_have_examples_to_run() -> None:
    assert len(RUNNABLE) >= 20, [b.name for b in RUNNABLE]
    assert len(MODULES) >= 4, [b.name for b in MODULES]


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.name)
def test_each_runnable_example_exits_0_and_prints_what_the_doc_shows(
    block: Block, live: Live
) -> None:
    ran = live.results[block.name]
    assert ran.returncode == 0, f"{block.name} exited {ran.returncode}:\n{ran.output}"
    if block.output is not None:
        expected = _rewrite(block.output.text, live.http_port, live.grpc_port)
        assert output_pattern(expected).search(ran.output), (
            f"{block.name}: the output does not match {block.output.name}:\n{ran.output}"
        )


@pytest.mark.parametrize("block", [b for b in COMMANDS if b.not_run], ids=lambda b: b.name)
def test_an_example_marked_not_run_gives_a_reason_and_shows_no_output(block: Block) -> None:
    assert block.not_run and len(block.not_run) > 5
    assert block.output is None, "an output nobody checks would rot"
    if block.lang == "python":
        compile(block.text, block.name, "exec")


def test_every_python_module_in_the_docs_imports_and_its_tests_pass(live: Live) -> None:
    names = [b.module for b in MODULES if b.module is not None]
    assert len(names) == len(set(names)), f"two doc modules share a name: {names}"
    check = """
import asyncio, importlib, inspect, sys
from mcplite import Tools
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    registry = getattr(module, "tools", None)
    assert registry is None or (isinstance(registry, Tools) and registry), name
    for attr, fn in vars(module).items():
        if attr.startswith("test_") and inspect.iscoroutinefunction(fn):
            asyncio.run(fn())
    print("ok", name)
"""
    done = subprocess.run(
        [sys.executable, "-c", check, *names],
        cwd=live.workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [w for n in names for w in ("ok", n)]


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "json"], ids=lambda b: b.name)
def test_each_json_example_parses(block: Block) -> None:
    json.loads(block.text)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_an_existing_file_and_heading(path: Path) -> None:
    broken = []
    for line, target in links_of(path):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        where = (path.parent / file_part).resolve() if file_part else path
        if not where.exists():
            broken.append(f"line {line}: {target} (no such file)")
        elif anchor and where.suffix == ".md" and anchor not in anchors_of(where):
            broken.append(f"line {line}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = blocks_of(ROOT / "README.md")
    command = (
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "
        ".venv/bin/python -m pytest"
    )
    serve = (
        "python3 -m venv .venv && .venv/bin/pip install -e . && "
        ".venv/bin/python -m mcplite serve mcplite.demo"
    )
    assert [b.text.strip() for b in readme[:2]] == [serve, command]
    assert command in ci.splitlines()


def test_the_readme_reads_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < 220, lines
