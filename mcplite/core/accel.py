"""Whether a part's speed paths (its ``accel`` modules) are on.

A speed path works on a dependency's private internals, so it is only safe on
the versions it was tested with.  Each binding's ``accel/__init__.py`` holds the
table of those versions and asks :func:`enabled` (as do the JSON encoder of
:mod:`mcplite.protocols.accel` and the listening-socket guard of
:mod:`mcplite.ops.accel`, on the standard library), which says no when

* ``MCPLITE_ACCEL`` is ``0``, ``false``, ``no`` or ``off`` (any case), or
* an installed version of a package in the table is not one listed for it
  (or the package is not installed): then the binding's log says so, once.

Off, the binding uses its dependencies' public API only.  The answer is worked
out once per binding and kept, so that a server decides its classes once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping

__all__ = ["ENVIRONMENT_VARIABLE", "enabled"]

#: The environment variable that turns every binding's speed paths off.
ENVIRONMENT_VARIABLE = "MCPLITE_ACCEL"
_OFF = frozenset({"0", "false", "no", "off"})

_decided: dict[str, bool] = {}


def enabled(binding: str, tested: Mapping[str, Collection[str]]) -> bool:
    """Whether ``binding``'s speed paths are on, given the versions of each package
    they were ``tested`` with (``{"h2": ("4.3.0",)}``).  Raises nothing."""
    decided = _decided.get(binding)
    if decided is None:
        decided = _decided[binding] = _decide(binding, tested)
    return decided


def _decide(binding: str, tested: Mapping[str, Collection[str]]) -> bool:
    if os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() in _OFF:
        return False
    if not tested:
        return True
    # Imported only when there is a version to check: importlib.metadata brings email
    # and zipfile, a good part of a stdio server's start, which checks none.
    import importlib.metadata

    for package, versions in tested.items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            installed = "(not installed)"
        if installed not in versions:
            logging.getLogger(f"mcplite.bindings.{binding}").warning(
                "%s speed paths off: they were tested with %s %s, not %s; "
                "using the plain path (public API only)",
                binding,
                package,
                " or ".join(sorted(versions)),
                installed,
            )
            return False
    return True
