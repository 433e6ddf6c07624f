"""The tools the playground is tried on (tests/browser/test_playground.py): one per
kind of form field and per kind of outcome, a prompt and a resource.

The tools that wait (``countdown``, ``long_job``) wait for ``release(job)``, which a
test calls over HTTP when it has seen what it looks for: no test sleeps, and no
tool runs on by itself past its bound.
"""

from __future__ import annotations

import asyncio
import base64
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mcplite import Context, Elicitation, Failure, Field, Prompts, Resources, Tools, content

__all__ = ["prompts", "resources", "tools"]

tools = Tools()
prompts = Prompts()
resources = Resources()

#: How long a waiting tool waits for its release before it gives up.
RELEASE_WAIT = 30.0
#: One queue of releases per job name.
_releases: defaultdict[str, asyncio.Queue[None]] = defaultdict(asyncio.Queue)
#: A 1x1 PNG, one red pixel.
RED_PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)


async def _released(job: str) -> bool:
    """Wait for ``release(job)``; False when none came in time."""
    try:
        await asyncio.wait_for(_releases[job].get(), RELEASE_WAIT)
    except TimeoutError:
        return False
    return True


@dataclass
class Traveller:
    name: Annotated[str, Field("Full name", min_length=1)]
    age: Annotated[int, Field("Age in years", ge=0, le=120)]
    email: str | None = None


@tools.tool(
    type="query",
    title="Plan a trip",
    annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
)
def plan_trip(
    destination: Annotated[
        str, Field("A city, capitalised", min_length=2, max_length=40, pattern=r"^[A-Z]")
    ],
    traveller: Traveller,
    stops: Annotated[list[str], Field("Cities on the way", max_items=4)],
    nights: Annotated[int, Field("How many nights", ge=1, le=14)] = 3,
    budget: Annotated[float, Field("In euros", gt=0, lt=10_000)] | None = None,
    travel_by: Literal["train", "plane", "boat"] = "train",
    insured: bool = False,
) -> dict[str, Any]:
    """Plan a trip: every kind of argument the form builds."""
    return {
        "destination": destination,
        "traveller": traveller.name,
        "stops": stops,
        "nights": nights,
        "budget": budget,
        "travel_by": travel_by,
        "insured": insured,
    }


@tools.tool(annotations={"destructiveHint": False})
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tools.tool
def echo_loud(text: str) -> str:
    """Return the text in capitals (retired by a test, to be called unlisted)."""
    return text.upper()


@tools.tool
def snapshot() -> list[Any]:
    """Answer a text, a JSON object and an image."""
    return [
        content.text("one red pixel"),
        {"width": 1, "height": 1},
        content.image(RED_PIXEL, "image/png"),
    ]


@tools.tool(type="generation")
async def countdown(job: str, start: Annotated[int, Field(ge=1, le=10)] = 3) -> AsyncIterator[str]:
    """Count down from start, one part per release(job)."""
    for n in range(start, 0, -1):
        yield f"{n}..."
        if not await _released(job):
            return
    yield "lift-off"


@tools.tool(type="analysis", promise_after=0.3)
async def long_job(job: str, ctx: Context) -> dict[str, Any] | Failure:
    """Run until release(job), reporting progress; a promise, since it takes long."""
    ctx.report_progress(1, 4, "waiting for the go", eta_seconds=60)
    if not await _released(job):
        return Failure(f"job {job} was never released", reason="timeout", retryable=True)
    return {"job": job, "status": "done"}


@tools.tool
async def release(job: str) -> str:
    """Let a waiting job (countdown, long_job) take its next step."""
    _releases[job].put_nowait(None)
    return f"released {job}"


@tools.tool
def retire(name: str) -> str:
    """Stop serving a tool."""
    tools.remove(name)
    return f"{name} retired"


@tools.tool
def book_table(
    guests: Annotated[int, Field("How many people", ge=1, le=12)], name: str | None = None
) -> str | Elicitation:
    """Book a table; asks for the name when it is not given."""
    if name is None:
        return Elicitation(
            "Under which name?",
            {
                "type": "object",
                "properties": {"name": {"type": "string", "minLength": 1, "description": "Yours"}},
                "required": ["name"],
            },
        )
    return f"table for {guests} booked under {name}"


@tools.tool(title="Open a report")
def open_report(report_id: str) -> str:
    """Open a stored report (they are all archived)."""
    raise Failure(f"report {report_id} is archived", reason="archived", retryable=False)


@prompts.prompt
def greet(who: Annotated[str, Field(description="Whom to greet")]) -> str:
    """Write a greeting."""
    return f"Write a short greeting for {who}."


def _memo() -> str:
    return "Water the plants."


resources.add(
    _memo,
    "memo://today",
    name="today",
    title="Today's memo",
    description="What to do today.",
    mime_type="text/plain",
)
