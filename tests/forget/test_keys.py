"""Which keys a logged forget request destroys: its scope's keys created no later than the
request, retired (by the emitter's rotation) or still live; keys created after it stay."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from memstack.foundation.keystore import FileKeyStore, KeyScope, rotate_before_request
from memstack.operators.forget import ForgetRequest
from memstack.operators.log import LogPosition
from memstack.pipelines.forgetting.keys import destroy_for
from memstack.schemas.events import ForgetScope


def test_the_processor_destroys_the_retired_key_and_keeps_the_fresh_one(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path)
    scope = ForgetScope(type="session", session="s1")
    old, _ = keys.current(KeyScope("acme", "s1"))
    assert rotate_before_request(keys, "acme", scope) == [old]
    time.sleep(0.005)
    request = ForgetRequest("r1", "acme", scope, LogPosition(datetime.now(UTC), 0, 0))
    time.sleep(0.005)
    fresh, _ = keys.current(KeyScope("acme", "s1"))  # new data, sealed after the request
    assert destroy_for(keys, request) == [old]
    assert keys.get(old) is None and keys.get(fresh) is not None
