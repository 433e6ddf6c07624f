"""A progress line on a terminal while ``mcplite call`` waits for a long call.

:class:`PromiseProgress` reads what a promise says about its progress (its
``_meta``: ``progress`` ``{progress, total, message}`` and ``estimated_completion``,
the same over HTTP and gRPC).  :func:`render` makes one line of it, fitted to a
width: a bar with a percentage when the total is known, else a spinner; the
server's message; an ETA from ``estimated_completion``; the time elapsed::

     50% ███████████░░░░░░░░░░░ crunch: step 2 of 4  ETA 0:03  0:02
    ⠹ crunch: loading  0:07

:class:`ProgressLine` draws it on a terminal (stderr), in place: a carriage
return, the line, and "clear to the end of the line", at most ten times a
second and only when the line changes; :meth:`ProgressLine.erase` leaves the
line empty, so what follows (the result, an error) starts on a clean line.
Nothing here writes to stdout, and nothing here decides *whether* to draw:
the CLI draws only when stderr is a terminal and ``--quiet`` is not given.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import time
import unicodedata
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

__all__ = ["REDRAW_INTERVAL", "ProgressLine", "PromiseProgress", "render", "terminal_width"]

#: Seconds between redraws (at most ten a second).
REDRAW_INTERVAL = 0.1

#: "Carriage return" and "erase to the end of the line" (ECMA-48 EL, CSI K).
_RETURN = "\r"
_CLEAR_TO_END = "\x1b[K"

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_SPINNER_ASCII = "|/-\\"
_FULL, _EMPTY = "█", "░"
_FULL_ASCII, _EMPTY_ASCII = "#", "-"


@dataclass(frozen=True, slots=True)
class PromiseProgress:
    """What a promise last said about its progress (every field may be missing)."""

    progress: float | None = None
    total: float | None = None
    message: str | None = None
    estimated_completion: float | None = None  # epoch seconds

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> PromiseProgress:
        """From a promise's ``_meta``; anything malformed is left out."""
        reported = meta.get("progress")
        reported = reported if isinstance(reported, Mapping) else {}
        message = reported.get("message")
        return cls(
            progress=_number(reported.get("progress")),
            total=_number(reported.get("total")),
            message=message if isinstance(message, str) and message else None,
            estimated_completion=_epoch(meta.get("estimated_completion")),
        )

    @property
    def fraction(self) -> float | None:
        """``progress / total`` in [0, 1], or None when the total is not known."""
        if self.progress is None or self.total is None or not self.total > 0:
            return None
        return min(1.0, max(0.0, self.progress / self.total))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _epoch(value: Any) -> float | None:
    """An ISO 8601 timestamp (as ``_meta`` has them) or epoch seconds."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return _number(value)


# --- one line -----------------------------------------------------------------------


def render(
    label: str,
    progress: PromiseProgress | None,
    *,
    elapsed: float,
    now: float,
    width: int,
    frame: int = 0,
    unicode: bool = True,
) -> str:
    """The progress line of call ``label``, at most ``width`` columns wide.

    ``elapsed`` is the time since the call began, ``now`` the epoch time (for the
    ETA), ``frame`` the spinner's step.  With a known total: a percentage and a
    bar; without: a spinner (and the count reported, if any).
    """
    progress = progress or PromiseProgress()
    tail = ""
    if progress.estimated_completion is not None:
        left = progress.estimated_completion - now
        if left >= 0.5:
            tail += f"  ETA {_duration(left)}"
    tail += f"  {_duration(elapsed)}"
    text = _printable(label)
    if progress.message:
        text += f": {_printable(progress.message)}"
    fraction = progress.fraction
    if fraction is not None:
        percent = f"{math.floor(fraction * 100):3d}% "
        bar_width = max(4, min(30, (width - len(percent) - len(tail) - 16) // 2))
        filled = math.floor(fraction * bar_width)
        full, empty = (_FULL, _EMPTY) if unicode else (_FULL_ASCII, _EMPTY_ASCII)
        bar = full * filled + empty * (bar_width - filled)
        head = percent + (bar if unicode else f"[{bar}]") + " "
    else:
        spinner = _SPINNER if unicode else _SPINNER_ASCII
        head = spinner[frame % len(spinner)] + " "
        if progress.progress is not None:
            text += f" ({progress.progress:g})"
    room = width - _columns(head) - _columns(tail)
    if room < 8:  # narrow: the tail goes first, then whatever does not fit
        return _fit(head + text, width)
    return head + _fit(text, room) + tail


def _printable(text: str) -> str:
    """``text`` without control characters: a server's message must not move the
    cursor, ring the bell or change colours (escape sequences start with one)."""
    return "".join(" " if unicodedata.category(ch)[0] == "C" else ch for ch in text)


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, with an ellipsis when cut."""
    if _columns(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        cols = _columns(ch)
        if used + cols > width - 1:
            break
        out.append(ch)
        used += cols
    return "".join(out) + ("…" if width > 0 else "")


def _duration(seconds: float) -> str:
    """``0:07``, ``12:34``, ``1:02:03``."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def terminal_width(stream: TextIO) -> int:
    """Columns of the terminal ``stream`` writes to: ``$COLUMNS`` when set, else the
    terminal's own size, else :func:`shutil.get_terminal_size`'s (80 by default)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return shutil.get_terminal_size().columns


def _unicode(stream: TextIO) -> bool:
    try:
        (_SPINNER + _FULL + _EMPTY + "…").encode(stream.encoding or "ascii")
    except (LookupError, UnicodeEncodeError):
        return False
    return True


# --- on a terminal ------------------------------------------------------------------


class ProgressLine:
    """The progress line of one call on ``stream`` (a terminal), redrawn in place.

    :meth:`update` takes the latest promise (from ``Client.call``'s
    ``on_progress``); :meth:`shown` redraws every :data:`REDRAW_INTERVAL` while
    its block runs, the first time after ``delay`` seconds (or at once when a
    promise came: a call that answers quickly shows nothing), and erases the line
    when the block ends, whatever ends it.
    """

    def __init__(
        self,
        stream: TextIO,
        label: str,
        *,
        delay: float = 0.3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.label = label
        self.delay = delay
        self.clock = clock
        self.started = clock()
        self.progress: PromiseProgress | None = None
        self.promised = False
        self.unicode = _unicode(stream)
        self._frame = 0
        self._drawn = ""  # what the line shows now ("" once erased)
        self._broken = False  # the terminal went away: draw no more

    def update(self, meta: Mapping[str, Any]) -> None:
        """A promise's ``_meta`` with the call's latest progress."""
        self.progress = PromiseProgress.from_meta(meta)
        self.promised = True

    def line(self) -> str:
        """The line as it would be drawn now."""
        return render(
            self.label,
            self.progress,
            elapsed=self.clock() - self.started,
            now=time.time(),
            width=max(1, terminal_width(self.stream) - 1),  # the last column may wrap
            frame=self._frame,
            unicode=self.unicode,
        )

    def draw(self) -> None:
        """Draw the line if it changed (and it is time to show it at all)."""
        if self._broken or (not self.promised and self.clock() - self.started < self.delay):
            return
        self._frame += 1
        line = self.line()
        if line != self._drawn:
            self._write(_RETURN + line + _CLEAR_TO_END)
            self._drawn = line

    def erase(self) -> None:
        """Empty the line (if anything was drawn), the cursor at its start."""
        if self._drawn:
            self._write(_RETURN + _CLEAR_TO_END)
            self._drawn = ""

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self._broken = True

    @contextlib.asynccontextmanager
    async def shown(self) -> AsyncIterator[ProgressLine]:
        """Redraw in the background while the block runs; erase at its end."""

        async def redraw() -> None:
            while True:
                self.draw()
                await asyncio.sleep(REDRAW_INTERVAL)

        task = asyncio.create_task(redraw())
        try:
            yield self
        finally:
            task.cancel()  # it draws no more: it only runs again to end
            self.erase()
            with contextlib.suppress(asyncio.CancelledError):
                await task
