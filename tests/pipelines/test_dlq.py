"""The DLQ wire format: key, JSON value with the original bytes, and headers."""

from __future__ import annotations

import json

import pytest

from memstack.pipelines import dlq
from memstack.pipelines.contracts import DeadLetter


def letter(value: bytes | None = b"\xff\x00not json", key: bytes | None = b"acme/s1") -> DeadLetter:
    return DeadLetter("p.events", 2, 41, key, value, "invalid JSON: Expecting value", "$")


def test_key_is_source_partition_and_offset() -> None:
    assert dlq.encode(letter()).key == b"2:41"


def test_value_carries_reason_source_and_original_bytes() -> None:
    body = json.loads(dlq.encode(letter()).value)
    assert body["reason"] == "invalid JSON: Expecting value"
    assert (body["source_topic"], body["source_partition"], body["source_offset"]) == (
        "p.events", 2, 41)
    assert body["field"] == "$"
    assert dlq.decode(dlq.encode(letter()).value) == letter()


@pytest.mark.parametrize("value,key", [(None, None), (b"", b""), (bytes(range(256)), None)])
def test_round_trip_keeps_bytes_exactly(value: bytes | None, key: bytes | None) -> None:
    original = letter(value, key)
    assert dlq.decode(dlq.encode(original).value) == original


def test_headers_repeat_the_facts() -> None:
    headers = dict(dlq.encode(letter()).headers)
    assert headers["memstack.dlq.reason"] == b"invalid JSON: Expecting value"
    assert headers["memstack.dlq.source_offset"] == b"41"
    assert headers["memstack.dlq.source_partition"] == b"2"


@pytest.mark.parametrize(
    "raw", [b"not json", b'{"format": "other/1"}', b'{"format": "memstack.dlq/1"}'])
def test_decode_rejects_foreign_records(raw: bytes) -> None:
    with pytest.raises(dlq.DeadLetterFormatError):
        dlq.decode(raw)


def test_a_huge_source_record_is_kept_truncated_with_its_size_and_hash() -> None:
    import hashlib

    original = b'{"text": "' + b"A" * 1_000_000 + b'"}'
    record = dlq.encode(letter(value=original))
    body = json.loads(record.value)
    assert body["value_truncated"] is True and body["value_bytes"] == len(original)
    assert body["value_sha256"] == hashlib.sha256(original).hexdigest()
    assert len(record.value) < 400_000  # fits the DLQ topic's 1 MiB record limit
    assert dlq.decode(record.value).value == original[:dlq.KEPT_BYTES]
    small = json.loads(dlq.encode(letter()).value)
    assert "value_truncated" not in small and "key_truncated" not in small
