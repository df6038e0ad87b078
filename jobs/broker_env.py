"""A broker for benchmarks and evaluations: reuse a running one, or start one for the run."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from memstack.infra.broker import KafkaBroker
from memstack.infra.net import request_metadata
from memstack.infra.topics import ensure_topics
from memstack.settings import Settings

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
