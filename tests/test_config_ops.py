"""Altering topic configs: Kafka's four operations as a table (ConfigAdminManager's rules),
and ``LogManager.alter_topic_config`` persisting the result and applying it to open logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import LogConfig, LogManager, ManualClock, Record
from kafkalog.errors import (
    InvalidConfigError,
    KafkaLogError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from kafkalog.manager.config_ops import AlterConfigOp, AlterConfigOpType, altered, as_ops

SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOpType.SET,
    AlterConfigOpType.DELETE,
    AlterConfigOpType.APPEND,
    AlterConfigOpType.SUBTRACT,
)
DEFAULTS = LogConfig()

# (current overrides, operations, the overrides after)
CASES = [
    ({}, [AlterConfigOp("retention.ms", SET, "1000")], {"retention.ms": "1000"}),
    ({"retention.ms": "5"}, [AlterConfigOp("retention.ms", DELETE)], {}),
    ({}, [AlterConfigOp("retention.ms", DELETE)], {}),  # deleting what is not set is no error
    # APPEND starts from the default when the key has no override
    (
        {},
        [AlterConfigOp("cleanup.policy", APPEND, "compact")],
        {"cleanup.policy": "delete,compact"},
    ),
    (
        {"cleanup.policy": "compact"},
        [AlterConfigOp("cleanup.policy", APPEND, "compact,delete")],
        {"cleanup.policy": "compact,delete"},
    ),
    (
        {"cleanup.policy": "compact,delete"},
        [AlterConfigOp("cleanup.policy", SUBTRACT, "delete")],
        {"cleanup.policy": "compact"},
    ),
    # an empty cleanup.policy is allowed (Kafka 3.x+: neither deletes nor compacts)
    ({}, [AlterConfigOp("cleanup.policy", SUBTRACT, "delete")], {"cleanup.policy": ""}),
    (
        {"segment.ms": "9"},
        [AlterConfigOp("segment.ms", SET, "10"), AlterConfigOp("retention.bytes", SET, "7")],
        {"segment.ms": "10", "retention.bytes": "7"},
    ),
]


@pytest.mark.parametrize(("current", "ops", "after"), CASES)
def test_each_operation_gives_kafkas_overrides(
    current: dict[str, str], ops: list[AlterConfigOp], after: dict[str, str]
) -> None:
    assert altered(current, ops, DEFAULTS) == after


def test_replace_makes_the_sets_the_whole_new_set() -> None:
    ops = [AlterConfigOp("retention.ms", SET, "1")]
    assert altered({"segment.ms": "9"}, ops, DEFAULTS, replace=True) == {"retention.ms": "1"}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([AlterConfigOp("retention.ms", APPEND, "1")], "append is not allowed for config key"),
        ([AlterConfigOp("segment.ms", SUBTRACT, "1")], "subtract is not allowed for config key"),
        ([AlterConfigOp("no.such.key", SET, "1")], "Unknown topic config name: no.such.key"),
        ([AlterConfigOp("retention.ms", SET, "soon")], "retention.ms"),
        ([AlterConfigOp("cleanup.policy", APPEND, "tidy")], "cleanup.policy"),
        ([AlterConfigOp("retention.ms", SET, None)], "Null value not supported for : retention.ms"),
        (
            [AlterConfigOp("retention.ms", SET, "1"), AlterConfigOp("retention.ms", DELETE)],
            "duplicate config keys",
        ),
    ],
)
def test_what_kafka_refuses_is_refused_with_the_key(ops: list[AlterConfigOp], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        altered({}, ops, DEFAULTS)


def test_the_mapping_form_sets_and_deletes() -> None:
    ops = as_ops({"retention.ms": 5, "preallocate": True, "segment.ms": None})
    assert ops == [
        AlterConfigOp("retention.ms", SET, "5"),
        AlterConfigOp("preallocate", SET, "true"),
        AlterConfigOp("segment.ms", DELETE),
    ]
    with pytest.raises(InvalidConfigError, match="AlterConfigOp"):
        as_ops([("retention.ms", 0, "1")])  # type: ignore[list-item]


def test_an_alteration_is_persisted_and_applied_to_the_open_logs(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    with LogManager(tmp_path, clock=clock) as manager:
        (log,) = manager.create_topic("t", 1, {"segment.ms": "100000"})
        log.append([Record(b"x" * 2000)])
        new = manager.alter_topic_config("t", {"max.message.bytes": 1000, "segment.ms": None})
        assert new == {"max.message.bytes": "1000"}
        assert log.config.max_message_bytes == 1000  # the open log, at once
        with pytest.raises(RecordTooLargeError):
            log.append([Record(b"x" * 2000)])
        # validate_only changes nothing
        manager.alter_topic_config("t", {"retention.ms": 1}, validate_only=True)
        assert "retention.ms" not in manager.topic_overrides("t")
        # retention follows the new retention.ms on the next pass
        log.roll()
        clock.advance(10_000)
        manager.alter_topic_config("t", [AlterConfigOp("retention.ms", SET, "1000")])
        assert manager.run_retention() == 1
        with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
            manager.alter_topic_config("nope", {"retention.ms": 1})
        with pytest.raises(InvalidConfigError, match=r"max\.message\.bytes"):
            manager.alter_topic_config("t", {"max.message.bytes": -5})
        assert manager.topic_overrides("t") == {"max.message.bytes": "1000", "retention.ms": "1000"}
    with LogManager(tmp_path, clock=clock) as manager:
        assert manager.topic_overrides("t") == {"max.message.bytes": "1000", "retention.ms": "1000"}
        assert manager.get_log("t").config.max_message_bytes == 1000


def test_compaction_starts_when_the_policy_becomes_compact(tmp_path: Path) -> None:
    config = LogConfig.from_properties({"segment.bytes": 1024 * 1024})
    clock = ManualClock(1_700_000_000_000)
    with LogManager(tmp_path, config, clock) as manager:
        (log,) = manager.create_topic("t", 1)
        for i in range(50):
            log.append([Record(b"v%d" % i, key=b"k%d" % (i % 5), timestamp=clock.milliseconds())])
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        assert manager.run_cleaner() == []
        manager.alter_topic_config("t", [AlterConfigOp("cleanup.policy", APPEND, "compact")])
        assert len(manager.run_cleaner()) == 1
        assert len(list(log.read_records(0, 1 << 20))) == 5


def test_a_closed_manager_alters_nothing(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.create_topic("t", 1)
    manager.close()
    with pytest.raises(KafkaLogError, match="closed"):
        manager.alter_topic_config("t", {"retention.ms": 1})


def test_an_alteration_that_cannot_be_written_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafkalog.errors import KafkaStorageError
    from kafkalog.manager.log_dir import LogDirectory

    with LogManager(tmp_path) as manager:
        (log,) = manager.create_topic("t", 1, {"retention.ms": "5000"})

        def full_disk(self: LogDirectory, configs: object) -> None:
            raise KafkaStorageError("No space left on device")

        with monkeypatch.context() as patch:
            patch.setattr(LogDirectory, "write_topic_configs", full_disk)
            with pytest.raises(KafkaStorageError):
                manager.alter_topic_config("t", {"retention.ms": 1, "segment.ms": 1000})
        assert manager.topic_overrides("t") == {"retention.ms": "5000"}
        assert log.config.retention_ms == 5000
        manager.create_topic("other", 1)  # the next write must not persist the failed one
    with LogManager(tmp_path) as manager:
        assert manager.topic_overrides("t") == {"retention.ms": "5000"}
