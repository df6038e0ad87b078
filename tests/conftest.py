"""Shared fixtures: one real Kafka broker per test session, unique topics per test.

- ``kafka`` (session): starts one local broker on a free loopback port pair with a temporary data
  dir, or uses the broker at ``MEMSTACK_TEST_BOOTSTRAP`` when that is set; yields an object with
  ``.bootstrap``. The broker is stopped at the end of the session.
- ``topics`` (function): a unique topic prefix with memstack's topics created on that broker;
  returns a :class:`memstack.foundation.settings.Settings` pointing at it, with ``home`` a
  temporary dir.
- :func:`settings_on_fresh_topics`: the same for a test or fixture that names its own home, topic
  stem and partition count (a module's or package's log, a service's settings).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memstack.foundation.settings import Settings
from memstack.infra.broker import FAST_START_JVM_OPTIONS, KafkaBroker
from memstack.infra.net import admin_client, free_port_pair
from memstack.infra.topics import ensure_topics, topic_specs

log = logging.getLogger(__name__)

TEST_PARTITIONS = 3


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Put pytest's crash handler back before each test, dumping every thread's stack.

    ``ray.init`` (the consolidation tests start Ray in this process) installs Ray's own SIGSEGV
    handler, which writes to a log file in Ray's temporary dir: a later crash in the process
    then printed nothing but the shell's "Segmentation fault" (a CI run, a PyFlink loopback
    replay after the Ray tests). pytest's handler writes to its copy of the terminal's stderr.
    """
    from _pytest.faulthandler import fault_handler_stderr_fd_key  # no public accessor

    fd = item.config.stash.get(fault_handler_stderr_fd_key, None)
    if fd is not None:
        faulthandler.disable()
        faulthandler.enable(file=fd, all_threads=True)


_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End a process that ran a Ray driver with pytest's own status, without the interpreter's
    finalisation.

    The side lane's pytest (Ray's driver, LanceDB's native runtime, ONNX Runtime and PyFlink's
    gateway in one process) passed every test and then died of a segfault while the
    interpreter tore those native libraries down, twice in CI (2026-12-06, once before the Ray
    tests moved there and once after), with no stack (Ray's handler had replaced pytest's).
    Every test and session fixture (the broker's stop included) has finished by now and the
    summary is printed, so what is skipped is only native teardown; the status is pytest's.
    """
    import sys

    if "ray" in sys.modules and _EXIT_STATUS:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])


@dataclass(frozen=True)
class KafkaUnderTest:
    """The session's broker: ``bootstrap`` always; ``broker`` when this session started it."""

    bootstrap: str
    broker: KafkaBroker | None = None

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    @property
    def controller_port(self) -> int:
        return self.broker.controller_port if self.broker else self.port + 1


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaUnderTest]:
    external = os.environ.get("MEMSTACK_TEST_BOOTSTRAP")
    if external:
        yield KafkaUnderTest(external)
        return
    port, controller_port = free_port_pair()
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), port, controller_port,
                         jvm_options=FAST_START_JVM_OPTIONS)
    broker.start(timeout_s=120)
    try:
        yield KafkaUnderTest(broker.bootstrap, broker)
    finally:
        broker.stop()


def settings_on_fresh_topics(kafka: KafkaUnderTest, home: Path, stem: str,
                             partitions: int = TEST_PARTITIONS) -> Settings:
    """Settings on the test broker under a new topic prefix ``<stem>-<random>``, memstack's
    topics created there with ``partitions`` partitions, and ``home`` as home."""
    prefix = f"{stem}-{uuid.uuid4().hex[:10]}"
    ensure_topics(kafka.bootstrap, prefix, partitions)
    return Settings(home=home, kafka_port=kafka.port, controller_port=kafka.controller_port,
                    bootstrap=kafka.bootstrap, topic_prefix=prefix, partitions=partitions)


@pytest.fixture
def topics(kafka: KafkaUnderTest, request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:40].strip("-")
    settings = settings_on_fresh_topics(kafka, tmp_path_factory.mktemp("home"), f"t-{name}")
    yield settings
    _delete_topics(kafka.bootstrap, [s.name for s in topic_specs(settings.topic_prefix,
                                                                 settings.partitions)])


def _delete_topics(bootstrap: str, names: list[str]) -> None:
    """Best effort: a long session on a shared broker should not pile up topics."""
    try:
        with admin_client(bootstrap) as client:
            client.delete_topics(names, raise_errors=False)
    except Exception as exc:  # cleanup must not turn a passing test into an error
        log.warning("could not delete test topics %s: %s", names, exc)
