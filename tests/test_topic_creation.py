"""Creating many topics as one (the manager's side of CreateTopics): the batch's intent synced
first, its partitions made unsynced, then settled (configs, one round of concurrent fsyncs, the
intent cleared) by ``flush_new_topics``. A crash before the intent is durable leaves none of the
batch; a crash after it, anywhere, completes every topic at the next start, as a topic in
Kafka's metadata log exists while its broker has yet to make the partitions.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafkalog import KafkaStorageError, LogManager, ManualClock, Record
from kafkalog.errors import InvalidArgumentError, KafkaLogError, TopicExistsError
from kafkalog.manager.topic_creation import NewTopic
from kafkalog.manager.topic_intents import INTENT_FILE
from kafkalog.storage.partition_metadata import random_topic_id, read_partition_metadata

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _live_partition_dirs(log_dir: Path) -> list[str]:
    return sorted(
        p.name for p in log_dir.iterdir() if p.is_dir() and not p.name.endswith("-delete")
    )


def test_a_batch_creates_each_topic_or_says_why_not(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
        ids = {"a": random_topic_id(), "b": random_topic_id()}
        results = manager.create_topics(
            [
                NewTopic("a", 2, {"cleanup.policy": "compact"}, ids["a"]),
                NewTopic("t", 1),
                NewTopic("b", 3, topic_id=ids["b"]),
            ],
            settle=False,
        )
        assert list(results) == ["a", "t", "b"]
        assert isinstance(results["t"], TopicExistsError)
        for name, count in (("a", 2), ("b", 3)):
            logs = results[name]
            assert isinstance(logs, list)
            assert [log.directory.name for log in logs] == [f"{name}-{p}" for p in range(count)]
            for log in logs:
                meta = read_partition_metadata(log.directory)
                assert meta is not None and meta.topic_id == ids[name]
        assert manager.topics() == {"a": 2, "b": 3, "t": 1}
        assert manager.topic_overrides("a") == {"cleanup.policy": "compact"}
        assert (tmp_path / INTENT_FILE).exists()  # until the batch is settled
        manager.flush_new_topics()
        assert not (tmp_path / INTENT_FILE).exists()
        stored = json.loads((tmp_path / "kafkalog-topic-configs.json").read_text())
        assert stored["a"] == {"cleanup.policy": "compact"}
        with pytest.raises(InvalidArgumentError, match="named twice"):
            manager.create_topics([NewTopic("c", 1), NewTopic("c", 2)])
        with pytest.raises(InvalidArgumentError, match="reserved"):
            manager.create_topics([NewTopic("c", 1, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")])
        assert "c" not in manager.topics()
    with LogManager(tmp_path) as again:
        assert again.topics() == {"a": 2, "b": 3, "t": 1}


def test_two_log_directories_share_a_batch_evenly(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    with LogManager(dirs) as manager:
        manager.create_topics([NewTopic("a", 3), NewTopic("b", 3)])
        counts = [len(_live_partition_dirs(d)) for d in dirs]
        assert counts == [3, 3]
        manager.create_topic("c", 1)
        assert [len(_live_partition_dirs(d)) for d in dirs] == [4, 3]


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name descriptors")
def test_a_batch_syncs_its_partitions_together_and_all_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's own thread fsyncs a fixed handful of files whatever the batch's size (the
    intent, the topic configs, the clear), and every new partition's files are still synced,
    by the concurrent round, before the call returns."""
    real = os.fsync
    calls: list[tuple[bool, str]] = []
    guard = threading.Lock()

    def counting(fd: int) -> None:
        with guard:
            calls.append((threading.current_thread() is threading.main_thread(), _fd_path(fd)))
        real(fd)

    with LogManager(tmp_path) as manager:
        monkeypatch.setattr(os, "fsync", counting)
        manager.create_topics([NewTopic(f"t{i}", 10) for i in range(20)], settle=False)
        assert len(calls) == 2, calls  # the intent and its directory entry: all the answer waits
        manager.flush_new_topics()
        monkeypatch.undo()
        on_caller = [path for own, path in calls if own]
        synced = {path for _, path in calls}
        assert len(on_caller) <= 6, on_caller
        for i in range(20):
            for p in range(10):
                d = tmp_path / f"t{i}-{p}"
                assert str(d) in synced and str(d / "partition.metadata") in synced
        assert str(tmp_path) in synced


_CRASH_IN_BATCH = """
import os, sys
from kafkalog import LogManager
from kafkalog.manager import log_manager, topic_creator, topic_intents
from kafkalog.manager.topic_creation import NewTopic
where = sys.argv[2]
def crash(*args, **kwargs):
    os._exit(9)
if where == "recording":
    topic_intents.write_atomically = crash
elif where == "opening":
    original = log_manager.LogManager._open_log
    def crash_at_b1(self, path, tp, *rest):
        if tp.topic == "b" and tp.partition == 1:
            os._exit(9)
        return original(self, path, tp, *rest)
    log_manager.LogManager._open_log = crash_at_b1
elif where == "flushing":
    topic_creator.sync_new_partitions = crash
manager = LogManager(sys.argv[1])
manager.create_topics(
    [NewTopic("a", 2, {"cleanup.policy": "compact"}), NewTopic("b", 2), NewTopic("c", 1)],
    settle=False,
)
if where == "answered":
    os._exit(9)
manager.flush_new_topics()
"""


@pytest.mark.parametrize("where", ["opening", "answered", "flushing"])
def test_a_crash_once_a_batch_is_recorded_completes_every_topic(tmp_path: Path, where: str) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("kept", 1)
    _crash(tmp_path, where)
    assert (tmp_path / INTENT_FILE).exists()
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {"a": 2, "b": 2, "c": 1, "kept": 1}
        assert manager.topic_overrides("a") == {"cleanup.policy": "compact"}
        ids = {manager.topic_id(t) for t in ("a", "b", "c", "kept")}
        assert None not in ids and len(ids) == 4
        for p in range(2):  # every partition carries its topic's ID, as recorded
            meta = read_partition_metadata(tmp_path / f"b-{p}")
            assert meta is not None and meta.topic_id == manager.topic_id("b")
        assert not (tmp_path / INTENT_FILE).exists()
        manager.get_log("b", 1).append([Record(b"v")])
    with LogManager(tmp_path) as again:
        assert again.topics() == {"a": 2, "b": 2, "c": 1, "kept": 1}
        assert again.get_log("b", 1).log_end_offset == 1


def test_a_crash_before_a_batch_is_recorded_leaves_none_of_it(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("kept", 1)
    _crash(tmp_path, "recording")
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {"kept": 1}
        assert _live_partition_dirs(tmp_path) == ["kept-0"]


def _crash(log_dir: Path, where: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CRASH_IN_BATCH, str(log_dir), where],
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=60,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 9, done.stderr


def _failing_off_the_caller(real: Callable[[int], None]) -> Callable[[int], None]:
    def fsync(fd: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    return fsync


def test_a_full_disk_while_recording_a_batch_creates_none_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("kept", 1)
        manager.flush_new_topics()
        with monkeypatch.context() as m:
            m.setattr(os, "fsync", _failing_everywhere(os.fsync))
            with pytest.raises(KafkaStorageError, match="No space left"):
                manager.create_topics([NewTopic("a", 4), NewTopic("b", 4)])
        assert manager.topics() == {"kept": 1}
        assert _live_partition_dirs(tmp_path) == ["kept-0"]
        assert not (tmp_path / INTENT_FILE).exists()
        assert not list(tmp_path.rglob("*.tmp"))
        manager.create_topics([NewTopic("a", 4)])  # the disk has room again
        assert manager.topics() == {"a": 4, "kept": 1}


def test_a_full_disk_while_settling_a_batch_keeps_it_and_settles_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topics([NewTopic("a", 4), NewTopic("b", 4)], settle=False)
        with monkeypatch.context() as m:
            m.setattr(os, "fsync", _failing_off_the_caller(os.fsync))
            with pytest.raises(KafkaStorageError, match="No space left"):
                manager.flush_new_topics()
            with pytest.raises(KafkaStorageError, match="No space left"):
                manager.create_topics([NewTopic("c", 1)])  # settles the last batch first
        assert manager.topics() == {"a": 4, "b": 4}
        assert (tmp_path / INTENT_FILE).exists()
        manager.flush_new_topics()  # the disk has room again
        assert not (tmp_path / INTENT_FILE).exists()
        manager.create_topics([NewTopic("c", 1)])
    with LogManager(tmp_path) as again:
        assert again.topics() == {"a": 4, "b": 4, "c": 1}


def test_the_manager_settles_a_batch_by_itself_soon_after(tmp_path: Path) -> None:
    clock = ManualClock(0)
    with LogManager(tmp_path, clock=clock) as manager:
        manager.create_topics([NewTopic("a", 2)], settle=False)
        assert (tmp_path / INTENT_FILE).exists()
        clock.advance(100)
        assert "flush-metadata-file" in manager.scheduler.tick()
        assert not (tmp_path / INTENT_FILE).exists()


def test_a_library_caller_gets_its_batch_settled_or_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``create_topics`` settles by default: nothing drives a library's manager's tasks."""
    with LogManager(tmp_path) as manager:
        manager.create_topics([NewTopic("a", 2)])
        assert not (tmp_path / INTENT_FILE).exists()
        with monkeypatch.context() as m:
            m.setattr(os, "fsync", _failing_off_the_caller(os.fsync))
            with pytest.raises(KafkaStorageError, match="No space left"):
                manager.create_topics([NewTopic("b", 3)])
        assert manager.topics() == {"a": 2}
        assert _live_partition_dirs(tmp_path) == ["a-0", "a-1"]
        assert not (tmp_path / INTENT_FILE).exists()
    with LogManager(tmp_path) as again:
        assert again.topics() == {"a": 2}


def test_a_start_completing_a_batch_rewrites_only_what_the_crash_broke(tmp_path: Path) -> None:
    """A partition.metadata that reads back right is left alone (on a full disk a rewrite
    would fail); an empty one, as a crash leaves an unsynced file, is written again."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    with LogManager(live) as manager:
        manager.create_topics([NewTopic("a", 2, {"retention.ms": "1000"})], settle=False)
        topic_id = manager.topic_id("a")
        shutil.copytree(live, crashed, ignore=shutil.ignore_patterns(".lock"))  # as a kill -9
    (crashed / "a-1" / "partition.metadata").write_bytes(b"")
    kept = crashed / "a-0" / "partition.metadata"
    before = kept.stat().st_mtime_ns, kept.stat().st_ino
    with LogManager(crashed) as manager:
        assert manager.topics() == {"a": 2}
        assert manager.topic_overrides("a") == {"retention.ms": "1000"}
        meta = read_partition_metadata(crashed / "a-1")
        assert meta is not None and meta.topic_id == topic_id
    assert (kept.stat().st_mtime_ns, kept.stat().st_ino) == before


def _failing_everywhere(real: Callable[[int], None]) -> Callable[[int], None]:
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return fsync


def test_an_intent_naming_one_topic_as_before_batches_is_still_finished(tmp_path: Path) -> None:
    """A directory left by a crash of an earlier kafkalog, whose intent names one topic."""
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 2)
    old: dict[str, Any] = {"version": 0, "op": "create", "topic": "t", "first": 0}
    (tmp_path / INTENT_FILE).write_text(json.dumps(old))
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {}
    (tmp_path / INTENT_FILE).write_text(json.dumps({"version": 1, "op": "create", "topics": []}))
    with pytest.raises(KafkaLogError, match="unknown topic intent"):
        LogManager(tmp_path)


@pytest.mark.parametrize(
    ("entry", "topics"),
    [
        ({"name": "a", "partitions": 2, "topic_id": "x", "configs": {}}, ["a"]),  # not a Uuid
        ({"name": "a", "partitions": 0, "configs": {}}, ["a"]),  # no ID, no partitions
        ({"name": "a", "partitions": 100_001, "topic_id": None, "configs": {}}, ["a"]),
        ({"name": "a", "partitions": 2, "topic_id": None, "configs": {"k": 1}}, ["a"]),
        ({"name": "b", "partitions": 2, "topic_id": None, "configs": {}}, ["a"]),  # names differ
    ],
)
def test_a_damaged_record_of_created_topics_is_refused_not_completed(
    tmp_path: Path, entry: dict[str, Any], topics: list[str]
) -> None:
    """A start refuses (typed, naming the file) rather than make partitions from a record it
    cannot trust; nothing is created."""
    if entry.get("topic_id") is None and "topic_id" in entry:
        entry = {**entry, "topic_id": random_topic_id()}
    document = {"version": 1, "op": "created", "topics": topics, "first": 0, "new": [entry]}
    (tmp_path / INTENT_FILE).write_text(json.dumps(document))
    with pytest.raises(KafkaLogError, match="topic intent") as raised:
        LogManager(tmp_path)
    assert INTENT_FILE in str(raised.value)
    assert _live_partition_dirs(tmp_path) == []


def test_threads_creating_overlapping_batches_each_get_a_topic_once(tmp_path: Path) -> None:
    """Four threads ask for overlapping batches while a fifth settles them as the task would:
    each topic is made by exactly one, the others are told it exists, and a restart finds
    exactly the topics made, each whole."""
    names = [f"t{i}" for i in range(12)]
    outcomes: list[dict[str, Any]] = []
    guard = threading.Lock()
    stop = threading.Event()
    with LogManager(tmp_path) as manager:

        def ask(offset: int) -> None:
            batch = [NewTopic(n, 3) for n in names[offset:] + names[:offset]]
            got = manager.create_topics(batch, settle=False)
            with guard:
                outcomes.append(got)

        def settle() -> None:
            while not stop.is_set():
                manager.flush_new_topics(threads=1)

        settler = threading.Thread(target=settle)
        settler.start()
        askers = [threading.Thread(target=ask, args=(i * 3,)) for i in range(4)]
        for t in askers:
            t.start()
        for t in askers:
            t.join(60)
        stop.set()
        settler.join(60)
        for name in names:
            made = [o[name] for o in outcomes if isinstance(o[name], list)]
            refused = [o[name] for o in outcomes if isinstance(o[name], TopicExistsError)]
            assert (len(made), len(refused)) == (1, 3), name
        assert manager.topics() == dict.fromkeys(names, 3)
        manager.flush_new_topics()
        assert not (tmp_path / INTENT_FILE).exists()
    with LogManager(tmp_path) as again:
        assert again.topics() == dict.fromkeys(names, 3)
