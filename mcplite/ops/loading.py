"""Finding what to serve: ``MODULE[:ATTR]`` imported, its registries taken."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

from ..core.prompts import Prompts
from ..core.resources import Resources
from ..core.tools import Tools
from .serve import ServeError

__all__ = ["DEFAULT_ATTR", "Served", "load_served", "load_tools"]

#: The attribute of the module named on the command line that holds its Tools.
DEFAULT_ATTR = "tools"


@dataclass(frozen=True, slots=True)
class Served:
    """What a module serves: its tools, and its prompts and resources if it has them."""

    tools: Tools
    prompts: Prompts | None = None
    resources: Resources | None = None


def load_served(target: str) -> Served:
    """Import ``MODULE[:ATTR]``: its Tools registry, and the module's ``prompts`` and
    ``resources`` attributes when they are a Prompts and a Resources registry;
    raises :class:`~mcplite.ops.serve.ServeError`."""
    tools = load_tools(target)
    module = sys.modules[target.partition(":")[0]]
    prompts = getattr(module, "prompts", None)
    resources = getattr(module, "resources", None)
    return Served(
        tools,
        prompts if isinstance(prompts, Prompts) else None,
        resources if isinstance(resources, Resources) else None,
    )


def load_tools(target: str) -> Tools:
    """Import ``MODULE[:ATTR]`` and return its registry; raises
    :class:`~mcplite.ops.serve.ServeError`."""
    module_name, _, attr = target.partition(":")
    attr = attr or DEFAULT_ATTR
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the console script does not add it
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ServeError(f"cannot import module '{module_name}': {exc}") from None
    except Exception as exc:
        raise ServeError(f"importing '{module_name}' failed: {type(exc).__name__}: {exc}") from None
    registry = getattr(module, attr, None)
    if registry is None:
        raise ServeError(f"module '{module_name}' has no attribute '{attr}' (a mcplite.Tools)")
    if not isinstance(registry, Tools):
        raise ServeError(
            f"'{module_name}:{attr}' is a {type(registry).__name__}, not a mcplite.Tools"
        )
    return registry
