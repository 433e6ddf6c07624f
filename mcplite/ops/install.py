"""``mcplite install HOST MODULE[:ATTR]``: add a server to an MCP host's config."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``install`` command to the CLI."""
    subparsers.add_parser("install", help="add a server to an MCP host's config")


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("install")
