"""Wire the stores switch into ``memstack serve``: a 1 s timer on the worker's loop checks
``stores/current``; the outcome goes to the log and to ``service.json`` (``stores``,
``encoder``, ``switch``), where ``memstack reindex`` waits for it. docs/replay.md."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstack.foundation.settings import Settings

if TYPE_CHECKING:
    from memstack.pipelines.commit_path import CommitPath
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.faust_app import LiveApp
    from memstack.pipelines.service.forgets import ForgetDesk
    from memstack.pipelines.service.switching import StoresSwitcher
    from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0


def update_service_file(path: Path, **changes: Any) -> None:
    """Merge ``changes`` into ``service.json`` (atomically; nothing when it is gone)."""
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    info.update(changes)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)


def attach_switcher(settings: Settings, live: LiveApp, path: CommitPath,
                    desk: ForgetDesk, service_file: Path) -> StoresSwitcher:
    from memstack.foundation.keystore import FileKeyStore
    from memstack.pipelines.embedding import CachingEncoder
    from memstack.pipelines.service.switching import StoresSwitcher, SwitchHooks

    base, forgetting = path.store, live.forgetting
    assert forgetting is not None and isinstance(base.encoder, CachingEncoder)
    keys = FileKeyStore(settings.keys_dir)

    def apply_forgets(target: Path, encoder: Encoder) -> int:
        from memstack.jobs.reindex import apply_pending_forgets

        return apply_pending_forgets(settings, target, forgetting.ledger.requests, encoder)

    def switched(stores: Stores) -> None:
        forgetting.move_to(stores.directory)
        desk.move_to(stores.directory)
        if path.feed is not None:  # its teacher reads the current facts
            path.feed.follow(stores)

    def recorded(outcome: Any) -> None:
        update_service_file(service_file, stores=str(base.stores.directory),
                            encoder=base.encoder.name, switch=outcome.as_dict())

    hooks = SwitchHooks(live.exclusive, [switched], [recorded])
    switcher = StoresSwitcher(settings, base, base.encoder, live.processor.on_store,
                              apply_forgets, hooks, keys)

    async def check() -> None:
        try:
            await switcher.check()
        except Exception:  # a failed check must not stop the worker; the next one retries
            log.exception("checking the stores pointer failed")

    live.app.timer(CHECK_EVERY_S)(check)
    return switcher
