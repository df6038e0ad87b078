"""Which resident search index a store's searches use, built and dropped per process.

:func:`resident_of` holds one :class:`~memstack.view.resident.index.ResidentIndex` per LanceDB
vector store of this process, built on first use (a large table in the background), brought
current before each search; a copy that fails is dropped and searches go through LanceDB for
:data:`RETRY_AFTER_S`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from memstack.pipelines.stores.lance_index import LanceVectorIndex
from memstack.view.resident.index import ResidentIndex

log = logging.getLogger(__name__)

ENV = "MEMSTACK_RESIDENT_SEARCH"
"""``0`` turns the resident index off (every search through LanceDB)."""
MAX_ROWS_ENV = "MEMSTACK_RESIDENT_MAX_ROWS"
MAX_ROWS = 4_000_000
"""Above this many rows (default; ``MEMSTACK_RESIDENT_MAX_ROWS``) searches go through LanceDB:
the copy takes ~1.7 KB a row (the vector 1.5 KB)."""


_INDEXES: weakref.WeakKeyDictionary[LanceVectorIndex, ResidentIndex] = \
    weakref.WeakKeyDictionary()
_REGISTRY = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def max_rows() -> int:
    raw = os.environ.get(MAX_ROWS_ENV)
    try:
        return MAX_ROWS if raw is None else int(raw)
    except ValueError as exc:
        raise ValueError(f"{MAX_ROWS_ENV}={raw!r} is not a whole number of rows") from exc


SYNC_ROWS = 100_000
"""A table of at most this many rows is copied by the first search that needs it (~1-2 s
per 100k rows here); a larger one in a background thread, its searches going through
LanceDB until the copy is ready (a one-off query of a large store does not wait a minute)."""


def resident_of(vectors: object, *, wait: bool | None = None) -> ResidentIndex | None:
    """The resident index of a LanceDB vector store, current; None when searches go through
    LanceDB: turned off, another store, more rows than :func:`max_rows`, or (``wait``
    False) the copy still being built. ``wait`` None: wait for tables of up to
    :data:`SYNC_ROWS` rows only."""
    if not isinstance(vectors, LanceVectorIndex) or not enabled():
        return None
    with _REGISTRY:
        failed = _FAILED.get(vectors)
        if failed is not None and time.monotonic() - failed < RETRY_AFTER_S:
            return None
        index = _INDEXES.get(vectors)
        if index is None:
            rows = vectors.count()
            if rows > max_rows():
                return None
            index = _INDEXES[vectors] = ResidentIndex(vectors.dim)
            if not (rows <= SYNC_ROWS if wait is None else wait):
                _build_in_background(vectors, index)
                return None
    if not index.ready and (wait is False or (wait is None and index.building)):
        return None  # being built in the background: this search goes through LanceDB
    try:
        index.refresh(vectors.lance_table, vectors.uri)
    except Exception:  # the search goes through LanceDB; the copy is rebuilt later
        _failed(vectors)
        return None
    if index.rows.live() > max_rows():
        with _REGISTRY:
            _INDEXES.pop(vectors, None)
        log.warning("%s holds more than %d rows: searches go through LanceDB (%s)",
                    vectors.directory, max_rows(), MAX_ROWS_ENV)
        return None
    return index


RETRY_AFTER_S = 300.0
"""After the copy failed to follow its table, searches go through LanceDB this long before
it is built again from scratch."""
_FAILED: weakref.WeakKeyDictionary[LanceVectorIndex, float] = weakref.WeakKeyDictionary()


def drop_failed(vectors: object) -> bool:
    """After a search failed while a ready copy of ``vectors`` was held: drop the copy (the
    error logged; searches go through LanceDB and it is rebuilt after :data:`RETRY_AFTER_S`)
    and return True. False when no ready copy was held: the failure was not the copy's."""
    if not isinstance(vectors, LanceVectorIndex):
        return False
    with _REGISTRY:
        held = _INDEXES.get(vectors)
    if held is None or not held.ready:
        return False
    _failed(vectors, "failed while answering a search")
    return True


def _failed(vectors: LanceVectorIndex, what: str = "failed to follow its table") -> None:
    log.exception("the resident search index of %s %s; searches go through LanceDB and the "
                  "copy is rebuilt in %.0f s", vectors.directory, what, RETRY_AFTER_S)
    with _REGISTRY:
        _INDEXES.pop(vectors, None)
        _FAILED[vectors] = time.monotonic()


def _build_in_background(vectors: LanceVectorIndex, index: ResidentIndex) -> None:
    index.building = True

    def build() -> None:
        began = time.perf_counter()
        try:
            index.refresh(vectors.lance_table, vectors.uri)
        except Exception:  # searches stay on LanceDB
            _failed(vectors)
            return
        log.info("resident search index of %s: %d rows in %.1f s", vectors.directory,
                 index.rows.live(), time.perf_counter() - began)

    threading.Thread(target=build, name="memstack-resident-build", daemon=True).start()


def refresh_held(vectors: object) -> None:
    """Bring the resident index of ``vectors`` current if this process holds one (after a
    forget's hide: the rows it deleted leave the copy now, not at the next search). A copy
    that fails to follow is dropped (:func:`_failed`); nothing is raised."""
    with _REGISTRY:
        index = _INDEXES.get(vectors) if isinstance(vectors, LanceVectorIndex) else None
    if index is not None and isinstance(vectors, LanceVectorIndex):
        try:
            index.refresh(vectors.lance_table, vectors.uri)
        except Exception:
            _failed(vectors)


def refresh_soon(vectors: object) -> None:
    """:func:`refresh_held` in a daemon thread: the caller (a worker's forget hook) neither
    waits for the copy's lock nor sees its errors."""
    threading.Thread(target=refresh_held, args=(vectors,), name="memstack-resident-refresh",
                     daemon=True).start()


def warm_in_background(vectors: object) -> None:
    """Start building the resident index of ``vectors`` in a daemon thread (a service's first
    search would otherwise pay the build); searches use it once it is ready."""
    try:
        resident_of(vectors, wait=False)
    except Exception:  # a search tries again and reports what fails
        log.exception("starting the resident search index failed; searches will retry")
