"""kafka-python clients built from one definition: bootstrap + :class:`KafkaSecurity`.

``client_options`` gives the options every ``KafkaProducer``, ``KafkaConsumer`` and
``KafkaAdminClient`` of memstack is built with; ``explain`` turns what the broker or the TLS
layer said into a message naming the setting to fix (never the password).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from typing import Any

from kafka import errors as kafka_errors

from memstack.foundation.errors import (
    BrokerUnavailableError,
    ConfigError,
    KafkaSecurityError,
)
from memstack.foundation.kafka_security import (
    CA_FILE_VAR,
    CHECK_HOSTNAME_VAR,
    MECHANISM_VAR,
    PASSWORD_FILE_VAR,
    PASSWORD_VAR,
    PROTOCOL_VAR,
    USERNAME_VAR,
    KafkaSecurity,
)


def security_of(security: KafkaSecurity | None) -> KafkaSecurity:
    """``security``, or the process's own (``MEMSTACK_KAFKA_*``) when None."""
    return security if security is not None else KafkaSecurity.from_env()


def client_options(bootstrap: str, security: KafkaSecurity | None = None) -> dict[str, Any]:
    """``bootstrap_servers`` and the security options of a kafka-python client."""
    return {"bootstrap_servers": bootstrap, **security_of(security).kafka_python()}


def check_connection(bootstrap: str, security: KafkaSecurity | None = None,
                     timeout_s: float = 8.0) -> None:
    """Fail fast, naming the setting, when ``security`` cannot connect to ``bootstrap``.

    kafka-python retries a refused TLS handshake or SASL login until its own timeout and then
    raises a bare ``KafkaTimeoutError``; this check reports the cause instead: TLS by a
    handshake of its own (:mod:`ssl`), SASL by one bootstrap of an admin client whose
    connection failures are collected as they happen. PLAINTEXT is not checked."""
    sec = security_of(security)
    if sec.protocol == "PLAINTEXT":
        return
    host, port = first_address(bootstrap)
    deadline = time.monotonic() + timeout_s
    if sec.uses_tls:
        _check_tls(host, port, sec, timeout_s)
    if sec.uses_sasl:
        _check_sasl(bootstrap, sec, max(1.0, deadline - time.monotonic()))


def first_address(bootstrap: str) -> tuple[str, int]:
    """``(host, port)`` of the first broker in ``bootstrap`` (``host:port[,host:port]``)."""
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise ConfigError(f"MEMSTACK_BOOTSTRAP={bootstrap!r}: expected host:port[,host:port]") \
            from None


def _check_tls(host: str, port: int, sec: KafkaSecurity, timeout_s: float) -> None:
    context = sec.ssl_context()
    assert context is not None  # uses_tls
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            return
    except ssl.SSLCertVerificationError as exc:
        if exc.verify_code in _NAME_MISMATCH:
            raise KafkaSecurityError(
                f"the broker at {host}:{port} presented a certificate that does not name "
                f"{host!r} ({exc.verify_message}); connect by a name the certificate holds, or "
                f"(tests only) set {CHECK_HOSTNAME_VAR}=0") from None
        trust = f"{CA_FILE_VAR}={sec.ca_file}" if sec.ca_file else \
            f"the system trust store ({CA_FILE_VAR} is not set)"
        raise KafkaSecurityError(
            f"the broker's certificate at {host}:{port} is not trusted by {trust}: "
            f"{exc.verify_message}; set {CA_FILE_VAR} to the CA that signed it") from None
    except (ssl.SSLError, ConnectionResetError) as exc:
        raise KafkaSecurityError(
            f"no TLS handshake with {host}:{port} ({exc}); is {PROTOCOL_VAR}={sec.protocol} "
            "the listener's protocol?") from None
    except OSError as exc:
        raise BrokerUnavailableError(
            f"cannot reach Kafka at {host}:{port} ({exc.strerror or exc}); check "
            "MEMSTACK_BOOTSTRAP") from None


_SASL_REFUSALS = (kafka_errors.SaslAuthenticationFailedError,
                  kafka_errors.UnsupportedSaslMechanismError,
                  kafka_errors.IllegalSaslStateError)


DISCONNECTS_AS_REFUSAL = 8
"""Connections closed during the login after which the check stops listening (see
:func:`_sasl_error`)."""


class _Failures(logging.Handler):
    """Collects the exceptions kafka-python logs while it (re)connects; ``refused`` is set at
    the first SASL refusal, or after :data:`DISCONNECTS_AS_REFUSAL` closed connections, so the
    check need not wait out the client's retries."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[BaseException] = []
        self.disconnects: set[int] = set()
        self.refused = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if not isinstance(arg, BaseException):
                continue
            self.seen.append(arg)
            if isinstance(arg, _SASL_REFUSALS):
                self.refused.set()
            elif _is_disconnect(arg):
                self.disconnects.add(id(arg))
                if len(self.disconnects) >= DISCONNECTS_AS_REFUSAL:
                    self.refused.set()


def _is_disconnect(exc: BaseException) -> bool:
    return isinstance(exc, kafka_errors.KafkaConnectionError) and "disconnected" in str(exc)


def _check_sasl(bootstrap: str, sec: KafkaSecurity, timeout_s: float) -> None:
    failures = _Failures()
    logger = logging.getLogger("kafka")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(failures)
    if not logger.isEnabledFor(logging.WARNING):  # quieted (the CLI): hear it, print nothing
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def bootstrap_once() -> None:
        from kafka.admin import KafkaAdminClient  # heavy to import; only the check needs it

        timeout_ms = int(timeout_s * 1000)
        try:
            KafkaAdminClient(**client_options(bootstrap, sec), client_id="memstack-check",
                             bootstrap_timeout_ms=timeout_ms,
                             request_timeout_ms=timeout_ms).close()
            outcome.append(None)
        except Exception as exc:  # reported below, whatever kafka-python raised
            outcome.append(exc)
        finally:
            done.set()
            failures.refused.set()

    threading.Thread(target=bootstrap_once, name="memstack-sasl-check", daemon=True).start()
    try:
        failures.refused.wait(timeout_s + 1.0)
    finally:
        logger.removeHandler(failures)
        logger.setLevel(level)
        logger.propagate = propagate
    if done.is_set() and outcome and outcome[0] is None:
        return
    raise _sasl_error(bootstrap, sec, [*failures.seen, *(e for e in outcome if e)]) from None


def _sasl_error(bootstrap: str, sec: KafkaSecurity,
                seen: list[BaseException]) -> BrokerUnavailableError:
    auth = [e for e in seen if isinstance(e, _SASL_REFUSALS)]
    if auth:
        return KafkaSecurityError(
            f"the broker at {bootstrap} refused SASL {sec.mechanism} login as "
            f"{sec.username!r}: {_said(auth[-1])}; check {USERNAME_VAR} and "
            f"{PASSWORD_VAR} (or {PASSWORD_FILE_VAR}), and {MECHANISM_VAR}")
    closed = {id(e) for e in seen if _is_disconnect(e)}
    if len(closed) >= 2:
        # kafka-python 3.0 drops a response that arrives with the connection's close (its
        # transport aborts on EOF, discarding bytes read with it): a refused login then shows
        # only as closed connections, the broker's reason lost.
        tls = "after a good TLS handshake " if sec.uses_tls else ""
        return KafkaSecurityError(
            f"the broker at {bootstrap} closed the connection {tls}during each SASL "
            f"{sec.mechanism} login as {sec.username!r} ({len(closed)} attempts), as a broker "
            f"does when it refuses a login; check {USERNAME_VAR} and {PASSWORD_VAR} (or "
            f"{PASSWORD_FILE_VAR}), {MECHANISM_VAR}, and that {PROTOCOL_VAR}={sec.protocol} "
            "is the listener's protocol")
    last = _said(seen[-1]) if seen else "no answer"
    return BrokerUnavailableError(
        f"no answer from Kafka at {bootstrap} as {sec.describe()}: {last}; is "
        f"{PROTOCOL_VAR}={sec.protocol} the listener's protocol?")


def _said(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.split(": ", 1)[1] if text.startswith("[Error") and ": " in text else text


def explain(exc: BaseException, security: KafkaSecurity | None = None) -> str:
    """What a refused operation means, naming the principal and what to grant."""
    if isinstance(exc, kafka_errors.AuthorizationError):
        sec = security_of(security)
        who = repr(sec.username) if sec.uses_sasl else "this client's principal"
        return (f"the broker denied {who}: {type(exc).__name__} {_resources(exc)}; grant the "
                "ACLs of its role (`memstack topics acls` prints them)")
    return str(exc)


def _resources(exc: BaseException) -> str:
    names = [a for arg in exc.args for a in (arg if isinstance(arg, (set, list, tuple))
                                               else [arg])]
    return ", ".join(sorted(str(n) for n in names))


_NAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
