"""Indexes built as segments of bounded size (:attr:`IndexPolicy.segment_rows`).

A forget's purge rewrites the fragment that holds a forgotten row, and Lance then remaps every
index segment that covers that fragment: its cost is the size of those segments, not of the
rewritten fragment. An index built over the whole table in one call is one segment, so at 1M
rows one purge remapped ten million-row segments (3.2 s of the purge, measured: the full-text
index 1.2 s, each of the seven BTREEs 0.23 s). Built here, each index is a list of segments
of at most ``segment_rows`` rows (whole fragments, in fragment order), committed as one index;
the tiered merges never grow a segment past the cap either
(:func:`~memstack.pipelines.stores.lance_segments.merge_plan`), as Lucene caps a merged
segment. The segments of the vector index share one IVF model and one PQ codebook, trained
once on the whole table, so a search reads them alike and later segments of new rows use the
same model.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

from lancedb.index import FTS

from memstack.pipelines.stores.lance_files import latest, retrying

log = logging.getLogger(__name__)

FTS_OPTIONS = ("with_position", "base_tokenizer", "language", "max_token_length", "lower_case",
               "stem", "remove_stop_words", "ascii_folding")
"""The tokenizer settings of LanceDB's ``FTS()`` that the full-text index is built with (its
defaults, one definition: what LanceDB's ``create_index(config=FTS())`` builds)."""


def fts_params() -> dict[str, Any]:
    """Keyword arguments for an INVERTED index tokenised as LanceDB's default ``FTS()``."""
    defaults = dataclasses.asdict(FTS())
    return {k: defaults[k] for k in FTS_OPTIONS}


def fragment_groups(fragments: Sequence[tuple[int, int]], cap: int) -> list[list[int]]:
    """``(fragment id, rows)`` pairs cut, in order, into groups of at most ``cap`` rows (a
    fragment larger than ``cap`` is a group of its own); fragments without rows are left out.
    Pure."""
    if cap < 1:
        raise ValueError(f"a segment must be allowed at least one row, not {cap}")
    groups: list[list[int]] = []
    current: list[int] = []
    held = 0
    for fragment, rows in fragments:
        if rows <= 0:
            continue
        if current and held + rows > cap:
            groups.append(current)
            current, held = [], 0
        current.append(fragment)
        held += rows
    if current:
        groups.append(current)
    return groups


def _groups(dataset: Any, cap: int) -> list[list[int]]:
    return fragment_groups([(f.fragment_id, int(f.metadata.physical_rows))
                            for f in dataset.get_fragments()], cap)


def build_scalar(uri: str, column: str, index_type: str, name: str, cap: int,
                 **params: Any) -> int:
    """(Re)build scalar index ``name`` (``BTREE``, ``BITMAP`` or ``INVERTED``) on ``column``
    as segments of at most ``cap`` rows; returns how many segments. Rows appended meanwhile
    stay unindexed until the next refresh gives them a segment."""
    def attempt() -> int:
        dataset = latest(uri)
        segments = [dataset.create_index_uncommitted(column, index_type, name=name,
                                                     replace=True, fragment_ids=group,
                                                     **params)
                    for group in _groups(dataset, cap)]
        if segments:
            dataset.commit_existing_index_segments(name, column, segments)
        return len(segments)
    built = retrying(f"build of {name}", attempt)
    log.debug("built %s in %d segment(s) of at most %d rows", name, built, cap)
    return built


SAMPLE_RATE = 256
"""Training rows per centroid at most (Lance's default sample rate)."""
PQ_CODES = 256
"""Centroids per PQ sub-vector (8 bits): training samples at least twice as many rows."""


def build_vector(uri: str, name: str, cap: int, *, rows: int, num_sub_vectors: int,
                 max_iterations: int = 20) -> int:
    """(Re)build IVF_PQ index ``name`` on ``vector`` (cosine) as segments of at most ``cap``
    rows sharing one model trained on the whole table (``sqrt(rows)`` partitions, as one
    index would have); returns how many segments."""
    from lance.indices import IndicesBuilder

    partitions = max(1, min(int(math.sqrt(rows)), rows // 1024))
    if rows < 2 * PQ_CODES:  # too few rows to sample a codebook from: Lance's own one-call build
        def whole() -> int:
            latest(uri).create_index("vector", "IVF_PQ", name=name, metric="cosine",
                                     replace=True, num_partitions=partitions,
                                     num_sub_vectors=num_sub_vectors)
            return 1
        return retrying(f"training of {name}", whole, attempts=3)

    def attempt() -> int:
        dataset = latest(uri)
        builder = IndicesBuilder(dataset, "vector")
        ivf = builder.train_ivf(partitions, distance_type="cosine", max_iters=max_iterations,
                                sample_rate=max(2, min(SAMPLE_RATE, rows // partitions)))
        pq = builder.train_pq(ivf, num_sub_vectors,
                              sample_rate=max(2, min(SAMPLE_RATE, rows // PQ_CODES)))
        segments = [dataset.create_index_uncommitted(
            "vector", "IVF_PQ", name=name, metric="cosine", replace=True,
            num_partitions=partitions, num_sub_vectors=num_sub_vectors,
            ivf_centroids=ivf.centroids, pq_codebook=pq.codebook, fragment_ids=group)
            for group in _groups(dataset, cap)]
        if segments:
            dataset.commit_existing_index_segments(name, "vector", segments)
        return len(segments)
    return retrying(f"training of {name}", attempt, attempts=3)
