"""LogManager opened for some partitions only (the Spark sink's commit): the others stay closed,
keep their checkpoint entries, and keep their claim to recovery after an unclean shutdown."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import LogManager, Record
from kafkalog.errors import KafkaLogError, TopicExistsError, UnknownTopicOrPartitionError
from kafkalog.log.log import Log
from kafkalog.storage import filenames as fn
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.types import TopicPartition
from test_manager import NOW, crash, fill, manager

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def two_topics(dirs: list[Path]) -> None:
    with manager(dirs) as m:
        m.create_topic("a", 2)
        m.create_topic("b", 1)
        for tp in (A0, A1, B0):
            fill(m, tp.topic, tp.partition)
            m.get_log(tp.topic, tp.partition).maybe_increment_log_start_offset(3)


def checkpoints(dirs: list[Path], name: str) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for d in dirs:
        out |= OffsetCheckpointFile(d / name).read()
    return out


def opened_with(monkeypatch: pytest.MonkeyPatch) -> dict[TopicPartition, bool]:
    """tp -> had_clean_shutdown, for every log the managers open from now on."""
    seen: dict[TopicPartition, bool] = {}
    original = Log.open

    def spy(path: Path, *args: object, **kwargs: object) -> Log:
        seen[fn.parse_partition_dir_name(Path(path).name)] = bool(kwargs["had_clean_shutdown"])
        return original(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Log, "open", staticmethod(spy))
    return seen


@pytest.mark.parametrize("dir_count", [1, 2])
def test_a_partial_load_opens_only_its_partitions_and_keeps_the_others_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dir_count: int
) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(dir_count)]
    two_topics(dirs)
    recovery = checkpoints(dirs, fn.RECOVERY_POINT_CHECKPOINT)
    starts = checkpoints(dirs, fn.LOG_START_OFFSET_CHECKPOINT)
    assert set(recovery) == {A0, A1, B0} and set(starts) == {A0, A1, B0}
    seen = opened_with(monkeypatch)
    m = LogManager(dirs, partitions=[A1])
    with m:
        assert set(m.logs()) == {A1} and seen == {A1: True}
        m.get_log("a", 1).append([Record(b"more", timestamp=NOW)])
        m.run_checkpoints()  # a rewrite while open keeps the others' entries too
        assert checkpoints(dirs, fn.RECOVERY_POINT_CHECKPOINT)[B0] == recovery[B0]
    after = checkpoints(dirs, fn.RECOVERY_POINT_CHECKPOINT)
    assert after[A1] == 11 and {tp: after[tp] for tp in (A0, B0)} == {
        tp: recovery[tp] for tp in (A0, B0)
    }
    assert checkpoints(dirs, fn.LOG_START_OFFSET_CHECKPOINT) == starts
    assert all((d / fn.CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    seen.clear()
    with manager(dirs) as whole:  # the next full start trusts everything: it was clean
        assert seen == dict.fromkeys((A0, A1, B0), True)
        assert {tp: log.log_start_offset for tp, log in whole.logs().items()} == dict.fromkeys(
            (A0, A1, B0), 3
        )
        assert whole.get_log("a", 1).log_end_offset == 11


def test_after_a_crash_a_partial_load_leaves_the_directory_unclean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = [tmp_path / "d"]
    two_topics(dirs)
    m = manager(dirs)
    fill(m, "b", 0)
    crash(m)
    seen = opened_with(monkeypatch)
    with LogManager(dirs, partitions=[A0]):
        assert seen == {A0: False}  # what it opens it recovers
    # it recovered a-0 only, so b-0 and a-1 must still be recovered by the next full start
    assert not (dirs[0] / fn.CLEAN_SHUTDOWN_FILE).exists()
    seen.clear()
    with manager(dirs) as whole:
        assert seen == dict.fromkeys((A0, A1, B0), False)
        assert whole.get_log("b", 0).log_end_offset == 20
    assert (dirs[0] / fn.CLEAN_SHUTDOWN_FILE).exists()


def test_a_partial_manager_refuses_topic_changes_and_names_what_it_did_not_open(
    tmp_path: Path,
) -> None:
    dirs = [tmp_path / "d"]
    two_topics(dirs)
    with LogManager(dirs, partitions=[A0]) as m:
        with pytest.raises(KafkaLogError, match="some partitions only, and not c-0"):
            m.create_topic("c")
        with pytest.raises(KafkaLogError, match="opened some partitions only"):
            m.delete_topic("a")
        with pytest.raises(UnknownTopicOrPartitionError, match="b-0 was not opened"):
            m.get_log("b", 0)
    with manager(dirs) as whole:
        assert whole.topics() == {"a": 2, "b": 1}


def test_a_partial_manager_creates_a_topic_whose_every_partition_it_opened(
    tmp_path: Path,
) -> None:
    """The Spark sink's auto-creation: the new partitions go where a whole manager would put
    them (the directory with the fewest partitions, unopened ones counted), and a topic that
    exists on disk, opened or not, is not created again."""
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    two_topics(dirs)  # a-0, b-0 in d1; a-1 in d2
    c = [TopicPartition("c", p) for p in range(3)]
    with LogManager(dirs, partitions=[A0, *c]) as m:
        with pytest.raises(KafkaLogError, match="and not c-3"):
            m.create_topic("c", 4)
        m.create_topic("c", 3)
        m.get_log("c", 2).append([Record(b"v")])
        with pytest.raises(TopicExistsError):
            m.create_topic("c", 3)
    for opened, topic in [
        ([TopicPartition("b", 0)], "b"),  # on disk, opened
        ([A0, TopicPartition("b", 0)], "a"),  # a-0 opened, a-1 not: the topic exists
        ([TopicPartition("b", 0)], "c"),  # c-0 was not asked for, yet on disk: exists
    ]:
        with LogManager(dirs, partitions=opened) as m, pytest.raises(TopicExistsError):
            m.create_topic(topic, 1)
    with manager(dirs) as whole:
        assert whole.topics() == {"a": 2, "b": 1, "c": 3}
        placed = sorted(len(list(d.glob("*-[0-9]*"))) for d in dirs)
        assert placed == [3, 3]  # d1 had two, d2 one: the three new ones even them out
        assert whole.get_log("c", 2).log_end_offset == 1


def test_cleaner_checkpoint_entries_of_unopened_partitions_survive(tmp_path: Path) -> None:
    dirs = [tmp_path / "d"]
    two_topics(dirs)
    cleaner = OffsetCheckpointFile(dirs[0] / fn.CLEANER_OFFSET_CHECKPOINT)
    cleaner.write({A0: 5, A1: 6, B0: 7})
    with LogManager(dirs, partitions=[A0]) as m:
        m.truncate_to("a", 0, 4)  # rewrites the cleaner checkpoint: a-0 pulled down to 4
    assert cleaner.read() == {A0: 4, A1: 6, B0: 7}


@pytest.mark.parametrize("partitions", [["a-0"], [("a", 0)], 7, [A0, None]])
def test_partitions_must_be_topic_partitions(tmp_path: Path, partitions: object) -> None:
    with pytest.raises(KafkaLogError, match="must be TopicPartitions"):
        LogManager([tmp_path / "d"], partitions=partitions)  # type: ignore[arg-type]
    LogManager([tmp_path / "d"]).close()  # nothing was left locked


def test_a_partial_manager_killed_mid_append_leaves_everything_to_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = [tmp_path / "d"]
    two_topics(dirs)
    recovery = checkpoints(dirs, fn.RECOVERY_POINT_CHECKPOINT)
    partial = LogManager(dirs, partitions=[A0])
    fill(partial, "a", 0)
    crash(partial)  # kill -9: no flush, no checkpoints, no marker
    assert not (dirs[0] / fn.CLEAN_SHUTDOWN_FILE).exists()
    assert checkpoints(dirs, fn.RECOVERY_POINT_CHECKPOINT) == recovery
    seen = opened_with(monkeypatch)
    with manager(dirs) as whole:
        assert seen == dict.fromkeys((A0, A1, B0), False)
        assert whole.get_log("a", 0).log_end_offset >= 10  # what was acknowledged before
