"""Full MCP on the same core: the 2026-07-28 stateless revision and 2025-11-25.

:mod:`.protocol` holds the revisions' rules (versions, the ``_meta`` envelope,
header checks, error codes); :mod:`.render` turns outcomes into MCP results;
:mod:`.server` answers one message for any transport through the method table
every JSON-RPC profile shares (:mod:`mcplite.protocols.methods`); :mod:`.rounds`
(input requests), :mod:`.tasks`, :mod:`.subscriptions` (``subscriptions/listen``),
:mod:`.inflight` (``notifications/cancelled`` over HTTP) and :mod:`.pagination`
are what MCP adds.  The HTTP endpoint lives in
:mod:`mcplite.bindings.http.connection` and stdio in :mod:`mcplite.bindings.stdio`.
"""
