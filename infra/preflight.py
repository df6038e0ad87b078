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
