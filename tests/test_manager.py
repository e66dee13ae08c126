"""LogManager: directories, topics, parallel load, checkpoints, background tasks (Kafka's
LogManager)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from kafkalog import (
    InvalidConfigError,
    InvalidTopicError,
    LogConfig,
    LogManager,
    ManagerConfig,
    ManualClock,
    ProducerFields,
    Record,
)
from kafkalog.errors import (
    KafkaLogError,
    LogDirectoryLockedError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from kafkalog.storage import filenames as fn
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.types import TopicPartition

NOW = 1_700_000_000_000


def manager(dirs: list[Path], clock: ManualClock | None = None, **broker: object) -> LogManager:
    return LogManager(
        dirs,
        LogConfig.from_properties({"internal.segment.bytes": 400, "file.delete.delay.ms": 1000}),
        clock or ManualClock(NOW),
        config=ManagerConfig.from_properties({k.replace("_", "."): v for k, v in broker.items()}),
    )


def crash(m: LogManager) -> None:
    """Drop everything as a killed process would: no flush, no checkpoints, no marker."""
    m.scheduler.shutdown()
    for log in m.logs().values():
        log.close_without_flush()
    for d in m._dirs:
        d.release()


def fill(m: LogManager, topic: str, partition: int = 0, n: int = 10) -> None:
    log = m.get_log(topic, partition)
    for i in range(n):
        log.append([Record(b"v" * 50, key=b"k%d" % i, timestamp=NOW)])


def test_topics_spread_over_the_emptiest_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    with manager(dirs) as m:
        m.create_topic("clicks", 3)
        m.create_topic("orders", 1)
        assert m.topics() == {"clicks": 3, "orders": 1}
        placed = [m.log_dir_of("clicks", p) for p in range(3)] + [m.log_dir_of("orders")]
        assert placed == [dirs[0], dirs[1], dirs[0], dirs[1]]
        assert (dirs[1] / "clicks-1" / "00000000000000000000.log").exists()
        with pytest.raises(TopicExistsError):
            m.create_topic("clicks")
        with pytest.raises(UnknownTopicOrPartitionError, match="clicks-7"):
            m.get_log("clicks", 7)


@pytest.mark.parametrize("bad", ["", ".", "..", "a" * 250, "has space", "sl/ash"])
def test_kafka_topic_name_rules(tmp_path: Path, bad: str) -> None:
    with manager([tmp_path / "a"]) as m, pytest.raises(InvalidTopicError):
        m.create_topic(bad)


def test_overrides_are_validated_and_persisted(tmp_path: Path) -> None:
    dirs = [tmp_path / "a"]
    with manager(dirs) as m:
        with pytest.raises(InvalidConfigError, match=r"retention\.ms"):
            m.create_topic("bad", config={"retention.ms": "soon"})
        assert m.topics() == {}
        m.create_topic(
            "keyed", 2, config={"cleanup.policy": "compact", "internal.segment.bytes": 1000}
        )
        assert m.get_log("keyed", 1).config.segment_size == 1000
    with manager(dirs) as m:
        config = m.topic_config("keyed")
        assert config.compact and config.segment_size == 1000
        assert m.get_log("keyed", 0).config.compact


def test_a_directory_has_one_owner(tmp_path: Path) -> None:
    m = manager([tmp_path / "a"])
    with pytest.raises(LogDirectoryLockedError):
        manager([tmp_path / "b", tmp_path / "a"])
    m.close()
    manager([tmp_path / "b", tmp_path / "a"]).close()  # the failed attempt released "b"
    with pytest.raises(InvalidConfigError, match=r"log\.dirs"):
        manager([tmp_path / "a", tmp_path / "a"])


def test_clean_shutdown_loads_without_recovery(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    with manager(dirs) as m:
        m.create_topic("t", 4)
        for p in range(4):
            fill(m, "t", p)
    assert all((d / fn.CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    points = OffsetCheckpointFile(dirs[0] / fn.RECOVERY_POINT_CHECKPOINT).read()
    assert points == {TopicPartition("t", 0): 10, TopicPartition("t", 2): 10}
    with manager(dirs, num_recovery_threads_per_data_dir=2) as m:
        assert not any((d / fn.CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
        for p in range(4):
            log = m.get_log("t", p)
            assert log.load_result.recovered_segments == []
            assert log.log_end_offset == 10


def test_a_crash_recovers_from_the_checkpointed_recovery_point(tmp_path: Path) -> None:
    dirs = [tmp_path / "a"]
    clock = ManualClock(NOW)
    m = manager(dirs, clock)
    m.create_topic("t")
    fill(m, "t", n=5)
    m.get_log("t").flush()
    m.run_checkpoints()
    fill(m, "t", n=5)
    crash(m)
    with manager(dirs, clock) as m:
        log = m.get_log("t")
        assert log.log_end_offset == 10
        assert log.load_result.recovered_segments  # the unflushed tail was validated
        assert min(log.load_result.recovered_segments) <= 5


def test_background_tasks_run_on_the_clock(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    m = manager(
        [tmp_path / "a"],
        clock,
        log_initial_task_delay_ms=100,
        log_retention_check_interval_ms=1000,
        log_flush_offset_checkpoint_interval_ms=500,
    )
    m.create_topic("t", config={"retention.ms": 5000})
    fill(m, "t", n=20)
    segments = m.get_log("t").number_of_segments
    assert m.scheduler.tick() == ["flush-metadata-file"]  # the initial delay: only the new topic
    clock.advance(100)
    ran = m.scheduler.tick()
    assert "kafka-log-retention" in ran and "kafka-recovery-point-checkpoint" in ran
    assert m.get_log("t").number_of_segments == segments  # nothing old enough yet
    clock.advance(6000)
    m.scheduler.tick()
    assert m.get_log("t").number_of_segments == 1
    assert m.get_log("t").log_start_offset == 20
    m.close()


def test_each_checkpoint_file_is_written_once_per_its_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kafka-recovery-point-checkpoint writes the recovery points, and
    kafka-log-start-offset-checkpoint the log start offsets, each on its own period: over
    three minutes of 60-second periods, three writes of each file, not six."""
    written: list[str] = []
    real = OffsetCheckpointFile.write

    def counted(self: OffsetCheckpointFile, offsets: Any, **kwargs: Any) -> None:
        written.append(self.path.name)
        real(self, offsets, **kwargs)

    monkeypatch.setattr(OffsetCheckpointFile, "write", counted)
    clock = ManualClock(NOW)
    m = manager([tmp_path / "a"], clock, log_initial_task_delay_ms=0)
    m.create_topic("t")
    fill(m, "t", n=5)
    written.clear()
    for _ in range(180):
        clock.advance(1000)
        m.scheduler.tick()
    assert written.count(fn.RECOVERY_POINT_CHECKPOINT) == 3
    assert written.count(fn.LOG_START_OFFSET_CHECKPOINT) == 3
    m.close()


def test_topic_deletion_is_asynchronous(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    dirs = [tmp_path / "a"]
    m = manager(dirs, clock)
    m.create_topic("gone", 2)
    m.create_topic("kept")
    fill(m, "gone")
    m.delete_topic("gone")
    assert m.topics() == {"kept": 1}
    pending = [p.name for p in dirs[0].iterdir() if p.name.endswith("-delete")]
    assert len(pending) == 2 and all(n.startswith("gone-") for n in pending)
    assert m.run_delete_logs() == 0
    clock.advance(1000)
    assert m.run_delete_logs() == 2
    assert not [p for p in dirs[0].iterdir() if p.name.endswith("-delete")]
    with pytest.raises(UnknownTopicOrPartitionError):
        m.delete_topic("gone")
    m.close()


def test_delete_dirs_found_at_start_are_removed(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    dirs = [tmp_path / "a"]
    m = manager(dirs, clock)
    m.create_topic("gone")
    m.delete_topic("gone")
    crash(m)  # before the delay passed
    with manager(dirs, clock) as m:
        assert m.topics() == {}
        clock.advance(1000)
        assert m.run_delete_logs() == 1


def test_producers_expire_through_the_manager(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    m = manager([tmp_path / "a"], clock, producer_id_expiration_ms=1000)
    m.create_topic("t")
    m.get_log("t").append([Record(b"v", timestamp=NOW)], producer=ProducerFields(3, 0, 0))
    assert m.run_producer_expiration() == 0
    clock.advance(1000)
    assert m.run_producer_expiration() == 1
    m.close()


def test_readers_never_fail_during_retention(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    m = manager([tmp_path / "a"], clock)
    m.create_topic("t", config={"retention.bytes": 1500})
    log = m.get_log("t")
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                start = log.log_start_offset
                fetch = log.read(start, 1 << 16)
                fetch.read()
            except KafkaLogError as err:
                if "out of range" not in str(err):  # the start moved between the two calls
                    errors.append(err)
            except BaseException as err:  # pragma: no cover - the failure this test looks for
                errors.append(err)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(30):
        fill(m, "t", n=3)
        m.run_retention()
        clock.advance(600)
        log.delete_old_segments()
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert log.size_in_bytes <= 1500 + 400
    m.close()


def test_manager_config_rejects_unknown_keys() -> None:
    with pytest.raises(InvalidConfigError, match=r"log\.dirz"):
        ManagerConfig.from_properties({"log.dirz": "x"})
    assert (
        ManagerConfig.from_properties(
            {"log.retention.check.interval.ms": "1000"}
        ).log_retention_check_interval_ms
        == 1000
    )


@pytest.mark.parametrize("step", ["renamed", "checkpointed"])
def test_a_crash_during_retention_leaves_a_consistent_log(tmp_path: Path, step: str) -> None:
    clock = ManualClock(NOW)
    dirs = [tmp_path / "a"]
    m = manager(dirs, clock)
    m.create_topic("t", config={"retention.bytes": 500})
    fill(m, "t", n=20)
    m.run_checkpoints()
    assert m.run_retention() > 0  # files renamed .deleted, removal still pending
    start = m.get_log("t").log_start_offset
    if step == "checkpointed":
        m.run_checkpoints()
    crash(m)
    with manager(dirs, clock) as m:
        log = m.get_log("t")
        assert not [p for p in log.directory.iterdir() if p.name.endswith(".deleted")]
        assert log.log_start_offset == start == log.segments.base_offsets[0]
        assert log.read_records(start)[0].offset == start
        assert log.log_end_offset == 20


def test_a_kraft_metadata_log_in_the_directory_is_left_alone(tmp_path: Path) -> None:
    """Kafka's KRaft node keeps ``__cluster_metadata-0`` in its first log directory unless
    ``metadata.log.dir`` says otherwise. Kafka's LogManager leaves it to the Raft layer; so do
    we: it is not a topic (nor to lock-free readers), retention never touches its segments,
    and the name cannot be created."""
    from kafkalog import Log
    from kafkalog.log.view import discover_partitions

    metadata = tmp_path / "__cluster_metadata-0"
    with Log.open(metadata) as log:  # what a KRaft node wrote, at a timestamp long past
        for i in range(30):
            log.append([Record(b"r" * 50, timestamp=NOW - 10**9 + i)])
        log.roll()
    before = {p.name: p.read_bytes() for p in metadata.iterdir() if p.is_file()}
    config = LogConfig.from_properties({"retention.ms": 1000, "file.delete.delay.ms": 0})
    with LogManager([tmp_path], config, ManualClock(NOW)) as m:
        m.create_topic("t", 1)
        assert m.topics() == {"t": 1}
        with pytest.raises(InvalidTopicError, match="__cluster_metadata is prohibited"):
            m.create_topic("__cluster_metadata", 1)
        m.run_retention()
        m.run_delete_logs()
    assert {p.name: p.read_bytes() for p in metadata.iterdir() if p.is_file()} == before
    assert [tp.topic for tp in discover_partitions([tmp_path])] == ["t"]
