"""What the warm replay service accepts (pure: no service started)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstack.jobs.replay_service.client import ReplayServiceError, submit
from memstack.jobs.replay_service.request import ReplayRequest
from memstack.jobs.replay_service.server import _first_error


def test_defaults_follow_memstack_replay() -> None:
    request = ReplayRequest.model_validate({"into": "/srv/stores"})
    body = request.to_body()
    assert body["from"] == "earliest" and body["to"] == "end"
    assert body["honour_forget"] is True and body["send_dead_letters"] is False
    assert ReplayRequest.model_validate(body) == request  # the wire form round-trips


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"into": "stores"}, "into", "absolute path"),
    ({"into": "/s", "from": "last tuesday"}, "from", "not a replay point"),
    ({"into": "/s", "to": "2026-03-02T09:00:00"}, "to", "no zone"),
    ({"into": "/s", "parallelism": 0}, "parallelism", "greater than or equal to 1"),
    ({"into": "/s", "prepare_key": "tenant"}, "prepare_key", "record"),
    ({"into": "/s", "flink": "host:1"}, "flink", "not permitted"),
    ({}, "into", "required"),
])
def test_a_bad_request_names_its_field(body: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ReplayRequest.model_validate(body)
    where, detail = _first_error(caught.value)
    assert where == field and detail.startswith(f"{field}: ") and words in detail


def test_a_service_url_must_be_http_host_port() -> None:
    request = ReplayRequest.model_validate({"into": "/s"})
    with pytest.raises(ReplayServiceError, match="http://HOST:PORT"):
        submit("127.0.0.1:8766", request)


def test_no_service_at_the_url_says_how_to_start_one() -> None:
    from memstack.infra.net import free_port_pair

    port, _ = free_port_pair()
    with pytest.raises(ReplayServiceError, match="memstack replay-service"):
        submit(f"http://127.0.0.1:{port}", ReplayRequest.model_validate({"into": "/s"}))
