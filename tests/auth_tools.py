"""Tools, a prompt and a resource for the auth and TLS tests (``tests/test_auth.py``,
``tests/test_tls.py``); served in-process and by ``python -m mcplite serve
tests.auth_tools:tools``.

- ``echo``: open to every authenticated caller;
- ``admin_report``: needs the ``admin`` scope;
- ``whoami``: the caller as the tool sees it (subject, scopes, claims);
- ``later``: always answers with a promise (``promise_after=ALWAYS``), done at once;
- ``hold``: always a promise, running until cancelled (or ``seconds`` pass);
- ``count``: a streaming tool (for the SSE paths).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from mcplite import ALWAYS, Context, Prompts, Resources, Tools

tools = Tools()
prompts = Prompts()
resources = Resources()

ADMIN = "admin"


@tools.tool
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tools.tool(scopes=[ADMIN])
async def admin_report() -> str:
    """Something only an admin may read."""
    return "the admin report"


@tools.tool
async def whoami(ctx: Context) -> dict[str, Any]:
    """The caller as this tool sees it."""
    caller = ctx.caller
    if caller is None:
        return {"subject": None, "scopes": [], "claims": {}}
    claims = {k: v for k, v in caller.claims.items() if isinstance(v, str | int | float | bool)}
    return {"subject": caller.subject, "scopes": sorted(caller.scopes), "claims": claims}


@tools.tool(promise_after=ALWAYS)
async def later(text: str = "done") -> str:
    """Answer with a promise; its outcome is ready at once."""
    return f"later: {text}"


@tools.tool(promise_after=ALWAYS)
async def hold(seconds: float = 30.0) -> str:
    """Answer with a promise that stays running until cancelled."""
    await asyncio.sleep(seconds)
    return "held"


@tools.tool
async def count(steps: int = 2) -> AsyncIterator[str]:
    """Stream ``steps`` parts."""
    for step in range(1, steps + 1):
        yield f"part {step}"


@prompts.prompt
def greeting(name: str) -> str:
    """Greet someone."""
    return f"Hello, {name}!"


@resources.resource("notes://secret", name="Secret", mime_type="text/plain")
def secret_note() -> str:
    """A note nobody anonymous may read."""
    return "the secret note"
