"""LangGraph's own StateGraph runs against memstack through ``MemstackStore`` (real service).

A graph of plain Python nodes (no LLM) writes an item, reads it back and searches it; a
second run supersedes the value (as-of reads still see the first); a third graph deletes it,
and the forget request that ``delete`` filed is followed to its audit: the content is gone
from every read and from memstack's own search.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from memstack.integrations.langgraph import MemstackStore, ReadOnlyStoreError
from memstack.service.client import MemoryService
from tests.service.conftest import KEYS, Service


class Turn(TypedDict, total=False):
    user: str
    city: str
    recalled: str | None
    found: list[str]


def remember(state: Turn, *, store: BaseStore) -> Turn:
    store.put(("acme", state["user"], "profile"), "home",
              {"city": state["city"], "text": f"{state['user']} lives in {state['city']}"})
    return {}


def recall(state: Turn, *, store: BaseStore) -> Turn:
    item = store.get(("acme", state["user"], "profile"), "home")
    hits = store.search(("acme", state["user"]), query="which city does the user live in")
    return {"recalled": None if item is None else item.value["city"],
            "found": [f"{h.key}:{h.value['city']}" for h in hits]}


def forget(state: Turn, *, store: BaseStore) -> Turn:
    store.delete(("acme", state["user"], "profile"), "home")
    return {}


def graph(store: BaseStore, *nodes: object) -> object:
    builder = StateGraph(Turn)
    previous = START
    for node in nodes:
        name = node.__name__  # type: ignore[attr-defined]
        builder.add_node(name, node)  # type: ignore[call-overload]
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile(store=store)


@pytest.fixture
def store(service: Service) -> MemstackStore:
    memory = MemstackStore(service.url, api_key=KEYS["acme"], tenant="acme")
    yield memory  # type: ignore[misc]
    memory.close()


def test_graph_writes_reads_supersedes_and_forgets(service: Service,
                                                  store: MemstackStore) -> None:
    user = f"user:{uuid.uuid4().hex[:8]}"
    run = graph(store, remember, recall)
    first = run.invoke({"user": user, "city": "Lisbon"})  # type: ignore[attr-defined]
    assert first["recalled"] == "Lisbon"
    assert first["found"] == ["home:Lisbon"]
    between = datetime.now(UTC)
    time.sleep(0.05)
    second = run.invoke({"user": user, "city": "Porto"})  # type: ignore[attr-defined]
    assert second["recalled"] == "Porto"
    assert second["found"] == ["home:Porto"], "a superseded value's note must not be a hit"

    namespace = ("acme", user, "profile")
    before = store.as_of(known=between).get(namespace, "home")
    assert before is not None and before.value["city"] == "Lisbon"
    assert [v.tt_to is None for v in store.history(namespace, "home")].count(True) >= 1
    assert namespace in store.list_namespaces(prefix=("acme", user))
    item = store.get(namespace, "home")
    assert item is not None and item.created_at < item.updated_at
    with pytest.raises(ReadOnlyStoreError):
        store.as_of(known=between).put(namespace, "x", {"a": 1})

    gone = graph(store, forget, recall).invoke({"user": user})  # type: ignore[attr-defined]
    assert gone["recalled"] is None and gone["found"] == []
    receipt = store.forgets[-1]
    with MemoryService(service.url, KEYS["acme"], tenant="acme") as memory:
        status = _audited(memory, receipt.request_id)
        assert status.audit is not None
        for text in ("Lisbon", "Porto"):
            hits = memory.search(f"{user} lives in {text}", k=50, subject=user,
                                 after=receipt).hits
            assert hits == [], f"{text} is still searchable after the forget"
        assert memory.facts(subject=user, after=receipt).facts == []
    assert namespace not in store.list_namespaces(prefix=("acme", user))


def test_filters_labels_and_async(service: Service, store: MemstackStore) -> None:
    import asyncio

    user = f"user:{uuid.uuid4().hex[:8]}"
    for key, city, size in (("a", "Lisbon", 3), ("b", "Porto", 5), ("c", "Faro", 8)):
        store.put(("acme", user, "trips"), key, {"city": city, "size": size})
    store.put(("acme", user), "plain", {"note": "no label"}, index=False)
    big = store.search(("acme", user, "trips"), filter={"size": {"$gte": 5}})
    assert sorted(i.key for i in big) == ["b", "c"]
    assert [i.key for i in store.search(("acme", user), filter={"city": "Faro"})] == ["c"]
    assert store.get(("acme", user), "plain") is not None
    assert all(i.key != "plain" for i in store.search(("acme", user), query="no label")), \
        "an item put with index=False is not searchable"
    names = store.list_namespaces(prefix=("acme", user))
    assert names == [("acme", user), ("acme", user, "trips")]
    assert store.list_namespaces(prefix=("acme", user), max_depth=2) == [("acme", user)]
    got = asyncio.run(store.aget(("acme", user, "trips"), "b"))
    assert got is not None and got.value["city"] == "Porto"


def _audited(memory: MemoryService, request_id: str, timeout_s: float = 60.0) -> object:
    deadline = time.monotonic() + timeout_s
    status = memory.forget_status(request_id)
    while status.status != "audited" and time.monotonic() < deadline:
        time.sleep(0.2)
        status = memory.forget_status(request_id)
    assert status.status == "audited", status
    assert status.audit is not None and status.audit["passed"] is True, status.audit
    return status
