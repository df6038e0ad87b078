"""The slow-consumer hook: off without its variable, a bounded delay read from its file."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.pipelines.fault_hooks import BATCH_DELAY_VARIABLE, injected_batch_delay


def test_off_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BATCH_DELAY_VARIABLE, raising=False)
    assert injected_batch_delay() == 0.0


def test_reads_the_file_each_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "delay"
    monkeypatch.setenv(BATCH_DELAY_VARIABLE, str(path))
    assert injected_batch_delay() == 0.0  # no file yet
    path.write_text("0.75")
    assert injected_batch_delay() == 0.75
    path.write_text("9999")
    assert injected_batch_delay() == 60.0
    path.write_text("soon")
    assert injected_batch_delay() == 0.0
    path.write_text("")
    assert injected_batch_delay() == 0.0
