"""A dead letter for a record near the events topic's size limit fits the DLQ topic.

Found by ``memstack eval faults``' fuzz run: a 1,000,001-character text (refused by the schema,
accepted by the broker) became a dead letter a third larger in base64, which the broker
refused; the worker stopped on the batch, and again at every restart.
"""

from __future__ import annotations

import json

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from memstack.foundation.settings import Settings
from memstack.pipelines import dlq
from memstack.pipelines.contracts import DeadLetter


def test_dead_letter_of_a_near_limit_record_is_accepted(topics: Settings) -> None:
    value = b'{"payload": {"text": "' + b"A" * 1_000_001 + b'"}}'
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap, acks="all",
                             max_request_size=8 * 1024 * 1024)
    try:
        producer.send(topics.events_topic, value=value).get(timeout=60)  # the source fits
        letter = DeadLetter(topics.events_topic, 0, 0, b"t0/s", value, "too long", "payload")
        record = dlq.encode(letter)
        producer.send(topics.dlq_topic, key=record.key, value=record.value,
                      headers=record.headers).get(timeout=60)
        whole = json.loads(record.value)
        whole["value_b64"] = dlq._b64(value)  # the old encoding: refused by the broker
        with pytest.raises(KafkaError):
            producer.send(topics.dlq_topic, value=json.dumps(whole).encode()).get(timeout=60)
    finally:
        producer.close()
