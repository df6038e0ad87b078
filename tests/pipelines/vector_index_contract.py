"""The contract every :class:`VectorIndex` satisfies (run by each backend's test module).

A backend module subclasses :class:`VectorIndexContract` and provides the ``vectors`` fixture
(a fresh, writable index of dimension 384) and ``reader(index)`` (the same store opened
read-only, as another process would).
"""

from __future__ import annotations

import numpy as np
import pytest

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.stores.base import VectorIndex
from memstack.pipelines.stores.errors import EmbeddingShapeError, StoreReadOnlyError
from tests.pipelines.helpers import builder, conversation, logged, memories, mutations, unit_vectors


def rows_of(n: int, tenant: str = "acme", session: str = "s1", start: int = 0) -> (
    list[MemoryRow]
):
    return memories(mutations(conversation(builder(tenant), session, n, start)))


class VectorIndexContract:
    def reader(self, index: VectorIndex) -> VectorIndex:
        raise NotImplementedError

    def test_merged_rows_read_back(self, vectors: VectorIndex) -> None:
        rows = rows_of(5)
        result = vectors.merge(rows, unit_vectors(5))
        assert (result.inserted, result.updated) == (5, 0)
        assert vectors.count() == 5
        assert vectors.get([rows[3].memory_id, "missing"]) == [rows[3]]

    def test_merging_a_batch_twice_changes_nothing(self, vectors: VectorIndex) -> None:
        rows, vecs = rows_of(6), unit_vectors(6)
        vectors.merge(rows, vecs)
        first = vectors.content_hash()
        again = vectors.merge(rows, vecs)
        assert again.inserted == 0
        assert vectors.count() == 6
        assert vectors.content_hash() == first

    def test_the_first_write_of_a_memory_id_wins(self, vectors: VectorIndex) -> None:
        rows, vecs = rows_of(2), unit_vectors(3)
        vectors.merge([rows[0], rows[1], rows[0]], vecs)
        later = unit_vectors(1, seed=9)
        vectors.merge([rows[0]], later)
        assert vectors.count() == 2
        hit = vectors.search_vector(vecs[0], tenant="acme", k=1)[0]
        assert hit.row == rows[0] and hit.score == pytest.approx(0.0, abs=1e-5)

    def test_content_hash_sees_vector_changes_above_the_tolerance(
        self, vectors: VectorIndex
    ) -> None:
        rows, vecs = rows_of(3), unit_vectors(3)
        vectors.merge(rows, vecs)
        before = vectors.content_hash()
        vectors.delete([rows[1].memory_id])
        shifted = vecs[1:2] + np.float32(1e-2)
        vectors.merge([rows[1]], shifted)
        assert vectors.content_hash() != before

    def test_vector_search_is_prefiltered_by_tenant(self, vectors: VectorIndex) -> None:
        mine, theirs = rows_of(4), rows_of(4, tenant="other")
        vecs = unit_vectors(8)
        vectors.merge(mine + theirs, vecs)
        hits = vectors.search_vector(vecs[5], tenant="acme", k=10)
        assert {h.row.tenant for h in hits} == {"acme"} and len(hits) == 4
        top = vectors.search_vector(vecs[5], tenant="other", k=1)
        assert top[0].row == theirs[1]
        assert vectors.search_vector(vecs[0], tenant="acme", k=3, where="session = 'nope'") == []

    def test_full_text_search_is_prefiltered(self, vectors: VectorIndex) -> None:
        b = builder()
        events = [logged(b.note("s1", "the flamingo flew over Lisbon"), 0),
                  logged(b.note("s2", "a quiet day in Porto"), 1),
                  logged(builder("other").note("s1", "flamingo sighting"), 2)]
        rows = memories(mutations(events))
        vectors.merge(rows, unit_vectors(3))
        hits = vectors.search_text("flamingo", tenant="acme", k=5)
        assert [h.row.memory_id for h in hits] == [rows[0].memory_id]
        assert vectors.search_text("flamingo", tenant="acme", where="session = 's2'") == []

    def test_vectors_must_match_rows_and_dimension(self, vectors: VectorIndex) -> None:
        with pytest.raises(EmbeddingShapeError):
            vectors.merge(rows_of(2), unit_vectors(3))
        with pytest.raises(EmbeddingShapeError):
            vectors.merge(rows_of(2), unit_vectors(2, dim=vectors.dim - 1))

    def test_deleted_rows_are_gone_from_reads(self, vectors: VectorIndex) -> None:
        rows, vecs = rows_of(3), unit_vectors(3)
        vectors.merge(rows, vecs)
        assert vectors.delete([rows[0].memory_id, "missing"]) == 1
        assert vectors.get([rows[0].memory_id]) == []
        hits = vectors.search_vector(vecs[0], tenant="acme", k=3)
        assert rows[0].memory_id not in {h.row.memory_id for h in hits}

    def test_a_reader_sees_committed_writes_and_cannot_write(self, vectors: VectorIndex) -> None:
        vectors.merge(rows_of(2), unit_vectors(2))
        reader = self.reader(vectors)
        assert reader.count() == 2
        vectors.merge(rows_of(1, start=2), unit_vectors(1, seed=3))
        assert reader.count() == 3
        with pytest.raises(StoreReadOnlyError):
            reader.merge(rows_of(1, start=5), unit_vectors(1))
