"""How a serving process ends once serving is over, whatever its tools still do.

The thread pool that runs sync tools has ordinary (non-daemon) threads, and the
interpreter joins them at exit: a sync tool that never returns (it waits on a lock,
a pipe, a peer that is gone) would keep a stopped process alive forever, after it
has said ``stopped``.  Such a process leaves without that thread instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time

__all__ = ["THREADS_EXIT_WAIT", "leave_stuck_threads"]

log = logging.getLogger("mcplite")

#: Seconds a process that has stopped serving waits for its other threads to end.
THREADS_EXIT_WAIT = 1.0


def leave_stuck_threads(status: int, wait: float = THREADS_EXIT_WAIT) -> None:
    """Wait up to ``wait`` seconds for every other non-daemon thread to end, and
    return once they have.  If one still runs then (a sync tool that does not
    return), say so, flush the logs and end the process at once with ``status``
    (``os._exit``: no exit handler runs, and nothing is raised)."""
    deadline = time.monotonic() + wait
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [
        t.name for t in threading.enumerate() if t is not current and not t.daemon and t.is_alive()
    ]
    if not stuck:
        return
    log.warning(
        "%d thread(s) still run a sync tool after the shutdown (%s): exiting without them",
        len(stuck),
        ", ".join(stuck),
    )
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader is gone
            stream.flush()
    os._exit(status)
