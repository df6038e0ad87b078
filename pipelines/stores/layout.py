"""The files of one stores directory: ``<dir>/memstack.duckdb`` (DuckDB) and ``<dir>/lance/``
(LanceDB). Names only, so that anything that looks at a directory (the bundle that opens it,
the ``current`` pointer that switches to it, verify, export) reads them from one place."""

DUCKDB_FILE = "memstack.duckdb"
LANCE_DIR = "lance"
