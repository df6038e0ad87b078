"""A broker for benchmarks and evaluations: reuse a running one, or start one for the run.

It lives with the benchmarks because only the lab uses it (the evaluations and
``cluster_check`` import it from here); the wheel ships none of it (pyproject.toml).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

from memstack.foundation.settings import Settings
from memstack.infra.broker import KafkaBroker
from memstack.infra.net import admin_client, request_metadata
from memstack.infra.topics import ensure_topics, topic_specs

log = logging.getLogger(__name__)


@contextmanager
def broker_for(settings: Settings, report: object = None) -> Iterator[Settings]:
    """Yield settings whose broker answers and whose topics exist.

    A broker already listening at ``settings.bootstrap`` is used as it is; otherwise one is
    started from ``settings.kafka_dir`` and stopped again when the block ends.
    """
    started: KafkaBroker | None = None
    if not request_metadata(settings.bootstrap, timeout_s=2.0):
        started = KafkaBroker(settings.kafka_dir, settings.kafka_port, settings.controller_port)
        log.info("no broker at %s: starting one in %s", settings.bootstrap, settings.kafka_dir)
        started.start()
    try:
        ensure_topics(settings.bootstrap, settings.topic_prefix, settings.partitions)
        yield settings
    finally:
        if started is not None:
            started.stop()


@contextmanager
def scratch_deployment(base: Settings) -> Iterator[Settings]:
    """Settings of a throw-away deployment for one benchmark run: a temporary home, a fresh
    topic prefix on ``base``'s broker (started here if none answers), topics deleted after."""
    with TemporaryDirectory(prefix="memstack-bench-") as home:
        wanted = base.with_(home=Path(home), topic_prefix=f"bench-{uuid.uuid4().hex[:8]}")
        with broker_for(wanted) as settings:  # a broker started here is stopped at the end
            try:
                yield settings
            finally:
                delete_topics(settings, [t.name for t in topic_specs(settings.topic_prefix)])


def delete_topics(settings: Settings, names: list[str]) -> None:
    """Delete ``names``, ignoring any failure (cleanup must not hide a run's result)."""
    try:
        with admin_client(settings.bootstrap) as admin:
            admin.delete_topics(names, raise_errors=False)
    except Exception:  # cleanup must not hide the result
        log.warning("could not delete topics %s at %s", names, settings.bootstrap)
