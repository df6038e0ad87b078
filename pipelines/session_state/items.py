"""What a session state is made of: items (one term per event), keyed by session.

An item is built from a logged event (:func:`item_of`) or, at forget time, from the stores'
rows; :func:`applied` says whether a state already holds it (its offset marks);
:func:`runs_within` cuts a batch into runs an arena of a given capacity can hold at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from memstack.operators.log import LoggedEvent
from memstack.operators.session_state.keys import ItemTexts, item_texts
from memstack.schemas.events import Envelope


def session_key(tenant: str, session: str) -> str:
    return f"{tenant}/{session}"


def runs_within(events: Sequence[LoggedEvent], sessions: int) -> Iterator[
        Sequence[LoggedEvent]]:
    """``events`` in order, cut into runs that touch at most ``sessions`` sessions each."""
    start, keys = 0, set[str]()
    for n, logged in enumerate(events):
        key = key_of(logged.event)
        if key not in keys and len(keys) == sessions:
            yield events[start:n]
            start, keys = n, set[str]()
        keys.add(key)
    if start < len(events):
        yield events[start:]


def key_of(event: Envelope) -> str:
    return session_key(event.tenant, event.session)


@dataclass(frozen=True)
class StateItem:
    """One term of a session state: its event's place in the log and its key/value texts.

    Built from a logged event (:func:`item_of`) or, at forget time, from the stores' rows
    (``memstack.pipelines.forgetting.session_state_store``).
    """

    event_id: str
    tenant: str
    session: str
    partition: int
    offset: int
    log_time: float
    """POSIX seconds of the event's log time."""
    texts: ItemTexts
    vector: npt.NDArray[np.float32] | None = field(default=None, compare=False, repr=False)
    """A turn's stored embedding (its key and value), when the stores kept the very vector the
    state added; without it the texts are embedded again (the model's batch noise)."""

    def __post_init__(self) -> None:
        if self.vector is not None and self.texts.key_text != self.texts.value_text:
            raise ValueError(f"item {self.event_id}: a stored vector stands for key and value, "
                             "so it fits turns only (key text = value text)")

    @property
    def key(self) -> str:
        return session_key(self.tenant, self.session)


def item_of(logged: LoggedEvent) -> StateItem | None:
    """The item ``logged`` adds to its session's state, None for kinds the state skips."""
    texts = item_texts(logged.event)
    if texts is None:
        return None
    event, pos = logged.event, logged.position
    return StateItem(event.event_id, event.tenant, event.session, pos.partition, pos.offset,
                     pos.log_time.timestamp(), texts)


def by_key(items: Iterable[StateItem]) -> dict[str, list[StateItem]]:
    """Items per session, each event once."""
    out: dict[str, dict[str, StateItem]] = {}
    for item in items:
        out.setdefault(item.key, {}).setdefault(item.event_id, item)
    return {key: list(group.values()) for key, group in out.items()}


def applied(item: StateItem, marks: Mapping[str, int]) -> bool:
    """True when the state has applied ``item``'s log position (it is below the marks)."""
    return item.offset < marks.get(f"p{item.partition}", 0)
