"""The fuzz run against the live deployment: hostile events on the topic, hostile HTTP requests.

Topic: each input from :func:`hostile_events` is produced raw (acks=all) to the events topic;
the broker refuses a record over its size limit (counted, not sent). Once the service caught
up, every input the parser rejects must be in the DLQ at its partition and offset with a
reason (``fuzz_dlq_rate``); every input it accepts (a harmless bit flip, a legal hostile name)
joins the history as an acknowledged write, so the checker proves it was stored once.
HTTP: every request from :func:`hostile_requests` must be answered 4xx; a 5xx, a dropped
connection or a service that exits is a crash (``fuzz_crashes``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import httpx
from kafka import KafkaProducer
from kafka.errors import KafkaError

from memstack.foundation.kafka_connect import client_options
from memstack.jobs.eval.faults.deploy import Deployment, key_of
from memstack.jobs.eval.faults.fuzz import hostile_events, hostile_requests
from memstack.jobs.eval.faults.history import History, Write
from memstack.jobs.measure import Report
from memstack.pipelines import dlq
from memstack.pipelines.log_reader import read_bounded
from memstack.schemas.events import parse_event


@dataclass
class FuzzOutcome:
    inputs: int = 0
    bad_events: int = 0
    dead_lettered: int = 0
    broker_refused: int = 0
    validator_misses: int = 0
    """Surely-bad inputs the parser accepted."""
    http_requests: int = 0
    http_4xx: int = 0
    crashes: int = 0
    problems: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        rate = self.dead_lettered / self.bad_events if self.bad_events else 1.0
        return {"fuzz_inputs": self.inputs, "fuzz_crashes": self.crashes,
                "fuzz_dlq_rate": rate, "fuzz_bad_events": self.bad_events,
                "fuzz_broker_refused": self.broker_refused,
                "fuzz_validator_misses": self.validator_misses,
                "fuzz_http_4xx_rate": self.http_4xx / self.http_requests
                if self.http_requests else 1.0}


def fuzz(deployed: Deployment, history: History, rng: random.Random, n: int,
         report: Report) -> FuzzOutcome:
    outcome = FuzzOutcome()
    deployed.ensure_service()
    n_http = n * 3 // 10
    bad = _fuzz_topic(deployed, history, rng, n - n_http, outcome)
    _fuzz_http(deployed, rng, n_http, outcome)
    report("fuzz: %d inputs sent (%d bad events, %d refused by the broker), %d HTTP requests",
           outcome.inputs, len(bad), outcome.broker_refused, outcome.http_requests)
    if deployed.wait_caught_up(300) is None:
        outcome.crashes += 1
        outcome.problems.append("the service did not catch up after the fuzz run")
    _count_dead_letters(deployed, bad, outcome)
    if not deployed.service_alive():
        outcome.crashes += 1
        outcome.problems.append(f"the service exited during the fuzz run: {deployed.exits}")
    return outcome


def _fuzz_topic(deployed: Deployment, history: History, rng: random.Random, n: int,
                outcome: FuzzOutcome) -> dict[tuple[int, int], str]:
    """Produce the inputs; the (partition, offset) -> mutation of the bad ones."""
    producer = KafkaProducer(**client_options(deployed.settings.bootstrap,
                                            deployed.settings.kafka_security), acks="all",
                             linger_ms=5, max_request_size=8 * 1024 * 1024)
    bad: dict[tuple[int, int], str] = {}
    pending = []
    for i, hostile in enumerate(hostile_events(rng, n, "t0")):
        key = f"t0/fuzz-{i % 20}".encode()
        pending.append((hostile, producer.send(deployed.settings.events_topic, key=key,
                                               value=hostile.data)))
    producer.flush()
    for hostile, future in pending:
        outcome.inputs += 1
        try:
            meta = future.get(timeout=60)
        except KafkaError:
            outcome.broker_refused += 1
            continue
        if hostile.expected_valid:
            if hostile.surely_bad:
                outcome.validator_misses += 1
                outcome.problems.append(f"the parser accepted a {hostile.mutation} input")
            history.add(_as_write(hostile.data, meta.partition, meta.offset))
        else:
            bad[(meta.partition, meta.offset)] = hostile.mutation
    producer.close()
    return bad


def _as_write(data: bytes, partition: int, offset: int) -> Write:
    event = parse_event(data)
    return Write(event.tenant, event.session, (event.event_id,), (str(event.kind),), (),
                 f"e{partition}-{offset + 1}", time.monotonic())


def _count_dead_letters(deployed: Deployment, bad: dict[tuple[int, int], str],
                        outcome: FuzzOutcome) -> None:
    outcome.bad_events = len(bad)
    lettered: set[tuple[int, int]] = set()
    topic = deployed.settings.events_topic
    for record in read_bounded(deployed.settings.bootstrap, deployed.settings.dlq_topic):
        letter = dlq.decode(record.value or b"")
        if letter.source_topic == topic and letter.reason:
            lettered.add((letter.partition, letter.offset))
    missing = set(bad) - lettered
    outcome.dead_lettered = len(bad) - len(missing)
    for where in sorted(missing)[:10]:
        outcome.problems.append(f"bad event ({bad[where]}) at {where} not in the DLQ")


def _fuzz_http(deployed: Deployment, rng: random.Random, n: int, outcome: FuzzOutcome) -> None:
    headers = {"Authorization": f"Bearer {key_of('t0')}", "Content-Type": "application/json"}
    with httpx.Client(base_url=deployed.url, timeout=60.0, headers=headers) as client:
        for request in hostile_requests(rng, n, "t0", "t1"):
            outcome.inputs += 1
            outcome.http_requests += 1
            url = f"/v1/tenants/t0/{request.path}"
            try:
                answer = client.request(request.method, url, content=request.body,
                                        params=list(request.params))
            except httpx.HTTPError as exc:
                outcome.crashes += 1
                outcome.problems.append(f"HTTP {request.mutation}: no answer ({exc!r})")
                continue
            if 400 <= answer.status_code < 500:
                outcome.http_4xx += 1
            elif answer.status_code >= 500:
                outcome.crashes += 1
                outcome.problems.append(f"HTTP {request.mutation} {request.method} "
                                        f"{request.path}: {answer.status_code} "
                                        f"{answer.text[:200]}")
            else:
                outcome.problems.append(f"HTTP {request.mutation} {request.method} "
                                        f"{request.path} {request.params}: accepted "
                                        f"({answer.status_code})")
