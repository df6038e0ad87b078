"""The one definition of Kafka client security: parsing, validation, what each client gets,
and that the password never shows (no broker; tests/integration/secure/ has the broker)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from memstack.foundation.errors import ConfigError
from memstack.foundation.kafka_connect import client_options
from memstack.foundation.kafka_security import KafkaSecurity, Secret
from memstack.foundation.settings import Settings
from memstack.infra.tls import ensure_certificates

PASSWORD = "s3cr3t-Pa55"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_certificates(tmp_path_factory.mktemp("certs")).ca


def scram_env(ca: Path, **extra: str) -> dict[str, str]:
    return {"MEMSTACK_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
            "MEMSTACK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "MEMSTACK_KAFKA_SASL_USERNAME": "svc", "MEMSTACK_KAFKA_SASL_PASSWORD": PASSWORD,
            "MEMSTACK_KAFKA_SSL_CA_FILE": str(ca), **extra}


def test_default_is_plaintext_and_adds_only_the_protocol() -> None:
    sec = KafkaSecurity.from_env({})
    assert sec == KafkaSecurity()
    assert client_options("h:1", sec) == {"bootstrap_servers": "h:1",
                                           "security_protocol": "PLAINTEXT"}


def test_sasl_ssl_gives_kafka_python_one_context_with_hostname_checks(ca: Path) -> None:
    sec = KafkaSecurity.from_env(scram_env(ca))
    options = sec.kafka_python()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "svc"
    assert options["sasl_plain_password"] == PASSWORD
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED


def test_hostname_verification_can_be_turned_off_only_explicitly(ca: Path) -> None:
    sec = KafkaSecurity.from_env(scram_env(ca, MEMSTACK_KAFKA_SSL_CHECK_HOSTNAME="0"))
    context = sec.ssl_context()
    assert context is not None and not context.check_hostname
    assert sec.flink_properties()["ssl.endpoint.identification.algorithm"] == ""


def test_password_file_is_read_and_its_newline_dropped(ca: Path, tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    env = scram_env(ca, MEMSTACK_KAFKA_SASL_PASSWORD_FILE=str(tmp_path / "pw"))
    del env["MEMSTACK_KAFKA_SASL_PASSWORD"]
    sec = KafkaSecurity.from_env(env)
    assert sec.password == Secret(PASSWORD)


def test_the_password_never_shows_in_reprs_or_descriptions(ca: Path) -> None:
    sec = KafkaSecurity.from_env(scram_env(ca))
    settings = Settings(kafka_security=sec)
    for text in (repr(sec), str(sec), sec.describe(), repr(settings), f"{sec.password}"):
        assert PASSWORD not in text
    assert "svc" in sec.describe()


@pytest.mark.parametrize(("change", "named"), [
    ({"MEMSTACK_KAFKA_SECURITY_PROTOCOL": "TLS"}, "MEMSTACK_KAFKA_SECURITY_PROTOCOL"),
    ({"MEMSTACK_KAFKA_SASL_MECHANISM": "GSSAPI"}, "MEMSTACK_KAFKA_SASL_MECHANISM"),
    ({"MEMSTACK_KAFKA_SASL_USERNAME": ""}, "MEMSTACK_KAFKA_SASL_USERNAME"),
    ({"MEMSTACK_KAFKA_SASL_PASSWORD": ""}, "MEMSTACK_KAFKA_SASL_PASSWORD"),
    ({"MEMSTACK_KAFKA_SASL_PASSWORD_FILE": "/nonexistent/pw"},
     "MEMSTACK_KAFKA_SASL_PASSWORD_FILE"),
    ({"MEMSTACK_KAFKA_SSL_CA_FILE": "/nonexistent/ca.pem"}, "MEMSTACK_KAFKA_SSL_CA_FILE"),
    ({"MEMSTACK_KAFKA_SSL_CERT_FILE": "/etc/hostname"}, "MEMSTACK_KAFKA_SSL_KEY_FILE"),
    ({"MEMSTACK_KAFKA_SSL_CHECK_HOSTNAME": "maybe"}, "MEMSTACK_KAFKA_SSL_CHECK_HOSTNAME"),
])
def test_a_bad_setting_is_named_and_the_password_is_not(ca: Path, change: dict[str, str],
                                                        named: str) -> None:
    env = scram_env(ca, **change)
    if change.get("MEMSTACK_KAFKA_SASL_PASSWORD_FILE"):
        del env["MEMSTACK_KAFKA_SASL_PASSWORD"]
    with pytest.raises(ConfigError, match=named) as caught:
        KafkaSecurity.from_env(env)
    assert PASSWORD not in str(caught.value)


def test_a_mechanism_without_sasl_is_refused() -> None:
    with pytest.raises(ConfigError, match="MEMSTACK_KAFKA_SASL_MECHANISM"):
        KafkaSecurity.from_env({"MEMSTACK_KAFKA_SASL_MECHANISM": "PLAIN"})


def test_flink_properties_carry_the_same_settings(ca: Path) -> None:
    props = KafkaSecurity.from_env(scram_env(ca)).flink_properties()
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["ssl.truststore.type"] == "PEM"
    assert props["ssl.truststore.location"] == str(ca.resolve())
    assert props["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" '
        f'password="{PASSWORD}";')


def test_settings_from_env_read_the_security(ca: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in scram_env(ca).items():
        monkeypatch.setenv(key, value)
    assert Settings.from_env().kafka_security.username == "svc"


def test_a_child_process_is_given_the_same_settings(ca: Path, tmp_path: Path) -> None:
    sec = KafkaSecurity.from_env(scram_env(ca))
    assert KafkaSecurity.from_env(sec.to_env()) == sec
    (tmp_path / "pw").write_text(PASSWORD)
    by_file = KafkaSecurity(sec.protocol, sec.mechanism, "svc", Secret(PASSWORD), ca_file=ca,
                            password_file=tmp_path / "pw")
    env = by_file.to_env()
    assert PASSWORD not in env.values()
    assert KafkaSecurity.from_env(env).password == Secret(PASSWORD)
    assert KafkaSecurity().to_env()["MEMSTACK_KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT"


def test_the_password_handed_to_kafka_python_prints_as_stars(ca: Path) -> None:
    """kafka-python logs its configuration dict at DEBUG: the value's repr must hide it."""
    options = KafkaSecurity.from_env(scram_env(ca)).kafka_python()
    assert options["sasl_plain_password"] == PASSWORD
    assert PASSWORD not in repr(options) and PASSWORD not in str(options)


def test_the_flink_connector_names_its_shaded_login_module(ca: Path) -> None:
    from memstack.pipelines.replay.source import CONNECTOR_SHADED

    jaas = KafkaSecurity.from_env(scram_env(ca)).flink_properties(CONNECTOR_SHADED)[
        "sasl.jaas.config"]
    assert jaas.startswith("org.apache.flink.kafka.shaded.org.apache.kafka.common.security."
                           "scram.ScramLoginModule required ")


def test_a_login_seen_only_as_closed_connections_names_the_credentials(ca: Path) -> None:
    """kafka-python 3.0 can drop the broker's refusal when the close comes with it."""
    from kafka.errors import KafkaConnectionError

    from memstack.foundation.errors import KafkaSecurityError
    from memstack.foundation.kafka_connect import _sasl_error

    sec = KafkaSecurity.from_env(scram_env(ca))
    closed = [KafkaConnectionError("socket disconnected") for _ in range(3)]
    error = _sasl_error("h:1", sec, [*closed, closed[0]])
    assert isinstance(error, KafkaSecurityError)
    assert "(3 attempts)" in str(error) and "MEMSTACK_KAFKA_SASL_PASSWORD" in str(error)
    assert PASSWORD not in str(error)
