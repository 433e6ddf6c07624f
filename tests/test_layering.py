"""The house's layering, checked from the source and from what an import loads.

By directory (``mcplite/<dir>/``, or module): the core imports nothing of the
others and only the standard library; the protocols only the core; the
bindings the protocols and the core; ``auth``, ``stores`` and ``tracing`` the
core (``tracing`` may import OpenTelemetry); the ``asgi`` app the bindings,
the core and ``auth``, and no library; the client no server module on any
path.  ``ops`` (serve, CLI, workers, metrics, logs) may use all of them and
nothing imports it (the root only names ``mcplite.Server``, loaded on first
use).  Across the package: no import cycle, no
``_private`` name imported from another module, no private name of h11, h2,
hpack or grpclib used outside an ``accel/`` package, no module over 700 lines,
and no module imports the package root.  A stdio server starts without the
modules only the other bindings, the client or a version check need.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mcplite"

#: What each layer may import of the package (besides itself); None: anything.
ALLOWED: dict[str, tuple[str, ...] | None] = {
    "core": ("mcplite._version",),
    "protocols": ("mcplite._version", "mcplite.core"),
    "bindings": ("mcplite._version", "mcplite.core", "mcplite.protocols"),
    "auth": ("mcplite._version", "mcplite.core"),
    "stores": ("mcplite._version", "mcplite.core"),
    # The client shares the wire constants, the outcome types and the protobuf codec.
    "client": (
        "mcplite._version",
        "mcplite.core.accel",
        "mcplite.core.wire",
        "mcplite.core.outcomes",
        "mcplite.protocols.protobuf",
        "mcplite.protocols.protocalls",
        "mcplite.protocols.protostruct",
        "mcplite.protocols.prototags",
        "mcplite.protocols.protowire",
        "mcplite.protocols.generated",
    ),
    "ops": None,
    "demo": None,
    # The OpenTelemetry middleware (mcplite/tracing.py): a user of the core.
    "tracing": ("mcplite._version", "mcplite.core"),
    # The ASGI app (mcplite/asgi.py): the HTTP endpoints' driver and the auth it assembles.
    "asgi": ("mcplite._version", "mcplite.core", "mcplite.bindings", "mcplite.auth"),
}
#: What each layer may import from outside the package besides the standard library.
THIRD_PARTY: dict[str, tuple[str, ...]] = {
    "core": (),
    "protocols": ("betterproto",),
    # hpack and hyperframe are h2's own: its HPACK and its frames, for the gRPC speed paths.
    "bindings": ("h11", "h2", "hpack", "hyperframe", "grpclib", "multidict", "betterproto"),
    "client": ("h11", "h2", "grpclib", "multidict", "certifi"),
    "tracing": ("opentelemetry",),
    "asgi": (),  # ASGI is a calling convention: no library
}
#: Modules of the package that only running a server needs.
SERVER_SIDE = (
    "mcplite.bindings",
    "mcplite.ops",
    "mcplite.auth",
    "mcplite.stores",
    "mcplite.core.dispatch",
    "mcplite.core.runner",
    "mcplite.core.promises",
    "mcplite.protocols.mcp",
    "mcplite.protocols.jsonrpc",
    "grpclib.server",
)
MAX_LINES = 700
#: Libraries whose private names only an ``accel/`` package (gated to the versions
#: it was tested with) may use.
GATED = ("h11", "h2", "hpack", "grpclib")
#: What ``mcplite stdio`` never needs, each a part of the start an MCP host waits for.
NOT_FOR_STDIO = (
    "h11",
    "h2",
    "hpack",
    "grpclib",
    "betterproto",
    "sqlite3",
    "mcplite.bindings.http",
    "mcplite.bindings.grpc",
    "mcplite.client",
    "mcplite.ops.install",
    "importlib.metadata",
)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, "mcplite.core.dispatch"
    target: str  # the module imported, resolved: "mcplite.core.errors", "h11"
    names: tuple[str, ...]
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    return {
        _module_name(p): p
        for p in sorted(PACKAGE.rglob("*.py"))
        if "generated" not in p.relative_to(PACKAGE).parts
    }


def _imports(name: str, path: Path, *, runtime_only: bool = False) -> list[Import]:
    """Every import of ``path``, resolved; ``runtime_only`` leaves out those under
    ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if runtime_only and id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [Import(name, a.name, (), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(Import(name, target, tuple(a.name for a in node.names), node.lineno))
    return found


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else None


def test_each_layer_imports_only_the_layers_below_it() -> None:
    offenders = []
    for name, path in _sources().items():
        layer = _layer(name)
        allowed = ALLOWED.get(layer) if layer else None
        if allowed is None:
            continue
        own = f"mcplite.{layer}"
        for imp in _imports(name, path):
            targets = [imp.target]
            # `from ..core import wire` imports the module mcplite.core.wire.
            targets += [f"{imp.target}.{n}" for n in imp.names]
            if not imp.target.startswith("mcplite"):
                continue
            if _within(imp.target, (own, *allowed)) or any(
                _within(t, allowed) for t in targets[1:]
            ):
                continue
            offenders.append(f"{name}:{imp.line} imports {imp.target} {imp.names}")
    assert offenders == []


def test_the_core_protocols_and_bindings_use_only_the_libraries_their_layer_names() -> None:
    stdlib = sys.stdlib_module_names
    offenders = []
    for name, path in _sources().items():
        layer = _layer(name)
        if layer not in THIRD_PARTY:
            continue
        allowed = THIRD_PARTY[layer]
        for imp in _imports(name, path, runtime_only=True):
            top = imp.target.partition(".")[0]
            if top in ("mcplite", "__future__") or top in stdlib or top in allowed:
                continue
            offenders.append(f"{name}:{imp.line} imports {imp.target}")
    assert offenders == []


def test_nothing_imports_ops() -> None:
    offenders = [
        f"{name}:{imp.line}"
        for name, path in _sources().items()
        if _layer(name) != "ops"
        for imp in _imports(name, path)
        if _within(imp.target, ("mcplite.ops",))
        # The root names mcplite.Server lazily (loaded on first use).
        and name not in ("mcplite", "mcplite.__main__", "mcplite.testing")
    ]
    assert offenders == []


def test_there_is_no_import_cycle() -> None:
    sources = _sources()
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        edges = set()
        for imp in _imports(name, path, runtime_only=True):
            # `from . import sse` depends on the submodule, not on the package's __init__.
            submodules = {f"{imp.target}.{n}" for n in imp.names} & sources.keys()
            for target in submodules or {imp.target}:
                if target in sources and target != name:
                    edges.add(target)
        graph[name] = edges

    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_no_private_name_is_imported_from_another_module() -> None:
    sources = _sources()
    offenders = [
        f"{name}:{imp.line} takes {n} from {imp.target}"
        for name, path in sources.items()
        for imp in _imports(name, path)
        if imp.target.startswith("mcplite")
        for n in imp.names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert offenders == []


def _private(name: str) -> bool:
    """``_name``: not a dunder, nor an enum's ``_sunder_``."""
    return name.startswith("_") and not name.startswith("__") and not name.endswith("_")


def _of_gated_library(obj: object) -> bool:
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    return isinstance(name, str) and name.partition(".")[0] in GATED


@functools.cache
def _private_names_of(obj: object) -> frozenset[str]:
    """The private names a gated library gives ``obj``: a module's globals and
    its classes' names; a class's, and each gated class's it derives from,
    with the instance attributes their methods set."""
    names: set[str] = set()
    if isinstance(obj, types.ModuleType):
        names |= {n for n in vars(obj) if _private(n)}
        for value in list(vars(obj).values()):
            if isinstance(value, type) and _of_gated_library(value):
                names |= _private_names_of(value)
    elif isinstance(obj, type):
        for cls in obj.__mro__:
            if not _of_gated_library(cls):
                continue
            names |= {n for n in vars(cls) if _private(n)}
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
            except (OSError, TypeError):
                continue
            names |= {
                n.attr
                for n in ast.walk(tree)
                if isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
                and _private(n.attr)
            }
    return frozenset(names)


def _gated_imports(tree: ast.Module) -> tuple[dict[str, object], list[str]]:
    """What a module binds of the gated libraries (name -> module or class), and
    the private names it imports from them."""
    bound: dict[str, object] = {}
    private: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.partition(".")[0] not in GATED:
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    private.append(alias.name)
                module = importlib.import_module(alias.name)
                bound[alias.asname or alias.name] = module
                top = alias.name.partition(".")[0]
                bound.setdefault(top, importlib.import_module(top))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.partition(".")[0] not in GATED:
                continue
            if any(_private(part) for part in node.module.split(".")):
                private.append(node.module)
            module = importlib.import_module(node.module)
            for alias in node.names:
                if _private(alias.name):
                    private.append(f"{node.module}.{alias.name}")
                value = getattr(module, alias.name, None)
                if value is None:
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                bound[alias.asname or alias.name] = value
    return bound, private


def _resolve(expr: ast.expr, bound: dict[str, object]) -> object | None:
    """The gated module or class ``expr`` names (``Channel``, ``h11.Connection``), or None."""
    if isinstance(expr, ast.Name):
        return bound.get(expr.id)
    if isinstance(expr, ast.Attribute):
        owner = _resolve(expr.value, bound)
        return getattr(owner, expr.attr, None) if owner is not None else None
    return None


def _gated_private_uses(tree: ast.Module) -> list[str]:
    """Where a module uses a private name of a gated library: imports it; reads
    it off anything (``protocol._x``) when the module defines no such name
    itself; reads it off ``super()``; or, in a class derived from a gated one,
    overrides or touches (``self._x``) one its base defines."""
    bound, found = _gated_imports(tree)
    if not bound:
        return found
    gated = frozenset().union(
        *(_private_names_of(o) for o in bound.values() if isinstance(o, type | types.ModuleType))
    )
    own = {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    own |= {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    own |= {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in gated:
            called = node.value
            from_super = (
                isinstance(called, ast.Call)
                and isinstance(called.func, ast.Name)
                and called.func.id == "super"
            )
            if from_super or node.attr not in own:
                found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ClassDef):
            bases = [_resolve(b, bound) for b in node.bases]
            inherited = frozenset().union(
                *(_private_names_of(b) for b in bases if isinstance(b, type))
            )
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef)
                    and inner.name in inherited
                ):
                    found.append(f"{inner.lineno}: {node.name}.{inner.name} overrides it")
                elif (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id == "self"
                    and inner.attr in inherited
                ):
                    found.append(f"{inner.lineno}: self.{inner.attr}")
    return found


def test_private_names_of_h11_h2_hpack_and_grpclib_are_used_only_in_accel_packages() -> None:
    offenders = [
        f"{name}:{use}"
        for name, path in _sources().items()
        if "accel" not in name.split(".")
        for use in _gated_private_uses(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "source",
    [
        "from grpclib.client import Channel\nclass C(Channel):\n"
        "    def _protocol_factory(self): ...\n",
        "from grpclib.client import Channel\nclass C(Channel):\n"
        "    def factory(self): return super()._protocol_factory()\n",
        "from grpclib.server import Server\n"
        "def f(server: Server): return server._protocol_factory()\n",
        "import h11\ndef f(conn: h11.Connection): return conn._cstate\n",
        "from h11._util import bytesify\n",
        "from grpclib.client import Channel\nclass C(Channel):\n"
        "    def connected(self): return self._protocol\n",
    ],
)
def test_the_private_name_rule_sees_each_way_of_using_one(source: str) -> None:
    assert _gated_private_uses(ast.parse(source)) != []


def test_the_private_name_rule_leaves_a_module_s_own_private_names_alone() -> None:
    source = (
        "import h11\nclass C:\n    def __init__(self): self._conn = h11.Connection(h11.CLIENT)\n"
        "    def _cstate(self): return self._conn.their_state\n"
    )
    assert _gated_private_uses(ast.parse(source)) == []


def test_no_module_is_over_700_lines() -> None:
    sizes = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in _sources().items()
    }
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_no_module_imports_the_package_root() -> None:
    offenders = []
    submodules = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir()
    }
    for name, path in _sources().items():
        if name in ("mcplite", "mcplite.__main__"):
            continue
        for imp in _imports(name, path):
            # `from .. import wire` names a submodule, not the root's contents.
            if imp.target == "mcplite" and not set(imp.names) <= submodules:
                offenders.append(f"{name}:{imp.line}")
    assert offenders == []


def _loaded_after_import(module: str, env: dict[str, str] | None = None) -> list[str]:
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


@pytest.mark.parametrize("module", ["mcplite.client", "mcplite.client.sync"])
def test_importing_the_client_loads_no_server_module(module: str) -> None:
    loaded = _loaded_after_import(module)
    assert [m for m in loaded if _within(m, SERVER_SIDE)] == []


def test_a_grpc_call_from_the_client_loads_no_server_module() -> None:
    code = (
        "import json, sys\n"
        "from mcplite.client import Client\n"
        "Client('grpc://127.0.0.1:1')\n"
        "import mcplite.client.grpc, mcplite.client.accel.channels\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(out.stdout)
    assert "grpclib.client" in loaded  # the gRPC path was really taken
    assert [m for m in loaded if _within(m, SERVER_SIDE)] == []


def test_importing_the_core_loads_no_library() -> None:
    for name in _sources():
        if _layer(name) == "core":
            loaded = _loaded_after_import(name)
            assert [m for m in loaded if _within(m, ("h11", "h2", "grpclib", "betterproto"))] == []


def test_a_stdio_server_starts_without_the_other_bindings_the_client_or_package_metadata(
    tmp_path: Path,
) -> None:
    (tmp_path / "one_tool.py").write_text(
        "from mcplite import Tools\n"
        "tools = Tools()\n\n"
        "@tools.tool\n"
        "async def echo(text: str) -> str:\n"
        "    return text\n"
    )
    # stdin at its end at once: the server starts, reads the end of its input, stops.
    # Not measured by coverage, when this run is (its data file is an SQLite database).
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_PROCESS_")}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mcplite", "stdio", "one_tool"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tools on stdio" in done.stderr  # it served
    loaded = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "mcplite.bindings.stdio" in loaded
    assert sorted(m for m in loaded if _within(m, NOT_FOR_STDIO)) == []
