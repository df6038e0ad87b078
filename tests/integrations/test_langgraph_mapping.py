"""The pure mapping of LangGraph items onto memstack (no service): addresses, values, filters."""

from __future__ import annotations

import pytest

from memstack.integrations.langgraph_mapping import (
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


def test_address_round_trips_through_the_relation() -> None:
    for namespace, key in ((("acme", "user:ana"), "home"),
                           (("acme", "user:ana", "trip/2026"), "a b/c%"),):
        where = address(namespace, key)
        assert where.session == where.relation and where.session.startswith("lg/")
        assert where.session.count("/") == 2, "label and key are quoted"
        back = address_of("acme", namespace[1], where.relation)
        assert back == where and back.namespace == namespace


def test_namespaces_memstack_cannot_map_are_refused() -> None:
    with pytest.raises(NamespaceError, match="tenant, subject"):
        address(("acme",), "k")
    with pytest.raises(NamespaceError):
        address(("acme", "s", "l", "deep"), "k")
    assert address_of("acme", "s", "lives_in") is None


def test_values_and_index_text() -> None:
    obj = encode_value({"city": "Porto", "n": 2}, "note-1")
    assert decode_value(obj) == ({"city": "Porto", "n": 2}, "note-1")
    assert decode_value("Porto") is None and decode_value('{"v": 3}') is None
    value = {"city": "Porto", "tags": ["sea", "wine"], "meta": {"by": "ana"}, "n": 2}
    assert index_text(value, None) == "Porto\nana\nsea\nwine"  # every string, keys sorted
    assert index_text(value, ["meta.by", "n"]) == "ana\n2"


def test_filters_and_namespace_conditions() -> None:
    value = {"size": 5, "city": "Porto", "meta": {"ok": True}}
    assert matches(value, {"size": {"$gte": 5, "$lt": 6}, "city": "Porto", "meta.ok": True})
    assert not matches(value, {"size": {"$gt": 5}})
    assert not matches(value, {"missing": {"$gt": 1}})
    assert not matches(value, {"city": {"$gt": 3}}), "incomparable types do not match"
    ns = ("acme", "user:ana", "trips")
    assert namespace_matches(ns, "prefix", ("acme", "*"))
    assert namespace_matches(ns, "suffix", ("trips",))
    assert not namespace_matches(ns, "prefix", ("other",))


def test_positions_merge_by_the_larger_offset() -> None:
    assert merge_positions(None, "e0-3") == "e0-3"
    assert merge_positions("e0-3.e1-9", "e0-5.f0-1") == "e0-5.e1-9.f0-1"
