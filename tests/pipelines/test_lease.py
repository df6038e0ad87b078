"""The deployment lease: one live worker per home, topic prefix and consumer group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memstack.pipelines.lease import LeaseHeldError, acquire_lease, client_id, member_alive


def no_members(group: str) -> list[str]:
    return []


def test_a_second_lease_in_one_home_is_refused_and_names_the_holder(tmp_path: Path) -> None:
    with acquire_lease(tmp_path, "p", "p-live", no_members, expire_s=1) as lease:
        holder = json.loads(lease.path.read_text())
        assert holder["pid"] == os.getpid() and holder["group"] == "p-live"
        with pytest.raises(LeaseHeldError, match="holds the lease of consumer group p-live"):
            acquire_lease(tmp_path, "p", "p-live", no_members, expire_s=1)
        acquire_lease(tmp_path, "q", "q-live", no_members, expire_s=1).release()  # another
    acquire_lease(tmp_path, "p", "p-live", no_members, expire_s=1).release()  # released


def test_a_live_member_of_the_group_refuses_the_lease_at_once(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        member = client_id().rsplit("-", 1)[0] + f"-{other.pid}"
        assert member_alive(member) is True
        with pytest.raises(LeaseHeldError, match="another live worker owns its partitions"):
            acquire_lease(tmp_path, "p", "p-live", lambda g: [member], expire_s=30)
    finally:
        other.kill()
        other.wait()
    assert member_alive(member) is False
    # the refusal released the home's lock
    acquire_lease(tmp_path, "p", "p-live", no_members, expire_s=1).release()


def test_a_dead_member_is_waited_for_until_the_broker_expires_it(tmp_path: Path) -> None:
    dead = client_id().rsplit("-", 1)[0] + "-999999999"
    answers = [[dead], [dead], []]
    lease = acquire_lease(tmp_path, "p", "p-live", lambda g: answers.pop(0), expire_s=5,
                          poll_s=0.01)
    lease.release()
    assert answers == []


def test_a_member_that_stays_refuses_after_the_expiry(tmp_path: Path) -> None:
    assert member_alive("faust-0.15.3") is None
    with pytest.raises(LeaseHeldError, match="already has 1 member"):
        acquire_lease(tmp_path, "p", "p-live", lambda g: ["faust-0.15.3"], expire_s=0.05,
                      poll_s=0.01)
