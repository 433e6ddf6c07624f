"""The house's layering, checked: the core and the client import no binding, the
client imports no server module, and no module imports the package root."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "mcplite"

#: Modules a binding is made of; the core and the client must not import them.
BINDINGS = ("mcplite.bindings.http", "mcplite.bindings.grpc", "h11", "grpclib")
#: The transport-free core.
CORE = (
    "authorize",
    "config",
    "context",
    "dispatch",
    "envelope",
    "errors",
    "hints",
    "jsonvalues",
    "jsonrpc",
    "metadata",
    "methods",
    "outcomes",
    "promises",
    "runner",
    "schema",
    "schemarefs",
    "tokens",
    "tools",
    "wire",
)


def _loaded_after_import(module: str) -> list[str]:
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def _offenders(loaded: list[str], forbidden: tuple[str, ...]) -> list[str]:
    return [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)]


def test_importing_the_core_loads_no_binding() -> None:
    for name in CORE:
        loaded = _loaded_after_import(f"mcplite.{name}")
        assert _offenders(loaded, BINDINGS) == [], name


def test_importing_the_client_loads_no_server_module() -> None:
    loaded = _loaded_after_import("mcplite.client")
    server_side = (
        *BINDINGS[:2],
        "mcplite.core.dispatch",
        "mcplite.core.runner",
        "mcplite.core.promises",
    )
    assert _offenders(loaded, server_side) == []
    assert "grpclib.server" not in loaded


def test_no_module_imports_the_package_root() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "_proto" in path.parts or (path.name == "__init__.py" and path.parent == PACKAGE):
            continue
        depth = len(path.relative_to(PACKAGE).parts)  # 1: mcplite/x.py, 2: mcplite/pkg/x.py
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                root_relative = node.level == depth and not node.module
                root_absolute = node.level == 0 and node.module == "mcplite"
                names = {alias.name for alias in node.names}
                # `from .. import wire` names a submodule, not the root's contents.
                submodules = {p.stem for p in PACKAGE.glob("*.py")} | {
                    p.name for p in PACKAGE.iterdir() if p.is_dir()
                }
                if (root_relative or root_absolute) and not names <= submodules:
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            elif isinstance(node, ast.Import) and any(a.name == "mcplite" for a in node.names):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
