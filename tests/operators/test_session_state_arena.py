"""The arena (in place, many sessions) against the immutable reference, and its snapshots."""

from __future__ import annotations

import math

import pytest
import torch

from memstack.operators import session_state as ss
from memstack.operators.session_state.arena import ArenaFullError, StateArena, Terms
from memstack.operators.session_state.codec import (
    SnapshotFormatError,
    restore_sums,
    snapshot_slot,
    snapshot_sums,
)
from memstack.operators.session_state.keys import Head

HOUR = 3600.0
T0 = 1_760_000_000.0


def _batch(cfg: ss.StateConfig, n: int, seed: int, start: float, step: float,
           prefix: str) -> ss.ItemBatch:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, 384, generator=gen, dtype=torch.float64)
    values = torch.randn(n, 384, generator=gen, dtype=torch.float64)
    weights = (0.5 + torch.rand(n, generator=gen, dtype=torch.float64)).tolist()
    heads = [Head(int(h)) for h in torch.randint(0, 2, (n,), generator=gen)]
    return ss.make_items(cfg, [f"{prefix}{i}" for i in range(n)], heads, keys, values,
                         [start + i * step for i in range(n)], weights)


def _terms(slot: int, batch: ss.ItemBatch) -> Terms:
    return Terms(torch.full((len(batch),), slot, dtype=torch.int64), batch.heads, batch.keys,
                 batch.values, batch.times, batch.weights)


def _cat(terms: list[Terms]) -> Terms:
    return Terms(*(torch.cat([getattr(t, f) for t in terms])
                   for f in ("slots", "heads", "keys", "values", "times", "weights")))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


@pytest.mark.parametrize(("dtype", "tol"), [("float64", 1e-12), ("float32", 1e-6)])
def test_arena_equals_reference_over_many_sessions_and_rebases(dtype: str, tol: float) -> None:
    cfg = ss.StateConfig(dim=24, gamma_per_hour=0.5, dtype=dtype)  # fast decay: grid rebases
    arena = StateArena(cfg, capacity=8)
    refs = {f"s{i}": ss.empty(cfg) for i in range(5)}
    for step in range(4):  # four micro-batches; sessions skip some; times jump past the grid
        terms, start = [], T0 + step * 30 * HOUR
        for i, key in enumerate(refs):
            if (i + step) % 3 == 0:
                continue
            batch = _batch(cfg, 3 + i, seed=100 * step + i, start=start, step=600.0,
                           prefix=f"{step}-")
            refs[key] = ss.update(refs[key], batch)
            terms.append(_terms(arena.slot(key), batch))
        arena.add(_cat(terms))
    for key, ref in refs.items():
        got = arena.cut(arena.slot(key))
        assert got.ref_time == ref.ref_time and got.last_time == ref.last_time
        assert _rel(got.sums_at(), ref.sums_at()) <= tol
        assert got.counts == tuple(int((ref.item_heads == h).sum()) for h in Head)


def test_arena_subtract_equals_reference_remove_and_empties_heads() -> None:
    cfg = ss.StateConfig(dim=16, gamma_per_hour=0.7)
    arena = StateArena(cfg, capacity=3)
    batch = _batch(cfg, 12, seed=1, start=T0, step=1800.0, prefix="i")
    slot = arena.slot("a")
    arena.add(_terms(slot, batch))
    ref = ss.update(ss.empty(cfg), batch)
    gone = [i for i in range(12) if int(batch.heads[i]) == Head.FACTS]
    idx = torch.tensor(gone)
    sub = ss.ItemBatch(tuple(batch.ids[i] for i in gone), batch.heads[idx], batch.keys[idx],
                       batch.values[idx], batch.times[idx], batch.weights[idx])
    arena.subtract(_terms(slot, sub))
    ref = ss.remove(ref, sub)
    got = arena.cut(slot)
    assert torch.count_nonzero(got.sums[Head.FACTS]) == 0
    assert got.counts[Head.FACTS] == 0
    assert _rel(got.sums_at(), ref.sums_at()) <= 1e-12
    with pytest.raises(ValueError, match="rebuilt"):
        arena.subtract(_terms(slot, sub))


def test_contiguous_and_scattered_slots_agree() -> None:
    cfg = ss.StateConfig(dim=12)
    a, b = StateArena(cfg, 6), StateArena(cfg, 6)
    batches = [_batch(cfg, 4, seed=s, start=T0, step=60.0, prefix="x") for s in range(3)]
    a.add(_cat([_terms(s, x) for s, x in zip([0, 1, 2], batches, strict=True)]))  # contiguous
    b.add(_cat([_terms(s, x) for s, x in zip([5, 1, 3], batches, strict=True)]))  # scattered
    for sa, sb in ((0, 5), (1, 1), (2, 3)):
        assert _rel(a.cut(sa).sums, b.cut(sb).sums) <= 1e-12


def test_snapshot_round_trip_load_and_evict() -> None:
    cfg = ss.StateConfig(dim=10, dtype="float32")
    arena = StateArena(cfg, capacity=2)
    arena.add(_terms(arena.slot("a"), _batch(cfg, 7, seed=3, start=T0, step=60.0, prefix="a")))
    arena.marks[arena.slot("a")]["events/0"] = 42
    state = arena.cut(arena.slot("a"))
    data = snapshot_sums(state)
    back = restore_sums(data)
    assert torch.equal(back.sums, state.sums)
    assert (back.ref_time, back.last_time, back.counts, dict(back.marks)) == (
        state.ref_time, state.last_time, state.counts, {"events/0": 42})
    other = StateArena(cfg, capacity=1)
    other.load("a", back)
    assert torch.equal(other.cut(other.slot("a")).sums, state.sums)
    with pytest.raises(ArenaFullError):
        other.slot("b")
    assert other.evict("a") is not None and "a" not in other
    assert other.slot("b") == 0 and other.cut(0).last_time == -math.inf
    with pytest.raises(SnapshotFormatError):
        restore_sums(data[:-3])


def test_snapshot_slot_is_the_canonical_snapshot_without_the_copy() -> None:
    cfg = ss.StateConfig(dim=12)
    arena = StateArena(cfg, capacity=2)
    arena.add(_terms(arena.slot("a"), _batch(cfg, 9, seed=7, start=T0, step=60.0, prefix="a")))
    arena.marks[0]["p0"] = 9
    raw = arena.sums[0]
    h_kk = raw[:, :12, :12]
    assert not torch.equal(h_kk, h_kk.transpose(-1, -2))  # the twins differ by rounding here
    assert snapshot_slot(arena, 0) == snapshot_sums(arena.cut(0))
    assert torch.equal(restore_sums(snapshot_slot(arena, 0)).sums, arena.cut(0).sums)


def test_free_drops_a_slot_like_evict() -> None:
    cfg = ss.StateConfig(dim=8)
    arena = StateArena(cfg, capacity=1)
    arena.add(_terms(arena.slot("a"), _batch(cfg, 3, seed=8, start=T0, step=60.0, prefix="a")))
    arena.free("a")
    arena.free("never there")
    assert "a" not in arena and len(arena) == 0
    slot = arena.slot("b")
    assert arena.cut(slot).counts == (0,) * len(arena.cut(slot).counts)
    assert not arena.sums[slot].any()


def test_snapshot_size_is_fixed() -> None:
    cfg = ss.StateConfig(dim=16)
    arena = StateArena(cfg, capacity=2)
    few = _batch(cfg, 2, seed=4, start=T0, step=60.0, prefix="f")
    many = _batch(cfg, 500, seed=5, start=T0, step=60.0, prefix="m")
    arena.add(_terms(arena.slot("few"), few))
    arena.add(_terms(arena.slot("many"), many))
    sizes = {len(snapshot_sums(arena.cut(arena.slot(k)))) for k in ("few", "many")}
    assert max(sizes) - min(sizes) <= 4  # only the digits of the counts differ


def test_score_values_decodes_against_external_candidates() -> None:
    cfg = ss.StateConfig(dim=32)
    batch = _batch(cfg, 20, seed=6, start=T0, step=60.0, prefix="c")
    arena = StateArena(cfg, 1)
    arena.add(_terms(arena.slot("s"), batch))
    state = arena.cut(0)
    ref = ss.update(ss.empty(cfg), batch)
    facts = torch.nonzero(batch.heads == Head.FACTS).flatten()
    for i in facts.tolist():
        out, mean_v = ss.read_matrix(cfg, state.sums_at()[Head.FACTS], batch.keys[i][None])
        scores = ss.score_values(out, mean_v, batch.values[facts])
        best = int(facts[int(scores.argmax())])
        assert best == i
        assert ss.read(ref, batch.keys[i], 1, Head.FACTS)[0][0] == batch.ids[i]
