"""How every Kafka client of memstack authenticates: one definition, read from ``MEMSTACK_*``.

:class:`KafkaSecurity` holds the security protocol, the SASL mechanism and credentials and the
TLS files; each client library gets its options from it (:meth:`KafkaSecurity.kafka_python`
for kafka-python's producer, consumer and admin client, :meth:`KafkaSecurity.ssl_context` and
the same credentials for aiokafka under Faust, :meth:`KafkaSecurity.flink_properties` for the
Flink Kafka connector). The password is a :class:`Secret`: it never appears in a repr, a log
line or an error message. Standard library only, so every layer may import it.

Settings (docs/kafka.md, "On your cluster"):

- ``MEMSTACK_KAFKA_SECURITY_PROTOCOL``: PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
- ``MEMSTACK_KAFKA_SASL_MECHANISM``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (SASL only)
- ``MEMSTACK_KAFKA_SASL_USERNAME``, ``MEMSTACK_KAFKA_SASL_PASSWORD`` or
  ``MEMSTACK_KAFKA_SASL_PASSWORD_FILE`` (a file holding the password; one trailing newline is
  dropped)
- ``MEMSTACK_KAFKA_SSL_CA_FILE`` (PEM; default: the system's trust store),
  ``MEMSTACK_KAFKA_SSL_CERT_FILE`` and ``MEMSTACK_KAFKA_SSL_KEY_FILE`` (PEM; a client
  certificate, for brokers that ask for one), ``MEMSTACK_KAFKA_SSL_CHECK_HOSTNAME`` (default 1)
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.foundation.env_flags import env_flag
from memstack.foundation.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

PROTOCOL_VAR = "MEMSTACK_KAFKA_SECURITY_PROTOCOL"
MECHANISM_VAR = "MEMSTACK_KAFKA_SASL_MECHANISM"
USERNAME_VAR = "MEMSTACK_KAFKA_SASL_USERNAME"
PASSWORD_VAR = "MEMSTACK_KAFKA_SASL_PASSWORD"
PASSWORD_FILE_VAR = "MEMSTACK_KAFKA_SASL_PASSWORD_FILE"
CA_FILE_VAR = "MEMSTACK_KAFKA_SSL_CA_FILE"
CERT_FILE_VAR = "MEMSTACK_KAFKA_SSL_CERT_FILE"
KEY_FILE_VAR = "MEMSTACK_KAFKA_SSL_KEY_FILE"
CHECK_HOSTNAME_VAR = "MEMSTACK_KAFKA_SSL_CHECK_HOSTNAME"

SECURITY_VARS = (PROTOCOL_VAR, MECHANISM_VAR, USERNAME_VAR, PASSWORD_VAR, PASSWORD_FILE_VAR,
                 CA_FILE_VAR, CERT_FILE_VAR, KEY_FILE_VAR, CHECK_HOSTNAME_VAR)
"""Every variable this module reads (a child process that must not inherit them drops these)."""


class Secret:
    """A string that prints as ``***``: in reprs, f-strings, logs and tracebacks alike."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the one call that hands it to a client library."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class UnprintedStr(str):
    """The password as the client libraries need it, a real ``str``, whose ``repr`` is
    ``'***'``: kafka-python logs its whole configuration at DEBUG (``%s`` of a dict, so the
    values' reprs), and this keeps the password out of that line."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"


@dataclass(frozen=True)
class KafkaSecurity:
    """The security settings of every Kafka connection memstack opens."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: Secret | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    check_hostname: bool = True
    password_file: Path | None = None
    """Where the password was read from, if from a file (a child process is told the file)."""

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """Read and validate the settings; a :class:`ConfigError` names the variable to fix."""
        env = os.environ if env is None else env
        protocol = (env.get(PROTOCOL_VAR) or "PLAINTEXT").strip().upper()
        mechanism = (env.get(MECHANISM_VAR) or "").strip().upper() or None
        return cls(protocol=protocol, mechanism=mechanism,
                   username=env.get(USERNAME_VAR) or None, password=_password(env),
                   password_file=_path(env, PASSWORD_FILE_VAR),
                   ca_file=_path(env, CA_FILE_VAR), cert_file=_path(env, CERT_FILE_VAR),
                   key_file=_path(env, KEY_FILE_VAR),
                   check_hostname=env_flag(env, CHECK_HOSTNAME_VAR, default=True))

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """One line for logs and errors, never the password: ``SASL_SSL, SCRAM-SHA-512 as
        'svc'``."""
        parts = [self.protocol]
        if self.uses_sasl:
            parts.append(f"{self.mechanism} as {self.username!r}")
        if self.uses_tls and self.ca_file is not None:
            parts.append(f"CA {self.ca_file}")
        return ", ".join(parts)

    def to_env(self) -> dict[str, str]:
        """The ``MEMSTACK_KAFKA_*`` variables that make a child process use these settings
        (the password by its file when it came from one). Every variable is present, empty
        when unset, so a child does not inherit another definition."""
        password = "" if self.password is None or self.password_file else self.password.reveal()
        return {PROTOCOL_VAR: self.protocol, MECHANISM_VAR: self.mechanism or "",
                USERNAME_VAR: self.username or "", PASSWORD_VAR: password,
                PASSWORD_FILE_VAR: str(self.password_file or ""),
                CA_FILE_VAR: str(self.ca_file or ""), CERT_FILE_VAR: str(self.cert_file or ""),
                KEY_FILE_VAR: str(self.key_file or ""),
                CHECK_HOSTNAME_VAR: "1" if self.check_hostname else "0"}

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of SSL and SASL_SSL connections (None for the others); one
        definition for kafka-python and aiokafka alike."""
        if not self.uses_tls:
            return None
        try:
            context = ssl.create_default_context(
                cafile=str(self.ca_file) if self.ca_file else None)
            if self.cert_file is not None:
                context.load_cert_chain(str(self.cert_file),
                                        str(self.key_file) if self.key_file else None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the TLS files ({CA_FILE_VAR}={self.ca_file}, "
                              f"{CERT_FILE_VAR}={self.cert_file}, {KEY_FILE_VAR}="
                              f"{self.key_file}): {exc}") from exc
        context.check_hostname = self.check_hostname
        return context

    def kafka_python(self) -> dict[str, Any]:
        """Options of kafka-python's ``KafkaProducer``, ``KafkaConsumer`` and
        ``KafkaAdminClient`` (and aiokafka's clients, which take the same names)."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        context = self.ssl_context()
        if context is not None:
            options["ssl_context"] = context
        if self.uses_sasl:
            options["sasl_mechanism"] = self.mechanism
            options["sasl_plain_username"] = self.username
            options["sasl_plain_password"] = (UnprintedStr(self.password.reveal())
                                              if self.password else None)
        return options

    def flink_properties(self, shaded: str = "") -> dict[str, str]:
        """Kafka client properties (Java), as the Flink connector takes them (without the
        ``properties.`` prefix of a table's options). ``shaded``: the package prefix under which
        a connector jar relocates Kafka's classes, as the JAAS login module is named by class
        (``flink-sql-connector-kafka``: ``org.apache.flink.kafka.shaded.``). They hold the
        password: never log them."""
        props = {"security.protocol": self.protocol}
        if self.uses_tls:
            if self.ca_file is not None:
                props["ssl.truststore.type"] = "PEM"
                props["ssl.truststore.location"] = str(self.ca_file)
            if self.cert_file is not None and self.key_file is not None:
                props["ssl.keystore.type"] = "PEM"
                props["ssl.keystore.certificate.chain"] = self.cert_file.read_text()
                props["ssl.keystore.key"] = self.key_file.read_text()
            if not self.check_hostname:
                props["ssl.endpoint.identification.algorithm"] = ""
        if self.uses_sasl:
            module = shaded + ("org.apache.kafka.common.security.plain.PlainLoginModule"
                               if self.mechanism == "PLAIN"
                               else "org.apache.kafka.common.security.scram.ScramLoginModule")
            password = self.password.reveal() if self.password else ""
            props["sasl.mechanism"] = str(self.mechanism)
            props["sasl.jaas.config"] = (f'{module} required username="{_jaas(self.username)}" '
                                         f'password="{_jaas(password)}";')
        return props


def _validate(sec: KafkaSecurity) -> None:
    if sec.protocol not in PROTOCOLS:
        raise ConfigError(f"{PROTOCOL_VAR}={sec.protocol!r} must be one of {', '.join(PROTOCOLS)}")
    if sec.uses_sasl:
        if sec.mechanism not in MECHANISMS:
            raise ConfigError(f"{MECHANISM_VAR}={sec.mechanism!r} must be one of "
                              f"{', '.join(MECHANISMS)} when {PROTOCOL_VAR}={sec.protocol}")
        if not sec.username:
            raise ConfigError(f"{USERNAME_VAR} is required when {PROTOCOL_VAR}={sec.protocol}")
        if sec.password is None:
            raise ConfigError(f"{PASSWORD_VAR} or {PASSWORD_FILE_VAR} is required when "
                              f"{PROTOCOL_VAR}={sec.protocol}")
    elif sec.mechanism is not None:
        raise ConfigError(f"{MECHANISM_VAR}={sec.mechanism} needs {PROTOCOL_VAR}=SASL_SSL or "
                          f"SASL_PLAINTEXT (it is {sec.protocol})")
    if (sec.cert_file is None) != (sec.key_file is None):
        raise ConfigError(f"{CERT_FILE_VAR} and {KEY_FILE_VAR} go together: set both or neither")
    for name, path in ((CA_FILE_VAR, sec.ca_file), (CERT_FILE_VAR, sec.cert_file),
                       (KEY_FILE_VAR, sec.key_file)):
        if path is not None and not sec.uses_tls:
            raise ConfigError(f"{name} needs {PROTOCOL_VAR}=SSL or SASL_SSL "
                              f"(it is {sec.protocol})")


def _password(env: Mapping[str, str]) -> Secret | None:
    value = env.get(PASSWORD_VAR)
    source = env.get(PASSWORD_FILE_VAR)
    if value and source:
        raise ConfigError(f"set {PASSWORD_VAR} or {PASSWORD_FILE_VAR}, not both")
    if source:
        try:
            text = Path(source).expanduser().read_text()
        except OSError as exc:
            raise ConfigError(f"{PASSWORD_FILE_VAR}={source}: cannot read it "
                              f"({exc.strerror})") from None
        return Secret(text[:-1] if text.endswith("\n") else text)
    return Secret(value) if value else None


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name)
    if not raw:
        return None
    path = Path(raw).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"{name}={raw}: no such file")
    return path



def _jaas(value: str | None) -> str:
    return (value or "").replace("\\", "\\\\").replace('"', '\\"')
