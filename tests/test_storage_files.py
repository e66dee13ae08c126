"""File names, checkpoints and atomic writes (Kafka's LogFileUtils, CheckpointFile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.errors import CorruptCheckpointError, InvalidTopicError
from kafkalog.storage import filenames as fn
from kafkalog.storage.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile
from kafkalog.types import TopicPartition, validate_topic_name


def test_twenty_digit_names(tmp_path: Path) -> None:
    assert fn.log_file(tmp_path, 0).name == "00000000000000000000.log"
    assert fn.offset_index_file(tmp_path, 12345).name == "00000000000000012345.index"
    assert fn.time_index_file(tmp_path, 7).name == "00000000000000000007.timeindex"
    assert (
        fn.transaction_index_file(tmp_path, 7, ".swap").name == "00000000000000000007.txnindex.swap"
    )
    assert fn.producer_snapshot_file(tmp_path, 9).name == "00000000000000000009.snapshot"
    assert fn.offset_from_file_name("00000000000000012345.log.deleted") == 12345


@pytest.mark.parametrize(
    ("name", "tp"),
    [("clicks-0", TopicPartition("clicks", 0)), ("a-b-c-12", TopicPartition("a-b-c", 12)),
     ("my.topic-3", TopicPartition("my.topic", 3)),
     ("t-1.0123456789abcdef0123456789abcdef-delete", TopicPartition("t", 1)),
     ("t-2.0123456789abcdef0123456789abcdef-future", TopicPartition("t", 2))],
)  # fmt: skip
def test_parse_partition_dir_names(name: str, tp: TopicPartition) -> None:
    assert fn.parse_partition_dir_name(name) == tp


@pytest.mark.parametrize("name", ["", "nodash", "-1", "topic-", "topic-x", "t-1.x.-delete"])
def test_bad_partition_dir_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        fn.parse_partition_dir_name(name)


@pytest.mark.parametrize("topic", ["", ".", "..", "a" * 250, "has space", "ü"])
def test_topic_name_rules(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(topic)


def test_valid_topic_name_round_trip() -> None:
    assert fn.partition_dir_name(TopicPartition("a" * 249, 3)) == "a" * 249 + "-3"


def test_offset_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / fn.RECOVERY_POINT_CHECKPOINT
    ck = OffsetCheckpointFile(path)
    ck.write({TopicPartition("b", 1): 20, TopicPartition("a", 0): 10})
    assert path.read_text() == "0\n2\na 0 10\nb 1 20\n"
    assert ck.read() == {TopicPartition("a", 0): 10, TopicPartition("b", 1): 20}
    assert not (tmp_path / (fn.RECOVERY_POINT_CHECKPOINT + ".tmp")).exists()
    path.write_text("0\n1\na   0\t7\n")  # any whitespace run is accepted on read
    assert ck.read() == {TopicPartition("a", 0): 7}


@pytest.mark.parametrize(
    "text", ["1\n0\n", "0\n2\na 0 1\n", "0\n1\na 0\n", "0\n1\na x 1\n", "zero\n"]
)
def test_malformed_checkpoints(tmp_path: Path, text: str) -> None:
    path = tmp_path / "ck"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()


def test_empty_or_missing_checkpoint_has_no_entries(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "missing").read() == {}
    (tmp_path / "empty").write_text("")
    assert OffsetCheckpointFile(tmp_path / "empty").read() == {}


def test_leader_epoch_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / fn.LEADER_EPOCH_CHECKPOINT
    LeaderEpochCheckpointFile(path).write([(0, 0), (3, 1500)])
    assert path.read_text() == "0\n2\n0 0\n3 1500\n"
    assert LeaderEpochCheckpointFile(path).read() == [(0, 0), (3, 1500)]


def test_leader_epoch_cache(tmp_path: Path) -> None:
    from kafkalog.log.leader_epoch import LeaderEpochCache

    cache = LeaderEpochCache(tmp_path)
    assert (cache.latest_epoch(), cache.leader_epoch()) == (None, 0)  # none yet: a leader at 0
    cache.assign(0, 0)
    cache.assign(2, 10)
    cache.assign(2, 15)  # same epoch, later start: no change
    cache.assign(5, 30)
    assert cache.entries == [(0, 0), (2, 10), (5, 30)]
    assert (cache.latest_epoch(), cache.leader_epoch()) == (5, 5)
    assert (cache.epoch_for_offset(9), cache.epoch_for_offset(10), cache.epoch_for_offset(99)) == (
        0,
        2,
        5,
    )
    assert cache.end_offset_for(5, 40) == (5, 40)  # the latest epoch ends at the log end
    assert cache.end_offset_for(2, 40) == (2, 30)
    assert cache.end_offset_for(3, 40) == (2, 30)  # largest epoch <= requested
    assert cache.end_offset_for(9, 40) == (-1, -1)
    cache.assign(4, 20)  # a lower epoch at a lower offset removes what follows it
    assert cache.entries == [(0, 0), (2, 10), (4, 20)]
    cache.truncate_from_end(15)
    assert cache.entries == [(0, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    assert LeaderEpochCache(tmp_path).entries == [(2, 12)]  # written through to the file


def test_a_segment_closed_during_a_read_is_not_read_through_a_reused_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention closes a segment while a fetch is inside pread; the number of the closed
    descriptor is handed to the next opened file. The read must still return its own bytes."""
    import os
    import threading

    from kafkalog.storage import file_records
    from kafkalog.storage.file_records import FileRecords

    records = FileRecords(tmp_path / "a.log")
    records.append(b"A" * 100)
    entered, release = threading.Event(), threading.Event()
    real_pread = os.pread

    def slow_pread(fd: int, n: int, at: int) -> bytes:
        entered.set()
        release.wait(10)
        return real_pread(fd, n, at)

    monkeypatch.setattr(file_records.os, "pread", slow_pread)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(records.read(0, 100)))
    reader.start()
    assert entered.wait(10)
    records.close_handler()
    other = os.open(tmp_path / "b.log", os.O_RDWR | os.O_CREAT)
    os.write(other, b"B" * 10)
    release.set()
    reader.join(10)
    os.close(other)
    assert got == [b"A" * 100]


def test_meta_properties_gives_the_node_and_cluster_a_kafka_broker_formatted(
    tmp_path: Path,
) -> None:
    from kafkalog.storage.meta_properties import node_id, read_meta_properties

    empty, kraft, zk = tmp_path / "empty", tmp_path / "kraft", tmp_path / "zk"
    for d in (empty, kraft, zk):
        d.mkdir()
    (kraft / "meta.properties").write_text(
        "#\n#Tue Nov 24 10:00:00 UTC 2026\nnode.id=3\ndirectory.id=AbC\nversion=1\n"
        "cluster.id = J8eMxyd0S9mC1cJr5IBQeA\n! a comment too\n"
    )
    (zk / "meta.properties").write_text("version=0\nbroker.id=7\n")
    assert (read_meta_properties([empty]), node_id([empty])) == ({}, None)
    props = read_meta_properties([empty, kraft, zk])  # the first that has one
    assert props["cluster.id"] == "J8eMxyd0S9mC1cJr5IBQeA" and "! a comment too" not in props
    assert (node_id([kraft, zk]), node_id([zk])) == (3, 7)
