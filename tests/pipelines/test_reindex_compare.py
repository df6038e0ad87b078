"""What a reindex verifies: the same log embedded by two encoders is equal but for its vectors.

Real stores (DuckDB + LanceDB files) built by the real projector with the real model, once
with ONNX int8 and once with torch: ``compare_reindexed`` calls them equal, the plain verify
does not (the vectors differ by design), and stores missing one event are DIFFERENT.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.pipelines.embedding import (
    ENCODERS,
    CachingEncoder,
    MiniLMEncoder,
    encoder_kind_for,
    kind_of,
    make_encoder,
    record_encoder,
)
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.replay.portable import compare_portable, compare_reindexed
from memstack.pipelines.replay.verify import compare
from memstack.pipelines.stores.bundle import Stores
from tests.pipelines.helpers import TOPIC, builder, record, year


def log() -> list[LogRecord]:
    b = builder()
    events = [b.message("s1", "user", f"Ana waters the basil every {i} days") for i in range(6)]
    events += [b.fact("s1", "user:ana", "lives_in", "Lisbon", valid_from=year(2019)),
               b.fact("s1", "user:ana", "lives_in", "Porto", valid_from=year(2026)),
               b.note("s1", "Ana prefers tea", subject="user:ana")]
    return [record(e, tt) for tt, e in enumerate(events)]


def build(directory: Path, kind: str, records: list[LogRecord]) -> Path:
    with Stores.open(directory) as stores:
        projector = StoreProjector(stores, make_encoder(kind).load(), TOPIC)
        projector.commit(projector.prepare(records))
    return directory


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root, records = tmp_path_factory.mktemp("reindex"), log()
    return {"int8": build(root / "int8", "onnx-int8", records),
            "torch": build(root / "torch", "torch", records),
            "short": build(root / "short", "torch", records[:-1])}


def test_same_log_other_encoder_is_equal_but_for_vectors(built: dict[str, Path]) -> None:
    with Stores.open(built["int8"], read_only=True) as a, \
            Stores.open(built["torch"], read_only=True) as b:
        assert compare_reindexed(a, b).equal
    assert not compare(built["int8"], built["torch"]).equal, "the vectors differ by design"
    assert compare_portable(built["int8"], built["torch"], vectors=False).equal
    assert not compare_portable(built["int8"], built["torch"]).equal


def test_a_missing_event_is_different(built: dict[str, Path]) -> None:
    with Stores.open(built["int8"], read_only=True) as a, \
            Stores.open(built["short"], read_only=True) as b:
        comparison = compare_reindexed(a, b)
    assert not comparison.equal
    assert {"records", "memories", "offsets"} <= set(comparison.differing())


def test_encoder_names_and_the_stores_encoder(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for kind in ENCODERS:
        assert kind_of(make_encoder(kind).name) == kind
    record_encoder(tmp_path, MiniLMEncoder())
    monkeypatch.delenv("MEMSTACK_ENCODER", raising=False)
    assert encoder_kind_for(tmp_path) == "torch", "the stores' own encoder when none is set"
    assert encoder_kind_for(tmp_path / "new") == "onnx-int8"
    monkeypatch.setenv("MEMSTACK_ENCODER", "onnx-fp32")
    assert encoder_kind_for(tmp_path) == "onnx-fp32", "an explicit setting wins"


def test_the_shared_encoder_swaps_in_place() -> None:
    shared = CachingEncoder(make_encoder("onnx-int8").load())
    before = shared.encode(["hello"])
    previous = shared.swap(MiniLMEncoder().load())
    assert previous.name.endswith("onnx-int8") and shared.name == "all-MiniLM-L6-v2"
    after = shared.encode(["hello"])
    assert float(abs(before - after).max()) > 1e-4, "no vector of the old encoder is served"
