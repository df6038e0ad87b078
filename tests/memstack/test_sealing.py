"""Crypto-shredding: sealed payloads open with their key and never without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.keystore import FileKeyStore, KeyScope, KeyStoreError
from memstack.foundation.sealing import Shredded, open_record, seal, seal_record
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event
from memstack.schemas.sealed import SealedEvent, envelope_bytes_of

B = EventBuilder(Defaults("acme", "bot"))


def test_sealed_round_trip_hides_the_payload(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    event = B.message("s1", "user", "my PIN is 4711", subject="user:ana")
    raw = seal(event, keys).to_json()
    assert b"4711" not in raw
    assert json.loads(raw)["session"] == "s1"  # the envelope stays readable for routing
    assert open_record(raw, keys) == event


@pytest.mark.parametrize("event", [
    B.message("s1", "user", "plain ascii"),
    B.note("sessão-ü/1", "texto com acentos: ç, ã, 中文, emoji \U0001f510, quote \" and \\",
           subject="user:zoë"),
    B.fact("s1", "user:ana", "lives_in", "Porto", valid_from="2026-01-01T00:00:00Z",
           valid_to="2026-06-01T00:00:00Z"),
    B.tool_call("s1", "search", "c1", {"q": "tab\there", "n": [1, 2.5, None]}),
])
def test_the_sealed_record_is_the_canonical_sealed_event(tmp_path: Path, event: Event) -> None:
    """seal_record writes the bytes without the model: they must be exactly what the model
    serializes them to, and open to the event."""
    keys = FileKeyStore(tmp_path)
    raw = seal_record(event, keys)
    model = SealedEvent.model_validate_json(raw)
    assert model.to_json() == raw
    assert model.envelope_bytes() == envelope_bytes_of(event)
    assert open_record(raw, keys) == event


def test_destroying_a_scope_shreds_only_that_scope(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    ana = seal(B.note("s1", "ana note", subject="user:ana"), keys).to_json()
    bob = seal(B.note("s1", "bob note", subject="user:bob"), keys).to_json()
    other_session = seal(B.note("s2", "ana elsewhere", subject="user:ana"), keys).to_json()
    destroyed = keys.destroy("acme", session="s1", subject="user:ana")
    assert len(destroyed) == 1
    assert isinstance(open_record(ana, keys), Shredded)
    assert not isinstance(open_record(bob, keys), Shredded)
    assert not isinstance(open_record(other_session, keys), Shredded)
    assert len(keys.destroy("acme", subject="user:ana")) == 1  # the s2 key
    assert isinstance(open_record(other_session, keys), Shredded)


def test_destroyed_key_leaves_no_file_and_a_new_key_follows(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    scope = KeyScope("acme", "s1", None)
    first, _ = keys.current(scope)
    keys.destroy("acme")
    assert list(tmp_path.rglob("*.key")) == []
    assert keys.get(first) is None
    second, _ = keys.current(scope)
    assert second != first


def test_a_retired_key_still_opens_but_no_longer_seals(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    scope = KeyScope("acme", "s1", None)
    old = seal(B.note("s1", "before the forget"), keys).to_json()
    first, _ = keys.current(scope)
    other = FileKeyStore(tmp_path)  # another process of the deployment, its cache warm
    other.current(scope)
    assert keys.retire("acme", session="s1") == [first]
    assert not isinstance(open_record(old, keys), Shredded)  # still readable
    assert keys.current(scope)[0] != first and other.current(scope)[0] != first
    assert first in keys.key_ids("acme")
    assert first in keys.destroy("acme", session="s1")  # destroy takes retired keys too
    assert isinstance(open_record(old, keys), Shredded)
    assert list(tmp_path.rglob("*.retired")) == []


def test_a_forget_that_never_reaches_the_log_destroys_nothing(tmp_path: Path) -> None:
    """rotate_before_request only retires: the data stays readable in the log until the
    forget processor applies the logged request (and destroys the retired keys then)."""
    from memstack.foundation.keystore import rotate_before_request
    from memstack.schemas.events import ForgetScope

    keys = FileKeyStore(tmp_path)
    raw = seal(B.note("s1", "kept if the forget fails"), keys).to_json()
    assert rotate_before_request(keys, "acme", ForgetScope(type="session", session="s1"))
    assert open_record(raw, keys) == open_record(raw, FileKeyStore(tmp_path))
    assert not isinstance(open_record(raw, keys), Shredded)


def test_moved_ciphertext_does_not_authenticate(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    raw = json.loads(seal(B.note("s1", "x"), keys).to_json())
    raw["agent"] = "mallory"  # the envelope is bound to the ciphertext as associated data
    with pytest.raises(InvalidEventError, match="does not authenticate"):
        open_record(json.dumps(raw).encode(), keys)


def test_sealed_without_key_store_is_a_clear_error(tmp_path: Path) -> None:
    raw = seal(B.note("s1", "x"), FileKeyStore(tmp_path)).to_json()
    with pytest.raises(InvalidEventError, match="no key store"):
        open_record(raw, None)


def test_a_key_caught_mid_shred_reads_as_destroyed(tmp_path: Path) -> None:
    # Regression: the live worker opened a record while a forget shredded its key (zeros
    # written, not yet unlinked) and the batch failed on "unreadable key file".
    keys = FileKeyStore(tmp_path)
    key_id, _ = keys.current(KeyScope("acme", "s1", None))
    path = next((tmp_path).rglob("*.key"))
    path.write_bytes(b"\0" * path.stat().st_size)  # the state _shred leaves before unlink
    assert keys.get(key_id) is None
    path.write_text("{not json")  # anything else unreadable stays a loud error
    with pytest.raises(KeyStoreError, match="unreadable key file"):
        keys.get(key_id)


def test_another_process_seals_with_the_scope_key_it_finds_without_a_scan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scope's live key is found through its pointer: another process reuses it, and a new
    scope costs one failed read, not a read of every key of the tenant (that scan made
    sealing quadratic in the sessions of a tenant: bench pipeline's emitter spent ~60 s of
    CPU in it on 5,000 events)."""
    keys = FileKeyStore(tmp_path)
    scopes = [KeyScope("acme", f"s{n}", "user:ana" if n % 2 else None) for n in range(50)]
    made = {scope: keys.current(scope)[0] for scope in scopes}

    def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("current() scanned the tenant's keys")

    monkeypatch.setattr(FileKeyStore, "_scan", no_scan)
    other = FileKeyStore(tmp_path)
    assert {scope: other.current(scope)[0] for scope in scopes} == made
    fresh = other.current(KeyScope("acme", "s-new", None))[0]
    assert fresh not in made.values()
    assert keys.current(KeyScope("acme", "s-new", None))[0] == fresh


def test_a_destroyed_scope_leaves_no_file_that_names_it(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    seal(B.note("session-of-zoe", "gone", subject="user:zoe"), keys)
    seal(B.note("kept-session", "kept"), keys)
    keys.destroy("acme", session="session-of-zoe")
    named = [p for p in tmp_path.rglob("*") if p.is_file() and b"zoe" in p.read_bytes()]
    assert named == []
    assert any(b"kept-session" in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_a_key_read_before_is_not_served_once_another_process_destroyed_it(
        tmp_path: Path) -> None:
    """``get`` answers keys it read before from memory (one stat per record), but only while
    their file exists: a key destroyed by another process reads as destroyed at once, and a
    retired one still opens."""
    writer, reader = FileKeyStore(tmp_path), FileKeyStore(tmp_path)
    raw = seal(B.note("s1", "held in a cache"), writer).to_json()
    other = seal(B.note("s2", "retired, still readable"), writer).to_json()
    assert not isinstance(open_record(raw, reader), Shredded)
    assert not isinstance(open_record(other, reader), Shredded)
    writer.retire("acme", session="s2")
    writer.destroy("acme", session="s1")
    assert isinstance(open_record(raw, reader), Shredded)
    assert not isinstance(open_record(other, reader), Shredded)
