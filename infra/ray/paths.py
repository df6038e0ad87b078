"""Where a local Ray keeps its sockets: a temp dir short enough for unix socket paths."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

MAX_TEMP_DIR_CHARS = 40
"""Ray puts unix sockets under ``<temp>/session_<date>_<time>_<pid>/sockets/plasma_store`` (62
more characters, 64 on a second node of one machine: ``plasma_store.1``): paths over 107 bytes
fail, so a longer temp dir is replaced by a short one under the system temp dir."""


def short_temp_dir(wanted: Path, *, always: bool = False) -> Path:
    """``wanted`` if Ray's socket paths fit under it, else (or ``always``) a short stable dir
    in /tmp named by a hash of ``wanted``."""
    wanted = wanted.resolve()
    if len(str(wanted)) <= MAX_TEMP_DIR_CHARS and not always:
        return wanted
    tag = hashlib.blake2b(str(wanted).encode(), digest_size=4).hexdigest()
    return Path(tempfile.gettempdir()) / f"memstack-ray-{tag}"
