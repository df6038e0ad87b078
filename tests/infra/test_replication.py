"""The replication of new topics: from the cluster's broker count unless given (pure rule)."""

from __future__ import annotations

import pytest

from memstack.client import PRODUCER_CONFIG
from memstack.infra.errors import TopicError
from memstack.infra.topics import Replication, TopicSpec, replication_for, topic_specs


@pytest.mark.parametrize(("brokers", "expected"), [
    (1, Replication(1, 1)), (2, Replication(2, 1)), (3, Replication(3, 2)),
    (5, Replication(3, 2)), (12, Replication(3, 2))])
def test_defaults_follow_the_broker_count(brokers: int, expected: Replication) -> None:
    assert replication_for(brokers) == expected


def test_a_given_factor_is_kept_and_min_insync_follows_it() -> None:
    assert replication_for(5, 5) == Replication(5, 2)
    assert replication_for(5, 2) == Replication(2, 1)
    assert replication_for(3, 1) == Replication(1, 1)
    assert replication_for(5, 4, 3) == Replication(4, 3)
    assert replication_for(3, None, 1) == Replication(3, 1)


@pytest.mark.parametrize(("brokers", "factor", "min_insync", "words"), [
    (0, None, None, "0 brokers"), (2, 3, None, "replication factor 3"),
    (3, 0, None, "replication factor 0"), (3, 3, 4, "acks=all"),
    (1, None, 2, "min.insync.replicas 2"), (3, 3, 0, "min.insync.replicas 0")])
def test_impossible_replication_is_refused(brokers: int, factor: int | None,
                                           min_insync: int | None, words: str) -> None:
    with pytest.raises(TopicError, match=words):
        replication_for(brokers, factor, min_insync)


def test_specs_leave_replication_to_the_cluster_and_producers_wait_for_all() -> None:
    specs = topic_specs("acme", 3)
    assert all(isinstance(s, TopicSpec) and s.replication_factor is None
               and s.min_insync_replicas is None for s in specs)
    assert all("min.insync.replicas" not in s.configs for s in specs)  # not checked on existing
    assert PRODUCER_CONFIG["acks"] == "all"
