"""The nemeses: each strikes one component while the workload runs, then heals it.

A nemesis returns its :class:`Fault` with ``healed_at`` set: the moment the fault is over (the
process restarted, the space freed, the delay lifted). The runner then measures how long the
pipeline takes to catch up. When healing needs an operator's hand (the service stopped itself
and has to be started again), the nemesis does it and says so in the fault's notes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memstack.jobs.eval.faults.deploy import Deployment
from memstack.jobs.eval.faults.history import Fault, Forget, History
from memstack.jobs.eval.faults.workload import Workload
from memstack.jobs.measure import Report
from memstack.jobs.run import worker_env
from memstack.pipelines.log_reader import end_offsets

CATCH_UP_TIMEOUT_S = 180.0


@dataclass
class Stage:
    """What a nemesis may touch."""

    deployed: Deployment
    workload: Workload
    history: History
    rng: random.Random
    report: Report
    replays: list[Path] = field(default_factory=list)
    consolidations: list[dict[str, object]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Nemeses that failed themselves (a harness problem, reported as a failure)."""


def _restart_if_down(stage: Stage, fault: Fault) -> None:
    if not stage.deployed.service_alive():
        fault.notes.append(f"the service had exited ({stage.deployed.exits[-1:]}); restarted")
        stage.deployed.start_service()


def kill_service(stage: Stage) -> Fault:
    fault = Fault("kill_service", time.monotonic())
    stage.deployed.kill_service()
    time.sleep(stage.rng.uniform(0.2, 2.0))
    stage.deployed.start_service()
    fault.healed_at = time.monotonic()
    return fault


def kill_broker(stage: Stage) -> Fault:
    fault = Fault("kill_broker", time.monotonic())
    stage.deployed.kill_broker()
    time.sleep(stage.rng.uniform(1.0, 5.0))
    stage.deployed.restart_broker()
    _restart_if_down(stage, fault)
    fault.healed_at = time.monotonic()
    return fault


def pause_service(stage: Stage) -> Fault:
    """SIGSTOP past the group's session timeout (6 s), so the broker drops the member."""
    fault = Fault("pause_service", time.monotonic())
    joins = _assignments(stage.deployed)
    stage.deployed.signal_service(signal.SIGSTOP)
    time.sleep(stage.rng.uniform(8.0, 12.0))
    stage.deployed.signal_service(signal.SIGCONT)
    _restart_if_down(stage, fault)
    fault.healed_at = time.monotonic()
    deadline = time.monotonic() + 30.0
    while _assignments(stage.deployed) == joins and time.monotonic() < deadline:
        time.sleep(0.5)
    fault.notes.append("rejoined the group after being dropped"
                       if _assignments(stage.deployed) > joins else "no new assignment seen")
    return fault


def _assignments(deployed: Deployment) -> int:
    """How many times the service logged a partition assignment (each join of the group)."""
    return deployed.log_path.read_text(errors="replace").count("assigned partitions")


def slow_consumer(stage: Stage) -> Fault:
    fault = Fault("slow_consumer", time.monotonic())
    stage.deployed.delay_file.write_text(f"{stage.rng.uniform(0.8, 1.5):.2f}")
    time.sleep(stage.rng.uniform(6.0, 10.0))
    stage.deployed.delay_file.write_text("")
    fault.healed_at = time.monotonic()
    return fault


def disk_full(stage: Stage) -> Fault:
    fault = Fault("disk_full", time.monotonic())
    disk = stage.deployed.disk
    if disk is None:
        fault.notes.append("skipped: no tmpfs for the stores")
        fault.healed_at = time.monotonic()
        return fault
    filler = disk / "filler"
    _fill(filler)
    time.sleep(stage.rng.uniform(4.0, 8.0))
    deadline = time.monotonic() + 50.0  # a failed worker drains, or exits after 30 s
    while stage.deployed.service_alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    alive = stage.deployed.service_alive()
    fault.notes.append("the service kept running on a full disk" if alive
                       else f"the service stopped on the full disk "
                            f"(exit {stage.deployed.exits[-1:]})")
    filler.unlink()
    _restart_if_down(stage, fault)
    fault.healed_at = time.monotonic()
    return fault


def _fill(path: Path) -> None:
    chunk = b"\0" * (1 << 20)
    with path.open("wb") as out:
        try:
            while True:
                out.write(chunk)
                out.flush()
        except OSError:
            pass


def kill_mid_forget(stage: Stage) -> Fault:
    """A forget request, then kill -9 of the process applying it (the service's worker)."""
    fault = Fault("kill_mid_forget", time.monotonic())
    workload = stage.workload
    with workload.lock:
        write = workload.doomed.pop() if workload.doomed else None
    if write is None:
        fault.notes.append("no doomed session yet: killed without a forget in flight")
    else:
        body = {"scope": {"type": "session", "session": write.session}, "reason": "nemesis"}
        answer, unanswered = workload._post_until_acked(write.tenant, "forget", body)
        if answer is None and unanswered:
            stage.history.unsure(write)
        if answer is not None:
            stage.history.add(Forget(write.tenant, write.session, answer["request_id"],
                                     answer["position"], write.tokens, write.event_ids,
                                     time.monotonic()))
            time.sleep(stage.rng.uniform(0.05, 1.5))
            applied = answer["request_id"] in stage.deployed.log_path.read_text(errors="replace")
            fault.notes.append("killed after the forget was applied" if applied
                               else "killed before the forget was logged as applied")
    stage.deployed.kill_service()
    stage.deployed.start_service()
    fault.healed_at = time.monotonic()
    return fault


def kill_replay(stage: Stage) -> Fault:
    """kill -9 of a PyFlink replay mid-job (its whole process group), then the rerun."""
    fault = Fault("kill_replay", time.monotonic())
    into = stage.deployed.root / f"replay-{len(stage.replays)}"
    first = _spawn_replay(stage.deployed, into)
    time.sleep(stage.rng.uniform(4.0, 14.0))
    fault.notes.append("killed mid-job" if first.poll() is None
                       else f"the replay had already ended ({first.returncode})")
    _kill_group(first)
    rerun = _spawn_replay(stage.deployed, into)
    code = rerun.wait(600)
    fault.notes.append(f"rerun exit {code}")
    stage.replays.append(into)
    fault.healed_at = time.monotonic()
    return fault


def _spawn_replay(deployed: Deployment, into: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "memstack.cli", "replay", "--into", str(into),
            "--parallelism", "1"]
    out = (deployed.root / "replay.log").open("ab")
    return subprocess.Popen(argv, env=worker_env(deployed.settings), stdin=subprocess.DEVNULL,
                            stdout=out, stderr=out, start_new_session=True)


def catch_up_replay(deployed: Deployment, into: Path) -> int:
    """Run the replay into ``into`` once more, to the log's end now (the check's bounds)."""
    return _spawn_replay(deployed, into).wait(600)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    for pid in sorted(_descendants(process.pid), reverse=True):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(60)


def _descendants(root: int) -> set[int]:
    from memstack.infra.ray import _descendants as walk

    return walk(root)


def kill_ray_actor(stage: Stage) -> Fault:
    return _kill_consolidation(stage, "kill_ray_actor", whole_runtime=False)


def kill_ray_runtime(stage: Stage) -> Fault:
    return _kill_consolidation(stage, "kill_ray_runtime", whole_runtime=True)


def _kill_consolidation(stage: Stage, name: str, *, whole_runtime: bool) -> Fault:
    """A consolidation run to the feed's end now, killed (one actor, or Ray with every
    process of it), rerun from its checkpoints, and a clean run to the same offsets: both must
    end with the same weight digests."""
    deployed = stage.deployed
    fault = Fault(name, time.monotonic())
    settings = deployed.settings
    stop = end_offsets(settings.bootstrap, f"{settings.topic_prefix}.consolidation")
    stop_arg = ",".join(f"{p}:{o}" for p, o in sorted(stop.items()))
    run_dir = deployed.root / f"consolidation-{len(stage.consolidations)}"
    first = _spawn_consolidation(deployed, run_dir / "killed", stop_arg)
    victim = _wait_for_actor(first, 120.0)
    time.sleep(stage.rng.uniform(0.0, 1.0))
    if first.poll() is not None:
        fault.notes.append("the first run had ended before the kill")
    if whole_runtime:
        _kill_group(first)
    elif victim is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    fault.notes.append(f"first run exit {first.wait(300)} (actor pid {victim})")
    resumed = _finish(_spawn_consolidation(deployed, run_dir / "killed", stop_arg))
    fault.healed_at = time.monotonic()
    fault.caught_up_at = deployed.wait_caught_up(CATCH_UP_TIMEOUT_S)  # before the clean run
    clean = _finish(_spawn_consolidation(deployed, run_dir / "clean", stop_arg))
    stage.consolidations.append({"fault": name, "stop": stop_arg, "resumed": resumed,
                                 "clean": clean,
                                 "equal": resumed is not None and resumed == clean})
    return fault


def _spawn_consolidation(deployed: Deployment, root: Path,
                         stop_arg: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "memstack.jobs.eval.faults.consolidate", str(root), stop_arg]
    err = (deployed.root / "consolidation.log").open("ab")
    env = {**worker_env(deployed.settings), "MEMSTACK_HOME": str(deployed.root / "ray-home")}
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=err, start_new_session=True)


def _wait_for_actor(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The pid of the consolidation actor's worker process, once it runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        for pid in _descendants(process.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"ConsolidationWorker" in cmdline or b"ConsolidationActor" in cmdline:
                return pid
        time.sleep(0.2)
    return None


def _finish(process: subprocess.Popen[bytes]) -> dict[str, object] | None:
    out, _ = process.communicate(timeout=600)
    if process.returncode != 0 or not out.strip():
        return None
    status: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return status


NEMESES: dict[str, Callable[[Stage], Fault]] = {
    "kill_service": kill_service, "kill_broker": kill_broker, "pause_service": pause_service,
    "slow_consumer": slow_consumer, "disk_full": disk_full, "kill_mid_forget": kill_mid_forget,
    "kill_replay": kill_replay, "kill_ray_actor": kill_ray_actor,
    "kill_ray_runtime": kill_ray_runtime,
}
