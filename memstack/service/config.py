"""Where the memstack service is, which key to present, and which tenant to use.

Each comes from an argument first, then the environment: ``MEMSTACK_URL`` (else the running
service's ``$MEMSTACK_HOME/service.json``, which ``memstack serve`` writes), ``MEMSTACK_API_KEY``
and ``MEMSTACK_TENANT``. The tenant is configuration, never guessed: the service checks that
the key is granted it (403 otherwise).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memstack.foundation.errors import ConfigError

URL_ENV = "MEMSTACK_URL"
API_KEY_ENV = "MEMSTACK_API_KEY"
TENANT_ENV = "MEMSTACK_TENANT"
SERVICE_FILE = "service.json"


@dataclass(frozen=True)
class ServiceConfig:
    url: str
    api_key: str | None
    tenant: str

    def __repr__(self) -> str:  # never print the key
        return f"ServiceConfig(url={self.url!r}, tenant={self.tenant!r}, api_key=***)"

    @classmethod
    def resolve(cls, url: str | None = None, api_key: str | None = None,
                tenant: str | None = None, env: Mapping[str, str] | None = None) -> ServiceConfig:
        env = os.environ if env is None else env
        found_url = url or env.get(URL_ENV) or running_service_url(env)
        if not found_url:
            raise ConfigError(
                f"no memstack service given: pass url=..., set {URL_ENV}, or start one with "
                "`memstack serve` (it writes $MEMSTACK_HOME/service.json)")
        found_tenant = tenant or env.get(TENANT_ENV)
        if not found_tenant:
            raise ConfigError(f"no tenant given: pass tenant=... or set {TENANT_ENV}")
        return cls(found_url.rstrip("/"), api_key or env.get(API_KEY_ENV) or None, found_tenant)


def service_file(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("MEMSTACK_HOME", ".memstack")).expanduser() / SERVICE_FILE


def running_service_url(env: Mapping[str, str] | None = None) -> str | None:
    """The URL in ``$MEMSTACK_HOME/service.json`` (``url``, or ``host`` and ``port``)."""
    path = service_file(env)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is unreadable ({exc}); remove it or set {URL_ENV}") from exc
    if isinstance(data, dict) and isinstance(data.get("url"), str):
        return str(data["url"])
    if isinstance(data, dict) and data.get("port"):
        return f"http://{data.get('host', '127.0.0.1')}:{data['port']}"
    raise ConfigError(f"{path} names no url; remove it or set {URL_ENV}")
