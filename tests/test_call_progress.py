"""``mcplite call`` on a long call: a progress line on a terminal, silence elsewhere,
and Ctrl-C (cancel the promise, ask, or print its token).

The CLI runs as a subprocess (``python -m mcplite call ...``) against a server
started in-process; its stderr (and stdin or stdout, where a test says so) is a
real pseudo-terminal from :func:`pty.openpty`, read with ``select`` and a deadline.
The tools are gated by the test: ``crunch`` reports 25 % and waits for the first
gate, then 75 % and waits for the second, so a test sees each percentage before
it lets the tool go on, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    BASE,
    PROCESS_WAIT,
    WAIT,
    DelegatingStore,
    RunningServer,
    start_server,
    subprocess_env,
)

from mcplite import PromiseRecord, Tools
from mcplite.client.progress import PromiseProgress, render
from mcplite.core.tools import ALWAYS, Context

ROOT = Path(__file__).resolve().parent.parent
CALL = [sys.executable, "-m", "mcplite", "call"]
SPINNER = set("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
CLEAR = "\x1b[K"
PERCENT = re.compile(r"(\d+)% ")
TOKEN = re.compile(r"prom_[A-Za-z0-9_-]+")
SETTLE = 0.1  # promise_after of the gated tools: the promise comes with their first report


class Job:
    """The tools of a test, and the gates and events through which it drives them."""

    def __init__(self) -> None:
        self.gates = [asyncio.Event(), asyncio.Event()]
        self.cancelled = asyncio.Event()
        self.tools = Tools()

        @self.tools.tool(promise_after=SETTLE)
        async def crunch(ctx: Context | None = None) -> str:
            """Two steps, each waiting for its gate; reports progress and an ETA."""
            assert ctx is not None
            try:
                ctx.report_progress(1, 4, "step 1 of 2", eta_seconds=30)
                await self.gates[0].wait()
                ctx.report_progress(3, 4, "step 2 of 2", eta_seconds=10)
                await self.gates[1].wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return "crunched"

        @self.tools.tool(promise_after=SETTLE)
        async def idle() -> str:
            """Reports nothing; waits for the first gate."""
            await self.gates[0].wait()
            return "idle done"

        @self.tools.tool(promise_after=ALWAYS)
        async def steps(ctx: Context | None = None) -> str:
            """Three quick steps with progress, on its own."""
            assert ctx is not None
            for step in range(3):
                ctx.report_progress(step, 3, f"step {step + 1}")
                await asyncio.sleep(0.1)  # the tool's work
            return "stepped"

    def open(self, server: RunningServer, *gates: int) -> None:
        for gate in gates:
            server.call_soon(self.gates[gate].set)

    def was_cancelled(self, server: RunningServer, timeout: float = WAIT) -> bool:
        async def wait() -> bool:
            try:
                await asyncio.wait_for(self.cancelled.wait(), timeout)
            except TimeoutError:
                return False
            return True

        result: bool = server.run(wait(), timeout=timeout + WAIT)
        return result


class RedeemSpy(DelegatingStore):
    """Sets ``redeemed`` when a redeem (or cancel) reads a promise: the client holds
    the token and waits on it."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.redeemed = threading.Event()

    async def get(self, promise_id: bytes) -> PromiseRecord:
        self.redeemed.set()
        return await self.inner.get(promise_id)


@pytest.fixture
def job() -> Job:
    return Job()


@pytest.fixture
def server(job: Job) -> Iterator[RunningServer]:
    running = start_server(job.tools, grpc=True)
    try:
        yield running
    finally:
        job.open(running, 0, 1)
        running.stop()


def http_url(server: RunningServer) -> str:
    return f"http://127.0.0.1:{server.port}{BASE}"


def env() -> dict[str, str]:
    out = subprocess_env()
    for name in ("COLUMNS", "LINES"):  # the width comes from the pseudo-terminal
        out.pop(name, None)
    return out


class Terminal:
    """The CLI with stderr on a pseudo-terminal of ``columns`` columns; stdin and
    stdout too when asked, else stdin empty and stdout a pipe.  Every read has a
    deadline; :meth:`close` kills what is left."""

    def __init__(
        self,
        *args: str,
        columns: int = 80,
        stdin_tty: bool = False,
        stdout_tty: bool = False,
    ) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.master = master
        self.proc = subprocess.Popen(
            [*CALL, *args],
            stdin=slave if stdin_tty else subprocess.DEVNULL,
            stdout=slave if stdout_tty else subprocess.PIPE,
            stderr=slave,
            cwd=ROOT,
            env=env(),
            start_new_session=True,  # the pty is not ours to share with the test runner
        )
        os.close(slave)
        self.data = bytearray()
        self.ended = False

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    def read_until(self, done: Callable[[str], bool], timeout: float = WAIT) -> str:
        """Read the terminal until ``done(all text so far)``; fail at the deadline."""
        deadline = time.monotonic() + timeout
        while not done(self.text):
            if self.ended:
                pytest.fail(f"the terminal closed first; it showed: {self.text!r}")
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"not shown in time; the terminal showed: {self.text!r}")
            ready, _, _ = select.select([self.master], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: every slave end is closed
                chunk = b""
            if not chunk:
                self.ended = True
            self.data += chunk
        return self.text

    def finish(self, timeout: float = PROCESS_WAIT) -> tuple[int, str]:
        """Read to the end; the exit status and stdout (empty when on the terminal)."""
        self.read_until(lambda _: self.ended, timeout)
        stdout = self.proc.stdout.read().decode() if self.proc.stdout is not None else ""
        return self.proc.wait(timeout), stdout

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(PROCESS_WAIT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        os.close(self.master)


@pytest.fixture
def terminals() -> Iterator[Callable[..., Terminal]]:
    made: list[Terminal] = []

    def start(*args: str, **options: Any) -> Terminal:
        terminal = Terminal(*args, **options)
        made.append(terminal)
        return terminal

    yield start
    for terminal in made:
        terminal.close()


def frames(text: str) -> list[str]:
    """Each drawing of the progress line: what comes after a carriage return,
    without the clear-to-end-of-line; empty ones (erasures) left out."""
    return [seg.replace(CLEAR, "") for seg in text.split("\r") if seg.replace(CLEAR, "").strip()]


def percentages(text: str) -> list[int]:
    return [int(m.group(1)) for f in frames(text) for m in [PERCENT.match(f.strip())] if m]


def screen(text: str) -> list[str]:
    """What a terminal shows after ``text``: carriage return, newline and
    clear-to-end-of-line applied (the only controls the CLI writes)."""
    lines = [""]
    col = 0
    for token in re.split(r"(\r|\n|\x1b\[K)", text):
        if token == "\r":
            col = 0
        elif token == "\n":
            lines.append("")
            col = 0
        elif token == CLEAR:
            lines[-1] = lines[-1][:col]
        elif token:
            line = lines[-1].ljust(col)
            lines[-1] = line[:col] + token + line[col + len(token) :]
            col += len(token)
    return lines


def shows(*needles: str) -> Callable[[str], bool]:
    """True once one frame has every needle."""
    return lambda text: any(all(n in f for n in needles) for f in frames(text))


# --- the progress line ----------------------------------------------------------------


@pytest.mark.parametrize("binding", ["http", "grpc"])
def test_a_waiting_call_draws_a_bar_with_rising_percentages_and_erases_it(
    binding: str, server: RunningServer, job: Job, terminals: Callable[..., Terminal]
) -> None:
    url = http_url(server) if binding == "http" else f"grpc://127.0.0.1:{server.grpc_port}"
    terminal = terminals(url, "crunch", columns=60)
    terminal.read_until(shows("25%", "crunch: step 1 of 2", "ETA 0:"))
    job.open(server, 0)
    terminal.read_until(shows("75%", "step 2 of 2"))
    job.open(server, 1)
    status, stdout = terminal.finish()
    assert (status, stdout) == (0, "crunched\n")
    seen = percentages(terminal.text)
    assert seen[0] == 25 and seen[-1] == 75 and seen == sorted(seen)
    # Drawn in place, within the terminal's width (the last column left free)...
    assert "\n" not in terminal.text
    assert all(len(f) <= 59 for f in frames(terminal.text))
    # ...and erased at the end: nothing stays on the line.
    assert terminal.text.endswith("\r" + CLEAR)
    assert screen(terminal.text) == [""]


def test_on_one_terminal_the_result_follows_on_a_clean_line(
    server: RunningServer, job: Job, terminals: Callable[..., Terminal]
) -> None:
    terminal = terminals(http_url(server), "crunch", stdout_tty=True)
    terminal.read_until(shows("25%"))
    job.open(server, 0, 1)
    status, _ = terminal.finish()
    assert status == 0
    assert screen(terminal.text.replace("\r\n", "\n")) == ["crunched", ""]


def test_with_stderr_not_a_terminal_nothing_but_the_result_is_written(
    server: RunningServer,
) -> None:
    done = subprocess.run(
        [*CALL, http_url(server), "steps"],
        cwd=ROOT,
        env=env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "stepped\n", "")


def test_quiet_draws_nothing_even_on_a_terminal(
    server: RunningServer, terminals: Callable[..., Terminal]
) -> None:
    terminal = terminals(http_url(server), "steps", "--quiet")
    status, stdout = terminal.finish()
    assert (status, stdout, terminal.text) == (0, "stepped\n", "")


def test_a_tool_without_progress_shows_a_spinner_and_the_time(
    server: RunningServer, job: Job, terminals: Callable[..., Terminal]
) -> None:
    terminal = terminals(http_url(server), "idle")

    def spun(text: str) -> bool:  # two different spinner steps, each with the time
        steps = {f[0] for f in frames(text) if f[0] in SPINNER and f.endswith("  0:00")}
        return len(steps) >= 2

    terminal.read_until(spun)
    assert all(f[2:].startswith("idle  0:0") for f in frames(terminal.text))
    assert not percentages(terminal.text)
    job.open(server, 0)
    status, stdout = terminal.finish()
    assert (status, stdout) == (0, "idle done\n")
    assert screen(terminal.text) == [""]


def test_the_line_fits_any_width_and_shows_no_control_characters() -> None:
    progress = PromiseProgress(2, 3, "line one\nline two \x1b[31mred\x07", time.time() + 65)
    for width in range(1, 120):
        line = render("crunch", progress, elapsed=3725, now=time.time(), width=width)
        assert len(line) <= width
        assert not any(ord(ch) < 32 or ord(ch) == 127 for ch in line)
    wide = render("crunch", progress, elapsed=3725, now=time.time(), width=100)
    assert wide.startswith(" 66% ")
    assert "crunch: line one line two  [31mred " in wide
    assert wide.endswith("  ETA 1:05  1:02:05")


# --- Ctrl-C ----------------------------------------------------------------------------


def test_ctrl_c_with_cancel_on_interrupt_cancels_the_promise(
    server: RunningServer, job: Job, terminals: Callable[..., Terminal]
) -> None:
    terminal = terminals(http_url(server), "crunch", "--cancel-on-interrupt")
    terminal.read_until(shows("25%"))
    terminal.proc.send_signal(signal.SIGINT)
    status, stdout = terminal.finish()
    assert (status, stdout) == (130, "")
    lines = screen(terminal.text)
    assert lines[0].startswith("mcplite: interrupted; cancelled the call on the server (prom_")
    assert job.was_cancelled(server)
    token = TOKEN.search(terminal.text)
    assert token is not None
    result = server.call("redeem", {"promise": token.group(0)})["result"]
    assert result["isError"] is True and result["failure"]["reason"] == "cancelled"


def test_ctrl_c_without_a_terminal_prints_a_redeem_command_that_works(
    server: RunningServer, job: Job
) -> None:
    spy = RedeemSpy(server.dispatcher.promises)
    server.call_soon(lambda: setattr(server.dispatcher, "promises", spy))
    url = http_url(server)
    proc = subprocess.Popen(
        [*CALL, url, "crunch"],
        cwd=ROOT,
        env=env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert spy.redeemed.wait(WAIT), "the CLI never redeemed its promise"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=PROCESS_WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=PROCESS_WAIT)
    assert (proc.returncode, stdout) == (130, "")
    first, command = stderr.splitlines()
    assert first == "mcplite: interrupted; the call goes on on the server. Redeem it later with:"
    words = shlex.split(command)
    assert words[:4] == ["mcplite", "call", url, "redeem"] and TOKEN.fullmatch(words[4][8:])
    assert not job.cancelled.is_set()
    job.open(server, 0, 1)
    later = subprocess.run(
        [sys.executable, "-m", *words],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT,
        check=False,
    )
    assert (later.returncode, later.stdout, later.stderr) == (0, "crunched\n", "")


def test_ctrl_c_on_a_terminal_asks_and_cancels_on_yes(
    server: RunningServer, job: Job, terminals: Callable[..., Terminal]
) -> None:
    terminal = terminals(http_url(server), "crunch", stdin_tty=True)
    terminal.read_until(shows("25%"))
    terminal.proc.send_signal(signal.SIGINT)
    terminal.read_until(lambda text: "Cancel the call on the server? [y/N] " in text)
    os.write(terminal.master, b"y\n")
    status, _ = terminal.finish()
    assert status == 130
    assert "cancelled the call on the server" in terminal.text
    assert job.was_cancelled(server)


def test_a_second_ctrl_c_at_the_question_exits_at_once_and_the_call_goes_on(
    server: RunningServer, job: Job, terminals: Callable[..., Terminal]
) -> None:
    terminal = terminals(http_url(server), "crunch", stdin_tty=True)
    terminal.read_until(shows("25%"))
    terminal.proc.send_signal(signal.SIGINT)
    terminal.read_until(lambda text: "[y/N] " in text)
    terminal.proc.send_signal(signal.SIGINT)
    status, _ = terminal.finish()
    assert status == 130
    assert "mcplite call " in terminal.text  # the token, to redeem it later
    assert not job.cancelled.is_set()  # no cancel was sent: the CLI has ended
