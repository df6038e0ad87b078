"""An event's metadata: the schema's rule (each breach names the field and the rule), sealing
with the payload (never in the clear in the log, gone with the key), the 422 of an HTTP write
and the dead letter of the pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.sealing import Shredded, open_record, seal_record
from memstack.pipelines.embedding import MiniLMEncoder, shared_encoder
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.service.writes import WriteLimits, WriteRejectedError, parse_events
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import parse_event
from memstack.schemas.metadata import MAX_BYTES
from memstack.schemas.sealed import SealedEvent
from tests.pipelines.helpers import TOPIC, record

B = EventBuilder(Defaults("acme", "bot"))
GOOD = {"topic": "billing", "score": 4.5, "n": 3, "ok": True, "none": None,
        "tags": ["a", 1, 2.5, False, None], "_x9": ""}


@pytest.fixture(scope="module")
def minilm() -> MiniLMEncoder:
    return shared_encoder().load()


def test_good_metadata_round_trips_on_the_wire() -> None:
    event = B.note("s1", "the invoice is late", metadata=GOOD)
    assert event.metadata == GOOD
    assert parse_event(event.to_json()) == event
    assert "metadata" not in json.loads(B.note("s1", "plain").to_json())


@pytest.mark.parametrize(("metadata", "rule"), [
    ({"a b": 1}, "key 'a b' must match"),
    ({"9lives": 1}, "key '9lives' must match"),
    ({"k" * 65: 1}, "must match"),
    ({"x": {"y": 1}}, "key 'x': dict is not allowed"),
    ({"x": [[1]]}, "key 'x'[0]: list is not allowed"),
    ({"x": "z" * 513}, "at most 512 characters, got 513"),
    ({"x": list(range(33))}, "a list holds at most 32 items, got 33"),
    ({f"k{i}": 1 for i in range(33)}, "holds at most 32 keys, got 33"),
    ({f"k{i}": "v" * 500 for i in range(9)}, f"at most {MAX_BYTES} are allowed"),
    ({"x": float("inf")}, "key 'x': float is not allowed"),
    (["not", "an", "object"], "must be an object"),
])
def test_bad_metadata_names_the_field_and_the_rule(metadata: Any, rule: str) -> None:
    with pytest.raises(InvalidEventError) as caught:
        B.note("s1", "text", metadata=metadata)
    assert caught.value.field == "metadata" and rule in caught.value.rule, caught.value.rule


def test_sealed_metadata_is_not_in_the_log_and_goes_with_the_key(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    event = B.note("s1", "checkup", subject="user:ana",
                   metadata={"diagnosis": "hypertension-xyz", "tags": ["cardio-secret"]})
    raw = seal_record(event, keys)
    assert b"hypertension-xyz" not in raw and b"cardio-secret" not in raw
    assert b'"metadata"' not in raw and json.loads(raw)["sealed"]["holds"] == "payload+metadata"
    assert SealedEvent.model_validate_json(raw).to_json() == raw  # canonical, as every record
    assert open_record(raw, keys) == event
    plain = seal_record(B.note("s1", "no metadata", subject="user:ana"), keys)
    assert b"holds" not in plain  # the payload-only form is unchanged
    keys.destroy("acme", session="s1", subject="user:ana")
    assert isinstance(open_record(raw, keys), Shredded)  # metadata unreadable with the payload


def test_a_sealed_record_cannot_carry_metadata_in_the_clear(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    raw = json.loads(seal_record(B.note("s1", "x"), keys))
    raw["metadata"] = {"leak": "in the clear"}
    with pytest.raises(InvalidEventError) as caught:
        open_record(json.dumps(raw).encode(), keys)
    assert caught.value.field == "metadata"


def test_an_http_write_with_bad_metadata_is_422_naming_the_field() -> None:
    good = json.loads(B.note("s1", "fine", metadata={"topic": "x"}).to_json())
    bad = dict(good, metadata={"topic": {"nested": 1}})
    body = json.dumps({"events": [good, bad]}).encode()
    with pytest.raises(WriteRejectedError) as caught:
        parse_events(body, "acme", WriteLimits())
    assert caught.value.status == 422
    assert caught.value.field == "events[1].metadata"
    assert "key 'topic': dict is not allowed" in str(caught.value)


def test_the_pipeline_dead_letters_bad_metadata(tmp_path: Path, minilm: MiniLMEncoder) -> None:
    good = B.note("s1", "kept", metadata={"topic": "x"})
    bad = json.loads(B.note("s1", "dropped").to_json())
    bad["metadata"] = {"topic": ["x"] * 40}
    log = [record(good, 0), record(json.dumps(bad).encode(), 1)]
    with Stores.open(tmp_path / "s") as stores:
        projector = StoreProjector(stores, minilm, TOPIC)
        plan = projector.prepare(log)
        assert [(d.offset, d.field) for d in plan.dead_letters] == [(1, "metadata")]
        assert "at most 32 items" in plan.dead_letters[0].reason
        projector.commit(plan)
        row = stores.events.record(good.event_id)
        assert row is not None and row.metadata == {"topic": "x"}


def test_a_sealed_events_metadata_reaches_the_rows_and_not_after_the_key(
        tmp_path: Path, minilm: MiniLMEncoder) -> None:
    keys = FileKeyStore(tmp_path / "keys")
    kept = B.note("s1", "kept", subject="user:bob", metadata={"topic": "x"})
    shredded = B.note("s1", "gone", subject="user:ana", metadata={"topic": "secret"})
    log = [record(seal_record(kept, keys), 0), record(seal_record(shredded, keys), 1)]
    keys.destroy("acme", session="s1", subject="user:ana")  # forgotten before any replay
    with Stores.open(tmp_path / "s") as stores:
        projector = StoreProjector(stores, minilm, TOPIC, keys=keys)
        projector.commit(projector.prepare(log))
        rows = stores.events.records("acme")
        assert [(r.event_id, r.metadata) for r in rows] == [(kept.event_id, {"topic": "x"})]
