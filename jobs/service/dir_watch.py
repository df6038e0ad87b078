"""Wait for a file in a directory to be replaced, without polling: Linux inotify through
``ctypes`` (a reader process wakes when the writer publishes a manifest, and costs no CPU
while nothing happens). Elsewhere, or when inotify is unavailable, a plain timed poll."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import time
from pathlib import Path

log = logging.getLogger(__name__)

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
FALLBACK_POLL_S = 0.01


class DirectoryWatch:
    """``wait(timeout_s)`` returns once something in ``directory`` was written or renamed
    into it (True), or after ``timeout_s`` (False)."""

    def __init__(self, directory: Path) -> None:
        self._fd = -1
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
            if libc.inotify_add_watch(fd, os.fsencode(directory),
                                      IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0:
                os.close(fd)
                raise OSError(ctypes.get_errno(), "inotify_add_watch")
            self._fd = fd
        except (OSError, AttributeError) as exc:
            log.info("no inotify on %s (%s): polling every %.0f ms", directory, exc,
                     FALLBACK_POLL_S * 1000)

    @property
    def notified(self) -> bool:
        """Whether changes wake :meth:`wait` (else it sleeps and says True)."""
        return self._fd >= 0

    def wait(self, timeout_s: float) -> bool:
        if self._fd < 0:
            time.sleep(min(timeout_s, FALLBACK_POLL_S))
            return True
        ready, _, _ = select.select([self._fd], [], [], timeout_s)
        if not ready:
            return False
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
