"""KRaft cluster ids must never look like an option to Kafka's storage tool."""

from __future__ import annotations

import base64

from memstack.infra.broker import new_cluster_id


def test_cluster_ids_never_start_with_a_dash_and_decode_to_a_uuid() -> None:
    ids = [new_cluster_id() for _ in range(2000)]  # ~31 would start with '-' if unguarded
    assert all(not i.startswith("-") for i in ids)
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
