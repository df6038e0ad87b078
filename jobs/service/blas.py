"""One BLAS thread in a service process.

numpy's OpenBLAS runs a matrix-vector product of a search (the resident index's vector lists)
on every core, and its worker threads then spin, waiting for more, long after the product is
done: measured on a 10k-row store, a search took 30.5 ms of the process's CPU, 14.9 ms of it
in the calling thread and as much again in a spinning OpenBLAS thread; with one BLAS thread,
16.4 ms. A service's cores belong to its ingest and its other reads, so the writer and every
reader run BLAS on the calling thread only.

threadpoolctl limits the libraries loaded when it is called: numpy (and its OpenBLAS) is
imported first. Before that import was added, the limit was taken before any module of the
service had imported numpy, and so limited nothing: a search at 10k rows took 31.3 ms of the
service's CPU with a p50 of 16.9 ms.
"""

from __future__ import annotations


def one_blas_thread() -> None:
    """Limit this process's BLAS libraries to one thread (for the life of the process)."""
    import numpy  # noqa: F401  # loads its BLAS, so that the limit below reaches it
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]  # no stubs

    threadpool_limits(limits=1, user_api="blas")
