"""LangGraph's ``BaseStore`` over a running memstack service (``memstack serve``).

>>> from langgraph.graph import StateGraph                                  # doctest: +SKIP
>>> store = MemstackStore("http://127.0.0.1:8765", api_key="...", tenant="acme")
>>> graph = StateGraph(State).add_node(...).compile(store=store)

Namespaces are ``(tenant, subject)`` or ``(tenant, subject, label)``; an item is a
single-valued fact in its own session, indexed for search by a note, and ``delete`` is a
forget request of that session (:mod:`memstack.integrations.langgraph_mapping` has the whole
mapping; docs/integrations.md). Every read waits for this store's own writes and forgets
(``after=`` the merged position), so a node reads what an earlier node wrote. As-of reads:
:meth:`MemstackStore.as_of` gives a read-only view at a valid time and a known time.

``abatch`` runs ``batch`` in a worker thread over the blocking HTTP client.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from memstack.foundation.errors import MemstackError
from memstack.integrations.langgraph_mapping import (
    ItemAddress,
    NamespaceError,
    address,
    address_of,
    decode_value,
    encode_value,
    index_text,
    matches,
    merge_positions,
    namespace_matches,
)
from memstack.service.calls import Time
from memstack.service.client import MemoryService
from memstack.service.types import ForgetReceipt
from memstack.view.types import Fact as FactVersion


class ReadOnlyStoreError(MemstackError):
    """An as-of view of the store is read-only: write through the store itself."""


@dataclass(frozen=True)
class _Current:
    """An item's current value as of the read's coordinates."""

    address: ItemAddress
    value: dict[str, Any]
    note_id: str | None
    version: FactVersion


@dataclass(frozen=True)
class _Coordinates:
    valid: Time | None = None
    known: Time | None = None


class MemstackStore(BaseStore):
    """A LangGraph store whose items are memstack facts, searchable, forgettable, as-of."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 tenant: str | None = None, agent: str = "langgraph",
                 service: MemoryService | None = None) -> None:
        self._url, self._api_key, self._agent = url, api_key, agent
        first = service or MemoryService(url, api_key, tenant=tenant, agent=agent,
                                         source="langgraph")
        self.tenant = first.tenant
        self._services: dict[str, MemoryService] = {first.tenant: first}
        self._lock = threading.Lock()
        self._position: str | None = None
        self._at = _Coordinates()
        self._writable = True
        self.forgets: list[ForgetReceipt] = []
        """The forget requests ``delete`` made, newest last (follow them with
        ``MemoryService.forget_status``)."""

    # -- the BaseStore contract ------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            validate_op_namespace(op)
            results.append(self._one(op))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _one(self, op: Op) -> Result:
        try:
            if isinstance(op, GetOp):
                return self._get(address(op.namespace, op.key))
            if isinstance(op, PutOp):
                value = None if op.value is None else dict(op.value)
                self._put(address(op.namespace, op.key), value, op.index)
                return None
            if isinstance(op, SearchOp):
                return self._search(op)
            if isinstance(op, ListNamespacesOp):
                return self._list_namespaces(op)
        except NamespaceError as exc:
            raise InvalidNamespaceError(str(exc)) from exc
        raise TypeError(f"unknown store operation {type(op).__name__}")

    # -- memstack extensions -----------------------------------------------------------------

    def as_of(self, *, valid: Time | None = None, known: Time | None = None) -> MemstackStore:
        """A read-only view of the same memory at valid time ``valid`` as known at ``known``
        (an aware datetime, a date, RFC 3339 text, or a log cut ``0:120,1:98``)."""
        view = object.__new__(MemstackStore)
        view.__dict__.update(self.__dict__)
        view._at, view._writable = _Coordinates(valid, known), False
        return view

    def put_valid(self, namespace: tuple[str, ...], key: str, value: dict[str, Any], *,
                  valid_from: datetime, valid_to: datetime | None = None,
                  index: Literal[False] | list[str] | None = None) -> None:
        """``put`` with the value's valid time given (e.g. "Ana lived in Lisbon from 2019")."""
        self._put(address(namespace, key), value, index, valid_from=valid_from,
                  valid_to=valid_to)

    def history(self, namespace: tuple[str, ...], key: str) -> list[FactVersion]:
        """Every bitemporal version of an item (as known at the view's known time)."""
        where = address(namespace, key)
        answer = self._service(where.tenant).history(
            where.subject, where.relation, valid=self._at.valid, known=self._at.known,
            after=self._position)
        return answer.versions

    @property
    def position(self) -> str | None:
        """The merged position of this store's writes and forgets (reads wait for it)."""
        return self._position

    def close(self) -> None:
        for service in self._services.values():
            service.close()

    # -- operations --------------------------------------------------------------------------

    def _service(self, tenant: str) -> MemoryService:
        with self._lock:
            if tenant not in self._services:
                self._services[tenant] = MemoryService(self._url, self._api_key, tenant=tenant,
                                                       agent=self._agent, source="langgraph")
            return self._services[tenant]

    def _advance(self, position: str) -> None:
        with self._lock:
            self._position = merge_positions(self._position, position)

    def _put(self, where: ItemAddress, value: dict[str, Any] | None,
             index: Literal[False] | list[str] | None, **times: Any) -> None:
        if not self._writable:
            raise ReadOnlyStoreError("this is an as-of view; write through the store itself")
        service = self._service(where.tenant)
        if value is None:
            self._delete(service, where)
            return
        events = []
        note_id = None
        if index is not False:
            note = service.events.note(where.session, index_text(value, index),
                                       subject=where.subject, **times)
            events.append(note)
            note_id = note.event_id
        events.append(service.events.fact(where.session, where.subject, where.relation,
                                          encode_value(value, note_id), **times))
        self._advance(service.emit_many(events).position)

    def _delete(self, service: MemoryService, where: ItemAddress) -> None:
        receipt = service.forget({"type": "session", "session": where.session},
                                 reason=f"LangGraph store delete of {where.namespace}/{where.key}")
        with self._lock:
            self.forgets.append(receipt)
        self._advance(receipt.position)

    def _current(self, tenant: str, subject: str | None,
                 relation: str | None = None) -> dict[ItemAddress, _Current]:
        answer = self._service(tenant).facts(subject, relation, valid=self._at.valid,
                                             known=self._at.known, after=self._position)
        items: dict[ItemAddress, _Current] = {}
        for fact in answer.facts:
            where = address_of(tenant, fact.subject, fact.relation)
            decoded = decode_value(fact.object)
            if where is not None and decoded is not None:
                items[where] = _Current(where, decoded[0], decoded[1], fact)
        return items

    def _created(self, tenant: str, subjects: Iterable[str]) -> dict[tuple[str, str], datetime]:
        """When each item of these subjects got its first value (its earliest version)."""
        first: dict[tuple[str, str], datetime] = {}
        for subject in set(subjects):
            answer = self._service(tenant).history(subject, known=self._at.known,
                                                   after=self._position)
            for v in answer.versions:
                key = (subject, v.relation)
                first[key] = min(first.get(key, v.tt_from), v.tt_from)
        return first

    def _item(self, current: _Current, created: dict[tuple[str, str], datetime],
              score: float | None = None, *, search: bool = False) -> Item:
        where, updated = current.address, current.version.tt_from
        made = created.get((where.subject, where.relation), updated)
        if search:
            return SearchItem(where.namespace, where.key, current.value, made, updated, score)
        return Item(value=current.value, key=where.key, namespace=where.namespace,
                    created_at=made, updated_at=updated)

    def _get(self, where: ItemAddress) -> Item | None:
        found = self._current(where.tenant, where.subject, where.relation).get(where)
        if found is None:
            return None
        return self._item(found, self._created(where.tenant, [where.subject]))

    def _scope(self, prefix: tuple[str, ...]) -> tuple[str, str | None, str | None]:
        if len(prefix) > 3:
            raise NamespaceError(f"namespace prefix {prefix} is deeper than "
                                 "(tenant, subject, label)")
        tenant = prefix[0] if prefix else self.tenant
        return tenant, prefix[1] if len(prefix) > 1 else None, \
            prefix[2] if len(prefix) > 2 else None

    def _search(self, op: SearchOp) -> list[SearchItem]:
        tenant, subject, label = self._scope(op.namespace_prefix)
        items = {a: c for a, c in self._current(tenant, subject).items()
                 if (label is None or a.label == label) and matches(c.value, op.filter)}
        ranked: list[tuple[_Current, float | None]]
        if op.query:
            ranked = self._ranked(tenant, subject, op, items)
        else:
            ranked = [(c, None) for c in sorted(items.values(),
                                                key=lambda c: c.version.tt_from, reverse=True)]
        page = ranked[op.offset:op.offset + op.limit]
        created = self._created(tenant, {c.address.subject for c, _ in page})
        return [self._item(c, created, score, search=True)  # type: ignore[misc]  # a SearchItem
                for c, score in page]

    def _ranked(self, tenant: str, subject: str | None, op: SearchOp,
                items: dict[ItemAddress, _Current]) -> list[tuple[_Current, float | None]]:
        """Notes found by memstack's hybrid search, kept while they index a current value."""
        by_note = {c.note_id: c for c in items.values() if c.note_id is not None}
        k = max(10, 4 * (op.offset + op.limit))
        hits = self._service(tenant).search(op.query or "", k, kinds=["note"], subject=subject,
                                            valid=self._at.valid, known=self._at.known,
                                            after=self._position).hits
        ranked: list[tuple[_Current, float | None]] = []
        for hit in hits:
            current = by_note.pop(hit.event_id, None)
            if current is not None:
                ranked.append((current, hit.score.fused))
        return ranked

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        for tenant in list(self._services):
            for where in self._current(tenant, None):
                namespace = where.namespace
                if all(namespace_matches(namespace, c.match_type, c.path)
                       for c in op.match_conditions or ()):
                    found.add(namespace[:op.max_depth] if op.max_depth else namespace)
        return sorted(found)[op.offset:op.offset + op.limit]


__all__ = ["MemstackStore", "ReadOnlyStoreError"]

