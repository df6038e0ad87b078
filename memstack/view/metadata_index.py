"""An in-process index of the ``memories`` table's metadata: a filter to the rows it keeps.

LanceDB evaluates a JSON filter row by row (no index reads ``metadata_json``): a filter that
keeps 1 % of 1M rows cost a search ~300 ms. :class:`MetadataIndex` answers "which of this
tenant's rows pass this filter" from memory instead, so a selective filter is resolved first
and its few rows are scored exactly (:mod:`memstack.view.selective`).

**What it holds.** Per Lance fragment (identified by its id, data files and deletion file),
the live rows' :data:`ROW_COLUMNS` with ``_rowid`` (every column but ``text``, ``vector`` and
the metadata), read once with the fragment, and per row a number into one table of the
distinct metadata texts, each parsed once. Per metadata key, over the distinct texts: the
scalar values (``(type, value) -> texts``, the exact equality of
:func:`memstack.schemas.filters.same`), the list items (for ``contains``) and the numbers and
strings in arrays (for ``gt``/``gte``/``lt``/``lte``, compared as
:func:`~memstack.schemas.filters.matches` compares them). A filter is evaluated on the
distinct texts, then gathered to the tenant's rows of each fragment (numpy); nothing reads the
store per query.

**Kept current.** A query reads the table's version (~0.3 ms); when it moved, the fragments
are listed and only fragments not seen before are read (an append adds fragments, a
compaction or a forget's delete or purge rewrites some: a fragment with a new deletion file is
a new fragment). When a fragment leaves, the distinct texts no live row uses any more are
dropped: the metadata of a forgotten row does not outlive its row here. The first filtered
search of a process reads every fragment (1M rows of the query benchmark, 100 distinct
metadata texts: 0.35 s and ~200 MB resident); :meth:`MetadataIndex.refresh` does it ahead of
time.

The answer is a snapshot of one table version: the caller reads more of those rows by
``_rowid`` and checks that each is there (a row moved by a compaction since is not read).
"""

from __future__ import annotations

import json
import operator
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from memstack.schemas.filters import And, Compare, Filter, Not, Or, Scalar
from memstack.schemas.metadata import Metadata, metadata_of

Mask = npt.NDArray[np.bool_]

_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}


def _tag(value: Scalar) -> tuple[str, Scalar]:
    """A scalar as a dict key with the filter language's equality: ``(tag, value)`` tuples
    are equal exactly when :func:`~memstack.schemas.filters.same` holds (3 and 3.0 are one key,
    ``True`` and 1 are not)."""
    if isinstance(value, bool):
        return ("b", value)
    if value is None:
        return ("z", None)
    if isinstance(value, (int, float)):
        return ("n", value)
    return ("s", value)


@dataclass
class _Key:
    """One metadata key over the distinct metadata texts (``uid`` = a text's number)."""

    scalars: dict[tuple[str, Scalar], list[int]] = field(default_factory=lambda: defaultdict(list))
    items: dict[tuple[str, Scalar], list[int]] = field(default_factory=lambda: defaultdict(list))
    numbers: list[float] = field(default_factory=list)
    number_uids: list[int] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    string_uids: list[int] = field(default_factory=list)
    _arrays: tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.object_],
                   npt.NDArray[np.int64]] | None = None

    def arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64],
                              npt.NDArray[np.object_], npt.NDArray[np.int64]]:
        """The numbers and the strings as arrays, with their uids (built once per change)."""
        if self._arrays is None:
            self._arrays = (np.asarray(self.numbers, dtype=np.float64),
                            np.asarray(self.number_uids, dtype=np.int64),
                            np.asarray(self.strings, dtype=object),
                            np.asarray(self.string_uids, dtype=np.int64))
        return self._arrays

    def add(self, uid: int, value: object) -> None:
        self._arrays = None
        if isinstance(value, list):
            for item in {_tag(i) for i in value}:
                self.items[item].append(uid)
            return
        tagged = _tag(value)  # type: ignore[arg-type]  # metadata values are checked scalars
        self.scalars[tagged].append(uid)
        if tagged[0] == "n":
            self.numbers.append(float(value))  # type: ignore[arg-type]  # a number
            self.number_uids.append(uid)
        elif tagged[0] == "s":
            self.strings.append(str(value))
            self.string_uids.append(uid)


ROW_COLUMNS = ("memory_id", "event_id", "tenant", "session", "kind", "subject", "vt_from",
               "vt_to", "tt_from", "tt_to", "partition", "offset")
"""The columns the index keeps of every row (with ``_rowid`` and its metadata): every column
but ``text`` and ``vector``, so a selective search reads only those of the rows that pass."""


@dataclass(frozen=True)
class _Fragment:
    rows: pa.Table
    """:data:`ROW_COLUMNS` and ``_rowid`` of the fragment's live rows."""
    codes: npt.NDArray[np.int64]
    """Each row's metadata text (a uid)."""
    tenants: dict[str, npt.NDArray[np.int64]]
    """Each tenant's row positions in the fragment."""


@dataclass(frozen=True)
class Selection:
    """What :meth:`MetadataIndex.select` found."""

    rowids: npt.NDArray[np.uint64]
    """The ``_rowid`` of the rows that pass, ascending."""
    tenant_rows: int
    """How many rows the tenant has."""
    rows: pa.Table | None
    """The rows that pass (see :meth:`MetadataIndex.rows`), or None when more than the limit
    pass."""

    @property
    def share(self) -> float:
        return len(self.rowids) / self.tenant_rows if self.tenant_rows else 0.0


class MetadataIndex:
    """The metadata of one ``memories`` table (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version: int | None = None
        self._fragments: dict[str, _Fragment] = {}
        self._texts: dict[str, int] = {}
        self._text_of: list[str] = []
        self._text_array: pa.Array | None = None
        """:attr:`_text_of` as Arrow, made when a selection needs it after they changed (a
        store whose rows each carry their own metadata holds as many texts as rows)."""
        self._parsed: list[Metadata] = []
        self._keys: dict[str, _Key] = {}

    @property
    def distinct(self) -> int:
        """How many distinct metadata texts the live rows hold."""
        return len(self._parsed)

    def refresh(self, table: Any, uri: str) -> None:
        """Bring the index to the version ``table`` (a LanceDB table) reads."""
        with self._lock:
            self._refresh(table, uri)

    def _refresh(self, table: Any, uri: str) -> None:
        import lance

        version = int(table.version)
        if version == self._version:
            return
        dataset = lance.dataset(uri, version=version)
        live: dict[str, Any] = {}
        for fragment in dataset.get_fragments():
            meta = fragment.metadata
            deletion = meta.deletion_file
            key = json.dumps([meta.id, [f.path for f in meta.files],
                              None if deletion is None else [deletion.id, deletion.read_version,
                                                              deletion.num_deleted_rows]])
            live[key] = fragment
        gone = set(self._fragments) - set(live)
        for key in gone:
            del self._fragments[key]
        for key, fragment in live.items():
            if key not in self._fragments:
                self._fragments[key] = self._read(fragment)
        if gone:
            self._compact()
        self._version = version

    def _read(self, fragment: Any) -> _Fragment:
        rows: pa.Table = fragment.to_table(columns=[*ROW_COLUMNS, "metadata_json"],
                                           with_row_id=True)
        encoded = pc.dictionary_encode(rows.column("metadata_json").combine_chunks())
        local = [self._uid(str(t)) for t in encoded.dictionary.to_pylist()]
        codes = np.asarray(local, dtype=np.int64)[
            encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)] if local \
            else np.zeros(0, dtype=np.int64)
        tenants = pc.dictionary_encode(rows.column("tenant").combine_chunks())
        t_codes = tenants.indices.to_numpy(zero_copy_only=False)
        order = np.argsort(t_codes, kind="stable")
        bounds = np.searchsorted(t_codes[order], np.arange(len(tenants.dictionary) + 1))
        by_tenant = {str(name): order[bounds[i]:bounds[i + 1]].astype(np.int64)
                     for i, name in enumerate(tenants.dictionary.to_pylist())}
        return _Fragment(rows.drop_columns(["metadata_json"]).combine_chunks(), codes, by_tenant)

    def _uid(self, text: str) -> int:
        uid = self._texts.get(text)
        if uid is None:
            uid = self._texts[text] = len(self._parsed)
            self._text_of.append(text)
            self._text_array = None
            parsed = metadata_of(text)
            self._parsed.append(parsed)
            for name, value in parsed.items():
                self._keys.setdefault(name, _Key()).add(uid, value)
        return uid

    def _compact(self) -> None:
        """Drop the texts no live row uses (renumbering the rest; nothing is parsed again)."""
        used = np.zeros(len(self._parsed), dtype=bool)
        for fragment in self._fragments.values():
            used[fragment.codes] = True
        if used.all():
            return
        renumber = np.cumsum(used) - 1
        kept = np.flatnonzero(used)
        self._fragments = {k: _Fragment(f.rows, renumber[f.codes], f.tenants)
                           for k, f in self._fragments.items()}
        self._text_of = [self._text_of[i] for i in kept]
        self._text_array = None
        self._parsed = [self._parsed[i] for i in kept]
        self._texts = {text: uid for uid, text in enumerate(self._text_of)}
        self._keys = {}
        for uid, parsed in enumerate(self._parsed):
            for name, value in parsed.items():
                self._keys.setdefault(name, _Key()).add(uid, value)

    # -- queries ---------------------------------------------------------------------------

    def select(self, table: Any, uri: str, tenant: str, f: Filter,
               limit: int | None = None) -> Selection:
        """The tenant's rows that pass ``f`` at the version ``table`` reads: their ``_rowid``,
        the tenant's row count, and (when at most ``limit`` pass) the rows themselves."""
        with self._lock:
            self._refresh(table, uri)
            passing = self._mask(f)
            kept: list[tuple[_Fragment, npt.NDArray[np.int64]]] = []
            tenant_rows = 0
            for fragment in self._fragments.values():
                at = fragment.tenants.get(tenant)
                if at is None or not len(at):
                    continue
                tenant_rows += len(at)
                kept.append((fragment, at[passing[fragment.codes[at]]]))
            ids = [f.rows.column("_rowid").to_numpy()[keep] for f, keep in kept]
            rowids = np.sort(np.concatenate(ids)).astype(np.uint64) if ids \
                else np.zeros(0, dtype=np.uint64)
            rows = None
            if limit is None or len(rowids) <= limit:
                found = [f.rows.take(pa.array(keep)) for f, keep in kept if len(keep)]
                if not found:
                    rows = _empty()
                else:
                    codes = np.concatenate([f.codes[keep] for f, keep in kept if len(keep)])
                    if self._text_array is None:
                        self._text_array = pa.array(self._text_of, pa.string())
                    metadata = self._text_array.take(pa.array(codes))
                    rows = (pa.concat_tables(found).append_column("metadata_json", metadata)
                            .sort_by("_rowid"))
        return Selection(rowids, tenant_rows, rows)

    def rows(self, table: Any, uri: str, tenant: str, f: Filter,
             limit: int | None = None) -> pa.Table | None:
        """The tenant's rows that pass ``f`` (:data:`ROW_COLUMNS`, ``_rowid`` and
        ``metadata_json``, ascending by ``_rowid``: storage order) at the version ``table``
        reads; None when more than ``limit`` pass."""
        return self.select(table, uri, tenant, f, limit).rows

    def _mask(self, f: Filter) -> Mask:
        """Which distinct metadata texts pass ``f``."""
        size = len(self._parsed)
        if isinstance(f, Not):
            out: Mask = ~self._mask(f.part)
            return out
        if isinstance(f, And | Or):
            result = np.full(size, isinstance(f, And), dtype=bool)
            for part in f.parts:
                if isinstance(f, And):
                    result &= self._mask(part)
                else:
                    result |= self._mask(part)
            return result
        return self._compare(f, size)

    def _compare(self, c: Compare, size: int) -> Mask:
        out = np.zeros(size, dtype=bool)
        key = self._keys.get(c.field)
        if c.op in ("ne", "nin"):
            return ~self._compare(Compare(c.field, "eq" if c.op == "ne" else "in", c.value),
                                  size)
        if key is None:
            return out
        if c.op in ("eq", "in"):
            values = c.value if isinstance(c.value, tuple) else (c.value,)
            for value in values:
                out[key.scalars.get(_tag(value), [])] = True
            return out
        if c.op == "contains":
            out[key.items.get(_tag(c.value), [])] = True  # type: ignore[arg-type]  # a scalar
            return out
        compare = _ORDER[c.op]
        bound = c.value
        numbers, number_uids, strings, string_uids = key.arrays()
        if isinstance(bound, (int, float)) and not isinstance(bound, bool):
            out[number_uids[np.asarray(compare(numbers, float(bound)), dtype=bool)]] = True
        elif isinstance(bound, str) and len(strings):
            out[string_uids[np.asarray(compare(strings, bound), dtype=bool)]] = True
        return out


def _empty() -> pa.Table:
    from memstack.schemas.rows import memories_schema

    schema = memories_schema()
    fields = [schema.field(c) for c in ROW_COLUMNS]
    return pa.schema([*fields, pa.field("_rowid", pa.uint64()),
                      pa.field("metadata_json", pa.string())]).empty_table()


_INDEXES: weakref.WeakKeyDictionary[Any, MetadataIndex] = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


def index_of(store: Any) -> MetadataIndex:
    """The metadata index of a vector store (one per store object, kept while it lives)."""
    with _INDEXES_LOCK:
        found = _INDEXES.get(store)
        if found is None:
            found = _INDEXES[store] = MetadataIndex()
        return found
