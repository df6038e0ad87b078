"""A service process runs BLAS on one thread (:mod:`memstack.jobs.service.blas`).

In a fresh interpreter, as ``memstack serve`` starts: no module has imported numpy yet, so
the limit must load numpy's BLAS itself before limiting it. (The first version limited
nothing there, and an OpenBLAS worker spinning after each search's matrix-vector product
doubled the search's CPU.)
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from memstack.jobs.service.blas import one_blas_thread
assert "numpy" not in sys.modules, "the probe must start without numpy"
one_blas_thread()
from threadpoolctl import threadpool_info
print(json.dumps([(i["filepath"], i["num_threads"]) for i in threadpool_info()
                  if i["user_api"] == "blas"]))
"""


def test_every_blas_pool_has_one_thread_after_the_limit_in_a_fresh_process() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, check=True)
    pools = json.loads(done.stdout.strip().splitlines()[-1])
    assert pools, "numpy's BLAS was not loaded: nothing was limited"
    assert all(threads == 1 for _, threads in pools), pools
