"""``resources/list``, ``resources/templates/list``, ``resources/read`` and (2025)
``resources/subscribe``: one handler each, for every profile.

MCP's params, results and errors everywhere: an unknown URI is -32602 with
``data.uri``.  MCP pages the lists (MCP-lite's endpoint answers them whole), and
2026 adds caching hints: the lists are public, a read private (a resource
function may answer each caller differently).
"""

from __future__ import annotations

from typing import Any

from ..core.errors import InvalidParams
from ..core.resources import Resources
from .mcp.pagination import cacheable, listed
from .prompts import object_params
from .requests import Request

__all__ = ["ResourceMethods"]


class ResourceMethods:
    """The resources methods of a registry."""

    def __init__(self, resources: Resources, page_size: int | None) -> None:
        self.resources = resources
        self.page_size = page_size

    async def list(self, request: Request) -> Any:
        return listed(request, "resources", self.resources.definitions(), "uri", self.page_size)

    async def templates(self, request: Request) -> Any:
        templates = self.resources.template_definitions()
        return listed(request, "resourceTemplates", templates, "uriTemplate", self.page_size)

    async def read(self, request: Request) -> Any:
        contents = await self.resources.read(_uri(request.params), request.context)
        return cacheable({"contents": contents}, request, "private")

    async def subscribe(self, request: Request) -> Any:
        """2025 ``resources/subscribe`` and ``unsubscribe``: acknowledged, but no
        ``notifications/resources/updated`` is ever sent: a stateless server has
        no session to send them on."""
        _uri(request.params)
        return {}


def _uri(params: Any) -> str:
    uri = object_params(params).get("uri")
    if not isinstance(uri, str):
        raise InvalidParams("Invalid params: params.uri must be a string")
    return uri
