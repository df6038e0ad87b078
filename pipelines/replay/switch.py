"""Serving from rebuilt stores without downtime: an atomic ``current`` pointer.

``<MEMSTACK_HOME>/stores/current`` is a symbolic link to the directory readers serve from.
``switch`` replaces it atomically (a new link renamed over the old one, ``rename(2)``), so a
reader that resolves ``current`` on each open sees the old stores or the new ones, never a
missing or half-written pointer; readers with the old stores open keep them until they close.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from memstack.foundation.settings import Settings
from memstack.pipelines.replay.errors import StoresSwitchError

log = logging.getLogger(__name__)

CURRENT = "current"
DEFAULT = "live"


def current_stores(settings: Settings) -> Path:
    """The stores directory to serve from: ``current``'s target, else ``stores/live``."""
    pointer = settings.stores_dir / CURRENT
    if pointer.is_symlink():
        return pointer.resolve()
    return settings.stores_dir / DEFAULT


def switch_stores(settings: Settings, target: Path) -> Path:
    """Point ``current`` at ``target`` atomically; return the previous target."""
    from memstack.pipelines.stores.layout import DUCKDB_FILE

    target = target.resolve()
    if not (target / DUCKDB_FILE).exists():
        raise StoresSwitchError(f"{target} holds no stores (no {DUCKDB_FILE}); replay into it "
                                "first with `memstack replay --into`")
    previous = current_stores(settings)
    settings.stores_dir.mkdir(parents=True, exist_ok=True)
    pointer = settings.stores_dir / CURRENT
    tmp = settings.stores_dir / f".{CURRENT}.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, pointer)
    log.info("stores: current now %s (was %s)", target, previous)
    return previous
