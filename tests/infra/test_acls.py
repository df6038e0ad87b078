"""The ACLs of memstack's roles, and ``memstack topics acls`` / ``create --dry-run``, which
need no broker."""

from __future__ import annotations

import argparse

import pytest

from memstack.infra.acls import acl_lines, role_acls
from memstack.jobs.commands import topics as topics_command


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="memstack")
    topics_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def test_the_agent_role_writes_and_cannot_read_or_forget() -> None:
    rules = role_acls("acme")["agent"]
    assert {r.name for r in rules} == {"acme.events", "acme.keys"}
    assert all(r.pattern == "LITERAL" and set(r.operations) == {"WRITE", "DESCRIBE"}
               for r in rules)


def test_the_service_role_reads_writes_and_joins_its_groups() -> None:
    by_resource = {r.resource: r for r in role_acls("acme")["service"]}
    assert {"READ", "WRITE", "DELETE"} <= set(by_resource["TOPIC"].operations)
    assert by_resource["TOPIC"].pattern == by_resource["GROUP"].pattern == "PREFIXED"
    assert by_resource["GROUP"].name == "acme"


def test_acl_lines_are_kafka_acls_commands() -> None:
    lines = acl_lines("acme", {"agent": "User:bot"})
    assert ("kafka-acls --add --allow-principal User:bot --operation Write --operation Describe "
            "--topic 'acme.events'") in lines
    assert any("--group 'acme' --resource-pattern-type prefixed" in line for line in lines)
    assert any("--operation DescribeConfigs --cluster" in line for line in lines)


def test_topics_acls_and_a_dry_run_print_without_a_broker(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MEMSTACK_TOPIC_PREFIX", "acme")
    monkeypatch.setenv("MEMSTACK_BOOTSTRAP", "127.0.0.1:1")
    assert run(["topics", "acls", "--service", "User:svc"]) == 0
    assert "--allow-principal User:svc" in capsys.readouterr().out
    assert run(["topics", "create", "--dry-run", "--replication-factor", "3"]) == 0
    out = capsys.readouterr().out
    assert "acme.events: 3 partitions, replication factor 3" in out
    assert "message.timestamp.type=LogAppendTime" in out
