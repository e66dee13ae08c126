"""Broker and group configs set at run time: Kafka's rules for them (each case a line, Kafka's
words as Apache Kafka 4.3.1 answers them; test_kafka_oracle_dynamic_configs.py asks the real
broker), kept in kafkalog's files, in force on the open logs, and seen by read-only readers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import LogManager
from kafkalog.coordinator.group_config import altered_group_configs, check_group_configs
from kafkalog.errors import CorruptCheckpointError, InvalidConfigError, KafkaStorageError
from kafkalog.manager.config_ops import AlterConfigOp, AlterConfigOpType
from kafkalog.manager.dynamic_broker_config import altered_broker_configs, check_broker_configs
from kafkalog.manager.log_dir import DYNAMIC_CONFIGS_FILE, LogDirectory
from kafkalog.manager.reader import LogDirsReader

SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT


def test_list_operations_start_from_kafkas_default() -> None:
    ops = [AlterConfigOp("log.cleanup.policy", APPEND, "compact")]
    assert altered_broker_configs({}, ops) == {"log.cleanup.policy": "delete,compact"}
    back = [AlterConfigOp("log.cleanup.policy", SUBTRACT, "compact")]
    assert altered_broker_configs({"log.cleanup.policy": "delete,compact"}, back) == {
        "log.cleanup.policy": "delete"
    }
    replaced = altered_broker_configs({"a.b": "1"}, [AlterConfigOp("c.d", SET, "2")], replace=True)
    assert replaced == {"c.d": "2"}
    assert altered_broker_configs({"a.b": "1"}, [AlterConfigOp("a.b", DELETE)]) == {}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([AlterConfigOp("num.io.threads", APPEND, "3")],
         "Config value append is not allowed for config key: num.io.threads"),
        ([AlterConfigOp("background.threads", SUBTRACT, "3")],
         "Config value subtract is not allowed for config key: background.threads"),
        ([AlterConfigOp("no.such.key", APPEND, "3")], "Unknown config name: no.such.key"),
        ([AlterConfigOp("a.b", SET, "1"), AlterConfigOp("a.b", SET, "2")],
         "Error due to duplicate config keys"),
    ],
)  # fmt: skip
def test_operations_kafka_refuses(ops: list[AlterConfigOp], message: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        altered_broker_configs({}, ops)
    assert caught.value.detail == message


@pytest.mark.parametrize(
    ("values", "per_broker", "message"),
    [
        ({"broker.id": "3"}, True, "Cannot update these configs dynamically: [broker.id]"),
        ({"log.dirs": "/x", "num.io.threads": "4"}, True,
         "Cannot update these configs dynamically: [log.dirs]"),
        ({"ssl.keystore.location": "/x"}, True,
         "These security configs can be dynamically updated only per-listener using the "
         "listener prefix: [ssl.keystore.location]"),
        ({"background.threads": "abc"}, True,
         "Invalid value abc for configuration background.threads: Not a number of type INT"),
        ({"background.threads": "0"}, True,
         "Invalid value 0 for configuration background.threads: Value must be at least 1"),
        ({"compression.gzip.level": "10"}, True,
         "Invalid value 10 for configuration compression.gzip.level: Value must be no more "
         "than 9"),
        ({"log.cleanup.policy": "delete,forever"}, True,
         "Invalid value delete,forever for configuration log.cleanup.policy: String must be "
         "one of: compact, delete"),
        ({"sasl.kerberos.min.time.before.relogin": "58000"}, False,
         "Cannot update these configs at default cluster level, broker id must be specified: "
         "[sasl.kerberos.min.time.before.relogin]"),
        ({"listener.name.external.ssl.keystore.type": "PKCS12"}, False,
         "Cannot update these configs at default cluster level, broker id must be specified: "
         "[listener.name.external.ssl.keystore.type]"),
        ({"listener.name.external.num.network.threads": "x"}, False,
         "Invalid value x for configuration listener.name.external.num.network.threads: Not a "
         "number of type INT"),
    ],
)  # fmt: skip
def test_values_kafka_refuses(values: dict[str, str], per_broker: bool, message: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        check_broker_configs(values, per_broker=per_broker)
    assert caught.value.detail == message


@pytest.mark.parametrize(
    ("values", "per_broker"),
    [
        ({"background.threads": "9", "log.cleanup.policy": "compact,delete"}, False),
        ({"compression.gzip.level": "-1", "log.cleaner.min.cleanable.ratio": "0.25"}, False),
        ({"sasl.kerberos.min.time.before.relogin": "58000"}, True),
        ({"listener.name.external.ssl.keystore.type": "PKCS12"}, True),
        ({"listener.name.external.max.connections": "10"}, False),  # cluster-level
        ({"a.key.kafka.does.not.define": "anything"}, False),  # kept, as Kafka keeps it
    ],
)
def test_values_kafka_takes(values: dict[str, str], per_broker: bool) -> None:
    check_broker_configs(values, per_broker=per_broker)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"consumer.session.timeout.ms": "1"},
         "consumer.session.timeout.ms must be greater than or equal to "
         "group.consumer.min.session.timeout.ms"),
        ({"consumer.heartbeat.interval.ms": "60000"},
         "consumer.heartbeat.interval.ms must be less than or equal to "
         "group.consumer.max.heartbeat.interval.ms"),
        ({"consumer.session.timeout.ms": "abc"},
         "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of "
         "type INT"),
        ({"share.isolation.level": "dirty"},
         "Invalid value dirty for configuration share.isolation.level: String must be one of: "
         "read_committed, read_uncommitted"),
        ({"share.auto.offset.reset": "by_duration:soon"},
         "Invalid value by_duration:soon for configuration share.auto.offset.reset: String "
         "must be one of: latest, earliest, by_duration:PnDTnHnMn.nS"),
        ({"streams.num.standby.replicas": "3"},
         "streams.num.standby.replicas must be less than or equal to "
         "group.streams.max.standby.replicas"),
    ],
)  # fmt: skip
def test_group_values_kafka_refuses(values: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        check_group_configs(values, {})
    assert caught.value.detail == message


def test_group_bounds_come_from_the_brokers_keys() -> None:
    values = {"consumer.session.timeout.ms": "20000", "consumer.heartbeat.interval.ms": "2000"}
    with pytest.raises(InvalidConfigError):
        check_group_configs(values, {})
    lowered = {
        "group.consumer.min.session.timeout.ms": "10000",
        "group.consumer.min.heartbeat.interval.ms": "1000",
    }
    check_group_configs(values, lowered)
    check_group_configs({"share.auto.offset.reset": "by_duration:PT1H30M"}, {})
    with pytest.raises(InvalidConfigError, match=r"must be greater than consumer\.heartbeat"):
        check_group_configs(
            {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "45000"},
            {"group.consumer.max.heartbeat.interval.ms": "50000"},
        )


def test_group_operations() -> None:
    set_ = [AlterConfigOp("consumer.session.timeout.ms", SET, "50000")]
    assert altered_group_configs({}, set_) == {"consumer.session.timeout.ms": "50000"}
    assert altered_group_configs({"consumer.session.timeout.ms": "50000"}, [
        AlterConfigOp("consumer.session.timeout.ms", DELETE)]) == {}  # fmt: skip
    with pytest.raises(InvalidConfigError) as caught:
        altered_group_configs({}, [AlterConfigOp("nope.key", SET, "1")])
    assert caught.value.detail == "Unknown group config name: nope.key"
    with pytest.raises(InvalidConfigError) as caught:
        altered_group_configs({}, [AlterConfigOp("share.auto.offset.reset", APPEND, "x")])
    assert caught.value.detail == (
        "Can't APPEND to key share.auto.offset.reset because its type is not LIST."
    )


def test_run_time_topic_defaults_are_in_force_kept_and_read(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:  # no meta.properties, no node.id: node 1
        (log,) = manager.create_topic("t", 1)
        (own,) = manager.create_topic("own", 1, {"retention.ms": "5000"})
        manager.alter_broker_configs("", {"log.retention.ms": "60000", "background.threads": "7"})
        manager.alter_broker_configs("1", {"log.segment.bytes": "2097152"})
        manager.alter_broker_configs("4", {"log.segment.bytes": "3145728"})  # not this broker
        assert log.config.retention_ms == 60000  # in force at once
        assert log.config.segment_size == 2097152
        assert own.config.retention_ms == 5000  # a topic's own override still wins
        manager.alter_group_configs("g", {"consumer.session.timeout.ms": "50000"})
        manager.create_topic("later", 1)
        assert manager.get_log("later").config.retention_ms == 60000
    with LogManager(tmp_path, node_id=4) as manager:  # serve's node.id 4: its own level
        assert manager.get_log("t").config.segment_size == 3145728
    with LogManager(tmp_path) as manager:
        assert manager.get_log("t").config.retention_ms == 60000
        assert manager.get_log("t").config.segment_size == 2097152
        assert manager.broker_configs("") == {
            "log.retention.ms": "60000",
            "background.threads": "7",
        }
        assert manager.group_configs("g") == {"consumer.session.timeout.ms": "50000"}
        manager.alter_broker_configs("", {})
        manager.alter_group_configs("g", {})
        assert manager.get_log("t").config.retention_ms == 7 * 24 * 3600 * 1000
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    reader = LogDirsReader([tmp_path])
    assert reader.dynamic_broker_configs == ({}, {"log.segment.bytes": "2097152"})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_an_alteration_that_cannot_be_written_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LogManager(tmp_path) as manager:
        (log,) = manager.create_topic("t", 1)
        manager.alter_broker_configs("", {"log.retention.ms": "60000"})

        def full_disk(self: LogDirectory, *configs: object) -> None:
            raise KafkaStorageError("No space left on device")

        with monkeypatch.context() as patch:
            patch.setattr(LogDirectory, "write_dynamic_configs", full_disk)
            with pytest.raises(KafkaStorageError):
                manager.alter_broker_configs("", {"log.retention.ms": "1"})
            with pytest.raises(KafkaStorageError):
                manager.alter_group_configs("g", {"consumer.session.timeout.ms": "50000"})
        assert manager.broker_configs("") == {"log.retention.ms": "60000"}
        assert log.config.retention_ms == 60000
        assert manager.group_configs("g") == {}
    with LogManager(tmp_path) as manager:
        assert manager.get_log("t").config.retention_ms == 60000


@pytest.mark.parametrize(
    "text", ["{", "[]", '{"brokers": {"": 5}, "groups": {}}', '{"brokers": {}}']
)
def test_a_damaged_file_is_named(tmp_path: Path, text: str) -> None:
    LogManager(tmp_path).close()
    (tmp_path / DYNAMIC_CONFIGS_FILE).write_text(text)
    with pytest.raises(CorruptCheckpointError, match="dynamic configs"):
        LogManager(tmp_path)


def test_node_zero_is_its_own_level(tmp_path: Path) -> None:
    """``node.id=0`` is a node like any other: its level applies, at start and at once."""
    with LogManager(tmp_path, node_id=0) as manager:
        (log,) = manager.create_topic("t", 1)
        manager.alter_broker_configs("0", {"log.retention.ms": "60000"})
        assert log.config.retention_ms == 60000
    with LogManager(tmp_path, node_id=0) as manager:
        assert manager.get_log("t").config.retention_ms == 60000
