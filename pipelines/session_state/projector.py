"""The live worker's session-state step of the commit path, and the bridge it needs to the loop.

:class:`SessionStateStep` is step 5 of :class:`~memstack.pipelines.commit_path.CommitPath`: it
updates the session state on the store thread, with the plan's vectors, before the stores
commit; the state's sink lives on the worker's event loop, which :func:`loop_runner` reaches
from the store thread without ever waiting on a stopped loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from memstack.foundation.errors import MemstackError
from memstack.operators.log import LoggedEvent
from memstack.pipelines.contracts import Plan
from memstack.pipelines.session_state.table import ApplyResult, SessionStateUpdater

log = logging.getLogger(__name__)


class SessionStateStep:
    """The commit path's session-state step: stage, publish, wait for the acknowledgements.

    The LiveProcessor commits on its store thread with exactly the events it applies
    (continuous per partition); the state's snapshots are acknowledged here, then the commit
    path writes rows and offsets. ``run`` bridges to the event loop that owns the sink.
    """

    def __init__(self, updater: SessionStateUpdater,
                 run: Callable[[Awaitable[Any]], Any]) -> None:
        self.updater, self._run = updater, run

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run one of the updater's coroutines on the loop that owns the sink; wait for it."""
        return self._run(coro)

    def texts(self, events: Sequence[LoggedEvent]) -> list[str]:
        """The texts the state embeds for ``events`` (the commit path's vectors step)."""
        return self.updater.texts(events)

    def apply(self, plan: Plan) -> None:
        if not plan.events:
            return
        # The arithmetic on the store thread, with the plan's vectors; the loop only sends.
        staged = self.updater.stage(plan.events, plan.vectors)
        result: ApplyResult = self._run(self.updater.publish(staged))
        log.debug("session state: %d items, %d sessions, %d skipped", result.items,
                  result.sessions, result.skipped)


class LoopStoppedError(MemstackError):
    """The event loop stopped while the store thread waited on a coroutine it had scheduled
    there (the worker is shutting down). The step was not applied; nothing after it committed,
    so the batch or forget is applied again when the worker restarts."""


LOOP_POLL_S = 0.25
"""How often a waiting store thread checks that the event loop still runs."""


def loop_runner(loop: asyncio.AbstractEventLoop) -> Callable[[Awaitable[Any]], Any]:
    """Run a coroutine on ``loop`` from another thread and wait for its result.

    The wait ends with :class:`LoopStoppedError` once the loop no longer runs: a worker that
    stops between scheduling and running the coroutine must not leave the store thread (and
    the shutdown that joins it) waiting forever.
    """
    def run(coro: Awaitable[Any]) -> Any:
        future: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(
            coro, loop)  # type: ignore[arg-type]  # a coroutine
        while True:
            try:
                return future.result(timeout=LOOP_POLL_S)
            except concurrent.futures.TimeoutError:
                if loop.is_closed() or not loop.is_running():
                    future.cancel()
                    raise LoopStoppedError(
                        "the worker's event loop stopped before the session-state step ran; "
                        "it is applied again when the worker restarts") from None
    return run
