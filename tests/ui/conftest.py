"""The inspector under test: ``memstack serve`` (real broker, stores, model) and a real
headless Chromium (Debian's ``chromium``) driven by Playwright for Python.

The service is the one of :mod:`tests.service.conftest` (its own topics, home, keys for the
tenants ``acme`` and ``other``, sealed payloads), started once for this package. The browser
tests are skipped only when Chromium cannot start here (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from memstack.foundation.settings import Settings
from tests.conftest import KafkaUnderTest
from tests.service.conftest import Service, fresh_settings, running_service

CHROMIUM = os.environ.get("MEMSTACK_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="package")
def ui_service(kafka: KafkaUnderTest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    settings: Settings = fresh_settings(kafka, tmp_path_factory)
    log = tmp_path_factory.mktemp("ui-log") / "serve.log"
    with running_service(settings, log) as running:
        yield running


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """A headless Chromium; the tests skip with the reason when it cannot start."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # the dev extra is not installed
        pytest.skip(f"playwright is not installed ({exc}); pip install '.[dev]'")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        except Exception as exc:  # a missing or broken browser: say which, and skip
            pytest.skip(f"Chromium at {CHROMIUM} cannot start ({type(exc).__name__}: "
                        f"{str(exc)[:200]}); install Debian's chromium or set MEMSTACK_CHROMIUM")
        try:
            yield chromium
        finally:
            chromium.close()
