"""Security of the local broker (``memstack infra up --secure``): SASL_SSL, SCRAM, ACLs.

Everything is made once under one folder (``$MEMSTACK_HOME/kafka-secure/secrets``): a CA and
the broker's certificate (:mod:`memstack.infra.tls`), and a random password per SCRAM user,
each in its own ``<user>.password`` file (mode 0600). The users are created when the storage
is formatted (``kafka-storage format --add-scram``, KIP-900), so they exist before the first
start. The client listener is SASL_SSL with SCRAM-SHA-512 (and -256); the controller listener
is TLS with a client certificate (KRaft's controller does not take SCRAM). ACLs are on
(``StandardAuthorizer``): the broker and ``memstack-admin`` are super users, the other roles get
:func:`memstack.infra.acls.role_acls`.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from memstack.foundation.kafka_security import (
    CA_FILE_VAR,
    MECHANISM_VAR,
    PASSWORD_FILE_VAR,
    PROTOCOL_VAR,
    USERNAME_VAR,
    KafkaSecurity,
    Secret,
)
from memstack.infra.tls import Certificates, ensure_certificates

MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "memstack-broker"
USERS = {"admin": "memstack-admin", "service": "memstack-service", "agent": "memstack-agent"}
"""The SCRAM user of each memstack role on the local broker."""


@dataclass(frozen=True)
class LocalSecurity:
    """The secrets folder of a secure local broker and what the broker and clients need."""

    folder: Path

    def ensure(self) -> Certificates:
        """Certificates and passwords, made unless they exist (never changed afterwards: the
        SCRAM credentials in the formatted storage were derived from them)."""
        certs = ensure_certificates(self.folder)
        for user in self.users():
            path = self.password_file(user)
            if not path.is_file():
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as out:
                    out.write(secrets.token_urlsafe(24))
        return certs

    @property
    def certificates(self) -> Certificates:
        return ensure_certificates(self.folder)

    def users(self) -> tuple[str, ...]:
        return (BROKER_USER, *USERS.values())

    def password_file(self, user: str) -> Path:
        return self.folder / f"{user}.password"

    def _password(self, user: str) -> str:
        return self.password_file(user).read_text().strip()

    def client(self, role: str) -> KafkaSecurity:
        """The client settings of one role (``admin``, ``service``, ``agent``)."""
        user = USERS[role]
        return KafkaSecurity("SASL_SSL", MECHANISM, user, Secret(self._password(user)),
                             ca_file=self.certificates.ca,
                             password_file=self.password_file(user))

    def client_env(self, role: str) -> dict[str, str]:
        """The ``MEMSTACK_KAFKA_*`` variables of one role (the password by file)."""
        return {PROTOCOL_VAR: "SASL_SSL", MECHANISM_VAR: MECHANISM, USERNAME_VAR: USERS[role],
                PASSWORD_FILE_VAR: str(self.password_file(USERS[role])),
                CA_FILE_VAR: str(self.certificates.ca)}

    def principals(self) -> dict[str, str]:
        return {role: f"User:{user}" for role, user in USERS.items()}

    def scram_arguments(self) -> list[str]:
        """``--add-scram`` arguments of the storage tool: every user, both SCRAM mechanisms."""
        args: list[str] = []
        for user in self.users():
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                args += ["--add-scram", f"{mechanism}=[name={user},"
                                        f"password={self._password(user)}]"]
        return args

    def server_properties(self, host: str, port: int, controller_port: int) -> dict[str, str]:
        """The broker's listener, TLS, SASL and authorizer settings (they hold the broker's
        own password: the file is written with mode 0600)."""
        certs = self.certificates
        jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{BROKER_USER}" password="{self._password(BROKER_USER)}";')
        return {
            "listeners": f"SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller_port}",
            "advertised.listeners": f"SASL_SSL://{host}:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "CONTROLLER:SSL,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.broker_key_and_cert),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca),
            "listener.name.controller.ssl.client.auth": "required",
            "authorizer.class.name":
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{BROKER_USER};User:{USERS['admin']};"
                           f"User:CN={BROKER_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }
