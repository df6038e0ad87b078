"""Errors of the stores: backend errors are translated into these at the store boundary.

Callers never see ``duckdb.Error`` or a Lance ``OSError``; they see one of these, each saying
what to do next. The original backend error is kept as ``__cause__``.
"""

from __future__ import annotations

from memstack.foundation.errors import MemstackError


class StoreError(MemstackError):
    """A store operation failed; the message names the store, the operation and the cause."""


class StoreLockedError(StoreError):
    """Another process holds the DuckDB file for writing (DuckDB allows one writer process).

    Query through the live worker's service, or open a published read snapshot
    (``memstack.pipelines.stores.duckdb_snapshot.publish_snapshot``) read-only; stop the
    other writer to write here.
    """


class StoreReadOnlyError(StoreError):
    """A write was attempted on stores opened read-only. Open them with ``read_only=False``."""


class StoreNotFoundError(StoreError):
    """The stores do not exist yet. Run the pipeline (`memstack run`) or a rebuild first."""


class StoreSchemaError(StoreError):
    """A stored table does not match this version's row schema.

    The stores are projections of the log: move the directory away and rebuild it from the log.
    """


class StoreWriteError(StoreError):
    """A write failed and was rolled back: nothing of the batch was committed; retry the batch."""


class EmbeddingShapeError(StoreError, ValueError):
    """Vectors do not match the rows (count) or the table (dimension); check the encoder."""
