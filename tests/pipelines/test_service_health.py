"""The service's health: acknowledged offsets against applied ones and the assignment."""

from __future__ import annotations

from dataclasses import dataclass

from memstack.pipelines.service.health import ServiceHealth


@dataclass(frozen=True)
class Ack:
    partition: int
    offset: int


class World:
    def __init__(self) -> None:
        self.now = 100.0
        self.applied = {0: 5, 1: 7}
        self.assigned: set[int] | None = {0, 1}
        self.high = {0: 5, 1: 7}
        self.stopping = False

    def health(self) -> ServiceHealth:
        return ServiceHealth([0, 1], lambda: self.applied, lambda: self.assigned,
                             lambda: self.high, stopping=lambda: self.stopping,
                             stuck_after_s=30, unassigned_after_s=15, ready_max_lag=10,
                             clock=lambda: self.now)


def test_caught_up_and_listening_is_ok_and_ready() -> None:
    world = World()
    health = world.health()
    assert not health.report().ready  # not listening yet
    health.started = True
    report = health.report()
    assert report.healthz() == {"status": "ok"} and report.ready
    assert report.readyz() == {"status": "ready", "lag": 0}
    world.stopping = True
    assert health.report().readyz()["reasons"] == ["draining"]


def test_acknowledged_records_not_applied_make_it_fail_after_the_timeout() -> None:
    world = World()
    health = world.health()
    health.started = True
    health.acknowledged([Ack(1, 9)])  # next offset 10, applied 7
    assert health.report().healthz() == {"status": "ok"}
    world.now += 20
    world.applied[1] = 8  # progress: the clock starts again
    assert health.report().healthz() == {"status": "ok"}
    world.now += 31
    report = health.report()
    assert report.healthz()["status"] == "failing"
    assert report.healthz()["partitions"]["p1"]["lag"] == 2
    assert report.healthz()["partitions"]["p1"]["assigned"] is True
    assert not report.ready and "failing" in report.reasons
    world.applied[1] = 10
    assert health.report().healthz() == {"status": "ok"}


def test_a_partition_held_elsewhere_fails_and_is_not_ready() -> None:
    world = World()
    health = world.health()
    health.started = True
    world.assigned = {0}
    assert health.report().reasons == ("partitions not assigned",)
    assert health.report().healthz() == {"status": "ok"}  # a rebalance takes a while
    world.now += 16
    body = health.report().healthz()
    assert body["status"] == "failing" and body["partitions"]["p1"]["assigned"] is False
    world.assigned = {0, 1}
    assert health.report().ready


def test_lag_against_the_high_water_marks_gates_readiness() -> None:
    world = World()
    health = world.health()
    health.started = True
    world.high = {0: 20, 1: 7}
    report = health.report()
    assert report.lag == 15 and report.reasons == ("lag 15 > 10",)
    assert report.healthz() == {"status": "ok"}  # behind is not broken
