"""Interop tests with MCP clients (a package, so its conftest is ``clients.conftest``,
beside the suite's own ``conftest``)."""
