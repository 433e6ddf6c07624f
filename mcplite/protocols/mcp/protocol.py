"""The rules of MCP's two revisions, with no I/O.

**2026-07-28** is stateless: every request carries ``params._meta`` with
``io.modelcontextprotocol/protocolVersion`` and ``.../clientCapabilities``, and
over HTTP the ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers
repeat what the body says.  **2025-11-25** (and 2025-06-18, 2025-03-26) starts
with ``initialize``; a stateless server answers every request on its own.

A request is checked in this order (what the official suite requires):
``_meta`` (400, -32602), headers (400, -32020), version (400, -32022), method
(404, -32601), client capabilities (400, -32021), then the handler.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Final

from ...core.errors import InvalidParams, MCPLiteError

__all__ = [
    "BASE64_OPEN",
    "CAPABILITIES_KEY",
    "CLIENT_INFO_KEY",
    "LEGACY_VERSIONS",
    "LOG_LEVEL_KEY",
    "MODERN_VERSION",
    "NAME_OPTIONAL",
    "NAME_PARAMS",
    "SERVER_INFO_KEY",
    "SUBSCRIPTION_ID_KEY",
    "TASKS_EXTENSION",
    "TASKS_REQUIRED",
    "VERSION_KEY",
    "HeaderMismatch",
    "MissingCapability",
    "UnsupportedVersion",
    "check_param_headers",
    "checked_meta",
    "decode_header_value",
    "extensions_of",
    "header_params",
    "require",
]

MODERN_VERSION: Final = "2026-07-28"
#: Revisions reached through ``initialize``, newest first.
LEGACY_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26")

VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY: Final = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_KEY: Final = "io.modelcontextprotocol/logLevel"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"


class HeaderMismatch(MCPLiteError):
    """An MCP header is missing, malformed or disagrees with the body."""

    jsonrpc_code = -32020
    grpc_status = 3
    default_message = "Header mismatch"


class MissingCapability(MCPLiteError):
    """The request needs a client capability this request did not declare."""

    jsonrpc_code = -32021
    grpc_status = 9
    default_message = "Missing required client capability"

    def __init__(self, what: str, required: Mapping[str, Any]) -> None:
        super().__init__(
            f"Missing required client capability: {what}",
            {"requiredCapabilities": dict(required)},
        )


class UnsupportedVersion(MCPLiteError):
    """``_meta`` names a protocol version this server does not speak."""

    jsonrpc_code = -32022
    grpc_status = 3
    default_message = "Unsupported protocol version"

    def __init__(self, requested: Any) -> None:
        super().__init__(
            "Unsupported protocol version",
            {"supported": [MODERN_VERSION], "requested": requested},
        )


#: What a tool declared ``task_support="required"`` needs of a 2026 client.
TASKS_REQUIRED: Final[Mapping[str, Any]] = {"extensions": {TASKS_EXTENSION: {}}}


def extensions_of(capabilities: Mapping[str, Any]) -> Mapping[str, Any]:
    """The extensions a client declared (none: empty)."""
    extensions = capabilities.get("extensions")
    return extensions if isinstance(extensions, dict) else {}


def require(capabilities: Mapping[str, Any], required: Mapping[str, Any]) -> None:
    """Raise :class:`MissingCapability` unless ``capabilities`` declares every key
    of ``required`` (one level into ``extensions``)."""
    for key, value in required.items():
        have = capabilities.get(key)
        if have is None:
            raise MissingCapability(key, {key: value})
        if key == "extensions" and isinstance(value, dict):
            for name in value:
                if name not in extensions_of(capabilities):
                    raise MissingCapability(f"extensions.{name}", {key: {name: value[name]}})


#: How a header value in base64 starts and ends (``=?base64?...?=``).
BASE64_OPEN, _B64_CLOSE = "=?base64?", "?="


def decode_header_value(value: str) -> str:
    """A header value as the body would hold it: ``=?base64?...?=`` decoded
    (strictly: padding and alphabet), anything else literal.  Raises
    :class:`HeaderMismatch` for a malformed base64 form."""
    if not (value.startswith(BASE64_OPEN) and value.endswith(_B64_CLOSE)):
        return value
    encoded = value[len(BASE64_OPEN) : -len(_B64_CLOSE)]
    try:
        raw = base64.b64decode(encoded, validate=True)
        if base64.b64encode(raw).decode("ascii") != encoded:
            raise ValueError("not canonical")
        return raw.decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise HeaderMismatch(f"Header mismatch: malformed base64 header value ({exc})") from None


#: Which param ``Mcp-Name`` repeats, per method.
NAME_PARAMS: Final[dict[str, str]] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
#: Methods whose ``Mcp-Name`` may be left out (but must match when sent).  The
#: core revision names only tools/call, prompts/get and resources/read; the tasks
#: extension adds the ``tasks/*`` methods, and its clients in the wild (fastmcp
#: tasks, pydantic-ai) poll without the header.  The official server and
#: fastmcp's own accept that and refuse only a mismatch: so do we.
NAME_OPTIONAL: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


def checked_meta(
    params: Mapping[str, Any],
    method: str,
    headers: Mapping[str, str] | None,
    header_version: str | None,
) -> dict[str, Any]:
    """The ``_meta`` of a 2026 request, once it (version and capabilities), the
    headers (over HTTP: ``headers`` not None) and the version are checked, in
    that order.  Raises :class:`InvalidParams` (-32602) naming what ``_meta``
    lacks, :class:`HeaderMismatch` (-32020) or :class:`UnsupportedVersion`.

    ``headers`` has lowercase names (values are case-sensitive);
    ``header_version`` is its ``MCP-Protocol-Version``, which the caller has
    read already (it decides the revision).
    """
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise InvalidParams("Invalid params: params._meta is required", {"field": "_meta"})
    version = meta.get(VERSION_KEY)
    if not isinstance(version, str):
        raise InvalidParams(
            f"Invalid params: _meta[{VERSION_KEY!r}] is required", {"field": VERSION_KEY}
        )
    if not isinstance(meta.get(CAPABILITIES_KEY), dict):
        raise InvalidParams(
            f"Invalid params: _meta[{CAPABILITIES_KEY!r}] is required", {"field": CAPABILITIES_KEY}
        )
    if headers is not None:  # the headers repeat what the body says
        if header_version is None:
            raise HeaderMismatch("Header mismatch: MCP-Protocol-Version header is required")
        if header_version != version:
            raise HeaderMismatch(
                f"Header mismatch: MCP-Protocol-Version header {header_version!r} does not "
                f"match _meta protocolVersion {version!r}"
            )
        header_method = headers.get("mcp-method")
        if header_method is None:
            raise HeaderMismatch("Header mismatch: Mcp-Method header is required")
        if header_method != method:
            raise HeaderMismatch(
                f"Header mismatch: Mcp-Method header {header_method!r} does not match "
                f"method {method!r}"
            )
        name_param = NAME_PARAMS.get(method)
        if name_param is not None:
            header_name = headers.get("mcp-name")
            if header_name is None:
                if method not in NAME_OPTIONAL:
                    raise HeaderMismatch("Header mismatch: Mcp-Name header is required")
            elif (
                header_name != params.get(name_param) or header_name.startswith(BASE64_OPEN)
            ) and (decode_header_value(header_name.strip()) != params.get(name_param)):
                raise HeaderMismatch(
                    f"Header mismatch: Mcp-Name header does not match params.{name_param}"
                )
    if version != MODERN_VERSION:
        raise UnsupportedVersion(version)
    return meta


def header_params(schema: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``(argument, header name)`` of each property whose schema says ``x-mcp-header``."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return ()
    return tuple(
        (name, prop["x-mcp-header"])
        for name, prop in properties.items()
        if isinstance(prop, dict) and isinstance(prop.get("x-mcp-header"), str)
    )


def check_param_headers(
    headers: Mapping[str, str],
    params: tuple[tuple[str, str], ...],
    arguments: Mapping[str, Any],
) -> None:
    """``Mcp-Param-*`` headers for the arguments :func:`header_params` named."""
    for name, header in params:
        sent = headers.get("mcp-param-" + header.lower())
        value = arguments.get(name)
        if value is None:
            if sent is not None:
                raise HeaderMismatch(
                    f"Header mismatch: Mcp-Param-{header} sent without a value in arguments"
                )
            continue
        if sent is None:
            raise HeaderMismatch(f"Header mismatch: Mcp-Param-{header} header is required")
        expected = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if decode_header_value(sent.strip()) != expected:
            raise HeaderMismatch(
                f"Header mismatch: Mcp-Param-{header} does not match arguments.{name}"
            )
