"""A replay writer's mark: present in the stores directory while the writer holds its stores.

PyFlink reports a replay job finished when its operators are done, while the Python worker may
still be closing the writer: building the indexes, closing DuckDB and LanceDB. In the
``loopback`` worker mode that worker runs in the replaying process itself, so no file lock
tells the two apart (a clean-clone CI run opened the stores for ``--verify`` at that moment and
the process died with a segmentation fault inside LanceDB's index build). So the writer leaves
a mark, ``.replay-writer-<pid>-<id>``, from opening its stores until they are closed, and the
replay returns only once no mark of a live process is left (:func:`wait_closed`). A mark left
by a process that died (kill -9) is not waited for.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path

from memstack.foundation.processes import pid_alive

log = logging.getLogger(__name__)

PREFIX = ".replay-writer-"
WAIT_S = 600.0
"""The longest :func:`wait_closed` waits (index builds at close grow with the store)."""
REPORT_EVERY_S = 10.0


def mark(into: Path) -> Path:
    """Leave this process's mark in ``into`` (the writer opens its stores next)."""
    into.mkdir(parents=True, exist_ok=True)
    path = into / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    path.touch()
    return path


def release(path: Path) -> None:
    """The writer's stores are closed: its mark goes."""
    path.unlink(missing_ok=True)


def live_marks(into: Path) -> list[Path]:
    """The marks in ``into`` whose process is alive."""
    out = []
    for path in into.glob(f"{PREFIX}*"):
        pid = path.name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and pid_alive(int(pid)):
            out.append(path)
    return sorted(out)


def wait_closed(into: Path, *, timeout_s: float = WAIT_S, poll_s: float = 0.05) -> bool:
    """Wait until no live writer holds stores in ``into``; False when ``timeout_s`` passed
    first (logged; whoever opens the stores next says what is wrong)."""
    began = time.monotonic()
    reported = began
    while True:
        held = live_marks(into)
        if not held:
            if reported > began or time.monotonic() - began > 0.5:
                log.info("replay: the writer closed its stores %.1f s after the job ended",
                         time.monotonic() - began)
            return True
        now = time.monotonic()
        if now - began > timeout_s:
            log.warning("replay: the writer still holds %s after %.0f s; not waiting longer",
                        into, now - began)
            return False
        if now - reported >= REPORT_EVERY_S:
            log.info("replay: waiting for the writer to close its stores (%.0f s so far)",
                     now - began)
            reported = now
        time.sleep(poll_s)

