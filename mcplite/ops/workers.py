"""``mcplite serve --workers N``: one supervisor process, N worker processes.

Each worker is today's :func:`mcplite.ops.serve.serve` in its own process, started with
:mod:`multiprocessing`'s "spawn" method (a fresh interpreter; the Config, secret
included, travels through spawn's pipe, never on a command line that ``ps``
shows).  Every worker binds the same HTTP and gRPC ports with ``SO_REUSEPORT``, so
the kernel spreads new connections over them.  The supervisor:

- picks each port once: it binds (without listening) a socket with
  ``SO_REUSEPORT`` on the address, which settles port 0 and keeps the port for the
  workers, and holds it until it exits.  Where SO_REUSEPORT does not spread
  connections (anything but Linux), or with ``MCPLITE_WORKER_SOCKETS=inherit`` in
  the environment, it binds and listens on one socket per binding instead and hands
  it to every worker (spawn passes the descriptor), which all accept on it;
- settles one sealing secret for all workers (``--secret``, else
  ``$MCPLITE_SECRET``, else a random one: tokens then die with the supervisor);
- settles one promise store: the one given, else a SQLite file in a private
  temporary directory it removes at exit (``memory://`` is refused: a promise made
  by one worker could not be redeemed through another);
- says ``serving N tools on ...`` once, when every worker listens;
- stops everything when a worker ends before it listens at the first start, with
  that worker's exit status;
- restarts a worker that dies later, after a backoff (0.5 s doubling up to 10 s,
  back to 0.5 s once a worker has stayed up 30 s), and logs how it ended; a
  replacement that fails before it listens is retried on the same backoff;
- on SIGINT/SIGTERM sends SIGTERM to every worker (each drains within
  ``--grace`` as a single process does), waits ``grace`` + :data:`KILL_MARGIN`
  seconds, kills what is left, and exits 0.

A worker whose supervisor is gone (a pipe only the supervisor holds ends, however
it ended) stops as on SIGTERM, and ends itself ``grace`` + :data:`KILL_MARGIN`
seconds later if it still runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from .._version import __version__
from ..bindings.base import loop_name
from ..core.config import Config
from .exits import leave_stuck_threads
from .logs import setup_logging
from .loops import run_on
from .metrics import METRICS, Health, MetricsServer, merge
from .serve import ServeError, resolve_secret

__all__ = [
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "KILL_MARGIN",
    "STABLE_AFTER",
    "check_store",
    "restart_delay",
    "run_workers",
]

log = logging.getLogger("mcplite")

#: First delay before a dead worker is restarted, in seconds; doubled per death.
BACKOFF_MIN = 0.5
#: Longest delay before a restart, in seconds.
BACKOFF_MAX = 10.0
#: A worker up this many seconds resets its backoff to :data:`BACKOFF_MIN`.
STABLE_AFTER = 30.0
#: Seconds the supervisor waits beyond ``grace`` before it kills workers at shutdown.
KILL_MARGIN = 5.0
#: Seconds a worker gets to start listening before the supervisor gives up on it.
START_TIMEOUT = 60.0

#: Linux spreads connections over the sockets bound with SO_REUSEPORT; elsewhere
#: (BSD, macOS: the last one bound gets them all; Windows: no such option) the
#: workers accept on one listening socket the supervisor binds and hands them.
_REUSEPORT_SPREADS = sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")


def check_store(url: str | None, workers: int) -> None:
    """Refuse a promise store that workers cannot share (:class:`ServeError`, 2)."""
    if url is not None and workers > 1 and url.lower().rstrip("/") in ("memory:", "memory:/"):
        raise ServeError(
            f"--promise-store memory:// cannot be shared by {workers} workers: a promise "
            "made by one could not be redeemed through another; use sqlite:///PATH, "
            "redis://... or leave --promise-store out (a private SQLite file)"
        )
    if url is not None and workers > 1 and url.lower().rstrip("/") == "sqlite:":
        raise ServeError(
            "--promise-store sqlite:// makes a private file per process, which "
            f"{workers} workers cannot share; give sqlite:///PATH or leave it out"
        )


def run_workers(
    target: str, config: Config, workers: int, *, log_level: str, loop: str = "asyncio"
) -> int:
    """Supervise ``workers`` processes serving ``target`` with ``config`` until
    SIGINT/SIGTERM; the exit status.  ``config.promise_store`` empty: a SQLite file
    in a private temporary directory.  The supervisor and every worker run on the
    event loop ``loop`` names (see :mod:`mcplite.ops.loops`).  Raises
    :class:`ServeError`."""
    check_store(config.promise_store or None, workers)
    inherit = os.environ.get("MCPLITE_WORKER_SOCKETS") == "inherit" or not _REUSEPORT_SPREADS
    reserved: dict[str, socket.socket] = {}
    private_dir: str | None = None
    try:
        if config.http is not None:
            reserved["HTTP"] = sock = _reserve("HTTP", *config.http, listen=inherit)
            config = dataclasses.replace(config, http=(config.http[0], sock.getsockname()[1]))
        if config.grpc is not None:
            reserved["gRPC"] = sock = _reserve("gRPC", *config.grpc, listen=inherit)
            config = dataclasses.replace(config, grpc=(config.grpc[0], sock.getsockname()[1]))
        if not config.promise_store:
            private_dir = tempfile.mkdtemp(prefix="mcplite-workers-")  # mode 0700
            path = os.path.join(os.path.abspath(private_dir), "promises.db")
            config = dataclasses.replace(config, promise_store=f"sqlite:///{path}")
        config = resolve_secret(
            config,
            "the supervisor made a random one for its workers; promise tokens die with "
            "the supervisor",
        )
        shared = reserved if inherit else None
        supervisor = _Supervisor(target, config, workers, log_level, loop, shared, private_dir)
        return run_on(loop, supervisor.run())
    finally:
        for sock in reserved.values():
            sock.close()
        if private_dir is not None:
            shutil.rmtree(private_dir, ignore_errors=True)


def restart_delay(backoff: float, uptime: float) -> tuple[float, float]:
    """The delay before restarting a worker that was up ``uptime`` seconds, and the
    backoff for its next death: doubling from :data:`BACKOFF_MIN` to
    :data:`BACKOFF_MAX`, back to the minimum after :data:`STABLE_AFTER` seconds up."""
    if uptime >= STABLE_AFTER:
        backoff = BACKOFF_MIN
    return backoff, min(backoff * 2, BACKOFF_MAX)


def _reserve(name: str, host: str, port: int, *, listen: bool) -> socket.socket:
    """A socket bound to ``host:port``, which settles port 0 for every worker: with
    SO_REUSEPORT and not listening (it takes no connections; each worker binds its
    own), or listening (``listen``: the workers inherit and accept on it)."""
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ServeError(f"cannot listen for {name} on {host}:{port}: {exc}", 1) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if listen:
            sock.bind(sockaddr)
            sock.listen(1024)
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise ServeError(f"cannot listen for {name} on {host}:{port}: {reason}", 1) from None
    return sock


def _ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "ended"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


@dataclasses.dataclass(eq=False)
class _Slot:
    """One worker place: the process that fills it now, and its restart backoff."""

    index: int
    process: BaseProcess | None = None
    ready: Connection | None = None
    started_at: float = 0.0
    backoff: float = BACKOFF_MIN
    restart: asyncio.TimerHandle | None = None
    ever_ready: bool = False
    metrics_url: str | None = None  # the worker's own /metrics (loopback), when on


class _Supervisor:
    def __init__(
        self,
        target: str,
        config: Config,
        workers: int,
        log_level: str,
        loop: str,
        sockets: dict[str, socket.socket] | None,
        private_dir: str | None = None,
    ) -> None:
        self.target = target
        self.loop = loop
        self.sockets = sockets
        self.private_dir = private_dir
        self.config = config
        self.log_level = log_level
        self.context = multiprocessing.get_context("spawn")
        self.slots = [_Slot(i + 1) for i in range(workers)]
        self.stopping = False
        self.failed: int | None = None  # exit status when a first start failed
        self.announced = False
        self.changed = asyncio.Event()
        # Workers read this pipe; it ends when the supervisor does, however it ends,
        # and then they stop (drain) on their own.
        self.lifeline, self._lifeline_end = self.context.Pipe(duplex=False)
        self.metrics: MetricsServer | None = None
        self.health = Health()

    async def _start_metrics(self) -> None:
        """``--metrics`` on the supervisor: every worker's figures, labelled by worker."""
        assert self.config.metrics is not None
        health = self.health
        health.checks.append(self._a_worker_ready)
        self.metrics = MetricsServer(METRICS, health, metrics=self._gather)
        host, port = self.config.metrics
        try:
            await self.metrics.start(host, port)
        except OSError as exc:
            raise ServeError(f"--metrics {host}:{port}: {exc.strerror or exc}") from None
        health.listening = True

    async def _gather(self) -> str:
        slots = [s for s in self.slots if s.metrics_url is not None and s.process is not None]
        answers = await asyncio.gather(*(_fetch(s.metrics_url or "") for s in slots))
        pairs = zip(slots, answers, strict=True)
        return merge({str(slot.index): text for slot, (status, text) in pairs if status == 200})

    async def _a_worker_ready(self) -> str | None:
        if self.stopping:
            return None  # draining says it
        slots = [s for s in self.slots if s.metrics_url is not None and s.process is not None]
        urls = [(s.metrics_url or "").replace("/metrics", "/readyz") for s in slots]
        answers = await asyncio.gather(*(_fetch(url) for url in urls))
        if any(status == 200 for status, _ in answers):
            return None
        return "no worker is ready"

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop)
        if self.config.metrics is not None:
            await self._start_metrics()
        for slot in self.slots:
            self._start(slot)
        deadline = loop.time() + START_TIMEOUT
        while not self.stopping and self.failed is None and not self.announced:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                log.error("workers did not start listening within %ss", START_TIMEOUT)
                self.failed = 1
        if self.failed is None:
            while not self.stopping:
                self.changed.clear()
                await self.changed.wait()
        if self.metrics is not None:
            self.health.draining = True
        await self._shutdown()
        if self.metrics is not None:
            await self.metrics.close()
        self._lifeline_end.close()
        self.lifeline.close()
        if self.failed is None:
            log.info("stopped")
        return self.failed or 0

    # --- workers ----------------------------------------------------------------------

    def _start(self, slot: _Slot) -> None:
        slot.restart = None
        receive, send = self.context.Pipe(duplex=False)
        config = self.config
        if config.metrics is not None:  # each worker's own listener, on loopback
            config = dataclasses.replace(config, metrics=("127.0.0.1", 0))
        slot.metrics_url = None
        process = self.context.Process(
            target=_worker_main,
            args=(
                self.target,
                config,
                self.log_level,
                self.loop,
                send,
                self.lifeline,
                self.sockets,
                self.private_dir,
            ),
            name=f"mcplite-worker-{slot.index}",
        )
        process.start()
        send.close()
        slot.process, slot.ready, slot.started_at = process, receive, time.monotonic()
        loop = asyncio.get_running_loop()
        loop.add_reader(receive.fileno(), self._on_ready, slot, receive)
        loop.add_reader(process.sentinel, self._on_exit, slot, process)

    def _on_ready(self, slot: _Slot, receive: Connection) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(receive.fileno())
        try:
            count, urls = receive.recv()
        except (EOFError, OSError):
            return  # died before it listened: _on_exit says so
        finally:
            receive.close()
            if slot.ready is receive:
                slot.ready = None
        if slot.process is None:
            return
        slot.metrics_url = next((u for u in urls if u.endswith("/metrics")), None)
        urls = [u for u in urls if not u.endswith("/metrics")]
        if self.metrics is not None:
            urls.append(self.metrics.url())
        restarted = slot.ever_ready
        slot.ever_ready = True
        if restarted:
            log.info("worker %d restarted (pid %s)", slot.index, slot.process.pid)
        elif not self.announced and all(s.ever_ready for s in self.slots):
            self.announced = True
            log.info(
                "%d workers (pids %s); promises in %s",
                len(self.slots),
                ", ".join(str(s.process.pid) for s in self.slots if s.process),
                self.config.promise_store,
            )
            log.info(
                "mcplite %s (%s) serving %d tools on %s",
                __version__,
                loop_name(asyncio.get_running_loop()),
                count,
                " and ".join(urls),
            )
        self.changed.set()

    def _on_exit(self, slot: _Slot, process: BaseProcess) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(process.sentinel)
        process.join(1.0)
        served = slot.ready is None  # it said it listens (or is being stopped)
        if slot.ready is not None:
            loop.remove_reader(slot.ready.fileno())
            slot.ready.close()
            slot.ready = None
        slot.process = None
        self.changed.set()
        if self.stopping:
            return
        how = _ended(process.exitcode)
        if not self.announced:
            log.error("worker %d (pid %s) %s before it served", slot.index, process.pid, how)
            code = process.exitcode
            self.failed = code if code is not None and code > 0 else 1
            self.stopping = True
            return
        delay, slot.backoff = restart_delay(slot.backoff, time.monotonic() - slot.started_at)
        log.warning(
            "worker %d (pid %s) %s%s; restarting it in %.1fs",
            slot.index,
            process.pid,
            how,
            "" if served else " before it served",
            delay,
        )
        slot.restart = loop.call_later(delay, self._start, slot)

    # --- shutdown ---------------------------------------------------------------------

    def _stop(self) -> None:
        if not self.stopping:
            log.info("shutting down: %d workers finish in-flight calls", len(self.slots))
        self.stopping = True
        self.changed.set()

    async def _shutdown(self) -> None:
        self.stopping = True
        for slot in self.slots:
            if slot.restart is not None:
                slot.restart.cancel()
                slot.restart = None
            if slot.process is not None and slot.process.is_alive():
                slot.process.terminate()  # SIGTERM: the worker drains within grace
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.grace + KILL_MARGIN
        while any(s.process is not None for s in self.slots) and loop.time() < deadline:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                break
        for slot in self.slots:
            process = slot.process
            if process is None:
                continue
            log.warning("worker %d (pid %s) still runs: killing it", slot.index, process.pid)
            loop.remove_reader(process.sentinel)
            process.kill()
            process.join(KILL_MARGIN)
            slot.process = None


async def _fetch(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """GET ``http://host:port/path`` on loopback: ``(status, body)``; ``(0, "")`` when
    the worker does not answer in time."""
    rest = url.split("://", 1)[1]
    authority, _, path = rest.partition("/")
    host, _, port = authority.rpartition(":")
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(f"GET /{path} HTTP/1.0\r\nHost: {authority}\r\n\r\n".encode())
                data = await reader.read(8 * 1024 * 1024)
            finally:
                writer.close()
    except (OSError, TimeoutError, ValueError):
        return 0, ""
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0, ""
    return status, body.decode("utf-8", "replace")


def _worker_main(
    target: str,
    config: Config,
    log_level: str,
    loop: str,
    ready: Connection,
    lifeline: Connection,
    sockets: dict[str, socket.socket] | None,
    private_dir: str | None,
) -> None:
    """A worker process: :func:`mcplite.ops.serve.serve` on the event loop ``loop``
    names, on ports shared with SO_REUSEPORT
    (or on the listening ``sockets`` the supervisor handed it), telling the supervisor
    through ``ready`` once it listens, and stopping as on SIGTERM when ``lifeline``
    ends (the supervisor is gone; the last worker out then removes the supervisor's
    ``private_dir``, which the supervisor no longer can)."""
    setup_logging(log_level, config.log_format, worker=str(os.getpid()))
    private = _PrivateDir(private_dir)
    threading.Thread(
        target=_watch_lifeline,
        args=(lifeline, config.grace, private),
        name="mcplite-lifeline",
        daemon=True,
    ).start()
    from .loading import load_served
    from .serve import serve

    def announce(count: int, urls: list[str]) -> None:
        ready.send((count, urls))
        ready.close()

    status = 0
    try:
        served = load_served(target)
        run_on(
            loop,
            serve(
                served.tools,
                config,
                prompts=served.prompts,
                resources=served.resources,
                reuse_port=sockets is None,
                sockets=sockets,
                announce=announce,
            ),
        )
    except ServeError as exc:
        print(f"mcplite: error: {exc}", file=sys.stderr)
        status = exc.status
    except ValueError as exc:
        print(f"mcplite: error: {exc}", file=sys.stderr)
        status = 2
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group before serve()
        status = 0
    private.leave()
    leave_stuck_threads(status)
    sys.exit(status)


class _PrivateDir:
    """The supervisor's private promise directory, as a worker holds it: a shared lock
    on a file in it while the worker runs.  A supervisor that ends normally removes
    the directory itself; one that was killed cannot, so each worker that outlived it
    tries, on its way out, for the lock alone, and the one that gets it (the last
    out) removes the directory."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.orphaned = False  # set when the supervisor is gone
        self.fd: int | None = None
        self.lock = threading.Lock()  # the main thread and the lifeline's may both leave
        if path is not None:
            self.fd = os.open(os.path.join(path, "workers.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_SH)

    def leave(self) -> None:
        """Let go of the lock, removing the directory first when this is the last
        worker out after the supervisor went."""
        with self.lock:
            fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            if self.orphaned and self.path is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return  # another worker still runs: it removes the directory
                shutil.rmtree(self.path, ignore_errors=True)
        finally:
            os.close(fd)


def _watch_lifeline(lifeline: Connection, grace: float, private: _PrivateDir) -> None:
    """Stop this worker (SIGTERM) when the supervisor is gone; end it outright
    ``grace`` + :data:`KILL_MARGIN` seconds later if it still runs (an event loop a
    tool blocks does not see SIGTERM), as the supervisor would have."""
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv()  # nothing is ever sent: this returns at the supervisor's end
    log.warning("the supervisor is gone: stopping")
    private.orphaned = True
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace + KILL_MARGIN)  # a bound, as the supervisor's own: nothing to wait on
    log.warning("still running %gs after the supervisor went: exiting", grace + KILL_MARGIN)
    private.leave()
    logging.shutdown()
    os._exit(1)
