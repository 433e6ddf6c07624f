"""Running a server: resolve what the core must be given, start the bindings,
drain them on SIGINT/SIGTERM.  ``cli.py`` only parses arguments and calls this.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets

from .config import Config

__all__ = ["resolve_secret"]

log = logging.getLogger("mcplite")


def resolve_secret(config: Config) -> Config:
    """``config`` with its promise secret settled: ``--secret``, else
    ``$MCPLITE_SECRET``, else a random one (tokens then die with the process: said
    once, as a warning)."""
    if config.secret is not None:
        return config
    env = os.environ.get("MCPLITE_SECRET")
    if env:
        return dataclasses.replace(config, secret=env.encode())
    log.warning(
        "no promise secret given (--secret or MCPLITE_SECRET): using a random one; "
        "promise tokens will not survive a restart"
    )
    return dataclasses.replace(config, secret=secrets.token_bytes(32))
