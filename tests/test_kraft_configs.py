"""Topic configs read from a KRaft node's metadata log (``records/kraft_metadata.py`` replays,
``manager/kraft_configs.py`` reads the files): the
latest snapshot, then the records after it, replayed as Kafka's ConfigurationControlManager
replays them, and used by a LogManager for the topics its own file does not name. The real
thing (a Kafka 3.9.2 and 4.3.1 broker's metadata log) is in test_kafka_oracle_serve.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from kafkalog import Log, LogConfig, LogManager, ManagerConfig, MemoryRecords, Record
from kafkalog.manager.kraft_configs import kraft_configs
from kafkalog.records.builder import RecordBatchBuilder
from kafkalog.storage import filenames as fn

TOPIC, BROKER = 2, 4  # ConfigResource.Type


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(text: str | None) -> bytes:
    if text is None:
        return b"\0"
    raw = text.encode()
    return _uvarint(len(raw) + 1) + raw


def _record(api_key: int, body: bytes) -> Record:
    """MetadataRecordSerde's frame (version 1, api key, version 0) around a flexible body."""
    return Record(_uvarint(1) + _uvarint(api_key) + _uvarint(0) + body + b"\0")


def topic_record(name: str, topic_id: bytes) -> Record:
    return _record(2, _string(name) + topic_id)


def config_record(kind: int, resource: str, key: str, value: str | None) -> Record:
    return _record(4, bytes([kind]) + _string(resource) + _string(key) + _string(value))


def remove_topic_record(topic_id: bytes) -> Record:
    return _record(9, topic_id)


A, C = uuid.uuid4().bytes, uuid.uuid4().bytes


def metadata_log(log_dir: Path) -> Path:
    """A metadata log whose snapshot covers offsets 0-2, and records after it."""
    path = log_dir / "__cluster_metadata-0"
    with Log.open(path) as log:
        log.append([config_record(TOPIC, "a", "retention.ms", "1")] * 3)  # below the snapshot
        log.append(
            [
                config_record(TOPIC, "a", "segment.bytes", "2097152"),
                config_record(TOPIC, "b", "cleanup.policy", None),  # deleted
                topic_record("c", C),
                config_record(TOPIC, "c", "retention.ms", "5"),
                remove_topic_record(C),  # and its configs with it
                config_record(TOPIC, "a", "no.such.config", "x"),  # not kafkalog's: left out
                config_record(TOPIC, "a", "retention.bytes", "lots"),  # not a number: left out
                config_record(BROKER, "1", "log.retention.ms", "1"),  # a broker's, not a topic's
            ]
        )
    snapshot = [
        topic_record("a", A),
        config_record(TOPIC, "a", "retention.ms", "-1"),
        config_record(TOPIC, "b", "cleanup.policy", "compact"),
    ]
    data = bytes(MemoryRecords.build(snapshot))
    (path / f"{3:020d}-{1:010d}.checkpoint").write_bytes(data)
    return path


def test_the_snapshot_then_the_records_after_it_are_replayed(tmp_path: Path) -> None:
    configs = kraft_configs(metadata_log(tmp_path)).topics
    assert configs == {"a": {"retention.ms": "-1", "segment.bytes": "2097152"}}


def test_a_log_manager_takes_them_for_topics_its_own_file_does_not_name(tmp_path: Path) -> None:
    metadata_log(tmp_path)
    for topic in ("a", "b"):
        Log.open(tmp_path / f"{topic}-0").close()  # partitions a Kafka broker created
    defaults = LogConfig()
    with LogManager([tmp_path]) as manager:
        assert manager.topic_config("a").retention_ms == -1
        assert manager.topic_config("a").segment_size == 2097152
        assert manager.topic_config("b").retention_ms == defaults.retention_ms
    (tmp_path / "kafkalog-topic-configs.json").write_text(json.dumps({"a": {}}))
    with LogManager([tmp_path]) as manager:  # kafkalog's own record of "a" wins
        assert manager.topic_config("a").retention_ms == defaults.retention_ms


def test_what_cannot_be_read_is_skipped_or_ends_the_replay_and_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An unreadable record (cut short, or of a ConfigRecord version newer than Kafka's schema
    here) is skipped; a damaged batch ends the replay, as Kafka's log recovery ends the log
    there. What came before still counts: one bad record does not put every topic back on
    the defaults. Each is named in a warning."""
    path = tmp_path / "__cluster_metadata-0"
    newer = _uvarint(1) + _uvarint(4) + _uvarint(1) + b"\x02\x02a"  # version 1 of ConfigRecord
    with Log.open(path) as log:
        log.append(
            [
                config_record(TOPIC, "a", "retention.ms", "-1"),
                Record(b"\x01\x04\x00"),  # a ConfigRecord frame that ends at once
                Record(newer),
                config_record(TOPIC, "a", "segment.bytes", "2097152"),
            ]
        )
    segment = fn.log_file(path, 0)
    damaged = segment.stat().st_size  # where the next batch starts
    with Log.open(path) as log:
        log.append([config_record(TOPIC, "b", "retention.ms", "5")])
        log.append([config_record(TOPIC, "c", "retention.ms", "6")])
    data = bytearray(segment.read_bytes())
    data[damaged + 65] ^= 0xFF  # past its 61-byte header, inside its one record
    segment.write_bytes(bytes(data))
    assert kraft_configs(path).topics == {"a": {"retention.ms": "-1", "segment.bytes": "2097152"}}
    warnings = [r.getMessage() for r in caplog.records]
    assert any("record at offset 1 skipped" in w and "ends inside" in w for w in warnings)
    assert any("record at offset 2 skipped: ConfigRecord version 1 is newer" in w for w in warnings)
    assert any("replay stopped at damage" in w for w in warnings)


def test_metadata_log_dir_points_at_a_metadata_log_kept_elsewhere(tmp_path: Path) -> None:
    """``metadata.log.dir`` in a broker's server.properties goes to the manager, which reads
    the metadata log there; without it a metadata log outside the log directory is not found."""
    from kafkalog.manager.server_config import ServerConfig

    metadata_log(tmp_path / "meta")
    data = tmp_path / "data"
    Log.open(data / "a-0").close()
    props = {"log.dirs": str(data), "metadata.log.dir": str(tmp_path / "meta")}
    server = ServerConfig.from_properties(props)
    assert "metadata.log.dir" not in server.unused
    with LogManager.from_server_config(server) as manager:
        assert manager.topic_config("a").retention_ms == -1
    with LogManager([data]) as manager:
        assert manager.topic_config("a").retention_ms == LogConfig().retention_ms


def test_a_metadata_log_dir_without_a_metadata_log_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = ManagerConfig.from_properties({"metadata.log.dir": str(tmp_path / "typo")})
    with LogManager([tmp_path / "data"], config=config):
        pass
    assert f"metadata.log.dir {tmp_path / 'typo'} holds no __cluster_metadata-0" in caplog.text


def test_the_metadata_log_is_read_once_and_kafkalogs_own_file_wins_in_any_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two log dirs and ``metadata.log.dir`` outside them: the metadata log is replayed once,
    and a topic kafkalog's file names (here in the first dir) keeps those overrides even
    though its partitions are in the second."""
    from kafkalog.manager import log_dir

    metadata_log(tmp_path / "meta")
    first, second = tmp_path / "d1", tmp_path / "d2"
    Log.open(second / "a-0").close()
    first.mkdir()
    (first / "kafkalog-topic-configs.json").write_text(json.dumps({"a": {"retention.ms": "9"}}))
    reads: list[Path] = []
    real = log_dir.kraft_configs
    monkeypatch.setattr(log_dir, "kraft_configs", lambda p, n: reads.append(p) or real(p, n))
    config = ManagerConfig.from_properties({"metadata.log.dir": str(tmp_path / "meta")})
    with LogManager([first, second], config=config) as manager:
        assert manager.topic_config("a").retention_ms == 9
        assert manager.topic_config("a").segment_size == LogConfig().segment_size
    assert reads == [tmp_path / "meta" / "__cluster_metadata-0"]


def _compacted_topic_with_a_gap(log_dir: Path) -> None:
    """Topic ``k``, compacted by the metadata log's say alone, whose cleaner left offsets 1-9
    in no segment, as Kafka's does when it empties a segment."""
    path = log_dir / "__cluster_metadata-0"
    with Log.open(path) as log:
        log.append([topic_record("k", A), config_record(TOPIC, "k", "cleanup.policy", "compact")])
    with Log.open(log_dir / "k-0") as log:
        for offset in (0, 10):
            batch = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=0)
            batch.append(b"v", key=b"k", timestamp=0)
            if offset:
                log.roll(offset)
            log.append_as_follower(batch.build())


def test_the_cli_reads_a_kafka_brokers_topic_configs_too(tmp_path: Path) -> None:
    """kafka-topics --describe shows a Kafka topic's configs, and verify takes a gap in a
    compacted Kafka topic for the cleaner's work, not a lost segment."""
    from click.testing import CliRunner

    from kafkalog.cli.main import cli

    _compacted_topic_with_a_gap(tmp_path)
    describe = CliRunner().invoke(cli, ["topics", "--log-dirs", str(tmp_path), "--describe"])
    assert "\tConfigs: cleanup.policy=compact\n" in describe.output, describe.output
    verify = CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)])
    assert verify.exit_code == 0, verify.output
    assert "offset gap" not in verify.output


def _dynamic_broker_configs(log_dir: Path, node: int) -> None:
    """A Kafka node ``node``'s directory whose metadata log holds dynamic broker configs, as
    ``kafka-configs --entity-type brokers [--entity-default | --entity-name N] --alter`` and
    ``--delete-config`` leave them."""
    (log_dir / "meta.properties").write_text(f"#\nnode.id={node}\nversion=1\ncluster.id=x\n")
    with Log.open(log_dir / "__cluster_metadata-0") as log:
        log.append(
            [
                config_record(BROKER, "", "log.retention.ms", "172800000"),  # every broker
                config_record(BROKER, "", "log.roll.hours", "1"),  # not taken at run time
                config_record(BROKER, "", "log.segment.bytes", "4194304"),
                config_record(BROKER, "", "log.cleanup.policy", "compact"),
                config_record(BROKER, "", "log.cleanup.policy", None),  # deleted again
                config_record(BROKER, "", "num.io.threads", "16"),  # not a topic default
                config_record(BROKER, "", "log.message.format.version", "2.8"),  # static only
                config_record(BROKER, str(node), "log.segment.bytes", "2097152"),  # its own
                config_record(BROKER, str(node), "log.flush.interval.messages", "many"),  # bad
                config_record(BROKER, str(node + 1), "log.retention.ms", "1"),  # another node's
            ]
        )


def test_dynamic_broker_configs_set_the_defaults_over_server_properties(tmp_path: Path) -> None:
    """Kafka's DynamicBrokerConfig: the node's own over every broker's over server.properties,
    a dynamic key replacing its synonyms below it (log.retention.ms over a static
    log.retention.hours); a topic's own override over all of them."""
    from kafkalog.manager.server_config import ServerConfig

    _dynamic_broker_configs(tmp_path, 3)
    Log.open(tmp_path / "a-0").close()
    server = ServerConfig.from_properties(
        {"log.dirs": str(tmp_path), "log.retention.hours": "1", "log.roll.hours": "5"}
    )
    with LogManager.from_server_config(server) as manager:
        config = manager.topic_config("a")
        assert config.retention_ms == 48 * 3600 * 1000
        assert config.segment_size == 2097152
        assert config.segment_ms == 5 * 3600 * 1000  # server.properties' where nothing dynamic
        assert config.cleanup_policy == LogConfig().cleanup_policy
        assert config.flush_messages == LogConfig().flush_messages
        assert manager.topic_overrides("a") == {}  # defaults, not overrides of the topic
        assert manager.dynamic_broker_configs == (
            {"log.retention.ms": "172800000", "log.segment.bytes": "4194304"},
            {"log.segment.bytes": "2097152"},
        )
        manager.alter_topic_config("a", {"retention.ms": "7"})
        assert manager.topic_config("a").retention_ms == 7
    (tmp_path / "meta.properties").unlink()  # no node: every broker's only
    with LogManager([tmp_path]) as manager:
        assert manager.topic_config("a").segment_size == 4194304
        assert manager.topic_config("b").retention_ms == 48 * 3600 * 1000  # a new topic too


def test_kafkalog_configs_names_a_kafka_brokers_run_time_defaults(tmp_path: Path) -> None:
    """kafka-configs --describe --all: a key a run-time broker default sets is named by its
    source and broker key, as Kafka's ConfigCommand prints it."""
    from click.testing import CliRunner

    from kafkalog.cli.main import cli

    _dynamic_broker_configs(tmp_path, 3)
    Log.open(tmp_path / "a-0").close()
    base = ["configs", "--log-dirs", str(tmp_path), "--entity-name", "a", "--describe"]
    lines = CliRunner().invoke(cli, [*base, "--all"]).output.splitlines()
    assert (
        "  retention.ms=172800000 sensitive=false synonyms="
        "{DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=172800000, "
        "DEFAULT_CONFIG:log.retention.hours=168}"
    ) in lines
    assert (
        "  segment.bytes=2097152 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "log.segment.bytes=2097152, DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=4194304, "
        "DEFAULT_CONFIG:log.segment.bytes=1073741824}"
    ) in lines


def test_kafkalog_configs_describes_a_kafka_brokers_configs_as_kafka_configs_does(
    tmp_path: Path,
) -> None:
    """--entity-type brokers: ConfigCommand's lines for node 3 (the directories' broker) and
    for --entity-default; broker configs are read only here, and another broker is not ours."""
    from click.testing import CliRunner

    from kafkalog.cli.main import cli

    _dynamic_broker_configs(tmp_path, 3)
    base = ["configs", "--log-dirs", str(tmp_path), "--entity-type", "brokers"]

    def run(*args: str) -> tuple[int, list[str]]:
        result = CliRunner().invoke(cli, [*base, *args])
        return result.exit_code, result.stdout.splitlines()

    assert run("--entity-name", "3", "--describe") == (
        0,
        [
            "Dynamic configs for broker 3 are:",
            "  log.segment.bytes=2097152 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.segment.bytes=2097152, DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=4194304, "
            "DEFAULT_CONFIG:log.segment.bytes=1073741824}",
        ],
    )
    assert run("--entity-default", "--describe") == (
        0,
        [
            "Default configs for brokers in the cluster are:",
            "  log.retention.ms=172800000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
            "log.retention.ms=172800000, DEFAULT_CONFIG:log.retention.hours=168}",
        ],
    )
    code, lines = run("--entity-name", "3", "--describe", "--all")
    assert code == 0 and "  log.roll.ms=null sensitive=false synonyms={}" in lines
    assert (
        "  log.roll.hours=168 sensitive=false synonyms={DEFAULT_CONFIG:log.roll.hours=168}" in lines
    )
    assert run("--entity-name", "4", "--describe")[0] != 0
    assert run("--entity-name", "x", "--describe")[0] != 0
    assert run("--entity-name", "3", "--entity-default", "--describe")[0] == 2
    assert run("--entity-name", "3", "--alter", "--add-config", "log.roll.ms=1")[0] == 2
