"""The demo tools of spec Appendix A, served by ``python -m mcplite serve mcplite.demo``.

- ``search_documents``: searches a small real corpus (``corpus.md`` beside this
  file: sections about MCP, MCP-lite and mcplite), best hits first.
- ``analyze_dataset``: ``quick`` answers at once; ``comprehensive`` takes about
  six seconds of real waiting, reports progress, and so becomes a promise under
  the default 5 s promise deadline.
- ``generate_report``: writes a report section by section, as a stream.
- ``echo``: returns its text; the benchmark's workload.

On MCP it also serves (``prompts`` and ``resources`` beside ``tools``):

- one resource per corpus section, ``mcplite-demo://corpus/<document_id>``
  (markdown), and the template ``mcplite-demo://corpus/{document_id}``, whose
  ``document_id`` completes;
- the prompts ``explain_section`` (a section embedded, explained for a beginner
  or an expert) and ``ask_the_corpus`` (a question to answer with
  ``search_documents``).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import statistics
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources as package_files
from typing import Annotated, Any, Literal

from ..core import content
from ..core.hints import Field
from ..core.outcomes import Elicitation, Failure, MoreResources
from ..core.prompts import Prompts
from ..core.resources import ResourceNotFound, Resources
from ..core.tools import Context, Tools

__all__ = ["prompts", "resources", "tools"]

tools = Tools()
prompts = Prompts()
resources = Resources()

COMPREHENSIVE_STEPS = 6
#: The passes of a comprehensive analysis of a dataset whose id starts with "long":
#: a minute, a promise that is still running when a client cancels it.
LONG_STEPS = 60
STEP_SECONDS = 1.0
SECTION_SECONDS = 0.05  # generate_report's stand-in for the time writing a section takes


@tools.tool(promise_after=math.inf)
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@dataclass(frozen=True, slots=True)
class _Section:
    document_id: str
    title: str
    text: str
    terms: Counter[str]


_WORD = re.compile(r"[a-z0-9_@/-]+")


def _terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) > 1]


def _load_corpus() -> list[_Section]:
    raw = package_files.files(__package__).joinpath("corpus.md").read_text(encoding="utf-8")
    sections = []
    for block in raw.split("\n## ")[1:]:
        title, _, text = block.partition("\n")
        slug = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")
        terms = Counter(_terms(title + " " + text))
        sections.append(_Section(f"doc_{slug}", title.strip(), text.strip(), terms))
    return sections


_CORPUS = _load_corpus()
_DF = Counter(term for s in _CORPUS for term in s.terms)


def _excerpt(text: str, words: list[str], width: int = 160) -> str:
    lowered = text.lower()
    hits = [lowered.find(w) for w in words if lowered.find(w) >= 0]
    start = max(0, min(hits) - 40) if hits else 0
    snippet = text[start : start + width].strip()
    return ("..." if start else "") + snippet + ("..." if start + width < len(text) else "")


@tools.tool(type="query", promise_after=math.inf)
async def search_documents(
    query: Annotated[str, Field(description="Search query")],
    limit: Annotated[int, Field(ge=1, le=100)] = 10,
) -> list[dict[str, Any]] | Elicitation:
    """Search through available documents."""
    words = _terms(query)
    if not words:
        return Elicitation(
            "What should I search for? The query has no searchable words.",
            {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        )
    n = len(_CORPUS)
    scored = []
    for section in _CORPUS:
        score = sum(
            section.terms[w] * math.log(1 + n / _DF[w]) for w in words if w in section.terms
        )
        if score > 0:
            scored.append((score, section))
    scored.sort(key=lambda pair: -pair[0])
    return [
        {
            "document_id": s.document_id,
            "title": s.title,
            "excerpt": _excerpt(s.text, words),
            "score": round(score, 3),
        }
        for score, s in scored[:limit]
    ]


def _dataset(dataset_id: str) -> list[float]:
    # A deterministic stand-in for a stored dataset: the same id, the same numbers.
    # Any str the schema accepts is an id, a lone surrogate (JSON's "\ud800") too:
    # "surrogatepass" hashes it instead of raising, and leaves valid text unchanged.
    seed = hashlib.sha256(dataset_id.encode("utf-8", "surrogatepass")).digest()
    return [((seed[i % 32] * (i + 7)) % 1000) / 10 for i in range(200)]


@tools.tool(type="analysis")
async def analyze_dataset(
    dataset_id: Annotated[str, Field(description="Dataset to analyse", min_length=1)],
    analysis_type: Literal["quick", "comprehensive"] = "quick",
    ctx: Context | None = None,
) -> dict[str, Any] | Failure | MoreResources:
    """Compute summary statistics of a dataset; comprehensive runs long and becomes a promise."""
    if dataset_id.startswith("missing"):
        return Failure(f"dataset '{dataset_id}' does not exist", reason="not_found")
    if dataset_id.startswith("huge") and analysis_type == "quick":
        return MoreResources(
            f"dataset '{dataset_id}' is too large for a quick analysis: "
            "allow 60 s or run a comprehensive analysis",
            time_seconds=60,
        )
    values = _dataset(dataset_id)
    summary: dict[str, Any] = {
        "dataset_id": dataset_id,
        "analysis_type": analysis_type,
        "rows": len(values),
        "mean": round(statistics.fmean(values), 3),
        "min": min(values),
        "max": max(values),
    }
    if analysis_type == "quick":
        return summary
    steps = LONG_STEPS if dataset_id.startswith("long") else COMPREHENSIVE_STEPS
    for step in range(steps):
        if ctx is not None:
            ctx.report_progress(
                step,
                steps,
                f"pass {step + 1} of {steps}",
                eta_seconds=(steps - step) * STEP_SECONDS,
            )
        await asyncio.sleep(STEP_SECONDS)
    summary |= {
        "stdev": round(statistics.stdev(values), 3),
        "median": statistics.median(values),
        "quartiles": [round(q, 3) for q in statistics.quantiles(values, n=4)],
    }
    return summary


_SECTIONS = (
    ("Executive Summary", "{topic}: the quarter closed ahead of plan."),
    ("Revenue", "Revenue for the period increased by 15% on the year before."),
    ("Costs", "Costs grew by 4%, mostly in infrastructure."),
    ("Outlook", "We expect steady growth in the next quarter."),
)


@tools.tool(type="generation")
async def generate_report(
    topic: Annotated[str, Field(description="What the report is about", min_length=1)],
) -> AsyncIterator[str]:
    """Generate a report on a topic, streamed section by section."""
    for i, (title, text) in enumerate(_SECTIONS):
        await asyncio.sleep(SECTION_SECONDS)
        heading = f"{topic.title()} Report\n\n{title}" if i == 0 else f"\n\n{title}"
        yield f"{heading}\n{text.format(topic=topic.capitalize())}"


# --- MCP prompts and resources: the corpus, section by section -----------------------

CORPUS_URI = "mcplite-demo://corpus/"
_BY_ID = {section.document_id: section for section in _CORPUS}


def _section_markdown(section: _Section) -> str:
    return f"## {section.title}\n\n{section.text}\n"


def _add_section_resource(section: _Section) -> None:
    def read() -> str:
        return _section_markdown(section)

    resources.add(
        read,
        CORPUS_URI + section.document_id,
        name=section.document_id,
        title=section.title,
        description=f"The corpus section {section.title!r}.",
        mime_type="text/markdown",
    )


for _section in _CORPUS:
    _add_section_resource(_section)


def _document_ids(value: str) -> list[str]:
    return [doc_id for doc_id in _BY_ID if doc_id.startswith(value.lower())]


@resources.resource(
    CORPUS_URI + "{document_id}",
    name="corpus_section",
    title="A corpus section",
    mime_type="text/markdown",
    complete={"document_id": _document_ids},
)
def corpus_section(document_id: str) -> str:
    """A section of the search corpus, by its document id (as search_documents gives it)."""
    section = _BY_ID.get(document_id)
    if section is None:
        raise ResourceNotFound(CORPUS_URI + document_id)
    return _section_markdown(section)


@prompts.prompt(complete={"document_id": _document_ids})
def explain_section(
    document_id: Annotated[str, Field(description="A document id, as search_documents gives it")],
    audience: Annotated[
        Literal["beginner", "expert"], Field(description="Who the explanation is for")
    ] = "beginner",
) -> list[Any]:
    """Explain one section of the corpus (embedded in the prompt) to a beginner or an expert."""
    section = _BY_ID.get(document_id)
    if section is None:
        raise Failure(f"no section {document_id!r}; search_documents lists the document ids")
    return [
        content.embedded(
            CORPUS_URI + document_id, text=_section_markdown(section), mime_type="text/markdown"
        ),
        f"Explain the section above to {'a beginner' if audience == 'beginner' else 'an expert'}"
        ", in a few sentences.",
    ]


@prompts.prompt
def ask_the_corpus(
    question: Annotated[str, Field(description="What you want to know")],
) -> str:
    """Answer a question from the corpus, searching it first."""
    return (
        f"Answer this question: {question}\n\n"
        "First call search_documents with a few keywords from it, read the sections it "
        f"finds (resources {CORPUS_URI}<document_id>), and cite their titles."
    )
