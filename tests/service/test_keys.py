"""API keys: stored hashed, roles, the keys file written by ``memstack keys add``."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.server.api_keys import ApiKeys, add_key, digest
from memstack.view.errors import AuthError


def test_env_keys_are_hashed_on_load_with_roles() -> None:
    keys = ApiKeys.from_env({"MEMSTACK_API_KEYS": "dev-key-0001:acme,read-key-01:acme:read,"
                                                  "dev-key-0001:other", "MEMSTACK_HOME": "/nx"})
    assert "dev-key-0001" not in repr(keys.grants) and all(
        g.digest != b"dev-key-0001" for g in keys.grants)
    dev = keys.grant_of("dev-key-0001")
    assert dev is not None and dev.tenants == {"acme", "other"}
    assert dev.roles == {"read", "write", "forget"}
    reader = keys.grant_of("read-key-01")
    assert reader is not None and reader.roles == {"read"}
    assert keys.grant_of("dev-key-0002") is None


def test_keys_file_holds_only_hashes(tmp_path: Path) -> None:
    path = tmp_path / "api-keys"
    key = add_key(path, ["acme", "beta"], ["write", "read"], label="ingest bot")
    text = path.read_text()
    assert key not in text and digest(key).hex() in text
    assert path.stat().st_mode & 0o777 == 0o600
    keys = ApiKeys.from_env({"MEMSTACK_HOME": str(tmp_path)})
    grant = keys.grant_of(key)
    assert grant is not None and grant.tenants == {"acme", "beta"}
    assert grant.roles == {"read", "write"}
    assert keys.grant_of(key + "x") is None


@pytest.mark.parametrize(("line", "match"), [
    ("sha256:zz acme read", "not hexadecimal"),
    ("sha256:abcd acme read", "not a SHA-256"),
    (f"sha256:{'0' * 64} acme admin", "unknown role"),
    ("short:acme", "at least 8"),
])
def test_bad_key_lines_are_named(tmp_path: Path, line: str, match: str) -> None:
    (tmp_path / "api-keys").write_text(line + "\n")
    with pytest.raises(AuthError, match=match):
        ApiKeys.from_env({"MEMSTACK_HOME": str(tmp_path)})


def test_no_keys_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(AuthError, match="memstack keys add"):
        ApiKeys.from_env({"MEMSTACK_HOME": str(tmp_path)})


def test_live_keys_follow_the_keys_file(tmp_path: Path) -> None:
    import time

    from memstack.server.api_keys import LiveApiKeys, revoke_key

    path = tmp_path / "api-keys"
    first = add_key(path, ["acme"], ["read"])
    keys = LiveApiKeys({"MEMSTACK_HOME": str(tmp_path), "MEMSTACK_API_KEYS": "dev-key-0001:dev"},
                       check_every_s=0.0)
    assert keys.grant_of(first) is not None and keys.grant_of("dev-key-0001") is not None
    second = add_key(path, ["acme"], ["write"])
    assert keys.grant_of(second) is not None
    assert revoke_key(path, "sha256:" + digest(first).hex()[:12] + "…") == 1
    assert keys.grant_of(first) is None and keys.tenants_of(second) == {"acme"}
    path.write_text("not a key line\n")
    time.sleep(0.01)
    assert keys.grant_of(second) is not None  # a broken file keeps the last good keys
    path.unlink()
    assert keys.grant_of(second) is None and keys.grant_of("dev-key-0001") is not None
    with pytest.raises(AuthError, match="8 or more hex digits"):
        revoke_key(path, "abc")
