"""mcplite: a small, fast server for MCP-lite tools over HTTP/1.1 and gRPC.

The public surface::

    from mcplite import Tools, Field, Context, Failure, Elicitation, MoreResources

    tools = Tools()

    @tools.tool(type="query")
    async def search(query: str, limit: Annotated[int, Field(ge=1, le=100)] = 10) -> list[dict]:
        ...

Serve it with ``python -m mcplite serve mymodule:tools``.
"""

from ._version import __version__
from .authorize import AllowAll, Policy
from .config import Config
from .context import Caller, RequestContext
from .dispatch import Dispatcher, ToolStream
from .envelope import Result
from .errors import (
    ExpiredToken,
    InternalError,
    InvalidParams,
    InvalidRequest,
    InvalidToken,
    MCPLiteError,
    MethodNotFound,
    Overloaded,
    ParseError,
    ToolNotFound,
    UnknownPromise,
)
from .outcomes import (
    Answer,
    Elicitation,
    Failure,
    MoreResources,
    Partial,
    Promised,
    ResponseType,
)
from .promises import MemoryStore, PromiseRecord, PromiseStatus, PromiseStore
from .schema import Field
from .tools import ALWAYS, NEVER, Context, Tool, Tools

__all__ = [
    "ALWAYS",
    "NEVER",
    "AllowAll",
    "Answer",
    "Caller",
    "Config",
    "Context",
    "Dispatcher",
    "Elicitation",
    "ExpiredToken",
    "Failure",
    "Field",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "InvalidToken",
    "MCPLiteError",
    "MemoryStore",
    "MethodNotFound",
    "MoreResources",
    "Overloaded",
    "ParseError",
    "Partial",
    "Policy",
    "PromiseRecord",
    "PromiseStatus",
    "PromiseStore",
    "Promised",
    "RequestContext",
    "ResponseType",
    "Result",
    "Tool",
    "ToolNotFound",
    "ToolStream",
    "Tools",
    "UnknownPromise",
    "__version__",
]
