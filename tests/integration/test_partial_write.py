"""The service's writer on a real broker: a send the producer refuses midway through a request
is reported with the receipts of what was and was not written, and a retry completes it.

The producer's own record limit stands in for a broker that refuses (``max_request_size``
below the second event's size: kafka-python refuses it in ``send``, after the first event of
the request was sent). The service checks sizes before producing, so this is the path of a
broker failure, not of a client's input.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from memstack.client import MemoryClient
from memstack.foundation.settings import Settings
from memstack.pipelines.log_reader import end_offsets
from memstack.pipelines.service.writes import (
    EventWriter,
    WriteLimits,
    WriteRejectedError,
    parse_events,
)
from tests.service.conftest import event

pytestmark = pytest.mark.timeout(300)


def _body(*events: dict[str, Any]) -> bytes:
    return json.dumps({"events": list(events)}).encode()


class Switched:
    """The writer's producer, switched from a refusing client to a working one."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client

    def emit(self, e: Any) -> Any:
        return self.client.emit(e)


def test_a_refused_send_reports_written_and_not_written(topics: Settings) -> None:
    small, big, after = (event("acme", "s-part", "small"),
                         event("acme", "s-part", "b" * 20_000),
                         event("acme", "s-part", "never sent"))
    events = parse_events(_body(small, big, after), "acme", WriteLimits())
    with MemoryClient("acme", "t", settings=topics, max_request_size=10_000) as refusing, \
            MemoryClient("acme", "t", settings=topics) as working:
        producer = Switched(refusing)
        writer = EventWriter(producer, topics.events_topic)
        with pytest.raises(WriteRejectedError) as caught:
            writer.write(events, timeout_s=30.0)
        assert caught.value.status == 503
        written = caught.value.extensions["written"]
        not_written = caught.value.extensions["not_written"]
        assert [w["event_id"] for w in written] == [small["event_id"]]
        assert [n["event_id"] for n in not_written] == [big["event_id"], after["event_id"]]
        assert sum(end_offsets(topics.bootstrap, topics.events_topic).values()) == 1
        producer.client = working  # the broker takes them now: the retry sends the rest
        receipts = writer.write(events, timeout_s=30.0)
    assert receipts[0].to_json() == written[0]
    assert sum(end_offsets(topics.bootstrap, topics.events_topic).values()) == 3
