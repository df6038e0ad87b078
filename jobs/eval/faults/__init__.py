"""``memstack eval faults``: nemeses strike every component while agents write, read and forget.

A deployment of its own (a KRaft broker from the jars on free loopback ports, the stores on a
small tmpfs, ``memstack serve`` as a child) runs the workload of
:mod:`memstack.jobs.eval.faults.workload` (three tenants writing messages, tool calls and
facts over HTTP, readers with ``after=``, forgets) while nemeses strike at seeded random
moments (:mod:`memstack.jobs.eval.faults.nemeses`): kill -9 of the service, of the broker
(restarted on the same data), of a PyFlink replay mid-job, of the service mid-forget, of a Ray
consolidation actor and of the whole Ray runtime; SIGSTOP past the group's session timeout; a
full disk under the stores; a slow consumer.

A **round** is: the workload runs a few seconds, one nemesis strikes and is healed, the time
until the service applied the log's end is measured (``recovery_p99_s``). A **check** stops the
workload and drains the service (SIGTERM), then proves the rules of
:mod:`memstack.jobs.eval.faults.checker` against the stores, the log and the raw files,
rebuilds the log into fresh stores and compares them (``verify_equal_rate``), and restarts.
Full: ``--rounds`` (default 20) random nemeses, every one at least once, a check after each
round. ``--quick``: one round of each nemesis and one check at the end, and a fuzz run of
1,000 inputs instead of 10,000. Then the fuzz run (:mod:`memstack.jobs.eval.faults.fuzz_run`)
and a last check. Any broken rule prints the seed and the history on stderr; rerun with
``--seed`` to replay the same schedule (thread timing still varies).
"""

from __future__ import annotations

import math
import random
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from memstack.jobs.eval.faults.checker import Verdict, check
from memstack.jobs.eval.faults.deploy import Deployment, deployment
from memstack.jobs.eval.faults.fuzz_run import FuzzOutcome, fuzz
from memstack.jobs.eval.faults.history import Fault, History
from memstack.jobs.eval.faults.nemeses import (
    CATCH_UP_TIMEOUT_S,
    NEMESES,
    Stage,
    catch_up_replay,
)
from memstack.jobs.eval.faults.snapshot import (
    behind_log,
    clean_rebuild,
    row_differences,
    snapshot,
    unapplied_forgets,
    verify,
)
from memstack.jobs.eval.faults.workload import Workload
from memstack.jobs.measure import Report, Result

FULL_ROUNDS = 20
FUZZ_FULL, FUZZ_QUICK = 10_000, 1_000
DRAIN_ATTEMPTS = 3


def schedule(rng: random.Random, rounds: int) -> list[str]:
    """``rounds`` nemesis names: every nemesis once (when rounds allow), the rest drawn at
    random, in a shuffled order."""
    names = sorted(NEMESES)
    plan = names[:rounds] if rounds < len(names) else names + [
        rng.choice(names) for _ in range(rounds - len(names))]
    rng.shuffle(plan)
    return plan


@dataclass
class Tally:
    """What the checks found, over the whole run."""

    checks: int = 0
    equal: int = 0
    last: Verdict = field(default_factory=Verdict)
    readable: set[str] = field(default_factory=set)
    resurrected: set[str] = field(default_factory=set)
    audited: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    drain_failures: int = 0
    replays_checked: int = 0
    late_records: int = 0
    """Records that reached the log only as the service drained (writes whose HTTP answer
    timed out during a fault): applied by a restart before the check compares."""
    late_forgets: int = 0
    """The same for forget requests: in the ledger, not yet applied when the service drained."""


def run(quick: bool, report: Report, seed: int | None = None,
        rounds: int | None = None) -> Result:
    seed = seed if seed is not None else random.randrange(2**31)
    signal.signal(signal.SIGTERM, _exit_cleanly)  # tear down the broker and the disk
    rng = random.Random(seed)
    plan = schedule(rng, rounds or (len(NEMESES) if quick else FULL_ROUNDS))
    report("seed %d; %d round(s): %s", seed, len(plan), ", ".join(plan))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="memstack-faults-") as tmp, \
            deployment(Path(tmp)) as deployed:
        history, tally = History(seed), Tally()
        deployed.start_service()
        workload = Workload(deployed, history, seed)
        stage = Stage(deployed, workload, history, rng, report)
        workload.start()
        for i, name in enumerate(plan):
            _round(stage, i, name)
            if not quick:
                _check(stage, tally, f"round {i}", restart=True)
        workload.stop()
        outcome = fuzz(deployed, history, rng, FUZZ_QUICK if quick else FUZZ_FULL, report)
        _check(stage, tally, "final", restart=False)
        tally.problems += outcome.problems + stage.errors
        tally.problems += [f"consolidation after {c['fault']}: resumed {c['resumed']} differs "
                           f"from a clean run {c['clean']}" for c in stage.consolidations
                           if not c["equal"]]
        figures = _figures(history, tally, outcome, len(plan), stage, deployed)
        failed = bool(tally.problems or workload.errors)
        if failed:
            kept = _keep_logs(deployed, seed)
            report("FAILED with seed %d (rerun: memstack eval faults --seed %d%s --json); logs "
                   "kept in %s; history:\n%s", seed, seed, " --quick" if quick else "", kept,
                   history.to_json(tally.problems + [repr(e) for e in workload.errors]))
    figures["seconds"] = time.monotonic() - started
    return Result("faults", figures)


def _keep_logs(deployed: Deployment, seed: int) -> Path:
    """Copy the run's logs (service, replays, consolidation, broker) out of its temp dir."""
    kept = Path("out") / "faults" / f"seed-{seed}"
    kept.mkdir(parents=True, exist_ok=True)
    for path in [*deployed.root.glob("*.log"), deployed.broker.data_dir / "broker.log"]:
        if path.is_file():
            shutil.copy(path, kept / path.name)
    return kept


def _exit_cleanly(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _round(stage: Stage, i: int, name: str) -> None:
    stage.deployed.ensure_service()
    time.sleep(stage.rng.uniform(2.0, 5.0))
    stage.report("round %d: %s", i, name)
    try:
        fault = NEMESES[name](stage)
    except Exception as exc:  # a nemesis that broke is reported, and the run goes on
        fault = Fault(name, time.monotonic(), healed_at=time.monotonic(),
                      notes=[f"the nemesis itself failed: {exc!r}"])
        stage.errors.append(f"round {i}: nemesis {name} failed: {exc!r}")
    stage.history.faults.append(fault)
    if fault.caught_up_at is None:  # a nemesis that runs more after healing measured it
        fault.caught_up_at = stage.deployed.wait_caught_up(CATCH_UP_TIMEOUT_S)
    stage.report("round %d: %s healed; caught up in %s s%s", i, name,
                 f"{fault.recovery_s:.1f}" if fault.recovery_s is not None else "NEVER",
                 f" ({'; '.join(fault.notes)})" if fault.notes else "")


def _check(stage: Stage, tally: Tally, label: str, *, restart: bool) -> None:
    """Stop the workload, drain the service, check everything, then go on."""
    deployed, history = stage.deployed, stage.history
    stage.workload.stop()
    _drain(stage, tally, label)
    fresh = stage.replays[tally.replays_checked:]  # each replay directory is checked once
    tally.replays_checked = len(stage.replays)
    extra = [p for p in fresh if catch_up_replay(deployed, p) == 0]
    tokens = [t for f in history.forgets for t in f.tokens]
    snap = snapshot(deployed.settings, deployed.stores, tokens, extra_stores=extra,
                    raw_roots=[deployed.broker.data_dir, deployed.settings.home])
    verdict = check(history, snap, tally.audited)
    _tally(tally, verdict, label)
    tally.audited |= {f.request_id for f in history.forgets} - verdict.readable_ids
    clean = clean_rebuild(deployed.settings, deployed.root / "clean")
    for what, a, b in [("a clean rebuild", deployed.stores, clean),
                       *[(f"the replay {p.name}", p, deployed.stores) for p in extra]]:
        comparison = verify(a, b)
        tally.checks += 1
        tally.equal += comparison.equal
        if not comparison.equal:
            tally.problems.append(f"{label}: the stores differ from {what}: "
                                  f"{', '.join(comparison.differing())}")
            _explain(stage, label, a, b, history.seed)
    shutil.rmtree(clean, ignore_errors=True)
    stage.report("%s check: %s; verify %d/%d equal", label,
                 "clean" if verdict.clean else "; ".join(verdict.problems[:5]), tally.equal,
                 tally.checks)
    if restart:
        deployed.start_service()
        stage.workload.start()


def _drain(stage: Stage, tally: Tally, label: str) -> None:
    """Catch the service up to the log's end and stop it with SIGTERM, until the stopped
    stores have applied every record of the events topic and every request of the ledger.

    A write or a forget whose HTTP answer timed out during a fault (the client then gave up)
    may still sit in the service's producer and reach the log as the service drains: Kafka
    delivers what it was given, acknowledged or not. The stores apply such records at their
    next start, so the check starts the service again for them (as an operator's restart would)
    before comparing the stores with a rebuild of the log, which honours the whole ledger.
    """
    deployed = stage.deployed
    for attempt in range(1, DRAIN_ATTEMPTS + 1):
        deployed.ensure_service()
        deployed.wait_caught_up(CATCH_UP_TIMEOUT_S)
        code = deployed.stop_service()
        if code != 0:
            tally.drain_failures += 1
            tally.problems.append(f"{label}: the service did not drain cleanly on SIGTERM "
                                  f"({code})")
        behind = behind_log(deployed.settings, deployed.stores)
        forgets = unapplied_forgets(deployed.settings, deployed.stores)
        if not behind and not forgets:
            return
        tally.late_records += sum(behind.values())
        tally.late_forgets += len(forgets)
        stage.report("%s check: %d record(s) (%s) and %d forget request(s) (%s) reached the log "
                     "as the service drained; applying them (drain %d of %d)", label,
                     sum(behind.values()), behind, len(forgets), ", ".join(forgets), attempt,
                     DRAIN_ATTEMPTS)
    tally.problems.append(f"{label}: the log still grew after {DRAIN_ATTEMPTS} drains: "
                          f"{behind} record(s) per partition and forget request(s) "
                          f"{forgets} not applied")


def _explain(stage: Stage, label: str, a: Path, b: Path, seed: int) -> None:
    """Report the rows that differ and keep both sets of stores for a closer look."""
    kept = Path("out") / "faults" / f"seed-{seed}" / label.replace(" ", "-")
    for side, stores in (("a", a), ("b", b)):
        shutil.copytree(stores, kept / side, dirs_exist_ok=True)
    stage.report("%s: stores differ (kept in %s):\n%s", label, kept,
                 "\n".join(row_differences(a, b)))


def _tally(tally: Tally, verdict: Verdict, label: str) -> None:
    tally.last = verdict
    for request_id in verdict.readable_ids:
        (tally.resurrected if request_id in tally.audited else tally.readable).add(request_id)
    tally.problems += [f"{label}: {p}" for p in verdict.problems]


def _figures(history: History, tally: Tally, outcome: FuzzOutcome, rounds: int, stage: Stage,
             deployed: Deployment) -> dict[str, float]:
    recoveries = sorted(f.recovery_s if f.recovery_s is not None else CATCH_UP_TIMEOUT_S
                        for f in history.faults)
    last = tally.last
    consolidations = stage.consolidations
    return {
        "rounds": rounds,
        "acked_events": sum(len(w.event_ids) for w in history.writes),
        "lost": last.lost, "duplicated": last.duplicated,
        "resurrected": len(tally.resurrected), "forgotten_readable": len(tally.readable),
        "cross_tenant_reads": last.cross_tenant_reads,
        "stale_after_reads": last.stale_after_reads,
        "verify_equal_rate": tally.equal / tally.checks if tally.checks else math.nan,
        "recovery_p99_s": _quantile(recoveries, 0.99),
        "recovery_p50_s": _quantile(recoveries, 0.5),
        "unrecovered": sum(1 for f in history.faults if f.recovery_s is None),
        **outcome.figures(),
        "log_duplicates": last.log_duplicates,
        "reads": len(history.reads), "forgets": len(history.forgets),
        "unavailable_requests": history.unavailable,
        "unsure_forgets": len(history.unsure_forgets),
        "service_drain_failures": tally.drain_failures,
        "late_records": tally.late_records,
        "late_forgets": tally.late_forgets,
        "service_exits": len(deployed.exits),
        "consolidation_resumed_equal_rate": (
            sum(1 for c in consolidations if c["equal"]) / len(consolidations)
            if consolidations else math.nan),
        "disk_full_skipped": int(deployed.disk is None),
        "checks": tally.checks,
    }


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]
