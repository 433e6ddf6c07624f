"""mcplite: a small, fast server for tools over MCP-lite (HTTP/1.1, gRPC) and full MCP.

The public surface::

    from mcplite import Tools, Field, Context, Failure, Elicitation, MoreResources

    tools = Tools()

    @tools.tool(type="query")
    async def search(query: str, limit: Annotated[int, Field(ge=1, le=100)] = 10) -> list[dict]:
        ...

Serve it with ``python -m mcplite serve mymodule:tools``; the module's ``prompts``
(:class:`Prompts`) and ``resources`` (:class:`Resources`) are served on MCP too.
"""

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .core import content
    from .core.authorize import AllowAll, Policy
    from .core.config import Config
    from .core.context import Caller, RequestContext
    from .core.dispatch import Dispatcher, ToolStream
    from .core.envelope import Result
    from .core.errors import (
        ExpiredToken,
        Forbidden,
        InternalError,
        InvalidParams,
        InvalidRequest,
        InvalidToken,
        MCPLiteError,
        MethodNotFound,
        Overloaded,
        ParseError,
        StoreUnavailable,
        ToolNotFound,
        UnknownPromise,
    )
    from .core.hints import Field
    from .core.metadata import Icon, TaskSupport, ToolAnnotations
    from .core.middleware import CallNext, Middleware, ToolCall
    from .core.outcomes import (
        Answer,
        Elicitation,
        Failure,
        InputRequired,
        MoreResources,
        Partial,
        ProgressUpdate,
        Promised,
        ResponseType,
    )
    from .core.promises import MemoryStore, PromiseRecord, PromiseStatus, PromiseStore
    from .core.prompts import Message, Prompt, Prompts
    from .core.resources import Resource, ResourceNotFound, Resources, ResourceTemplate
    from .core.tools import ALWAYS, NEVER, Context, Tool, Tools
    from .ops.serve import Server

# Names load on first use (PEP 562), so that ``import mcplite.client`` does not
# pull in the server: the package root imports nothing but the version.
_HOMES = {
    "AllowAll": "authorize",
    "Policy": "authorize",
    "Config": "config",
    "Caller": "context",
    "RequestContext": "context",
    "Dispatcher": "dispatch",
    "ToolStream": "dispatch",
    "Result": "envelope",
    "ExpiredToken": "errors",
    "InternalError": "errors",
    "InvalidParams": "errors",
    "InvalidRequest": "errors",
    "InvalidToken": "errors",
    "MCPLiteError": "errors",
    "MethodNotFound": "errors",
    "Overloaded": "errors",
    "ParseError": "errors",
    "StoreUnavailable": "errors",
    "ToolNotFound": "errors",
    "UnknownPromise": "errors",
    "Forbidden": "errors",
    "Field": "hints",
    "Icon": "metadata",
    "TaskSupport": "metadata",
    "ToolAnnotations": "metadata",
    "CallNext": "middleware",
    "Middleware": "middleware",
    "ToolCall": "middleware",
    "Answer": "outcomes",
    "Elicitation": "outcomes",
    "Failure": "outcomes",
    "InputRequired": "outcomes",
    "MoreResources": "outcomes",
    "Partial": "outcomes",
    "ProgressUpdate": "outcomes",
    "Promised": "outcomes",
    "ResponseType": "outcomes",
    "MemoryStore": "promises",
    "PromiseRecord": "promises",
    "PromiseStatus": "promises",
    "PromiseStore": "promises",
    "Message": "prompts",
    "Prompt": "prompts",
    "Prompts": "prompts",
    "Resource": "resources",
    "ResourceNotFound": "resources",
    "ResourceTemplate": "resources",
    "Resources": "resources",
    "Server": "..ops.serve",
    "ALWAYS": "tools",
    "NEVER": "tools",
    "Context": "tools",
    "Tool": "tools",
    "Tools": "tools",
}


def __getattr__(name: str) -> Any:
    if name == "content":  # the module of content-block helpers: content.text(...)
        from .core import content

        globals()[name] = content
        return content
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mcplite' has no attribute {name!r}")
    import importlib

    module = home[2:] if home.startswith("..") else f"core.{home}"  # ..: outside the core
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "ALWAYS",
    "NEVER",
    "AllowAll",
    "Answer",
    "CallNext",
    "Caller",
    "Config",
    "Context",
    "Dispatcher",
    "Elicitation",
    "ExpiredToken",
    "Failure",
    "Field",
    "Forbidden",
    "Icon",
    "InputRequired",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "InvalidToken",
    "MCPLiteError",
    "MemoryStore",
    "Message",
    "MethodNotFound",
    "Middleware",
    "MoreResources",
    "Overloaded",
    "ParseError",
    "Partial",
    "Policy",
    "ProgressUpdate",
    "PromiseRecord",
    "PromiseStatus",
    "PromiseStore",
    "Promised",
    "Prompt",
    "Prompts",
    "RequestContext",
    "Resource",
    "ResourceNotFound",
    "ResourceTemplate",
    "Resources",
    "ResponseType",
    "Result",
    "Server",
    "StoreUnavailable",
    "TaskSupport",
    "Tool",
    "ToolAnnotations",
    "ToolCall",
    "ToolNotFound",
    "ToolStream",
    "Tools",
    "UnknownPromise",
    "__version__",
    "content",
]


def __dir__() -> list[str]:
    return sorted(__all__)
