"""The tools of the cold-start and many-tools phases, the same for every server.

``echo`` and :func:`generated` are plain functions (standard library only), so that
the official SDK and fastmcp register exactly what mcplite does without importing
mcplite.  mcplite serves them as ``bench.toolgen:echo_tools`` (echo alone) and
``bench.toolgen:tools_N`` (the first N generated tools, ``tools_1000``); each
registry is built when it is first asked for, so a cold start of ``echo_tools``
does not pay for the thousand others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["TOOL_COUNT", "echo", "generated"]

#: How many tools the many-tools phase registers.
TOOL_COUNT = 1000

# A parameter's annotation and a default for it, the tools' second and third
# parameters cycling through these; names are distinct per tool too.
_KINDS = (
    ("str", '"any"'),
    ("int", "10"),
    ("float", "0.5"),
    ("bool", "False"),
    ("list[str]", "None"),
)
_VERBS = ("find", "count", "rank", "fetch", "check", "summarize", "list", "tag")
_NOUNS = ("orders", "invoices", "tickets", "users", "files", "events", "metrics", "notes")


async def echo(text: str) -> str:
    """Echo the text back."""
    return text


def _source(index: int) -> str:
    verb, noun = _VERBS[index % len(_VERBS)], _NOUNS[index // len(_VERBS) % len(_NOUNS)]
    name = f"{verb}_{noun}_{index:04d}"
    second, second_default = _KINDS[index % len(_KINDS)]
    third, third_default = _KINDS[(index + 2) % len(_KINDS)]
    if third_default == "None":
        third += " | None"
    if second_default == "None":
        second += " | None"
    return (
        f"async def {name}(query: str, option_{index}: {second} = {second_default}, "
        f"extra: {third} = {third_default}) -> str:\n"
        f'    """{verb.capitalize()} the {noun} that match the query (tool number {index}).\n\n'
        f"    Every generated tool has a name and a description of its own, so that no\n"
        f'    server can share them between tools."""\n'
        f"    return f'{name}: {{query}}'\n"
    )


def generated(count: int = TOOL_COUNT) -> list[Callable[..., Any]]:
    """``count`` async functions with three typed parameters each (the first one
    required), distinct names and docstrings."""
    namespace: dict[str, Any] = {}
    exec("\n".join(_source(i) for i in range(count)), namespace)
    return [value for name, value in namespace.items() if not name.startswith("__")]


def _registry(functions: list[Callable[..., Any]]) -> Any:
    from mcplite import Tools

    tools = Tools()
    for function in functions:
        tools.add(function)
    return tools


def __getattr__(name: str) -> Any:
    # mcplite's registries, built on first use (PEP 562): the peers import this
    # module for the plain functions only.
    count = name.removeprefix("tools_")
    if name == "echo_tools":
        value = _registry([echo])
    elif name.startswith("tools_") and count.isdigit():
        value = _registry(generated(int(count)))
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
