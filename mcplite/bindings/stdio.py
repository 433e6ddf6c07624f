"""MCP over stdio: ``python -m mcplite stdio MODULE[:ATTR]``.

The transport an MCP host uses when it starts the server itself: one JSON-RPC
message per line on stdin, one per line on stdout (compact JSON, which never
holds a raw newline), and nothing else on stdout; logs go to stderr.  Every
message is answered by :class:`~mcplite.protocols.mcp.server.McpServer` without headers,
so it classifies each message on its own: a 2026-07-28 ``_meta`` envelope, or
the 2025 revision (``initialize``, ``ping``, ...).

- Each request runs as its own task: a slow tool does not hold up the next
  request.  At most ``max_concurrent_calls`` are in flight; one more is
  answered -32000 at once (reading goes on, so that cancellations get through).
- What a tool says before its result (``notifications/progress``,
  ``notifications/message``) is written as it comes, so before the result.
- A 2025 call asks the client what a tool needs (``elicitation/create``,
  ``sampling/createMessage``, ``roots/list``) with requests of its own on
  stdout; the client's answers come back on stdin.
- ``notifications/cancelled`` stops the request it names, which is then not
  answered (as MCP asks).  Other notifications from the client are ignored.
- A 2026 ``subscriptions/listen`` writes its acknowledgement, then the
  ``notifications/*/list_changed`` it asked for, until the client cancels it
  (``notifications/cancelled`` with its id) or the server stops (a final
  ``resultType: complete`` result).
- A line that is not JSON (an empty one included) gets a -32700 error with id
  null; a line longer than ``max_body_size`` a -32600 error, and no more than
  about twice that is ever held of it; either way the server reads on.
- Backpressure: while the client is not reading stdout, stdin is not read (its
  end included).
- SIGINT/SIGTERM: stop reading, give the requests in flight ``grace`` seconds,
  answer what is left with a shutting-down error, exit.  End of stdin is how an
  MCP client shuts its server down (it sends SIGTERM 2 seconds later): the
  requests in flight get :data:`~mcplite.core.config.STDIN_EOF_GRACE` seconds at
  most.  A closed stdout: they are cancelled at once (nobody can read the answers).

:func:`take_stdio` moves the protocol off file descriptors 0 and 1 before the
tools are imported: a ``print()`` in a tool (or a program it starts) lands on
stderr instead of corrupting the stream, and nothing but the server reads stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import selectors
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..core.config import STDIN_EOF_GRACE, Config
from ..core.context import RequestContext
from ..core.errors import (
    InternalError,
    InvalidRequest,
    MCPLiteError,
    Overloaded,
    ParseError,
    ShuttingDown,
)
from ..protocols.jsonrpc import decode, encode
from ..protocols.mcp.server import McpServer
from .base import loop_name

__all__ = ["StdioPipes", "StdioServer", "run_stdio", "take_stdio"]

log = logging.getLogger("mcplite")
access_log = logging.getLogger("mcplite.access")

#: Seconds the last lines get to reach a client that has stopped reading.
FLUSH_TIMEOUT = 2.0
_READ_CHUNK = 64 * 1024

_RequestKey = tuple[type, str | int]


@dataclass(frozen=True, slots=True)
class StdioPipes:
    """The file descriptors the protocol is read from and written to."""

    stdin: int
    stdout: int


def take_stdio() -> StdioPipes:
    """Move the protocol to new descriptors; point 0 at ``/dev/null`` and 1 at stderr.

    After this, ``sys.stdout`` (still fd 1) writes to stderr, line by line, and
    ``sys.stdin`` reads nothing.  The new descriptors are not inherited by child processes.
    """
    sys.stdout.flush()
    pipes = StdioPipes(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    os.dup2(2, 1)
    if isinstance(sys.stdout, io.TextIOWrapper):  # as prompt as stderr, in order with the logs
        sys.stdout.reconfigure(line_buffering=True)
    return pipes


async def run_stdio(mcp: McpServer, pipes: StdioPipes, stop: asyncio.Event) -> None:
    """Answer the MCP messages read from ``pipes`` until the input ends, the output
    is gone or ``stop`` is set; then drain within the config's ``grace`` and return.

    The pipes are closed on return; the dispatcher is not (its owner closes it).
    """
    config = mcp.dispatcher.config
    server = StdioServer(mcp, config)
    reader = _Input(pipes.stdin, config.max_body_size)
    output = _Output(pipes.stdout)
    try:
        await reader.open()
        await output.open()
        log.info(
            "mcplite %s (%s) serving %d tools on stdio",
            __version__,
            loop_name(asyncio.get_running_loop()),
            len(mcp.dispatcher.tool_definitions()),
        )
        await server.run(reader.stream, output, stop)
    finally:
        await output.close()
        reader.close()


class StdioServer:
    """Answers the messages of one input stream on one output: the read loop,
    the requests in flight, their cancellation and the drain."""

    def __init__(self, mcp: McpServer, config: Config) -> None:
        self.mcp = mcp
        self.config = config
        self.context = RequestContext("stdio")
        self._calls: dict[_RequestKey, asyncio.Task[None]] = {}
        self._output: _Output | None = None

    async def run(self, reader: asyncio.StreamReader, output: _Output, stop: asyncio.Event) -> None:
        """Read and answer until the input ends, ``stop`` is set or the output is
        gone; then let the requests in flight finish within ``config.grace``."""
        self._output = output
        waits = [
            asyncio.ensure_future(self._read(reader)),
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(output.lost.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        await asyncio.wait(waits)
        reading = waits[0]
        if not reading.cancelled() and reading.exception() is not None:
            log.error("reading stdin failed", exc_info=reading.exception())
        grace = self.config.grace
        if output.lost.is_set():
            grace = 0.0  # nobody can read the answers
        elif not reading.cancelled():  # the end of stdin
            grace = min(grace, STDIN_EOF_GRACE)
        await self.drain(grace)

    async def drain(self, grace: float) -> None:
        """Give the requests in flight ``grace`` seconds, then cancel the rest
        (each is answered with a shutting-down error).  A ``subscriptions/listen``
        ends at once with its final result."""
        self.mcp.end_subscriptions()
        calls = set(self._calls.values())
        if not calls:
            return
        log.info("shutting down: %d requests in flight get %ss to finish", len(calls), grace)
        _, pending = await asyncio.wait(calls, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    # -- reading -------------------------------------------------------------

    async def _read(self, reader: asyncio.StreamReader) -> None:
        assert self._output is not None
        limit = self.config.max_body_size
        skipping = False  # inside a line that is too long, until its end
        while True:
            await self._output.drain()  # a client that does not read gets no more answers
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                if end.partial and not skipping:
                    await self._received(end.partial)  # the last line had no newline
                return
            except asyncio.LimitOverrunError as long:
                await reader.readexactly(long.consumed)  # drop what is buffered of it
                if not skipping:
                    skipping = True
                    message = f"Invalid request: message longer than {limit} bytes"
                    error = InvalidRequest(message, {"max_body_size": limit})
                    self._send(_error(None, error))
                continue
            if skipping:
                skipping = False  # the end of the long line
            else:
                await self._received(line)
                # Let the request just started run before the next line is read: a
                # client that writes many at once would otherwise fill
                # max_concurrent_calls with requests that each take a moment.
                await asyncio.sleep(0)

    async def _received(self, line: bytes) -> None:
        try:
            if not line.strip():
                raise ParseError("Parse error: an empty line (one JSON-RPC message per line)")
            message = decode(line)
        except ParseError as exc:
            self._send(_error(None, exc))
            return
        if (
            isinstance(message, dict)
            and "id" not in message
            and message.get("method") == "notifications/cancelled"
        ):
            self._cancel(message.get("params"))
            return
        key = _request_key(message)
        if key is None:
            # A notification, a stray response, or not a request at all: no tool runs,
            # so it is answered (or not) at once.
            reply = await self.mcp.handle(message, self.context)
            if reply.body is not None:
                self._send(reply.body)
            return
        request_id = key[1]
        if key in self._calls:
            error = InvalidRequest(f"Invalid request: id {request_id!r} is already in flight")
            self._send(_error(request_id, error))
            return
        if len(self._calls) >= self.config.max_concurrent_calls:
            limit = self.config.max_concurrent_calls
            overloaded = Overloaded(
                f"Too many requests in flight (max {limit})", retry_after=self.config.retry_after
            )
            self._send(_error(request_id, overloaded))
            return
        self._calls[key] = asyncio.ensure_future(self._answer(message, key))

    def _cancel(self, params: Any) -> None:
        """``notifications/cancelled``: stop the request it names, if still running."""
        request_id = params.get("requestId") if isinstance(params, dict) else None
        key = _key_of(request_id)
        task = self._calls.pop(key, None) if key is not None else None
        if task is not None:
            log.debug("request %r cancelled by the client", request_id)
            task.cancel()

    # -- answering -----------------------------------------------------------

    async def _answer(self, message: dict[str, Any], key: _RequestKey) -> None:
        assert self._output is not None
        output = self._output
        task = asyncio.current_task()
        t0 = time.perf_counter()
        finished = False  # then a promise still running says nothing more for it

        def notify(method: str, params: dict[str, Any]) -> None:
            if not finished:
                output.send_threadsafe({"jsonrpc": "2.0", "method": method, "params": params})

        def send(request: dict[str, Any]) -> None:
            # 2025: a request to the client (elicitation, sampling, roots); its answer
            # comes back as a line of its own, for McpServer.handle.
            if not finished:
                output.send_threadsafe(request)

        body: dict[str, Any] | None
        encoded = None
        try:
            reply = await self.mcp.handle(message, self.context, None, notify, send=send)
            body, encoded = reply.body, reply.encoded
        except asyncio.CancelledError:
            if self._calls.get(key) is task:  # the shutdown, not the client: say so
                self._send(_error(key[1], ShuttingDown()))
                self._log(message, "shutdown", t0)
            else:
                self._log(message, "cancelled", t0)
            raise
        except Exception:
            log.exception("answering %s failed", message.get("method"))
            body = _error(key[1], InternalError())
        finally:
            finished = True
            if self._calls.get(key) is task:
                del self._calls[key]
        if body is not None:
            self._send(body, encoded)
        self._log(message, _outcome(body), t0)
        await output.drain()

    def _send(self, message: dict[str, Any], encoded: bytes | None = None) -> None:
        assert self._output is not None
        self._output.send(message, encoded)

    def _log(self, message: dict[str, Any], outcome: str, t0: float) -> None:
        if not self.config.access_log:
            return
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        access_log.info(
            "stdio %s %s %s %.2fms",
            message.get("method"),
            name if isinstance(name, str) else "-",
            outcome,
            (time.perf_counter() - t0) * 1000,
        )


def _request_key(message: Any) -> _RequestKey | None:
    """The key of a request that gets its own task (a method and a usable id)."""
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    return _key_of(message.get("id"))


def _key_of(request_id: Any) -> _RequestKey | None:
    # 1 and "1" are different ids; true is none (bool is an int in Python).
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    return (type(request_id), request_id)


def _error(request_id: Any, error: MCPLiteError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()}


def _outcome(body: dict[str, Any] | None) -> str:
    if body is None:
        return "-"
    error = body.get("error")
    if isinstance(error, dict):
        return f"error {error.get('code')}"
    result = body.get("result")
    if isinstance(result, dict) and result.get("isError"):
        return "isError"
    return "ok"


# -- the pipes ------------------------------------------------------------------------


def _pollable(fd: int, events: int) -> bool:
    """Whether the event loop can wait on ``fd`` (a pipe, socket or tty can; a regular
    file or /dev/null cannot under epoll)."""
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, events)
        except (OSError, ValueError):
            return False
    return True


def _pipe_file(fd: int, mode: str) -> io.FileIO:
    """A file over a descriptor of its own (a duplicate of ``fd``), for an event loop's
    pipe transport: the transport owns what it is given, and loops close it in their
    own ways (asyncio's closes the file; uvloop's closes the descriptor, in libuv,
    then the file).  ``fd`` stays ours to close."""
    return io.FileIO(os.dup(fd), mode)


def _discard(file: io.FileIO) -> None:
    """Close a :func:`_pipe_file` a loop refused (or closed its descriptor already)."""
    with contextlib.suppress(OSError):
        file.close()


class _Input:
    """A StreamReader over the input: a pipe transport when the loop can poll the
    descriptor, else a thread that reads it (a file, /dev/null)."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd = fd
        self.stream = asyncio.StreamReader(limit=limit)
        self._transport: asyncio.ReadTransport | None = None
        self._reading: threading.Thread | None = None
        # The descriptor shares its O_NONBLOCK flag with whoever else holds the
        # terminal or pipe: put it back as it was when done.
        self._blocking = os.get_blocking(fd)
        self._keep = os.dup(fd)

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        if _pollable(self.fd, selectors.EVENT_READ):
            file = _pipe_file(self.fd, "rb")
            try:
                self._transport, _ = await loop.connect_read_pipe(
                    lambda: asyncio.StreamReaderProtocol(self.stream), file
                )
                return
            except (ValueError, OSError, NotImplementedError):
                _discard(file)  # e.g. kqueue polls a regular file, which asyncio refuses
        self._reading = threading.Thread(
            target=self._pump, args=(loop,), name="mcplite-stdin", daemon=True
        )
        self._reading.start()

    def _pump(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while chunk := os.read(self.fd, _READ_CHUNK):
                loop.call_soon_threadsafe(self.stream.feed_data, chunk)
        except OSError as exc:
            log.debug("reading stdin: %s", exc)
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(self.stream.feed_eof)
        os.close(self.fd)  # here: closing it under a blocked read() would be a race

    def close(self) -> None:
        if self._reading is None:
            if self._transport is not None:
                self._transport.close()
            os.close(self.fd)
        # else: the reading thread closes it at the end of the input (or the
        # process ends first).
        with contextlib.suppress(OSError):
            os.set_blocking(self._keep, self._blocking)
        os.close(self._keep)


class _Pipe(asyncio.Protocol):
    """Flow control for the output pipe; ``lost`` once it is closed (by us, or by
    a client that stopped reading)."""

    def __init__(self, lost: asyncio.Event) -> None:
        self.lost = lost
        self.resumed: asyncio.Future[None] | None = None

    def pause_writing(self) -> None:
        self.resumed = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)
        self.resumed = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        self.resume_writing()


class _Output:
    """The one writer of the output: every message is one whole line, written by
    one call on the loop's thread, so lines never interleave."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lost = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._transport: asyncio.WriteTransport | None = None
        self._pipe: _Pipe | None = None
        self._closed = False
        self._blocking = os.get_blocking(fd)
        self._keep = os.dup(fd)

    async def open(self) -> None:
        if _pollable(self.fd, selectors.EVENT_WRITE):
            file = _pipe_file(self.fd, "wb")
            try:
                self._transport, self._pipe = await self._loop.connect_write_pipe(
                    lambda: _Pipe(self.lost), file
                )
            except (ValueError, OSError, NotImplementedError):
                # Refused (e.g. kqueue polls a regular file): written to directly, as a file.
                _discard(file)

    def send(self, message: dict[str, Any], encoded: bytes | None = None) -> None:
        """Write ``message`` (its JSON ``encoded``, when known) as one line (on the
        loop's thread)."""
        if self._closed or self.lost.is_set():
            return
        try:
            line = (encode(message) if encoded is None else encoded) + b"\n"
        except (TypeError, ValueError) as exc:
            log.error("cannot write %s as JSON: %s", message.get("method") or "a reply", exc)
            if "id" not in message:
                return  # a notification: dropped
            line = encode(_error(message["id"], InternalError())) + b"\n"
        if self._transport is not None:
            self._transport.write(line)
            return
        try:  # a file: writes do not wait for a reader
            view = memoryview(line)
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            log.warning("writing stdout failed: %s", exc)
            self.lost.set()

    def send_threadsafe(self, message: dict[str, Any]) -> None:
        """:meth:`send` from any thread (a sync tool reports progress from a worker)."""
        if threading.get_ident() == self._thread:
            self.send(message)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
                self._loop.call_soon_threadsafe(self.send, message)

    async def drain(self) -> None:
        """Wait while the client is behind on reading."""
        pipe = self._pipe
        if pipe is not None and pipe.resumed is not None:
            await asyncio.shield(pipe.resumed)

    async def close(self) -> None:
        """Flush what is written (within :data:`FLUSH_TIMEOUT`) and close."""
        self._closed = True
        if self._transport is not None:
            self._transport.close()  # once its buffer is written
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.lost.wait(), FLUSH_TIMEOUT)
            if not self.lost.is_set():
                self._transport.abort()
        os.close(self.fd)
        with contextlib.suppress(OSError):
            os.set_blocking(self._keep, self._blocking)
        os.close(self._keep)
