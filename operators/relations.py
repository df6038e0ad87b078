"""Which relations are single-valued and which are multi-valued.

Default: a relation is **single-valued** (``lives_in``, ``works_at``, ``email``): at any valid
time a subject has at most one value, and a new fact supersedes the old one. A relation declared
**multi-valued** (``likes``, ``knows``, ...) keeps one presence/absence timeline per object, so
values coexist; a retraction removes the named value (or all values when it names none).

The registry is part of the derivation: changing it changes the versions derived from the same
log, so a changed registry calls for a replay of the fact index.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.foundation.errors import MemstackError

log = logging.getLogger(__name__)

DEFAULT_MULTI_VALUED: frozenset[str] = frozenset(
    {"likes", "dislikes", "has_skill", "knows", "member_of", "visited", "speaks", "owns"}
)
"""Relations multi-valued out of the box; every other relation is single-valued."""


class RelationConfigError(MemstackError, ValueError):
    """The relation registry config is malformed.

    Expected JSON like ``{"multi_valued": ["likes", "knows"], "single_valued": ["lives_in"]}``;
    fix the file (or dict) named in the message and restart.
    """


@dataclass(frozen=True)
class RelationRegistry:
    """Declares the multi-valued relations; everything else is single-valued."""

    multi_valued: frozenset[str] = DEFAULT_MULTI_VALUED

    def is_multi(self, relation: str) -> bool:
        return relation in self.multi_valued

    def with_multi(self, relations: Iterable[str]) -> RelationRegistry:
        return RelationRegistry(self.multi_valued | frozenset(relations))

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, base: RelationRegistry | None = None
    ) -> RelationRegistry:
        """Build from ``{"multi_valued": [...], "single_valued": [...]}`` (both optional).

        Names in ``multi_valued`` are added to ``base`` (the defaults unless given); names in
        ``single_valued`` are removed from it, so a default can be overridden.
        """
        unknown = set(data) - {"multi_valued", "single_valued"}
        if unknown:
            raise RelationConfigError(
                f"unknown keys {sorted(unknown)}; allowed: 'multi_valued', 'single_valued'"
            )
        multi = _names(data, "multi_valued")
        single = _names(data, "single_valued")
        both = multi & single
        if both:
            raise RelationConfigError(
                f"relations {sorted(both)} are declared both single- and multi-valued"
            )
        start = (base or cls()).multi_valued
        registry = cls((start | multi) - single)
        log.info("relation registry: %d multi-valued relations", len(registry.multi_valued))
        return registry

    @classmethod
    def from_json(cls, text: str, *, base: RelationRegistry | None = None) -> RelationRegistry:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RelationConfigError(f"relation registry is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise RelationConfigError("relation registry JSON must be an object")
        return cls.from_dict(data, base=base)

    @classmethod
    def from_file(cls, path: Path, *, base: RelationRegistry | None = None) -> RelationRegistry:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RelationConfigError(f"cannot read relation registry {path}: {exc}") from exc
        try:
            return cls.from_json(text, base=base)
        except RelationConfigError as exc:
            raise RelationConfigError(f"{path}: {exc}") from exc


def _names(data: Mapping[str, Any], key: str) -> frozenset[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RelationConfigError(f"'{key}' must be a list of non-empty relation names")
    return frozenset(value)
