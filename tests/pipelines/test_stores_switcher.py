"""The service's stores switch on real stores, without a broker: switched, refused, later.

The live projector serves stores built with ONNX int8; targets are built from the same records
with torch (switched: the projector, the shared encoder and the hooks move), from records whose
content differs at the same offsets (refused: the pointer goes back, nothing moves), and from
one record more than live applied (later: retried once the worker caught up).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.foundation.settings import Settings
from memstack.pipelines.embedding import CachingEncoder, MiniLMEncoder, make_encoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.replay.switch import current_stores, switch_stores
from memstack.pipelines.service.switching import StoresSwitcher, SwitchHooks
from memstack.pipelines.stores.bundle import Stores
from tests.pipelines.helpers import builder, record


def message(text: str, tt: int) -> LogRecord:
    return record(builder().message("s1", "user", text), tt)


def records() -> list[LogRecord]:
    texts = [f"Ana talks about her garden {i}" for i in range(4)] + ["Ana moved to Porto"]
    return [message(t, tt) for tt, t in enumerate(texts)]


def build(directory: Path, encoder: object, topic: str, recs: list[LogRecord]) -> Path:
    with Stores.open(directory) as stores:
        projector = StoreProjector(stores, encoder, topic)  # type: ignore[arg-type]
        projector.commit(projector.prepare(recs))
    return directory


@pytest.fixture(scope="module")
def torch_encoder() -> MiniLMEncoder:
    return MiniLMEncoder().load()


def test_switched_refused_and_later(tmp_path: Path, torch_encoder: MiniLMEncoder) -> None:
    settings = Settings(home=tmp_path)
    topic = settings.events_topic
    int8 = make_encoder("onnx-int8").load()
    log = records()
    live_dir = build(settings.stores_dir / "live", int8, topic, log)
    shared = CachingEncoder(int8)
    base = StoreProjector(Stores.open(live_dir), shared, topic)
    moved: list[Path] = []
    hooks = SwitchHooks(None, [lambda stores: moved.append(stores.directory)])
    switcher = StoresSwitcher(settings, base, shared, on_store=lambda f, *a: f(*a),
                              apply_forgets=lambda target, encoder: 0, hooks=hooks)

    other = [*log[:-1], message("Ana moved to Faro", 4)]  # the same offsets, other content
    differing = build(tmp_path / "differing", torch_encoder, topic, other)
    switch_stores(settings, differing)
    refused = switcher.switch(differing, torch_encoder)
    assert refused.status == "refused" and "records" in (refused.reason or "")
    assert current_stores(settings) == live_dir.resolve(), "the pointer goes back"
    assert base.stores.directory == live_dir and shared.name.endswith("onnx-int8") and not moved

    ahead = build(tmp_path / "ahead", torch_encoder, topic, [*log, message("one more", 5)])
    assert switcher.switch(ahead, torch_encoder).status == "later"

    target = build(tmp_path / "torch", torch_encoder, topic, log)
    old = base.stores
    switched = switcher.switch(target, torch_encoder)
    assert switched.status == "switched", switched
    assert switched.comparison["equal"] is True and switched.encoder == "all-MiniLM-L6-v2"
    assert base.stores.directory == target and moved == [target]
    assert shared.name == "all-MiniLM-L6-v2"
    with pytest.raises(Exception):  # noqa: B017  # the old stores were closed
        old.events.counts()
    base.stores.close()
