"""A missing topic or broker is reported within seconds, with what to run."""

from __future__ import annotations

import time
import uuid

import pytest

from memstack.foundation.errors import BrokerUnavailableError
from memstack.infra.net import free_port_pair
from memstack.infra.preflight import TopicMissingError, require_topics
from tests.conftest import KafkaUnderTest


def test_missing_topics_are_named_with_the_command(kafka: KafkaUnderTest) -> None:
    prefix = f"t-nothing-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with pytest.raises(TopicMissingError, match="memstack infra up") as caught:
        require_topics(kafka.bootstrap, [f"{prefix}.events", f"{prefix}.forget"])
    assert time.monotonic() - started < 10
    assert f"{prefix}.events" in str(caught.value) and prefix in str(caught.value)


def test_no_broker_is_reported_at_once() -> None:
    port, _ = free_port_pair()
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="memstack infra up"):
        require_topics(f"127.0.0.1:{port}", ["memstack.events"], timeout_s=2)
    assert time.monotonic() - started < 10
