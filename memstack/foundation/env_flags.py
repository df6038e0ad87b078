"""Yes/no ``MEMSTACK_*`` variables: one parser, so every flag accepts the same words."""

from __future__ import annotations

from collections.abc import Mapping

from memstack.foundation.errors import ConfigError

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def env_flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    """``name``'s value as a bool (``default`` when unset or empty); any other word is a
    :class:`ConfigError` naming the variable and the accepted words."""
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in TRUE or raw in FALSE:
        return raw in TRUE
    raise ConfigError(f"{name}={raw!r} must be one of {TRUE + FALSE}")
