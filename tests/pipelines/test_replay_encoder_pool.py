"""The replay's encoder pool (real encoders) and the process state a replay job leaves."""

from __future__ import annotations

import logging
import os

import numpy as np

from memstack.pipelines.embedding import encoder_kind
from memstack.pipelines.replay import encoder_pool
from memstack.pipelines.replay.flink_env import process_state_kept


def test_a_stage_that_closes_hands_its_loaded_encoder_to_the_next() -> None:
    kind, threads = encoder_kind(), 1
    first = encoder_pool.lend(kind, threads)
    second = encoder_pool.lend(kind, threads)  # lent at once: two models, none shared
    assert first is not second
    vectors = first.encode(["the evidence is in the turn after"])
    assert vectors.shape[0] == 1
    encoder_pool.give_back(kind, threads, first)
    encoder_pool.give_back(kind, threads, second)
    assert encoder_pool.idle_count(kind, threads) >= 2
    again = encoder_pool.lend(kind, threads)
    assert again in (first, second)  # no new model loaded
    assert np.allclose(again.encode(["the evidence is in the turn after"]), vectors)
    encoder_pool.give_back(kind, threads, again)


def test_encoders_of_other_threads_are_not_mixed() -> None:
    kind = encoder_kind()
    one = encoder_pool.lend(kind, 1)
    encoder_pool.give_back(kind, 1, one)
    two = encoder_pool.lend(kind, 2)
    assert two is not one
    encoder_pool.give_back(kind, 2, two)


def test_a_job_leaves_the_environment_and_root_logger_as_they_were() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    before = dict(os.environ)
    with process_state_kept():
        # what Beam's loopback worker does to the process
        os.environ["PYFLINK_GATEWAY_DISABLED"] = "true"
        root.handlers = [logging.NullHandler()]
        root.setLevel(logging.DEBUG)
    assert dict(os.environ) == before
    assert root.handlers == handlers and root.level == level
