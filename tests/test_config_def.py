"""Config keys declared once (kafkalog.config_def), Java .properties files, and a broker's
server.properties with Kafka's precedence: --override > file > Kafka's default, and per topic,
its override > the first broker synonym set > Kafka's default."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kafkalog import LogManager, ManualClock
from kafkalog.cleaner.config import CleanerConfig
from kafkalog.config_def import ConfigDef, load_properties
from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import TOPIC_CONFIG, LogConfig
from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.server_config import ServerConfig

pytestmark = pytest.mark.one_codec  # no records involved

# the shape of the server.properties Kafka ships for a KRaft node, plus log.* keys
SERVER_PROPERTIES = b"""\
# Licensed to the Apache Software Foundation (ASF) ...
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
num.network.threads=3
socket.request.max.bytes=104857600
log.dirs=LOGDIR
num.partitions=3
num.recovery.threads.per.data.dir=2
offsets.topic.replication.factor=1
log.retention.hours=168
log.retention.minutes=90
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
log.cleaner.threads 2
log.roll.hours : 1
log.cleanup.policy=compact,\\
    delete
"""


def test_every_config_class_declares_each_key_once_with_its_field_default() -> None:
    for cls in (LogConfig, ManagerConfig, CleanerConfig):
        config_def = ConfigDef.of(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert config_def.keys, cls
        for key in config_def.keys.values():
            assert fields[key.attribute].default == key.default, key.name
            assert key.doc.strip(), f"{key.name} has no doc"
            assert key.parse(key.default) == key.default, key.name


def test_java_properties_syntax(tmp_path: Path) -> None:
    path = tmp_path / "x.properties"
    path.write_bytes(
        b"! a comment\n"
        b"a=1\n"
        b"b : two words \n"
        b"c three\n"
        b"d = first \\\n      second\n"
        b"e=tab\\there\\u00e9\n"
        b"f\\=g=h\n"
        b"a=last wins\n"
        b"latin=caf\xe9\n"
    )
    assert load_properties(path) == {
        "a": "last wins",
        "b": "two words ",
        "c": "three",
        "d": "first second",
        "e": "tab\there\u00e9",
        "f=g": "h",
        "latin": "caf\u00e9",
    }


def test_a_missing_properties_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="cannot read the properties file"):
        load_properties(tmp_path / "nope.properties")


def test_server_properties_with_kafkas_precedence(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(SERVER_PROPERTIES.replace(b"LOGDIR", str(tmp_path / "logs").encode()))
    server = ServerConfig.from_properties(path, {"log.segment.bytes": "4194304"})
    assert server.log_dirs == [tmp_path / "logs"]
    assert server.broker.num_partitions == 3
    defaults = server.log_defaults
    assert defaults.retention_ms == 90 * 60_000  # .minutes beats .hours
    assert defaults.segment_ms == 3_600_000  # log.roll.hours in ms
    assert defaults.segment_bytes == 4 << 20  # the override beats the file
    assert defaults.cleanup_policy == {"compact", "delete"}  # a continuation line
    assert defaults.overrides == {}  # broker defaults are no topic's overrides
    assert server.manager.num_recovery_threads_per_data_dir == 2
    assert server.manager.cleaner.num_threads == 2
    assert "process.roles" in server.unused and "num.network.threads" in server.unused
    assert "listeners" not in server.unused  # kafkalog serve takes its PLAINTEXT listener
    assert "supplied but are not used" in caplog.text
    with LogManager.from_server_config(server, ManualClock(0)) as manager:
        manager.create_topic("t", config={"retention.ms": "1000"})  # num.partitions: 3
        assert manager.topics() == {"t": 3}
        config = manager.get_log("t", 2).config
        assert (config.retention_ms, config.segment_bytes) == (1000, 4 << 20)  # topic > broker
        assert manager.topic_config("t").overrides == {"retention.ms": "1000"}


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"log.retention.hours": "a week"}, "log.retention.hours"),
        ({"log.segment.bytes": "1048575"}, "log.segment.bytes"),  # Kafka 4's minimum: 1 MiB
        ({"log.cleanup.policy": "shred"}, "log.cleanup.policy"),
        ({"num.partitions": "0"}, "num.partitions"),
        ({"log.cleaner.threads": "1.5"}, "log.cleaner.threads"),
        ({"log.preallocate": "yes"}, "log.preallocate"),
    ],
)
def test_a_bad_broker_value_names_the_key_the_file_uses(props: dict[str, str], key: str) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        ServerConfig.from_properties(props)
    assert raised.value.key == key


def test_negative_retention_hours_mean_forever() -> None:
    assert (
        ServerConfig.from_properties({"log.retention.hours": "-1"}).log_defaults.retention_ms == -1
    )


def test_topic_keys_round_trip_through_their_rendering() -> None:
    rendered = LogConfig().to_properties()
    unset = {name for name, key in TOPIC_CONFIG.keys.items() if key.default is None}
    assert unset == {"internal.segment.bytes"}  # no value, so not rendered (Kafka's null)
    assert set(rendered) == set(TOPIC_CONFIG.keys) - unset
    assert LogConfig.from_properties(rendered) == LogConfig()


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"segment.bytes": "1_000_000"}, "segment.bytes"),  # Python's int() takes it; Java's not
        ({"segment.bytes": "1e6"}, "segment.bytes"),
        ({"segment.ms": "0x10"}, "segment.ms"),
        ({"min.cleanable.dirty.ratio": "NaN"}, "min.cleanable.dirty.ratio"),  # passes any range
        (["segment.bytes"], "config"),
    ],
)
def test_values_java_would_not_parse_are_refused(props: object, key: str) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        LogConfig.from_properties(props)  # type: ignore[arg-type]
    assert raised.value.key == key


def test_a_malformed_unicode_escape_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"log.dirs=\\u12\n")
    with pytest.raises(InvalidConfigError, match="malformed properties file") as raised:
        ServerConfig.from_properties(path)
    assert raised.value.key == str(path)


@pytest.mark.parametrize(("props", "overrides"), [(["a=b"], None), ({}, "a=b")])
def test_server_config_refuses_what_is_not_a_mapping(props: object, overrides: object) -> None:
    with pytest.raises(InvalidConfigError, match="must be a mapping"):
        ServerConfig.from_properties(props, overrides)  # type: ignore[arg-type]
