"""The Kafka admin tools over log directories: ``topics`` (kafka-topics' --alter, regex topics,
--if-exists/--if-not-exists, --replication-factor), ``configs`` (kafka-configs),
``get-offsets``, ``delete-records`` and ``log-dirs``, each in Kafka's flags and output (the
same lines ``test_server_clients.py`` reads from Kafka's own tools)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog import LogManager, Record
from kafkalog.cli.main import cli
from kafkalog.cli.tools import parse_add_config

NOW = 1_700_000_000_000


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def data(tmp_path: Path) -> str:
    with LogManager(tmp_path) as manager:
        for name, count in (("clicks", 2), ("clicks-raw", 1), ("users", 1)):
            for log in manager.create_topic(name, count):
                for i in range(5):
                    log.append([Record(b"v%d" % i, key=b"k", timestamp=NOW + i * 1000)])
    return str(tmp_path)


def test_topics_alter_regex_and_existence_flags(data: str) -> None:
    code, out, _ = run("topics", "--log-dirs", data, "--list", "--topic", "clicks.*")
    assert (code, out.split()) == (0, ["clicks", "clicks-raw"])
    assert (
        run("topics", "--log-dirs", data, "--alter", "--topic", "clicks", "--partitions", "4")[0]
        == 0
    )
    code, out, _ = run("topics", "--log-dirs", data, "--describe", "--topic", "clicks")
    assert "PartitionCount: 4\tReplicationFactor: 1" in out
    assert "\tTopic: clicks\tPartition: 3\tLeader: 1\tReplicas: 1\tIsr: 1\t" in out
    code, _, err = run(
        "topics", "--log-dirs", data, "--alter", "--topic", "clicks", "--partitions", "2"
    )
    assert code != 0 and "currently has 4 partitions" in err
    code, _, err = run("topics", "--log-dirs", data, "--describe", "--topic", "nope")
    assert code != 0 and "does not exist" in err
    assert run("topics", "--log-dirs", data, "--delete", "--topic", "nope", "--if-exists")[0] == 0
    code, _, err = run("topics", "--log-dirs", data, "--create", "--topic", "users")
    assert code != 0 and "already exists" in err
    assert (
        run("topics", "--log-dirs", data, "--create", "--topic", "users", "--if-not-exists")[0] == 0
    )
    assert (
        run("topics", "--log-dirs", data, "--create", "--topic", "r1", "--replication-factor", "1")[
            0
        ]
        == 0
    )
    code, _, err = run(
        "topics", "--log-dirs", data, "--create", "--topic", "r3", "--replication-factor", "3"
    )
    assert code != 0 and "one copy" in err
    code, _, err = run(
        "topics", "--log-dirs", data, "--alter", "--topic", "users", "--config", "a=b"
    )
    assert code != 0 and "kafkalog configs" in err
    code, _, err = run("topics", "--log-dirs", data, "--list", "--topic", "(")
    assert code != 0 and "regular expression" in err
    assert run("topics", "--log-dirs", data, "--delete", "--topic", "clicks-.*")[0] == 0
    assert run("topics", "--log-dirs", data, "--list")[1].split() == ["clicks", "r1", "users"]
    with LogManager([Path(data)]) as manager:
        assert manager.topics()["clicks"] == 4


def test_configs_alter_delete_and_describe(data: str) -> None:
    base = ("configs", "--log-dirs", data, "--entity-type", "topics", "--entity-name", "users")
    added = "retention.ms=1000,cleanup.policy=[compact,delete],segment.ms=5000"
    code, out, _ = run(*base, "--alter", "--add-config", added)
    assert (code, out) == (0, "Completed updating config for topic users.\n")
    assert run(*base, "--alter", "--delete-config", "segment.ms")[0] == 0
    code, out, _ = run(*base, "--describe")
    assert out.splitlines() == [
        "Dynamic configs for topic users are:",
        "  cleanup.policy=compact,delete sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        # Kafka lists no default here: log.retention.ms, the key it would list, has none
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}",
    ]
    code, out, _ = run(*base, "--describe", "--all")
    assert "  segment.ms=604800000 sensitive=false synonyms={}" in out  # as for retention.ms
    assert (
        "  segment.bytes=1073741824 sensitive=false "
        "synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}"
    ) in out
    assert "  flush.ms=9223372036854775807 sensitive=false synonyms={}" in out
    assert "message.format.version" not in out  # Kafka 4 describes it no more
    code, _, err = run(*base, "--alter", "--add-config", "retention.ms=soon")
    assert code != 0 and "retention.ms" in err
    code, _, err = run(*base, "--alter", "--add-config", "no.such=1")
    assert code != 0 and "Unknown topic config name" in err
    code, _, err = run("configs", "--log-dirs", data, "--entity-name", "nope", "--describe")
    assert code != 0
    with LogManager([Path(data)]) as manager:
        assert manager.topic_overrides("users") == {
            "retention.ms": "1000",
            "cleanup.policy": "compact,delete",
        }


def test_add_config_groups_list_values_in_brackets() -> None:
    assert parse_add_config("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    with pytest.raises(Exception, match="k1=v1"):
        parse_add_config("=1")


def test_get_offsets_by_special_time_and_timestamp(data: str) -> None:
    def offsets(*args: str) -> list[str]:
        code, out, err = run("get-offsets", "--log-dirs", data, *args)
        assert code == 0, err
        return out.split()

    assert offsets("--topic", "clicks") == ["clicks:0:5", "clicks:1:5"]
    assert offsets("--topic", "clicks", "--time", "-2", "--partitions", "1") == ["clicks:1:0"]
    assert offsets("--topic", "users", "--time", str(NOW + 2500)) == ["users:0:3"]
    assert offsets("--topic", "users", "--time", "max-timestamp") == ["users:0:4"]
    # GetOffsetShell leaves out a partition whose answer is UNKNOWN_OFFSET
    assert offsets("--topic", "users", "--time", str(NOW + 99_000)) == []
    assert len(offsets()) == 4
    code, _, err = run("get-offsets", "--log-dirs", data, "--time", "soon")
    assert code != 0 and "--time" in err


def test_get_offsets_topic_partition_rules_as_get_offset_shell(data: str, tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("__consumer_offsets", 3)

    def offsets(*args: str) -> list[str]:
        code, out, err = run("get-offsets", "--log-dirs", data, *args)
        assert code == 0, err
        return out.split()

    every = offsets("--time", "-2")
    assert "__consumer_offsets:2:0" in every and len(every) == 7
    assert "__consumer_offsets:0:0" not in offsets("--exclude-internal-topics", "--time", "-2")
    # N, N-M (M excluded), N-, -M and a rule without partitions, as Kafka's filters read them
    assert offsets("--topic-partitions", "clicks:1") == ["clicks:1:5"]
    assert offsets("--topic-partitions", "__consumer_offsets:1-2,users", "--time", "-2") == [
        "__consumer_offsets:1:0",
        "users:0:0",
    ]
    assert offsets("--topic-partitions", "__consumer_offsets:-1", "--time", "-2") == [
        "__consumer_offsets:0:0"
    ]
    assert offsets("--topic-partitions", ":1-", "--time", "-2") == [
        "__consumer_offsets:1:0",
        "__consumer_offsets:2:0",
        "clicks:1:0",
    ]
    code, _, err = run("get-offsets", "--log-dirs", data, "--topic-partitions", "nothing.*")
    assert code != 0 and "Could not match any topic-partitions with the specified filters" in err
    code, _, err = run("get-offsets", "--log-dirs", data, "--topic-partitions", "a:b")
    assert code != 0 and "Invalid rule specification: a:b" in err
    code, _, err = run("get-offsets", "--log-dirs", data, "--topic", "x", "--topic-partitions", "y")
    assert code == 2 and "--topic-partitions cannot be used with --topic" in err


def test_topics_internal_topics_ids_and_partition_reports(data: str, tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("__consumer_offsets", 1)
        manager.create_topic("strict", 2, {"min.insync.replicas": "2"})

    def lines(*args: str) -> list[str]:
        code, out, err = run("topics", "--log-dirs", data, *args)
        assert code == 0, err
        return out.splitlines()

    assert "__consumer_offsets" in lines("--list")
    assert "__consumer_offsets" not in lines("--list", "--exclude-internal")
    described = lines("--describe", "--exclude-internal")
    assert not any("__consumer_offsets" in line for line in described)
    # one replica, its own leader, always in sync: never under-replicated nor unavailable
    assert lines("--describe", "--under-replicated-partitions") == []
    assert lines("--describe", "--unavailable-partitions") == []
    under = lines("--describe", "--under-min-isr-partitions")
    assert [line.split("\t")[1:3] for line in under] == [
        ["Topic: strict", "Partition: 0"],
        ["Topic: strict", "Partition: 1"],
    ]
    at_min = lines("--describe", "--at-min-isr-partitions", "--topic", "clicks.*")
    assert len(at_min) == 3 and all(line.startswith("\tTopic: clicks") for line in at_min)
    # Kafka 4.3.1's fields after Isr, as its kafka-topics prints them for one node
    assert all("\tIsr: 1\tElr: \tLastKnownElr: \tLogStartOffset: " in line for line in at_min)
    topic_id = lines("--describe", "--topic", "users")[0].split("\t")[1].split(": ")[1]
    by_id = lines("--describe", "--topic-id", topic_id)
    assert by_id[0].startswith("Topic: users\t") and len(by_id) == 2


def test_delete_records_takes_kafkas_json_file(data: str, tmp_path: Path) -> None:
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [
        {"topic": "clicks", "partition": 0, "offset": 3},
        {"topic": "clicks", "partition": 1, "offset": -1},
        {"topic": "nope", "partition": 0, "offset": 1},
    ], "version": 1}))  # fmt: skip
    code, out, _ = run("delete-records", "--log-dirs", data, "--offset-json-file", str(spec))
    assert code == 0
    lines = out.splitlines()
    assert lines[:4] == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: clicks-0\tlow_watermark: 3",
        "partition: clicks-1\tlow_watermark: 5",
    ]
    assert lines[4].startswith("partition: nope-0\terror: ")
    with LogManager([Path(data)]) as manager:
        assert manager.get_log("clicks", 0).log_start_offset == 3
    spec.write_text("{not json")
    code, _, err = run("delete-records", "--log-dirs", data, "--offset-json-file", str(spec))
    assert code != 0 and "--offset-json-file" in err


def test_log_dirs_describe_prints_kafkas_json(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    with LogManager(dirs) as manager:
        manager.create_topic("t", 2)[0].append([Record(b"x")])
        manager.create_topic("u", 1)
    joined = ",".join(map(str, dirs))
    code, out, _ = run("log-dirs", "--log-dirs", joined, "--describe", "--topic-list", "t")
    assert code == 0
    head, received, document = out.splitlines()
    assert head == "Querying brokers for log directories information"
    assert received == "Received log directory information from brokers 1"
    (broker,) = json.loads(document)["brokers"]
    partitions = {p["partition"]: p for d in broker["logDirs"] for p in d["partitions"]}
    assert sorted(partitions) == ["t-0", "t-1"] and partitions["t-0"]["size"] > 0
    assert [d["logDir"] for d in broker["logDirs"]] == [str(d) for d in dirs]
