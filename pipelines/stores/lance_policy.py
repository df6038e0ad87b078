"""``IndexPolicy``: when :class:`~memstack.pipelines.stores.lance_index.LanceVectorIndex` builds
and refreshes its indexes, and how it searches them (see docs/stores.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class IndexPolicy:
    """When to build and refresh the indexes (all amortised over writes)."""

    vector_min_rows: int = 10_000
    """Below this a flat (exact) scan is fast enough; no IVF_PQ index."""
    vector_rebuild_growth: float = 1.0
    """Retrain IVF_PQ when the table grew by this fraction since the last training."""
    refresh_rows: int = 2_000
    """Refresh (bounded compaction, then a new index segment for the new rows) after this many
    new rows, at any table size: the rows no index covers yet, which every search and forget
    resolution scans, stay below it (see :mod:`~memstack.pipelines.stores.lance_segments`)."""
    merge_width: int = 4
    """An index's newest segments are merged when this many are in one size tier (tiers grow
    by this factor from ``refresh_rows``): at most ``width - 1`` segments per tier."""
    fragment_rows: int = 65_536
    """Compaction merges fragments up to this many rows and no further (LanceDB's ``optimize``
    would merge up to ~1M): a forget purge rewrites only the fragments holding deleted rows, so
    this bounds its cost (see pipelines/stores/lance_files.py and docs/forget.md)."""
    segment_rows: int = 131_072
    """An index segment covers at most this many rows (whole fragments): builds cut an index
    into such segments and the tiered merges stop short of it, so a forget's purge remaps
    segments of this size whatever the table's (:mod:`~memstack.pipelines.stores.lance_capped`;
    at 1M rows, one purge's rewrite and remap took 3.2 s with one segment per index, measured).
    The cost: a search reads ``rows / segment_rows`` segments or more."""
    num_sub_vectors: int = 24
    """PQ sub-vectors (16 dims each at 384): 48 trains ~2.5x slower for little gain with refine."""
    refine_factor: int = 5
    nprobes: int = 30
    """IVF partitions searched (of ~sqrt(n)): at 1M rows 20 found 0.87 of the exact top 40 of a
    tenant in the query benchmark, 25 found 0.96 for ~2 ms more (30: 0.99, ~5 ms more). The
    top 10 of ``search(mode="vector")`` against exact cosine (as of, 150 queries, 1M rows):
    0.966 at 25, 0.998 at 30, 0.999 at 40 and 50; a refine factor of 10 instead of 5 changed
    nothing (0.967 at 25). 25 measured 0.937 on another corpus: 30 keeps a margin."""
    scalar_columns: tuple[str, ...] = ("memory_id", "session", "subject", "tt_from", "vt_from",
                                       "tt_to", "vt_to")
    """BTREE indexes: with all four time columns indexed, the whole as-of prefilter is
    answered from the indexes instead of reading ``tt_to``/``vt_to`` of every candidate;
    ``session`` and ``subject`` find a forget's rows without a scan (a subject forget's
    resolution at 1M rows: 40 ms scanning, see docs/forget.md)."""
    bitmap_columns: tuple[str, ...] = ("tenant",)
    """BITMAP indexes (few distinct values): a tenant's rows and their count in ~0.5 ms."""
    text_overfetch_max: int = 4000
    """Full-text search ranks at most this many rows of all tenants to find one tenant's top
    ``k`` instead of prefiltering by tenant (see :meth:`LanceVectorIndex.text_candidates`)."""
    text_overfetch_margin: float = 1.3
    """Rank ``margin * k / tenant share`` rows: the tenant's ``k`` are then almost always in."""
    text_overfetch_cost: float = 25.0
    """Rank rows of all tenants only when the tenant has this many rows per row ranked: the
    prefilter scores each of the tenant's rows (~0.17 us), ranking reads each row (~4 us)."""
    keep_versions_for: timedelta = timedelta(hours=1)
    index_check_every: float = 5.0
    """Seconds a reader trusts its cached list of built indexes (the writer refreshes it
    whenever it builds one); listing them per query costs ~2 ms."""
