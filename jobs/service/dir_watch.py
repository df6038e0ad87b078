"""Wait for a file in a directory to be replaced, without polling: Linux inotify through
``ctypes`` (a reader process wakes when the writer publishes a manifest, and costs no CPU
while nothing happens). Elsewhere, or when inotify is unavailable, a plain timed poll."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
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
    into it, or :meth:`poke` was called (True), or after ``timeout_s`` (False)."""

    def __init__(self, directory: Path) -> None:
        self._fd = -1
        self._poke_r, self._poke_w = os.pipe()
        os.set_blocking(self._poke_r, False)
        os.set_blocking(self._poke_w, False)
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

    def poke(self) -> None:
        """Wake :meth:`wait` now (from any thread)."""
        with contextlib.suppress(BlockingIOError):  # already poked
            os.write(self._poke_w, b"!")

    def wait(self, timeout_s: float) -> bool:
        fds = [self._poke_r] if self._fd < 0 else [self._fd, self._poke_r]
        if self._fd < 0:
            timeout_s = min(timeout_s, FALLBACK_POLL_S)
        ready, _, _ = select.select(fds, [], [], max(0.0, timeout_s))
        for fd in ready:
            try:
                while os.read(fd, 65536):
                    pass
            except BlockingIOError:
                pass
        return bool(ready) or self._fd < 0

    def close(self) -> None:
        for fd in (self._fd, self._poke_r, self._poke_w):
            if fd >= 0:
                os.close(fd)
        self._fd = self._poke_r = self._poke_w = -1
