"""A replay returns only once its writer has closed its stores (:mod:`...replay.writer_mark`).

The race it closes: in the ``loopback`` worker mode PyFlink runs the writer in the replaying
process and reports the job finished while the writer still builds its indexes; a CI run then
opened the stores for the verify and the process died in LanceDB (segmentation fault).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from memstack.pipelines.replay import writer_mark


def test_a_replay_waits_for_the_writer_of_this_process(tmp_path: Path) -> None:
    held = writer_mark.mark(tmp_path)
    assert writer_mark.live_marks(tmp_path) == [held]
    threading.Timer(0.4, writer_mark.release, args=(held,)).start()
    assert writer_mark.wait_closed(tmp_path, timeout_s=60)
    assert not held.exists()  # it returned only once the writer had closed
    assert writer_mark.live_marks(tmp_path) == []


def test_a_mark_left_by_a_dead_process_is_not_waited_for(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = int(child.stdout)  # exited: the pid is no longer alive
    (tmp_path / f"{writer_mark.PREFIX}{dead}-abc").touch()
    (tmp_path / f"{writer_mark.PREFIX}junk").touch()  # not a mark of any process
    assert writer_mark.wait_closed(tmp_path, timeout_s=60)  # False had it waited for them


def test_a_writer_that_never_closes_is_waited_for_no_longer_than_the_limit(
        tmp_path: Path) -> None:
    held = writer_mark.mark(tmp_path)
    assert not writer_mark.wait_closed(tmp_path, timeout_s=0.3)  # gave up: the mark is live
    assert writer_mark.live_marks(tmp_path) == [held]
    writer_mark.release(held)
    assert writer_mark.live_marks(tmp_path) == []
