"""Where memstack keeps what it downloads or builds once per machine: never inside the package.

``$MEMSTACK_CACHE`` when set, else ``$XDG_CACHE_HOME/memstack``, else ``~/.cache/memstack``.
Shared by every ``MEMSTACK_HOME`` of the user: Maven-resolved jars (``jars/``) and built
encoder graphs (``models/``, which ``$MEMSTACK_MODEL_CACHE`` can move on its own). The
installed package is read-only at run time; a test checks that nothing is written into it.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    override = os.environ.get("MEMSTACK_CACHE")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "memstack"
