"""``check_connection``'s TLS step against a TLS server of our own (no broker): hostname
verification is on by default and a mismatch names the host and the setting."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator

import pytest

from memstack.foundation.errors import BrokerUnavailableError, KafkaSecurityError
from memstack.foundation.kafka_connect import check_connection
from memstack.foundation.kafka_security import KafkaSecurity
from memstack.infra.tls import Certificates, ensure_certificates

HOST = "127.0.0.2"  # on loopback, but not named by the certificate (127.0.0.1, localhost)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return ensure_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_server(certs: Certificates) -> Iterator[int]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.broker_key_and_cert)
    listener = socket.create_server((HOST, 0))
    listener.settimeout(5)

    def serve() -> None:
        for _ in range(2):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    listener.close()
    thread.join(5)


def test_a_certificate_not_naming_the_host_is_refused_by_default(
        certs: Certificates, tls_server: int) -> None:
    security = KafkaSecurity("SSL", ca_file=certs.ca)
    with pytest.raises(KafkaSecurityError, match="MEMSTACK_KAFKA_SSL_CHECK_HOSTNAME") as refused:
        check_connection(f"{HOST}:{tls_server}", security, timeout_s=5)
    assert f"does not name '{HOST}'" in str(refused.value)
    unchecked = KafkaSecurity("SSL", ca_file=certs.ca, check_hostname=False)
    check_connection(f"{HOST}:{tls_server}", unchecked, timeout_s=5)  # only when turned off


def test_nothing_listening_is_a_broker_unavailable_error(certs: Certificates) -> None:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]
    with pytest.raises(BrokerUnavailableError, match="cannot reach Kafka"):
        check_connection(f"{HOST}:{port}", KafkaSecurity("SSL", ca_file=certs.ca), timeout_s=2)
