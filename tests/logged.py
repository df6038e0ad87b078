"""Reading a test's events back from the log as a reader of the deployment does: sealed records
(the default) are opened with the deployment's key store under ``settings.home``."""

from __future__ import annotations

from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.sealing import Shredded, open_record
from memstack.foundation.settings import Settings
from memstack.schemas.events import Event


def open_logged(settings: Settings, raw: bytes | None) -> Event:
    """The event a record of ``settings``'s events topic holds (opened when sealed); a record
    whose key a forget destroyed fails the test."""
    opened = open_record(raw or b"", FileKeyStore(settings.keys_dir))
    assert not isinstance(opened, Shredded), f"shredded record {opened.envelope.event_id}"
    return opened
