"""A read's metadata filter as the view takes it: the parsed filter, its JSON object or text.

The language is :mod:`memstack.schemas.filters`; its store forms are
:mod:`memstack.schemas.filter_sql` (LanceDB for search, DuckDB for records).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memstack.schemas.filters import And, Compare, Filter, FilterError, Not, Or, parse_filter
from memstack.view.errors import InvalidFilterError

FilterSpec = Filter | Mapping[str, Any] | str | None
"""What a view's ``filter=`` accepts."""


def as_filter(spec: FilterSpec) -> Filter | None:
    """The parsed filter of ``spec`` (None for none or ``{}``); a bad one raises
    :class:`InvalidFilterError` naming the field and the operator."""
    if spec is None:
        return None
    if isinstance(spec, Compare | And | Or | Not):
        parsed: Filter = spec
    else:
        try:
            parsed = parse_filter(spec)
        except FilterError as exc:
            raise InvalidFilterError(str(exc), exc.field, exc.op) from None
    return None if parsed == And(()) else parsed
