"""Export a tenant's events, import them into a fresh deployment, and prove it is the same memory.

The source deployment (sealed payloads) holds two tenants; some of ``acme``'s events are
forgotten (a session - crypto-shredded -, one event, one fact key). ``memstack export`` writes
``acme``'s events without the forgotten ones, with their original times; ``memstack import``
re-emits them into a fresh topic prefix, and a second import sends nothing.

Why the comparison is meaningful: the source's stores are *rebuilt from its log honouring the
forget ledger* (the same projector as live and replay), so they hold exactly the non-forgotten
events; the destination's stores are built from the imported log. Log positions and
transaction times differ between the two logs by construction, so ``memstack verify
--portable`` compares what must not differ: records and fact entries without log columns, the
current fact versions, memory rows, vectors within 1e-4. The plain ``verify`` tells them apart
(other log), and a rebuild of the source that ignores the ledger is DIFFERENT: the comparison
can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.infra.topics import ensure_topics
from memstack.jobs.run import worker_env
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.log_reader import read_bounded
from memstack.pipelines.rebuild import rebuild
from memstack.schemas.events import parse_event
from tests.conftest import TEST_PARTITIONS
from tests.logged import open_logged

SECRET = "the safe combination is 4471"
FORGOTTEN_ONE = "I secretly dislike the office coffee"


def cli(settings: Settings, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "memstack.cli", *args], capture_output=True,
                          text=True, env=worker_env(settings), timeout=300)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def fresh(settings: Settings, home: Path) -> Settings:
    prefix = f"t-import-{uuid.uuid4().hex[:8]}"
    ensure_topics(settings.bootstrap, prefix, TEST_PARTITIONS)
    return settings.with_(topic_prefix=prefix, home=home, seal=False)


def write_source(settings: Settings) -> dict[str, str]:
    keys = FileKeyStore(settings.keys_dir)
    ids: dict[str, str] = {}
    with MemoryClient("acme", "bot", settings=settings, keys=keys) as client:
        ids["keep"] = client.message("s-keep", "user", "I water the basil every 3 days",
                                     occurred_at=datetime(2026, 5, 1, 9, tzinfo=UTC)).event_id
        ids["one"] = client.message("s-keep", "user", FORGOTTEN_ONE).event_id
        client.note("s-keep", "user likes tea", subject="user:ana")
        ids["lisbon"] = client.fact("s-keep", "user:ana", "lives_in", "Lisbon",
                                    valid_from=datetime(2019, 5, 1, tzinfo=UTC)).event_id
        client.fact("s-keep", "user:ana", "lives_in", "Porto",
                    valid_from=datetime(2026, 4, 1, tzinfo=UTC))
        client.fact("s-keep", "user:ana", "salary", "100k")
        ids["secret"] = client.message("s-gone", "user", SECRET).event_id
        client.message("s-x", "user", "another tenant's line", tenant="other")
        client.flush()
        client.forget({"type": "session", "session": "s-gone"}, reason="user asked")
        client.forget({"type": "event", "event_id": ids["one"]}, reason="user asked")
        client.forget({"type": "fact", "subject": "user:ana", "relation": "salary"})
        client.flush()
        time.sleep(0.01)  # log times are ms: a tie with the request counts as covered
        ids["after"] = client.message("s-gone", "user", "a new talk after the forget").event_id
    return ids


@pytest.mark.timeout(900)
def test_export_import_verify_equal(topics: Settings, tmp_path: Path) -> None:
    ids = write_source(topics)
    exported = tmp_path / "acme.jsonl"
    done = cli(topics, "export", "--tenant", "acme", "-o", str(exported))
    assert "export acme:" in done.stderr, "progress goes to stderr"
    summary = json.loads(done.stdout)
    skipped = summary["skipped"]
    assert skipped.get("forgotten", 0) + skipped.get("shredded", 0) == 3, skipped
    assert skipped["other_tenant"] == 1

    events = [parse_event(line) for line in exported.read_text().splitlines()]
    by_id = {e.event_id: e for e in events}
    assert ids["secret"] not in by_id and ids["one"] not in by_id
    assert SECRET not in exported.read_text() and FORGOTTEN_ONE not in exported.read_text()
    assert "salary" not in exported.read_text() and "other" not in {e.tenant for e in events}
    assert ids["after"] in by_id and ids["keep"] in by_id
    assert by_id[ids["keep"]].occurred_at == datetime(2026, 5, 1, 9, tzinfo=UTC)
    assert by_id[ids["lisbon"]].valid_from == datetime(2019, 5, 1, tzinfo=UTC)

    target = fresh(topics, tmp_path / "target-home")
    first = json.loads(cli(target, "import", str(exported)).stdout)
    assert first == {"read": len(events), "sent": len(events), "already_there": 0}
    again = json.loads(cli(target, "import", str(exported)).stdout)
    assert again == {"read": len(events), "sent": 0, "already_there": len(events)}
    logged = [r for r in read_bounded(target.bootstrap, target.events_topic)]
    assert len(logged) == len(events), "a second import must add nothing to the log"

    source_keys = FileKeyStore(topics.keys_dir)
    ledger = ForgetLedger.load(topics.bootstrap, topics.forget_topic)
    rebuild(topics.bootstrap, topics.events_topic, tmp_path / "source", keys=source_keys,
            forgotten=ledger)
    rebuild(target.bootstrap, target.events_topic, tmp_path / "target",
            keys=FileKeyStore(target.keys_dir))
    rebuild(topics.bootstrap, topics.events_topic, tmp_path / "unforgetting", keys=source_keys)

    verify = cli(topics, "verify", str(tmp_path / "source"), str(tmp_path / "target"),
                 "--portable", "--tenant", "acme", "--json")
    assert json.loads(verify.stdout)["equal"] is True
    plain = cli(topics, "verify", str(tmp_path / "source"), str(tmp_path / "target"),
                check=False)
    assert plain.returncode == 1, "other logs: positions and transaction times differ"
    wrong = cli(topics, "verify", str(tmp_path / "unforgetting"), str(tmp_path / "target"),
                "--portable", "--tenant", "acme", check=False)
    assert wrong.returncode == 1 and "DIFFERENT" in wrong.stdout


MEM0_EXPORT = {
    "count": 2, "next": None, "previous": None,
    "results": [
        {"id": "3c90c3cc-0d44-4b50-8888-8dd25736052a", "memory": "Dev works at TechCorp",
         "user_id": "dev", "agent_id": None, "app_id": None, "run_id": None,
         "hash": "9f1d", "metadata": {"type": "professional"}, "categories": ["work"],
         "created_at": "2025-03-01T10:00:00-08:00", "updated_at": "2025-03-02T10:00:00-08:00"},
        {"id": "a1b2c3d4-0000-4000-8000-000000000002",
         "memory": "Prefers morning meetings", "user_id": "arjun", "agent_id": "planner",
         "run_id": "run-7", "metadata": None, "created_at": "2025-04-01T08:30:00Z",
         "updated_at": "2025-04-01T08:30:00Z"},
    ],
}


def test_mem0_export_imports_into_events(topics: Settings, tmp_path: Path) -> None:
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(MEM0_EXPORT))
    first = json.loads(cli(topics, "import", "--format", "mem0", str(path), "--tenant",
                           "acme").stdout)
    assert first["sent"] == 4 and first["already_there"] == 0  # 2 notes, 2 metadata facts
    again = json.loads(cli(topics, "import", "--format", "mem0", str(path), "--tenant",
                           "acme").stdout)
    assert again["sent"] == 0 and again["already_there"] == 4
    logged = [open_logged(topics, r.value) for r in read_bounded(topics.bootstrap,
                                                                  topics.events_topic)]
    notes = {e.payload.text: e for e in logged if e.kind == "note"}  # type: ignore[union-attr]
    dev = notes["Dev works at TechCorp"]
    assert dev.tenant == "acme" and dev.subject == "user:dev" and dev.session == "mem0-dev"
    assert dev.occurred_at == datetime(2025, 3, 1, 18, tzinfo=UTC)
    assert dev.provenance.source == "mem0:3c90c3cc-0d44-4b50-8888-8dd25736052a"
    assert dev.provenance.authority == "import"
    arjun = notes["Prefers morning meetings"]
    assert (arjun.agent, arjun.session, arjun.subject) == ("planner", "run-7", "user:arjun")
    facts = {(e.subject, e.payload.relation): e.payload.object  # type: ignore[union-attr]
             for e in logged if e.kind == "fact_asserted"}
    mem = "mem0:3c90c3cc-0d44-4b50-8888-8dd25736052a"
    assert facts == {(mem, "metadata.type"): "professional", (mem, "categories"): '["work"]'}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"id": "x", "memory": ""}]}))
    refused = cli(topics, "import", "--format", "mem0", str(bad), "--tenant", "acme",
                  check=False)
    assert refused.returncode == 2 and "[0].memory" in refused.stderr
