"""``memstack bench ingest``: events/s through ``MemoryClient.emit`` vs a bare producer.

Both sides send the same serialized bytes with the same keys to a fresh topic of the same
configuration, with the same producer settings (idempotent, ``acks=all``). Runs interleave
in ABBA order (SDK, raw, raw, SDK, ...) so both see the same machine load; the ratio is the
median of the per-pair ratios. The SDK side pays for everything the SDK adds, inside the
clock: building each event (ids, times, envelope), validating it, canonical JSON, topic
routing and the returned handle (``client.message(...)``, as an agent calls it), and sealing
each payload (AES-256-GCM under its scope's key: on by default). The raw side sends unsealed
bytes serialized before its clock starts: the bare producer's best case. The SDK with
``MEMSTACK_SEAL=0`` runs in the same rounds, so ``sealed_over_unsealed`` is the cost of sealing
measured beside the rest (the three sides rotate: sealed, unsealed, raw, then raw, unsealed,
sealed).

``--secure`` measures the cost of TLS instead: two brokers started for the run from the same
jars with the same JVM options, one PLAINTEXT and one SASL_SSL with SCRAM-SHA-512 and ACLs (as
``memstack infra up --secure`` starts it), on the same cores at the same time. The SDK sends the
same events to each (as the ``agent`` principal on the secure one) in ABBA order; the ratio is
the median of the per-pair ratios secure / plaintext (1.0: TLS costs nothing). The bare producer
is measured the same way beside it (``raw_*``): TLS's cost undiluted by the SDK's own work.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

from kafka import KafkaProducer

from memstack.client import PRODUCER_CONFIG, MemoryClient
from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.kafka_connect import client_options
from memstack.foundation.settings import Settings
from memstack.infra.acls import apply_acls
from memstack.infra.broker import KafkaBroker
from memstack.infra.local_security import LocalSecurity
from memstack.infra.net import admin_client, free_port_pair
from memstack.infra.topics import ensure_topics
from memstack.jobs.bench.broker_env import broker_for
from memstack.jobs.measure import Report, Result
from memstack.schemas.events import Event
from memstack.schemas.ids import uuid7

TEXTS = [
    "Can you book a table for two at 8pm?",
    "I moved to Porto last spring and I love the river.",
    "The flight search returned 14 options under 300 EUR.",
    "Remember that Ana is allergic to peanuts.",
]


def calls(n: int) -> list[tuple[str, str, str]]:
    """(session, role, text) of the ``n`` messages both sides send."""
    return [(f"s{i % 64}", "user", TEXTS[i % len(TEXTS)]) for i in range(n)]


def _events(n: int) -> list[Event]:
    builder = EventBuilder(Defaults(tenant="bench", agent="ingest"))
    return [builder.message(*call) for call in calls(n)]


def _sdk_run(settings: Settings, n: int) -> float:
    todo = calls(n)
    with MemoryClient("bench", "ingest", settings=settings) as client:
        start = time.perf_counter()
        for session, role, text in todo:
            client.message(session, role, text)  # builds, validates, serializes, sends
        client.flush()
        return n / (time.perf_counter() - start)


def _raw_run(settings: Settings, payloads: list[tuple[bytes, bytes]]) -> float:
    producer = KafkaProducer(**client_options(settings.bootstrap, settings.kafka_security),
                             **PRODUCER_CONFIG)
    try:
        start = time.perf_counter()
        for key, value in payloads:
            producer.send(settings.events_topic, key=key, value=value)
        producer.flush()
        return len(payloads) / (time.perf_counter() - start)
    finally:
        producer.close()


def run(quick: bool, report: Report, secure: bool = False) -> Result:
    if secure:
        return _run_secure(quick, report)
    n, rounds = (5_000, 3) if quick else (20_000, 7)
    base = Settings.from_env()
    with broker_for(base) as settings:
        bench = settings.with_(topic_prefix=f"bench-ingest-{uuid7().hex[:8]}")
        ensure_topics(bench.bootstrap, bench.topic_prefix, bench.partitions)
        events = _events(n)
        payloads = [(e.key, e.to_json()) for e in events]
        report("%d events of ~%d bytes, %d interleaved rounds", n, len(payloads[0][1]), rounds)
        _raw_run(bench, payloads[: n // 5])  # warm-up: connections, JIT on the broker
        sealed, unsealed = bench.with_(seal=True), bench.with_(seal=False)
        rates: dict[str, list[float]] = {"sdk": [], "unsealed": [], "raw": []}
        sides = {"sdk": lambda: _sdk_run(sealed, n), "unsealed": lambda: _sdk_run(unsealed, n),
                 "raw": lambda: _raw_run(bench, payloads)}
        for i in range(rounds):  # ABBA order: a drift in machine load hits every side alike
            for side in (sides if i % 2 == 0 else reversed(list(sides))):
                rates[side].append(sides[side]())
            report("round %d: sdk (sealed) %.0f ev/s, sdk unsealed %.0f ev/s, raw %.0f ev/s",
                   i + 1, rates["sdk"][-1], rates["unsealed"][-1], rates["raw"][-1])
    sdk, raw = rates["sdk"], rates["raw"]
    ratios = [s / r for s, r in zip(sdk, raw, strict=True)]
    return Result(
        name="ingest",
        ratio=statistics.median(ratios),
        figures={
            "sdk_events_per_s": statistics.median(sdk),
            "sdk_unsealed_events_per_s": statistics.median(rates["unsealed"]),
            "raw_events_per_s": statistics.median(raw),
            "sealed_over_unsealed": statistics.median(
                s / u for s, u in zip(sdk, rates["unsealed"], strict=True)),
            "unsealed_over_raw": statistics.median(
                u / r for u, r in zip(rates["unsealed"], raw, strict=True)),
            "events_per_round": n,
            "rounds": rounds,
        },
    )


@contextmanager
def _started(data: Path, security: LocalSecurity | None, partitions: int,
             prefix: str) -> Iterator[Settings]:
    """A broker of its own in ``data`` with memstack's topics under ``prefix``; the settings
    of the ``agent`` principal on it (PLAINTEXT settings when ``security`` is None)."""
    port, controller_port = free_port_pair()
    broker = KafkaBroker(data, port, controller_port, security=security)
    broker.start(timeout_s=180)
    try:
        admin = broker.client_security("admin")
        ensure_topics(broker.bootstrap, prefix, partitions, security=admin)
        if security is not None:
            with admin_client(broker.bootstrap, security=admin) as client:
                apply_acls(client, prefix, security.principals(), ("service", "agent"))
        yield Settings(home=data, kafka_port=port, controller_port=controller_port,
                       bootstrap=broker.bootstrap, topic_prefix=prefix, partitions=partitions,
                       kafka_security=broker.client_security("agent"))
    finally:
        broker.stop()


def _run_secure(quick: bool, report: Report) -> Result:
    n, rounds = (2_000, 3) if quick else (20_000, 7)
    partitions = Settings.from_env().partitions
    prefix = f"bench-ingest-{uuid7().hex[:8]}"
    with TemporaryDirectory(prefix="memstack-bench-tls-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        plain = stack.enter_context(_started(root / "plain", None, partitions, prefix))
        tls = stack.enter_context(_started(root / "secure", LocalSecurity(root / "secrets"),
                                           partitions, prefix))
        report("PLAINTEXT broker at %s, SASL_SSL (SCRAM-SHA-512) broker at %s; "
               "%d events, %d interleaved rounds", plain.bootstrap, tls.bootstrap, n, rounds)
        payloads = [(e.key, e.to_json()) for e in _events(n)]
        for warm in (plain, tls):  # warm-up: connections, TLS sessions, JIT on both brokers
            _sdk_run(warm, n // 5)
            _raw_run(warm, payloads[: n // 5])
        rates: dict[str, list[float]] = {k: [] for k in ("sdk_plain", "sdk_tls", "raw_plain",
                                                          "raw_tls")}
        runs = {"sdk_plain": lambda: _sdk_run(plain, n), "sdk_tls": lambda: _sdk_run(tls, n),
                "raw_plain": lambda: _raw_run(plain, payloads),
                "raw_tls": lambda: _raw_run(tls, payloads)}
        for i in range(rounds):  # ABBA order: a drift in machine load hits both sides alike
            for key in (list(runs) if i % 2 == 0 else list(reversed(runs))):
                rates[key].append(runs[key]())
            report("round %d: SDK PLAINTEXT %.0f / SASL_SSL %.0f ev/s; bare producer "
                   "PLAINTEXT %.0f / SASL_SSL %.0f ev/s", i + 1, rates["sdk_plain"][-1],
                   rates["sdk_tls"][-1], rates["raw_plain"][-1], rates["raw_tls"][-1])
    tls_rates, plain_rates = rates["sdk_tls"], rates["sdk_plain"]
    ratios = [t / p for t, p in zip(tls_rates, plain_rates, strict=True)]
    raw_ratios = [t / p for t, p in zip(rates["raw_tls"], rates["raw_plain"], strict=True)]
    return Result(
        name="ingest",
        ratio=statistics.median(ratios),
        figures={
            "secure_events_per_s": statistics.median(tls_rates),
            "plaintext_events_per_s": statistics.median(plain_rates),
            "secure_over_plaintext": statistics.median(ratios),
            "raw_secure_events_per_s": statistics.median(rates["raw_tls"]),
            "raw_plaintext_events_per_s": statistics.median(rates["raw_plain"]),
            "raw_secure_over_plaintext": statistics.median(raw_ratios),
            "events_per_round": n,
            "rounds": rounds,
            "partitions": partitions,
        },
    )
