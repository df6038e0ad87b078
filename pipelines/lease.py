"""One owner per partition: the lease a live worker (``memstack run`` or ``memstack serve``)
takes before it joins its consumer group.

A deployment is a home, a topic prefix and the consumer group of its live pipeline. Kafka
would happily split the group's partitions between two such processes; each then applies only
its share, while a service acknowledges writes to every partition (found by a hostile test: a
second ``memstack serve`` whose port was taken joined the group, took a partition and hung, and
the first service's ``after=`` reads timed out). So before anything that can take a partition,
a worker acquires the lease, in two steps:

1. an exclusive ``flock`` on ``$MEMSTACK_HOME/leases/<group>.lease`` (held for the process's
   life, gone with it even after ``kill -9``; the file names the holder), which settles two
   processes starting at once in one home;
2. the group itself on the broker (any home, any host): a group with a live member is owned by
   another process, so the lease is refused. A member left by a process that died (its client
   id names this host and a pid that is gone, or a client that is not ours) is waited for
   until the broker expires it (the session timeout), then the group is asked again.

Members are recognised by their client id, ``memstack-<host>-<pid>`` (:func:`client_id`),
which the worker's consumer uses. :class:`LeaseHeldError` says who holds the lease and what to
do. Sharded workers share their group on purpose and take no lease (docs/scaling.md).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from memstack.foundation.errors import MemstackError
from memstack.foundation.processes import pid_alive

log = logging.getLogger(__name__)

LEASES = "leases"
CLIENT_PREFIX = "memstack-"


class LeaseHeldError(MemstackError):
    """Another process owns this deployment's partitions; stop it first, or run this one on
    another topic prefix (``MEMSTACK_TOPIC_PREFIX``) or home (``MEMSTACK_HOME``)."""


def live_group(topic_prefix: str) -> str:
    """The consumer group (and Faust app id) of the live pipeline for one topic prefix; here,
    not in ``faust_app``, so a worker can take its lease before importing Faust (~10 s)."""
    return f"{topic_prefix}-live"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"


def client_id() -> str:
    """The client id of this process's consumer: ``memstack-<host>-<pid>``."""
    return f"{CLIENT_PREFIX}{_host()}-{os.getpid()}"



def member_alive(member_client_id: str) -> bool | None:
    """True when the member is a process known to run (ours on another host, or a live pid
    here), False when it is ours, on this host and gone, None when it is not ours."""
    if not member_client_id.startswith(CLIENT_PREFIX):
        return None
    host_pid = member_client_id[len(CLIENT_PREFIX):]
    host, _, pid = host_pid.rpartition("-")
    if not pid.isdigit():
        return None
    if host != _host():
        return True
    return int(pid) != os.getpid() and pid_alive(int(pid))


Members = Callable[[str], Sequence[str]]
"""The client ids of a consumer group's members (empty: no member)."""


@dataclass
class DeploymentLease:
    """A held lease; :meth:`release` (or leaving the ``with`` block) gives it back."""

    group: str
    path: Path
    handle: IO[str] | None = field(default=None, repr=False)

    def release(self) -> None:
        if self.handle is None:
            return
        try:
            self.handle.seek(0)
            self.handle.truncate()
            fcntl.flock(self.handle, fcntl.LOCK_UN)
        finally:
            self.handle.close()
            self.handle = None
        log.debug("lease of group %s released", self.group)

    def __enter__(self) -> DeploymentLease:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def acquire_lease(home: Path, topic_prefix: str, group: str, members: Members, *,
                  expire_s: float, poll_s: float = 0.5) -> DeploymentLease:
    """Take the lease of ``group`` (see the module's docstring) or raise
    :class:`LeaseHeldError`; ``expire_s`` is how long a dead member may linger (the group's
    session timeout, plus a margin)."""
    lease = _lock(home, topic_prefix, group)
    try:
        _group_free(group, members, expire_s, poll_s)
    except BaseException:
        lease.release()
        raise
    log.info("lease of consumer group %s taken (%s)", group, lease.path)
    return lease


def _lock(home: Path, topic_prefix: str, group: str) -> DeploymentLease:
    path = Path(home) / LEASES / f"{group}.lease"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise LeaseHeldError(
            f"another live worker of this home holds the lease of consumer group {group} "
            f"({path}: {holder}); stop it first, or give this one another MEMSTACK_HOME and "
            "MEMSTACK_TOPIC_PREFIX") from None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "client_id": client_id(), "group": group,
                             "topic_prefix": topic_prefix,
                             "since": datetime.now(UTC).isoformat()}) + "\n")
    handle.flush()
    return DeploymentLease(group, path, handle)


def _group_free(group: str, members: Members, expire_s: float, poll_s: float) -> None:
    deadline = time.monotonic() + expire_s
    while True:
        found = list(members(group))
        if not found:
            return
        alive = [m for m in found if member_alive(m)]
        if alive or time.monotonic() >= deadline:
            raise LeaseHeldError(
                f"consumer group {group} already has {len(found)} member(s) "
                f"({', '.join(sorted(found))}): another live worker owns its partitions. Stop "
                "it first (SIGTERM), or run this one on another MEMSTACK_TOPIC_PREFIX")
        log.info("consumer group %s still lists %s (a stopped process); waiting for the broker "
                 "to expire it", group, found)
        time.sleep(poll_s)


def broker_members(bootstrap: str, retry_s: float = 30.0) -> Members:
    """:data:`Members` of the groups on the broker at ``bootstrap``; retriable errors (a
    fresh broker has no group coordinator for a few seconds) are retried for ``retry_s``."""
    from kafka.errors import KafkaError

    from memstack.infra.net import admin_client

    def members(group: str) -> list[str]:
        deadline = time.monotonic() + retry_s
        with admin_client(bootstrap) as admin:
            while True:
                try:
                    described: dict[str, Any] = admin.describe_groups([group])
                    break
                except KafkaError as exc:
                    if not getattr(exc, "retriable", False) or time.monotonic() > deadline:
                        raise
                    log.debug("describing group %s: %s; retrying", group, exc)
                    time.sleep(0.5)
        found = described.get(group) or {}
        return [str(m.get("client_id", "")) for m in found.get("members") or []]
    return members
