"""Logging: text or JSON lines on stderr, and an access log cheap enough for the hot path.

:func:`setup_logging` is what ``mcplite serve`` and ``stdio`` call: one handler on
the root logger writing to stderr, as text (the default,
``2026-11-22 19:35:56,736 INFO mcplite.access: POST /mcp-lite/v1/rpc echo 200 0.41ms``)
or, with ``--log-format json``, one JSON object per line::

    {"ts": "2026-11-22T19:35:56.736Z", "level": "info", "logger": "mcplite.access",
     "binding": "http", "method": "POST", "path": "/mcp-lite/v1/rpc", "tool": "echo",
     "status": 200, "duration_ms": 0.41, "peer": "127.0.0.1"}

A request whose client went away before its answer was complete ends its
line with ``client-gone`` (JSON: ``"outcome": "client-gone"``); one the server
cut off at shutdown with ``cancelled``.  Its status is what was sent (an SSE
stream's ``200``), or ``499`` when nothing was (gRPC: ``CANCELLED``).

Error lines carry ``error_id`` when there is one (the id a client was given)
and ``exc`` (the traceback).  Nothing logged carries a header, a token, a
promise token, an argument value or a secret; the HTTP/2 libraries under
gRPC (``hpack``, ``h2``), which log every header at DEBUG, are held at WARNING.

The access log (:data:`ACCESS`) is written per request, so it must cost little.
When :func:`setup_logging` owns the output and nobody changed the
``mcplite.access`` logger since, its lines are formatted here and written once
per event loop iteration, bypassing ``logging``'s record objects and locks.
Otherwise (mcplite embedded in an application with its own logging), each line
goes through ``logging.getLogger("mcplite.access")`` with the same fields as
``extra``, so any handler or formatter sees them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any, TextIO

from ..core.config import LOG_FORMATS
from ..core.observe import Access
from ..core.wire import iso_timestamp

__all__ = ["ACCESS", "AccessLog", "JsonFormatter", "setup_logging"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Fields of an access line, in order (JSON keys; ``extra`` names on the logging path).
ACCESS_FIELDS = ("binding", "method", "path", "tool", "status", "duration_ms", "peer")
# Standard LogRecord attributes: anything else on a record came from ``extra``.
_RECORD_KEYS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

access_logger = logging.getLogger("mcplite.access")
#: Third-party loggers that would log credentials at DEBUG (hpack: every header).
_QUIET = ("hpack", "h2")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, the ``extra``
    fields, and ``exc`` (the traceback) when there is one."""

    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static = static or {}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": iso_timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            **self.static,
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_KEYS and not key.startswith("_"):
                out[key] = value
        if "status" not in out:  # an access line has its fields; others a message
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class AccessLog:
    """One line per request or call; see the module doc for the two paths."""

    def __init__(self) -> None:
        self._stream: TextIO | None = None
        self._json = False
        self._static = ""
        self._prefix = ""  # text: the logger part after the time
        self._pending: list[str] = []
        self._scheduled = False
        self._second = -1
        self._stamp = ""
        self._handler: logging.Handler | None = None

    def direct(
        self, stream: TextIO, *, json_lines: bool, static: dict[str, Any], handler: logging.Handler
    ) -> None:
        """Write lines to ``stream`` ourselves while ``handler`` is the only output."""
        self._stream = stream
        self._json = json_lines
        self._static = "".join(f",{json.dumps(k)}:{json.dumps(v)}" for k, v in static.items())
        name = "mcplite.access"
        if "worker" in static:
            name = f"mcplite.access[{static['worker']}]"
        self._prefix = f" INFO {name}: "
        self._handler = handler

    def _owned(self) -> bool:
        """Whether the direct path is still right: our handler alone on the root, the
        access logger untouched and at INFO or below."""
        root = logging.getLogger()
        return (
            self._stream is not None
            and root.handlers == [self._handler]
            and not access_logger.handlers
            and access_logger.propagate
            and access_logger.isEnabledFor(logging.INFO)
        )

    def enabled(self) -> bool:
        return access_logger.isEnabledFor(logging.INFO)

    def write(self, entry: Access) -> None:
        """One line of ``entry``."""
        binding, method, path, tool = entry.binding, entry.method, entry.path, entry.tool
        status, duration_ms, peer = entry.status, entry.duration_ms, entry.peer
        outcome = entry.outcome
        if self._stream is None or not self._owned():  # through logging, fields as extra
            values = (binding, method, path, tool, status, round(duration_ms, 2), peer and peer[0])
            extra: dict[str, Any] = dict(zip(ACCESS_FIELDS, values, strict=True))
            text, args = "%s %s %s %s %.2fms", [method, path, tool or "-", status, duration_ms]
            if outcome is not None:
                extra["outcome"] = outcome
                text, args = text + " %s", [*args, outcome]
            access_logger.info(text, *args, extra=extra)
            return
        now = time.time()
        if self._json:
            status_text = status if isinstance(status, int) else json.dumps(status)
            peer_text = json.dumps(peer[0]) if peer else "null"
            tail = "" if outcome is None else f',"outcome":{json.dumps(outcome)}'
            line = (
                f'{{"ts":"{iso_timestamp(now)}","level":"info","logger":"mcplite.access"{self._static},'
                f'"binding":"{binding}","method":{json.dumps(method)},"path":{json.dumps(path)},'
                f'"tool":{json.dumps(tool)},"status":{status_text},'
                f'"duration_ms":{duration_ms:.2f},"peer":{peer_text}{tail}}}\n'
            )
        else:
            seconds = int(now)
            if seconds != self._second:
                self._second = seconds
                self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
            millis = int((now - seconds) * 1000)
            line = (
                f"{self._stamp},{millis:03d}{self._prefix}{method} {path} {tool or '-'} "
                f"{status} {duration_ms:.2f}ms{'' if outcome is None else ' ' + outcome}\n"
            )
        self._pending.append(line)
        if not self._scheduled:
            self._scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a thread): write now
                self.flush()

    def flush(self) -> None:
        """Write what is pending (once per loop iteration, and at shutdown)."""
        self._scheduled = False
        if not self._pending or self._stream is None:
            return
        data = "".join(self._pending)
        self._pending.clear()
        try:
            self._stream.write(data)
            self._stream.flush()
        except (OSError, ValueError):  # stderr closed or gone: nothing to do about it
            pass


#: The process's access log.
ACCESS = AccessLog()


def setup_logging(
    level: str = "info",
    log_format: str = "text",
    *,
    stream: TextIO | None = None,
    worker: str | None = None,
) -> None:
    """Log to ``stream`` (stderr) as text or JSON lines, at ``level``; ValueError
    for a ``log_format`` not in :data:`~mcplite.core.config.LOG_FORMATS`.

    ``worker`` names a ``--workers`` process in every line (text: the logger's
    name becomes ``name[worker]``; JSON: a ``worker`` field).
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"--log-format must be one of {LOG_FORMATS}, got {log_format!r}")
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    static = {"worker": worker} if worker is not None else {}
    if log_format == "json":
        handler.setFormatter(JsonFormatter(static))
    else:
        text = TEXT_FORMAT
        if worker is not None:
            text = f"%(asctime)s %(levelname)s %(name)s[{worker}]: %(message)s"
        handler.setFormatter(logging.Formatter(text))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # HTTP/2's header codec logs every header it decodes at DEBUG, the gRPC
    # `authorization` metadata included: never below WARNING, whatever the level.
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    ACCESS.direct(stream, json_lines=log_format == "json", static=static, handler=handler)
