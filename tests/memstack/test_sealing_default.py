"""Sealing is on unless MEMSTACK_SEAL=0, and an unsealed deployment says what it cannot erase."""

from __future__ import annotations

import pytest

from memstack.foundation.errors import ConfigError
from memstack.foundation.settings import SEALING_OFF, Settings
from memstack.pipelines.forgetting.audit import unsealed_detail


def test_sealing_is_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMSTACK_SEAL", raising=False)
    assert Settings.from_env().seal and Settings().seal
    assert Settings.from_env().sealing_warning is None


@pytest.mark.parametrize("raw", ["0", "false", "No", " off "])
def test_seal_zero_turns_it_off_and_says_so(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("MEMSTACK_SEAL", raw)
    monkeypatch.setenv("MEMSTACK_TOPIC_PREFIX", "acme")
    settings = Settings.from_env()
    assert not settings.seal
    warning = settings.sealing_warning
    assert warning is not None and warning.startswith(SEALING_OFF)
    assert "MEMSTACK_SEAL=0" in warning and "acme.events" in warning


def test_a_seal_value_that_is_not_a_flag_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_SEAL", "sometimes")
    with pytest.raises(ConfigError, match="MEMSTACK_SEAL='sometimes' must be one of"):
        Settings.from_env()


def test_the_audit_names_unsealed_payloads_as_not_erased() -> None:
    detail = unsealed_detail(3)
    assert detail.startswith(SEALING_OFF) and "3 payload(s)" in detail and "retention" in detail
