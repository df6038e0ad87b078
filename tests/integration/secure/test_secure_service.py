"""The live service (``memstack serve``: Faust worker on aiokafka + HTTP) over SASL_SSL with
SCRAM-SHA-512 as the service principal: a write is acknowledged and a read ``after=`` it sees
it; the service's log holds no password."""

from __future__ import annotations

from pathlib import Path

from memstack import MemoryService
from tests.integration.secure.conftest import SecureTopics
from tests.service.conftest import KEYS, running_service


def test_the_service_writes_and_reads_over_sasl_ssl(secure_topics: SecureTopics,
                                                   tmp_path: Path) -> None:
    settings = secure_topics.settings("service")
    log = tmp_path / "serve.log"
    with running_service(settings, log) as service, \
            MemoryService(service.url, api_key=KEYS["acme"], tenant="acme") as memory:
        receipt = memory.fact("s1", "user:ana", "lives_in", "Porto")
        answer = memory.facts(subject="user:ana", after=receipt)
        assert [f.object for f in answer.facts] == ["Porto"]
    text = log.read_text(errors="replace")
    for user in secure_topics.kafka.security.users():
        assert secure_topics.kafka.security.password_file(user).read_text().strip() not in text
