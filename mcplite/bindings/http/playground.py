"""The playground: a page to try a server's tools in a browser, served by the
server itself (``--playground``, on in ``mcplite dev``; docs/develop.md).

``GET /`` answers one self-contained HTML file shipped in the package (no CDN,
no build step): it lists the tools, prompts and resources, builds a form per
tool from its ``inputSchema`` and calls over the MCP-lite endpoint, as any
client does.  ``GET /playground/state`` tells it where that endpoint is, whether
it needs a token, and, under ``mcplite dev``, the last reload and its error.

Both are public (a browser cannot send a bearer token with a navigation; the
calls the page makes need it) and Host/Origin-checked like the MCP endpoint:
a page on another site cannot read them through a rebound name.  The page's
inline script and style are allowed by their hashes in its
``Content-Security-Policy``, which allows nothing else but this origin.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..._version import __version__
from ...core.config import Config
from ...protocols.jsonrpc import encode
from .messages import Request, Response
from .statuses import JSON

__all__ = ["PAGE_PATH", "STATE_PATH", "Playground", "page"]

#: Where the page is served.
PAGE_PATH = b"/"
#: Where the page reads what it needs to know of the server.
STATE_PATH = b"/playground/state"
_INLINE = re.compile(rb"<(script|style)>(.*?)</\1>", re.DOTALL)


@dataclass(frozen=True, slots=True)
class _Page:
    body: bytes
    headers: list[tuple[bytes, bytes]]


def _sha256(block: bytes) -> bytes:
    return b"'sha256-" + base64.b64encode(hashlib.sha256(block).digest()) + b"'"


def page() -> bytes:
    """The playground's HTML, as shipped in the package."""
    return resources.files(__package__).joinpath("playground.html").read_bytes()


def _load() -> _Page:
    body = page()
    scripts = [_sha256(m.group(2)) for m in _INLINE.finditer(body) if m.group(1) == b"script"]
    styles = [_sha256(m.group(2)) for m in _INLINE.finditer(body) if m.group(1) == b"style"]
    policy = b"; ".join(
        [
            b"default-src 'none'",
            b"script-src " + b" ".join(scripts),
            b"style-src " + b" ".join(styles),
            b"connect-src 'self'",
            b"img-src 'self' data:",
            b"base-uri 'none'",
            b"form-action 'none'",
            b"frame-ancestors 'none'",
        ]
    )
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-security-policy", policy),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"cache-control", b"no-store"),
    ]
    return _Page(body, headers)


@dataclass(slots=True)
class Playground:
    """The page and its state endpoint for one HTTP site.  ``mcplite dev`` sets
    :attr:`error` when a reload fails (None once one succeeds) and calls
    :meth:`reloaded` after each good one; the page shows both."""

    config: Config
    #: The last reload's error (the exception and its traceback), or None.
    error: str | None = None
    #: Counts the reloads that took; the page lists again when it changes.
    generation: int = 0
    #: Whether ``mcplite dev`` serves this page (it then watches files).
    dev: bool = False
    reloaded_at: float = field(default_factory=time.time)
    _page: _Page | None = None

    def reloaded(self) -> None:
        self.error = None
        self.generation += 1
        self.reloaded_at = time.time()

    def answer_page(self, request: Request) -> Response:
        if self._page is None:
            self._page = _load()
        # HEAD: the connection sends the headers of this answer and no body.
        return Response(200, list(self._page.headers), self._page.body)

    def state(self, auth: bool) -> dict[str, Any]:
        config = self.config
        return {
            "server": {"name": "mcplite", "version": __version__},
            "base_path": config.base_path,
            "mcp_path": config.mcp_path,
            "auth": auth,
            "dev": self.dev,
            "generation": self.generation,
            "reloaded_at": self.reloaded_at,
            "error": self.error,
        }

    def answer_state(self, request: Request, auth: bool) -> Response:
        return Response(200, [*JSON, (b"cache-control", b"no-store")], encode(self.state(auth)))
