"""What a client may ask of the warm replay service, checked before anything runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memstack.pipelines.replay.bounds import parse_point
from memstack.pipelines.replay.errors import BadPointError


class ReplayRequest(BaseModel):
    """One replay job: the same choices as ``memstack replay`` (the service's workers are
    always loopback workers of the service process, and its log is the service's own)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    into: str
    """The stores directory, an absolute path on the service's machine."""
    start: str = Field("earliest", alias="from")
    stop: str = Field("end", alias="to")
    parallelism: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=64)
    embed_batch: int = Field(1024, ge=1, le=65_536)
    prepare_key: Literal["record", "session"] = "record"
    send_dead_letters: bool = False
    honour_forget: bool = True

    @field_validator("into")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value or not Path(value).is_absolute():
            raise ValueError(f"{value!r} is not an absolute path; the service resolves no "
                             "relative paths (pass the stores directory's full path)")
        return value

    @field_validator("start", "stop")
    @classmethod
    def _point(cls, value: str) -> str:
        try:
            parse_point(value)
        except BadPointError as exc:
            raise ValueError(str(exc)) from exc
        return value

    def to_body(self) -> dict[str, object]:
        return self.model_dump(by_alias=True)
