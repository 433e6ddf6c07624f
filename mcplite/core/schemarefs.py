"""Local ``$ref`` resolution for the schema checker.

A :class:`Document` indexes one schema's ``$id`` resources and ``$anchor``
names once, resolves each ``$ref`` inside it (JSON pointers, anchors, embedded
resources) and compiles every target once, so recursive schemas compile.
Remote references are refused: nothing is ever fetched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from .schemanodes import Node

__all__ = ["Compile", "Document", "Node", "bad"]

Compile = Callable[[Any, str, "Document"], Node]
"""``compile(schema, where, document)``: the checker's compiler, handed in."""


def bad(where: str, message: str) -> ValueError:
    return ValueError(f"invalid schema at {where}: {message}")


# --- references ------------------------------------------------------------------

# The keywords whose values are subschemas (2020-12 and the older spellings), for
# finding every $id and $anchor; a value under any other keyword (enum, const,
# default, examples) is data, not a schema, even when it looks like one.
_SUBSCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SUBSCHEMA_ONE = frozenset(
    {
        "additionalProperties",
        "items",
        "additionalItems",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)


class Target:
    """A ``$ref`` target: compiled once; ``node`` is None while it is being compiled."""

    __slots__ = ("descent", "node")

    def __init__(self, descent: int) -> None:
        self.descent = descent
        self.node: Node | None = None


class Document:
    """One schema being compiled: where its ``$id`` resources and ``$anchor`` names
    are, and each ``$ref`` target compiled once.

    ``descent`` counts the open keywords that step into a part of the value
    (``properties``, ``items``, ``additionalProperties``).  A reference back to a
    target still being compiled is recursion; with no step into the value since
    the target began it would loop forever on any value, so it is refused.
    """

    def __init__(self, root: Any, compile: Compile) -> None:
        self._compile = compile
        self.resources: dict[str, Any] = {}  # absolute URI (no fragment) -> schema
        self.anchors: dict[tuple[str, str], Any] = {}
        self.bases: dict[int, str] = {}  # id(schema) -> its base URI
        self.targets: dict[int, Target] = {}
        self.descent = 0
        self.resources[""] = root
        self._index(root, "")

    def _index(self, root: Any, base: str) -> None:
        stack = [(root, base)]
        while stack:
            schema, base = stack.pop()
            if not isinstance(schema, Mapping) or id(schema) in self.bases:
                continue
            own_id = schema.get("$id")
            if isinstance(own_id, str):
                base = urldefrag(urljoin(base, own_id))[0]
                self.resources.setdefault(base, schema)
            self.bases[id(schema)] = base
            for keyword in ("$anchor", "$dynamicAnchor"):
                anchor = schema.get(keyword)
                if isinstance(anchor, str):
                    self.anchors.setdefault((base, anchor), schema)
            for key, sub in schema.items():
                if key in _SUBSCHEMA_MAPS and isinstance(sub, Mapping):
                    stack.extend((each, base) for each in sub.values())
                elif key in _SUBSCHEMA_LISTS and isinstance(sub, list):
                    stack.extend((each, base) for each in sub)
                elif key in _SUBSCHEMA_ONE:
                    stack.append((sub, base))

    def child(self, schema: Any, where: str) -> Node:
        """Compile the schema of a part of the value (a property, an item)."""
        self.descent += 1
        try:
            return self._compile(schema, where, self)
        finally:
            self.descent -= 1

    def reference(self, schema: Mapping[str, Any], where: str) -> Node:
        """The node of ``schema["$ref"]``, compiled once for every place that refers to it."""
        ref = schema["$ref"]
        if not isinstance(ref, str):
            raise bad(where, f"'$ref' must be a string, not {ref!r}")
        base = self.bases.get(id(schema), "")
        uri, fragment = (base, ref[1:]) if ref.startswith("#") else urldefrag(urljoin(base, ref))
        resource = self.resources.get(uri)
        if resource is None:
            raise bad(
                where,
                f"$ref {ref!r} is not in this schema; only references inside it "
                "(#/$defs/name, #anchor) are supported, remote ones are not fetched",
            )
        target = self._resolve(resource, unquote(fragment), ref, where)
        if isinstance(target, bool):
            return self._compile(target, where, self)  # true or false: accept or reject all
        if id(target) not in self.bases:
            self._index(target, uri)  # a pointer into a place no keyword names
        known = self.targets.get(id(target))
        if known is not None:
            if known.node is not None:
                return known.node
            if known.descent == self.descent:
                raise bad(where, f"$ref {ref!r} refers to itself without a step into the value")
            cell = known

            def recurse(value: Any) -> Any:
                node = cell.node
                assert node is not None  # set once its compilation ends
                return node(value)

            return recurse
        return self.compile(target, ref)

    def compile(self, target: Any, where: str) -> Node:
        """Compile a reference target (the root is one: ``"$ref": "#"``) once."""
        entry = self.targets[id(target)] = Target(self.descent)
        entry.node = self._compile(target, where, self)
        return entry.node

    def _resolve(self, resource: Any, fragment: str, ref: str, where: str) -> Any:
        if not fragment:
            return resource
        if not fragment.startswith("/"):
            uri = self.bases.get(id(resource), "")
            found = self.anchors.get((uri, fragment))
            if found is None:
                raise bad(where, f"$ref {ref!r}: no $anchor named {fragment!r}")
            return found
        node = resource
        for raw in fragment[1:].split("/"):
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise bad(where, f"$ref {ref!r} does not resolve: nothing at {part!r}")
        return node
