"""An event's ``metadata``: a small, flat object of JSON scalars and lists of them.

The rule, checked at the edge like every other field (a bad object is an
:class:`~memstack.schemas.errors.InvalidEventError` naming ``metadata`` and the key, so the
pipeline dead-letters it and the service answers 422):

- at most :data:`MAX_KEYS` keys, each matching :data:`KEY_PATTERN` (a metadata key is also a
  filter's field name: :mod:`memstack.schemas.filters`);
- values: a string of at most :data:`MAX_STRING` characters, a finite number, a bool, null, or
  a list of at most :data:`MAX_LIST` of those (no objects, no nested lists);
- the whole object at most :data:`MAX_BYTES` bytes as compact JSON.

Metadata is content, not envelope: a sealed event carries it inside its ciphertext
(:mod:`memstack.foundation.sealing`), and the stores keep it on the rows derived from the
event as canonical JSON text (:func:`metadata_json`), erased with them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

MAX_KEYS = 32
MAX_STRING = 512
MAX_LIST = 32
MAX_BYTES = 4096
KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
_KEY = re.compile(KEY_PATTERN)

Scalar = str | int | float | bool | None
Value = Scalar | list[Scalar]
Metadata = dict[str, Value]

EMPTY_JSON = "{}"
"""What a row without metadata stores."""


def is_scalar(value: object) -> bool:
    """A metadata scalar: a string, a finite number, a bool or null."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    return isinstance(value, float) and math.isfinite(value)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(f"key {key!r} must match {KEY_PATTERN} (a letter or _, then up to 63 "
                         "letters, digits or _)")
    return key


def _check_scalar(key: str, value: object, where: str) -> None:
    if not is_scalar(value):
        raise ValueError(f"key '{key}'{where}: {type(value).__name__} is not allowed; use a "
                         "string, a finite number, a bool or null")
    if isinstance(value, str) and len(value) > MAX_STRING:
        raise ValueError(f"key '{key}'{where}: a string holds at most {MAX_STRING} characters, "
                         f"got {len(value)}")


def check_metadata(value: Any) -> Metadata:
    """``value`` when it obeys the rule above; else ``ValueError`` naming the key and rule."""
    if not isinstance(value, dict):
        raise ValueError(f"must be an object of keys to values, got {type(value).__name__}")
    if len(value) > MAX_KEYS:
        raise ValueError(f"holds at most {MAX_KEYS} keys, got {len(value)}")
    for key, item in value.items():
        check_key(key)
        if isinstance(item, list):
            if len(item) > MAX_LIST:
                raise ValueError(f"key '{key}': a list holds at most {MAX_LIST} items, "
                                 f"got {len(item)}")
            for i, element in enumerate(item):
                _check_scalar(key, element, f"[{i}]")
        else:
            _check_scalar(key, item, "")
    size = len(metadata_json(value).encode())
    if size > MAX_BYTES:
        raise ValueError(f"is {size} bytes as JSON; at most {MAX_BYTES} are allowed")
    return dict(value)


def metadata_json(metadata: Metadata | None) -> str:
    """Canonical JSON text of ``metadata`` (sorted keys, compact, UTF-8 kept): ``{}`` for none."""
    if not metadata:
        return EMPTY_JSON
    return json.dumps(metadata, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def metadata_of(text: str | None) -> Metadata:
    """The metadata a row's JSON text holds (``{}`` for none)."""
    if not text:
        return {}
    loaded: Metadata = json.loads(text)
    return loaded


_SCALAR_SCHEMA: list[dict[str, Any]] = [
    {"type": "string", "maxLength": MAX_STRING}, {"type": "number"}, {"type": "boolean"},
    {"type": "null"},
]
JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": MAX_KEYS,
    "propertyNames": {"pattern": KEY_PATTERN},
    "additionalProperties": {"anyOf": [
        *_SCALAR_SCHEMA,
        {"type": "array", "maxItems": MAX_LIST, "items": {"anyOf": _SCALAR_SCHEMA}},
    ]},
    "description": (f"Flat metadata: at most {MAX_KEYS} keys, values JSON scalars (strings of "
                    f"at most {MAX_STRING} characters) or lists of at most {MAX_LIST} of them, "
                    f"at most {MAX_BYTES} bytes as JSON. Sealed with the payload."),
}

MetadataField = Annotated[dict[str, Any], BeforeValidator(check_metadata),
                          WithJsonSchema(JSON_SCHEMA)]
"""The pydantic type of an event's ``metadata`` (validated by :func:`check_metadata`)."""
