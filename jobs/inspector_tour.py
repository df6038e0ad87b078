"""A tour of the memory inspector in a headless Chromium, saving screenshots (``make demo``).

The demo opens ``/ui`` on its running service, types the key and tenant, picks a subject,
lets the agent write while the page follows the change feed, moves the as-of slider, searches,
opens a hit's provenance and files a forget from the page, followed until ``audited``. Each
step is saved as a PNG under ``out/ui/``. The browser is Debian's ``chromium`` (or
``MEMSTACK_CHROMIUM``) driven by Playwright (the ``dev`` extra); without either the tour is
skipped with the reason.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memstack.foundation.errors import MemstackError

log = logging.getLogger(__name__)

CHROMIUM_ENV = "MEMSTACK_CHROMIUM"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
SHOTS_ENV = "MEMSTACK_UI_SHOTS"
"""Where the screenshots go (default ``out/ui`` under the working directory)."""


class BrowserUnavailableError(MemstackError, RuntimeError):
    """Playwright or Chromium is missing: the tour cannot run here."""


def shots_dir() -> Path:
    return Path(os.environ.get(SHOTS_ENV) or Path("out") / "ui")


@contextmanager
def inspector_page(url: str, key: str, tenant: str) -> Iterator[Any]:
    """A headless page on ``url``/ui/, connected with ``key`` to ``tenant``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise BrowserUnavailableError(f"playwright is not installed ({exc}); "
                                      "pip install '.[dev]'") from exc
    executable = os.environ.get(CHROMIUM_ENV, DEFAULT_CHROMIUM)
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=executable, headless=True)
        except Exception as exc:  # any launch failure means no browser here
            raise BrowserUnavailableError(
                f"Chromium at {executable} cannot start ({type(exc).__name__}); install "
                f"Debian's chromium or set {CHROMIUM_ENV}") from exc
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 980})
            page.set_default_timeout(60_000)
            page.goto(f"{url}/ui/")
            page.fill("#key", key)
            page.fill("#tenant", tenant)
            page.click("#connect-go")
            page.wait_for_selector("#subjects li")
            yield page
        finally:
            browser.close()


def tour(page: Any, subject: str, write_more: Callable[[], None], out: Path) -> list[Path]:
    """The tour's steps on a connected page; returns the screenshots saved."""
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []

    def shot(name: str) -> None:
        path = out / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        saved.append(path)

    page.click(f'#subjects li[data-subject="{subject}"]')
    page.wait_for_selector("#versions tbody tr")
    steps = int(page.get_attribute("#known-slider", "max") or 0) + 1
    write_more()  # the page follows the change feed: a new step appears on the slider
    page.wait_for_function(f"() => Number(document.querySelector('#known-slider').max) >= "
                           f"{steps}")
    shot("1-latest")
    page.focus("#known-slider")
    page.keyboard.press("Home")
    page.wait_for_function("() => document.querySelector('#versions').dataset.known === "
                           "document.querySelector('#known-label').dataset.known")
    shot("2-as-of-first-write")
    page.keyboard.press("End")
    page.fill("#search-text", "where will Ana live?")
    page.click("#search-go")
    page.wait_for_selector("#hits tbody tr")
    page.click("#hits tbody tr")
    page.wait_for_selector("#provenance:not([hidden])")
    shot("3-search-and-provenance")
    page.click("#forget-event")
    page.wait_for_selector('#forgets li[data-status="audited"]', timeout=120_000)
    page.wait_for_selector('#feed li[data-type="forgotten"]')
    versions = page.eval_on_selector_all("#versions tbody tr", "rows => rows.length")
    if versions:
        page.click("#versions tbody tr")
        page.wait_for_selector("#provenance:not([hidden])")
    shot("4-forget-audited")
    return saved
