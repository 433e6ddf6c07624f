"""Full MCP on the same core: the 2026-07-28 stateless revision and 2025-11-25.

:mod:`.protocol` holds the revisions' rules (versions, the ``_meta`` envelope,
header checks, error codes); :mod:`.render` turns outcomes into MCP results;
:mod:`.server` answers one message for any transport; the HTTP endpoint lives in
:mod:`mcplite.bindings.http.connection` and stdio in :mod:`.stdio`.
"""
