"""Loopback ports and a Kafka admin connection that fails with a clear error."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator

from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

from memstack.foundation.errors import BrokerUnavailableError
from memstack.foundation.kafka_connect import client_options
from memstack.foundation.kafka_security import KafkaSecurity

log = logging.getLogger(__name__)


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` and we may bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port_pair(host: str = "127.0.0.1") -> tuple[int, int]:
    """Two distinct ports that are free on ``host`` now (the OS picks them)."""
    with socket.socket() as a, socket.socket() as b:
        a.bind((host, 0))
        b.bind((host, 0))
        return int(a.getsockname()[1]), int(b.getsockname()[1])


def can_connect(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def admin_client(bootstrap: str, timeout_s: float = 10.0,
                 security: KafkaSecurity | None = None) -> Iterator[KafkaAdminClient]:
    """A kafka-python admin client; :class:`BrokerUnavailableError` if ``bootstrap`` is down.
    ``security``: how to authenticate (default: the process's ``MEMSTACK_KAFKA_*`` settings)."""
    timeout_ms = int(timeout_s * 1000)
    try:
        client = KafkaAdminClient(**client_options(bootstrap, security),
                                  client_id="memstack-admin",
                                  bootstrap_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms)
    except KafkaError as exc:
        raise BrokerUnavailableError(
            f"cannot reach Kafka at {bootstrap} ({exc}); start the local broker with "
            "`memstack infra up`, or point MEMSTACK_BOOTSTRAP at a running one"
        ) from exc
    try:
        yield client
    finally:
        client.close()


def request_metadata(bootstrap: str, timeout_s: float = 3.0,
                     security: KafkaSecurity | None = None) -> bool:
    """True when the cluster answers a metadata request and lists an unfenced broker."""
    try:
        with admin_client(bootstrap, timeout_s, security) as client:
            cluster = client.describe_cluster()
    except (BrokerUnavailableError, KafkaError, OSError) as exc:
        log.debug("metadata request to %s failed: %s", bootstrap, exc)
        return False
    brokers = cluster.get("brokers") or []
    return any(not b.get("is_fenced", False) for b in brokers)
