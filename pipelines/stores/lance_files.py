"""Bounded rewrites of a Lance dataset's files: maintenance compaction and the forget purge.

LanceDB's ``optimize`` compacts a table into fragments of up to ~1M rows, so materialising one
deleted row would rewrite the whole table. Here compaction goes through pylance's
``compact_files`` with ``target_rows_per_fragment`` (the policy's ``fragment_rows``), which
keeps every fragment bounded; the purge then rewrites only the fragments that carry a deletion
file and lets Lance remap every index to the rewritten rows.

Every function opens its own dataset handle at the latest version and retries when a
concurrent writer committed first (:func:`retrying`): the purge runs beside the live writer.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import lance

log = logging.getLogger(__name__)

T = TypeVar("T")
DECODED_FILES = 4096
"""Data files whose decoded text column the audit keeps (a fragment of 64Ki short texts is a
few MB)."""
CONFLICT_ATTEMPTS = 8


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` says another writer committed first (the operation may be retried)."""
    return "conflict" in str(exc).lower() or type(exc).__name__ == "CommitConflictError"


def retrying(operation: str, attempt: Callable[[], T], attempts: int = CONFLICT_ATTEMPTS) -> T:
    """Run ``attempt`` again (on a fresh handle: ``attempt`` opens its own) after a commit
    conflict; any other error, or the last conflict, is raised."""
    for i in range(attempts):
        try:
            return attempt()
        except (OSError, ValueError, RuntimeError) as exc:
            if not is_conflict(exc) or i == attempts - 1:
                raise
            log.info("%s: commit conflict (%s); retrying on the latest version", operation, exc)
            time.sleep(0.01 * (i + 1))
    raise AssertionError("unreachable")


def latest(uri: str) -> Any:
    """A new handle on the dataset's latest version (never the caller's, maybe stale, one)."""
    return lance.dataset(uri)


def deleted_fragments(dataset: Any) -> list[Any]:
    """The fragments with a deletion file: what a purge must rewrite."""
    return [f for f in dataset.get_fragments() if f.metadata.deletion_file is not None]


def compact_small(uri: str, fragment_rows: int,
                  among: Callable[[Any], set[int]] | None = None) -> int:
    """Merge the small fragments that no index covers yet (the rows written since the last
    refresh), or those ``among`` picks from the dataset, into fragments of fewer than
    ``fragment_rows`` rows; deletions are left to the purge. Returns the fragments removed.

    Indexed fragments are left as they are: compacting one would make Lance remap every index
    segment covering it, a rewrite of that segment (1.6 s for one index over 1M rows), so the
    maintenance would cost more as the table grows (see
    :mod:`~memstack.pipelines.stores.lance_segments`).

    Lance's ``target_rows_per_fragment`` is not a cap: it merges fragments smaller than the
    target, adjacent ones together, until a merged one reaches the target, and never splits
    one (measured, pylance 14.0.2: 150-row fragments and a target of 1,000 gave 1,750). So the
    target is half the bound: a merge of fragments each under half stops under twice half. A
    single write of more rows than that keeps its size (the benchmark writes 50k at a time).
    """
    def attempt() -> int:
        dataset = latest(uri)
        every = {int(f.fragment_id) for f in dataset.get_fragments()}
        chosen = among(dataset) if among is not None else every - indexed_fragments(dataset)
        if len(chosen & every) < 2:
            return 0
        metrics = dataset.optimize.compact_files(
            target_rows_per_fragment=max(1, fragment_rows // 2), materialize_deletions=False,
            excluded_fragment_ids=sorted(every - chosen))
        return int(metrics.fragments_removed)
    return retrying("compaction", attempt)


def index_segments(dataset: Any) -> list[dict[str, Any]]:
    """Every segment of every index (name, uuid, version, fragment_ids), as Lance lists them."""
    with warnings.catch_warnings():
        # list_indices is deprecated for describe_indices, which does not list segments
        warnings.simplefilter("ignore", DeprecationWarning)
        return list(dataset.list_indices())


def indexed_fragments(dataset: Any) -> set[int]:
    """The fragments some index segment covers."""
    return {int(f) for index in index_segments(dataset) for f in index["fragment_ids"]}


def drop_versions(uri: str, older_than: timedelta, *, unreferenced: bool = False) -> int:
    """Remove versions older than ``older_than`` and the files only they reference.

    Files no version references (an in-flight write's, not committed yet, or the rewritten
    fragments of a purge whose commit lost a conflict) are kept unless ``unreferenced``: the
    caller must then hold the writer's lock, so that no write is in flight. Returns the bytes
    removed.
    """
    stats = latest(uri).cleanup_old_versions(older_than=older_than,
                                            delete_unverified=unreferenced,
                                            error_if_tagged_old_versions=True)
    return int(stats.bytes_removed)


@dataclass(frozen=True)
class Rewrite:
    """What a purge's compaction rewrote."""

    fragments: int
    rows: int


def rewrite_deleted(uri: str, fragment_rows: int) -> Rewrite:
    """Rewrite only the fragments with deletions, without their deleted rows, and remap every
    index (other fragments are excluded, so their files stay as they are).

    The set of fragments is read from the deletion files at each attempt: the purge needs no
    list of erased ids, and a retry after a concurrent commit sees that commit's fragments.
    """
    def attempt() -> Rewrite:
        dataset = latest(uri)
        dirty = deleted_fragments(dataset)
        if not dirty:
            return Rewrite(0, 0)
        ids = {f.fragment_id for f in dirty}
        rows = sum(int(f.count_rows()) for f in dirty)
        others = [f.fragment_id for f in dataset.get_fragments() if f.fragment_id not in ids]
        dataset.optimize.compact_files(
            target_rows_per_fragment=fragment_rows, materialize_deletions=True,
            materialize_deletions_threshold=0.0, excluded_fragment_ids=others)
        return Rewrite(len(dirty), rows)
    return retrying("purge compaction", attempt)


def index_overcount(dataset: Any, name: str) -> int:
    """How many more rows index ``name`` holds than the live rows of the fragments it covers:
    0 once every deleted row left it (a compaction remaps it without them), more while a
    deletion file hides rows it still holds, or when a delete dropped a whole fragment (Lance
    drops such a fragment at once, and no compaction remaps the index then). Full-text
    indexes count documents, vector indexes the rows of their partitions."""
    import os

    os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")  # stats without them
    try:
        stats = dataset.stats.index_stats(name)
    except (OSError, ValueError, RuntimeError, KeyError):
        return 0  # no such index (not built yet)
    held = 0
    for segment in stats.get("segments") or stats.get("indices") or []:
        if "num_docs" in segment:
            held += int(segment["num_docs"])
        else:
            held += sum(int(p.get("size", 0)) for p in segment.get("partitions", []))
    return max(0, held - int(stats.get("num_indexed_rows", 0)))


def data_files_holding(directory: str, column: str, needles: list[str]) -> dict[str, int]:
    """For each Lance data file under ``directory`` (any version's, referenced or not), how many
    of ``needles`` its decoded ``column`` contains (files with none left out).

    A raw byte scan is no proof of absence here: Lance compresses string pages (the benchmark
    corpus's texts are not found as bytes even in the live file), so the file is decoded. Data
    files are immutable, so each is decoded once (:func:`_decoded`, by path and size) and the
    audits of a batch of requests share the work.
    """
    import pyarrow.compute as pc

    hits: dict[str, int] = {}
    for path, values in _data_files(directory, column) if needles else ():
        found = sum(1 for n in needles
                    if pc.any(pc.match_substring(values, n)).as_py())
        if found:
            hits[path] = found
    return hits


def data_files_with(directory: str, column: str, values: list[str]) -> dict[str, int]:
    """For each Lance data file under ``directory`` (any version's, referenced or not), how many
    of its rows have ``column`` equal to one of ``values`` (files with none left out); one
    membership pass per file, decoded once (:func:`_decoded`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    hits: dict[str, int] = {}
    wanted = pa.array(values, pa.string())
    for path, decoded in _data_files(directory, column) if values else ():
        found = int(pc.sum(pc.is_in(decoded, value_set=wanted)).as_py() or 0)
        if found:
            hits[path] = found
    return hits


def _data_files(directory: str, column: str) -> Iterator[tuple[str, Any]]:
    """Every Lance data file under ``directory`` with its decoded ``column`` (:func:`_decoded`);
    files removed meanwhile (a cleanup) are skipped."""
    for path in sorted(Path(directory).rglob("*.lance")):
        if not path.is_file() or path.parent.name != "data":
            continue
        try:
            yield str(path), _decoded(str(path), path.stat().st_size, column)
        except (OSError, ValueError, RuntimeError):
            continue  # removed while scanning (a cleanup), or not a data file


@functools.lru_cache(maxsize=DECODED_FILES)
def _decoded(path: str, size: int, column: str) -> Any:
    """``column`` of one data file, decoded (``size`` in the key: a path is never rewritten in
    place, but a cache must not trust that blindly)."""
    from lance.file import LanceFileReader

    return LanceFileReader(path, columns=[column]).read_all().to_table()[column]
