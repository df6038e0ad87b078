"""Settings: one frozen object, read from ``MEMSTACK_*`` environment variables.

Every job validates its settings at start; errors name the variable to fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from memstack.foundation.env_flags import env_flag
from memstack.foundation.errors import ConfigError
from memstack.foundation.kafka_security import KafkaSecurity

DEFAULT_KAFKA_PORT = 39092
"""Default broker port: far from Kafka's 9092 and the usual dev-server ports."""


def _int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not an integer") from exc
    if value < minimum:
        raise ConfigError(f"{name}={value} must be >= {minimum}")
    return value


SEALING_OFF = "log not erased: sealing is off"
"""What every report of an unsealed deployment says (``/healthz``, the inspector, the forget
audit and ``memstack forget``): a forget cannot reach payloads written in the clear."""


@dataclass(frozen=True)
class Settings:
    """Where memstack keeps its data and how it reaches Kafka."""

    home: Path = field(default_factory=lambda: Path(".memstack").resolve())
    kafka_port: int = DEFAULT_KAFKA_PORT
    controller_port: int = DEFAULT_KAFKA_PORT + 1
    bootstrap: str = f"127.0.0.1:{DEFAULT_KAFKA_PORT}"
    topic_prefix: str = "memstack"
    partitions: int = 3
    seal: bool = True
    """Seal event payloads with per-scope keys (crypto-shredding), on unless ``MEMSTACK_SEAL=0``:
    a forget then destroys the keys and so reaches the Kafka log too (docs/forget.md)."""
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)
    """How every Kafka client authenticates (``MEMSTACK_KAFKA_SECURITY_PROTOCOL`` and the rest:
    :mod:`memstack.foundation.kafka_security`)."""

    @classmethod
    def from_env(cls) -> Settings:
        home = Path(os.environ.get("MEMSTACK_HOME", ".memstack")).expanduser().resolve()
        port = _int("MEMSTACK_KAFKA_PORT", DEFAULT_KAFKA_PORT, minimum=1)
        controller = _int("MEMSTACK_KAFKA_CONTROLLER_PORT", port + 1, minimum=1)
        bootstrap = os.environ.get("MEMSTACK_BOOTSTRAP") or f"127.0.0.1:{port}"
        prefix = os.environ.get("MEMSTACK_TOPIC_PREFIX", "memstack")
        if not prefix or any(c in prefix for c in " /\\:"):
            raise ConfigError(f"MEMSTACK_TOPIC_PREFIX={prefix!r} must be a plain topic name part")
        partitions = _int("MEMSTACK_PARTITIONS", 3, minimum=1)
        seal = env_flag(os.environ, "MEMSTACK_SEAL", default=True)
        return cls(home, port, controller, bootstrap, prefix, partitions, seal,
                   KafkaSecurity.from_env())

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]  # dataclass replace is untyped

    @property
    def events_topic(self) -> str:
        return f"{self.topic_prefix}.events"

    @property
    def forget_topic(self) -> str:
        return f"{self.topic_prefix}.forget"

    @property
    def dlq_topic(self) -> str:
        return f"{self.topic_prefix}.dlq"

    @property
    def keys_topic(self) -> str:
        return f"{self.topic_prefix}.keys"

    @property
    def sealing_warning(self) -> str | None:
        """:data:`SEALING_OFF` with what it means, or None when payloads are sealed."""
        if self.seal:
            return None
        return (f"{SEALING_OFF} (MEMSTACK_SEAL=0): payloads are written to {self.events_topic} "
                "in the clear and a forget cannot erase them there; only retention removes them")

    @property
    def keys_dir(self) -> Path:
        """The file key store of crypto-shredding (one key per tenant/session/subject)."""
        return self.home / "keys"

    @property
    def kafka_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def stores_dir(self) -> Path:
        return self.home / "stores"
