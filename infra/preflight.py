"""Check the broker and memstack's topics up front, in seconds, with what to run instead.

Without this a client with a new topic prefix waits 60 s for metadata and then raises a raw
``KafkaTimeoutError``; the worker, the service and the SDK call :func:`require_topics` first.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafka.errors import KafkaError

from memstack.foundation.errors import BrokerUnavailableError
from memstack.foundation.kafka_connect import check_connection
from memstack.infra.errors import TopicError
from memstack.infra.topics import describe_topics


class TopicMissingError(TopicError):
    """A topic memstack needs does not exist; the message says what to run."""


def require_topics(bootstrap: str, names: Sequence[str], timeout_s: float = 5.0) -> None:
    """Raise :class:`BrokerUnavailableError` when nothing answers at ``bootstrap`` and
    :class:`TopicMissingError` naming the missing topics, both within about ``timeout_s``;
    with TLS or SASL, :class:`KafkaSecurityError` naming the setting when the broker refuses
    this process's ``MEMSTACK_KAFKA_*`` settings."""
    check_connection(bootstrap, timeout_s=max(timeout_s, 8.0))
    try:
        infos = describe_topics(bootstrap, names, timeout_s=timeout_s)
    except KafkaError as exc:
        raise BrokerUnavailableError(
            f"Kafka at {bootstrap} did not answer within {timeout_s:.0f} s ({exc}); start the "
            "local broker with `memstack infra up`, or set MEMSTACK_BOOTSTRAP") from exc
    missing = [i.name for i in infos if not i.exists]
    if missing:
        prefix = missing[0].rsplit(".", 1)[0]
        raise TopicMissingError(
            f"topic(s) {missing} do not exist at {bootstrap}; create them with `memstack infra "
            f"up` on the local broker or `memstack topics create` on another cluster (with "
            f"MEMSTACK_TOPIC_PREFIX={prefix}), or check MEMSTACK_TOPIC_PREFIX")


WORKER_STACK = ("faust", "aiokafka", "duckdb", "lancedb", "pyarrow", "torch")
"""Top-level modules a live worker imports; only the ``server`` extra installs them."""


def require_server_stack(modules: Sequence[str] = WORKER_STACK) -> None:
    """Raise :class:`ModuleNotFoundError` naming the first of ``modules`` that is not
    installed (the CLI turns it into what to install), without importing any of them: Faust
    alone takes ~9 s to import, and a worker checks its lease before paying that."""
    from importlib.util import find_spec

    for name in modules:
        if find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
