"""The code ring (operators/session_state/codes.py): fixed bytes, the latest items, exact
removal with refill."""

from __future__ import annotations

import numpy as np
import pytest

from memstack.operators.session_state import codes
from memstack.operators.session_state.codes import CodeRing, CodeRingFormatError, RingConfig


def unit_rows(n: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, 384))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def built(config: RingConfig, vectors: np.ndarray, offsets: list[int],
          lengths: list[int] | None = None) -> CodeRing:
    lens = lengths if lengths is not None else [100] * len(offsets)
    return codes.append(codes.empty(config), offsets, codes.encode(config, vectors), lens)


def test_the_default_fits_its_budget_and_every_snapshot_has_one_size() -> None:
    config = RingConfig()
    assert config.capacity == 371  # (8192 - 30 header) // (16 code + 4 offset + 2 length)
    assert codes.snapshot_size(config) == 8192 <= config.budget
    ring = built(config, unit_rows(50), list(range(50)))
    assert len(codes.snapshot(codes.empty(config))) == len(codes.snapshot(ring)) == 8192
    assert codes.size_of(codes.snapshot(ring) + b"more") == 8192


def test_snapshot_round_trip_is_exact() -> None:
    config = RingConfig(bits=64, budget=1024, salient=0.25, seed=3)
    lengths = np.random.default_rng(1).integers(1, 70_000, size=200).tolist()
    ring = codes.remove(built(config, unit_rows(200), list(range(10, 210)), lengths), [205, 150])
    assert ring.lengths.max() <= codes.MAX_LENGTH
    assert ring.items == config.capacity - 2  # no kept items given: two slots stay empty
    assert codes.restore(codes.snapshot(ring)).same_as(ring)
    assert codes.restore(codes.snapshot(codes.empty(config))).same_as(codes.empty(config))


def test_a_read_finds_the_item_whose_embedding_is_asked() -> None:
    config = RingConfig()
    vectors = unit_rows(300, seed=1)
    ring = built(config, vectors, [1000 + i for i in range(300)])
    for i in (0, 77, 299):
        best = codes.read(ring, vectors[i], 3)
        assert best[0][0] == 1000 + i
        assert best[0][1] > 0.5 > best[1][1]
    assert codes.read(codes.empty(config), vectors[0], 3) == []


def test_the_ring_holds_the_latest_items_by_offset_whatever_the_order() -> None:
    config = RingConfig(bits=32, budget=30 + 10 * 10)
    assert config.capacity == 10
    vectors = unit_rows(25)
    order = np.random.default_rng(4).permutation(25)
    ring = codes.empty(config)
    for i in order:  # one at a time, shuffled
        ring = codes.append(ring, [int(i) * 3], codes.encode(config, vectors[i:i + 1]), [100])
    assert ring.offsets.tolist() == [3 * i for i in range(15, 25)]
    assert ring.same_as(built(config, vectors, [3 * i for i in range(25)]))


def test_salient_slots_keep_the_longest_older_turns() -> None:
    config = RingConfig(bits=32, budget=30 + 10 * 10, salient=0.4)
    assert (config.capacity, config.salient_slots) == (10, 4)
    lengths = [10, 900, 20, 800, 30, 700, 40, 600, 50, 500, 60, 5, 5, 5, 5, 5, 5, 5, 5, 5]
    ring = built(config, unit_rows(20), list(range(20)), lengths)
    assert ring.offsets.tolist() == [1, 3, 5, 7, *range(14, 20)]
    one_by_one = codes.empty(config)
    for i in range(20):  # the same ring, appended one turn at a time
        one_by_one = codes.append(one_by_one, [i], codes.encode(config, unit_rows(20)[i:i + 1]),
                                  [lengths[i]])
    assert one_by_one.same_as(ring)


@pytest.mark.parametrize("salient", [0.0, 0.5])
def test_removal_with_the_kept_items_equals_a_build_from_the_survivors(salient: float) -> None:
    config = RingConfig(bits=64, budget=30 + 14 * 30, salient=salient)
    rng = np.random.default_rng(7)
    vectors = unit_rows(90, seed=2)
    offsets = sorted(rng.choice(1000, size=90, replace=False).tolist())
    lengths = rng.integers(1, 400, size=90)
    table = codes.encode(config, vectors)
    full = codes.append(codes.empty(config), offsets, table, lengths)
    for trial in range(30):
        gone = set(rng.choice(offsets, size=1 + trial % 7, replace=False).tolist())
        keep = [i for i, o in enumerate(offsets) if o not in gone]
        removed = codes.remove(full, sorted(gone), [offsets[i] for i in keep], table[keep],
                               lengths[keep])
        survivors = codes.append(codes.empty(config), [offsets[i] for i in keep], table[keep],
                                 lengths[keep])
        assert removed.same_as(survivors), f"trial {trial}"
        assert not set(removed.offsets.tolist()) & gone
    # without the kept items it empties the slots only; still nothing of what went
    alone = codes.remove(full, [int(full.offsets[-1])])
    assert alone.items == config.capacity - 1 and int(full.offsets[-1]) not in alone.offsets
    # a turn it does not hold: nothing changes
    dropped = next(o for o in offsets if o not in full.offsets)
    assert codes.remove(full, [dropped]) is full


def test_items_too_far_behind_the_newest_are_left_out_and_round_trip() -> None:
    config = RingConfig(bits=64, budget=512)
    table = codes.encode(config, unit_rows(3))
    ring = codes.append(codes.empty(config), [5, codes.MAX_SPAN + 5], table[:2], [1, 2])
    assert ring.offsets.tolist() == [5, codes.MAX_SPAN + 5]  # exactly the span: kept
    ring = codes.append(ring, [codes.MAX_SPAN + 6], table[2:], [3])
    assert ring.offsets.tolist() == [codes.MAX_SPAN + 5, codes.MAX_SPAN + 6]
    assert codes.restore(codes.snapshot(ring)).same_as(ring)


def test_appends_are_idempotent() -> None:
    config = RingConfig(bits=64, budget=512)
    table = codes.encode(config, unit_rows(40))
    once = codes.append(codes.empty(config), list(range(40)), table, [7] * 40)
    assert codes.append(once, list(range(20, 40)), table[20:], [7] * 20).same_as(once)


def test_bad_bytes_and_configs_get_clear_errors() -> None:
    data = codes.snapshot(codes.empty(RingConfig()))
    with pytest.raises(CodeRingFormatError, match="too short"):
        codes.restore(data[:10])
    with pytest.raises(CodeRingFormatError, match="not a code-ring"):
        codes.restore(b"XXXX" + data[4:])
    with pytest.raises(CodeRingFormatError, match="bytes, got"):
        codes.restore(data[:-1])
    with pytest.raises(ValueError, match="multiple of 8"):
        RingConfig(bits=12)
    with pytest.raises(ValueError, match="holds no item"):
        RingConfig(budget=40)
    with pytest.raises(ValueError, match="offsets but"):
        codes.append(codes.empty(RingConfig()), [1, 2], codes.encode(RingConfig(), unit_rows(1)),
                     [1, 2])
    with pytest.raises(ValueError, match="salient"):
        RingConfig(salient=1.0)
    with pytest.raises(ValueError, match="salient"):
        RingConfig(salient=0.0005)


def test_chosen_picks_by_offset_and_length_alone_what_a_ring_holds() -> None:
    config = RingConfig(bits=32, budget=30 + 10 * 8, salient=0.5)
    rng = np.random.default_rng(11)
    offsets = [*rng.permutation(50).tolist(), 3, 7]  # shuffled, two offsets twice
    lengths = rng.integers(1, 300, size=52).tolist()
    picked = codes.chosen(config, offsets, lengths)
    table = codes.encode(config, unit_rows(52))
    ring = codes.append(codes.empty(config), offsets, table, lengths)
    assert sorted(offsets[i] for i in picked) == ring.offsets.tolist()
    # the picked items alone build the same ring
    alone = codes.append(codes.empty(config), [offsets[i] for i in picked], table[picked],
                         [lengths[i] for i in picked])
    assert alone.same_as(ring)
