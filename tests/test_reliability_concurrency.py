"""Reliability under concurrency: lazily opened indexes, one writer per directory, and lock-free
readers racing appends, truncation, rolls, retention and compaction swaps.

Each test here reproduced a failure on 487a232 (data loss, wrong data or a reader crash).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kafkalog import (
    KafkaLogError,
    Log,
    LogClosedError,
    LogConfig,
    LogManager,
    ManualClock,
    MemoryRecords,
    OffsetOutOfRangeError,
    Record,
)
from kafkalog.errors import LogDirectoryLockedError
from kafkalog.log.read_path import LogReader
from kafkalog.storage import time_index as time_index_module
from kafkalog.storage.dir_lock import held_by_writer
from kafkalog.storage.segment import LogSegment

SRC = str(Path(__file__).resolve().parents[1] / "src")


def records(n: int, ts: int = 1_000, size: int = 40) -> list[Record]:
    return [Record(b"v" * size, key=b"k%d" % i, timestamp=ts + i) for i in range(n)]


def run_threads(targets: list[Callable[[], None]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def go() -> None:
            try:
                fn()
            except BaseException as err:
                errors.append(err)

        return go

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a thread hung"
    return errors


# --- 1. lazily opened indexes ----------------------------------------------------------------


def test_two_threads_opening_a_time_index_share_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The opening is slowed so both threads are inside it at once: before the fix the second
    read the first's preallocated file as ~870,000 zero entries."""
    log = Log.open(tmp_path / "t-0", LogConfig(), ManualClock(10_000))
    log.append(records(10))
    seg = log.roll()
    original = time_index_module.TimeIndex.__init__

    def slow_init(self: object, *args: object, **kwargs: object) -> None:
        time.sleep(0.05)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(time_index_module.TimeIndex, "__init__", slow_init)
    seen: list[object] = []
    errors = run_threads([lambda: seen.append(seg.time_index)] * 2)
    assert not errors
    assert seen[0] is seen[1]
    assert seg.time_index.entries == 0
    log.append(records(5, ts=50_000))
    assert seg.max_timestamp_so_far == 50_004
    log.close()
    with Log.open(tmp_path / "t-0", LogConfig(), ManualClock(10_000)) as again:
        assert again.list_offsets(-3) is not None
        assert again.list_offsets(-3).offset == 14  # type: ignore[union-attr]


def test_max_timestamp_reader_never_hides_an_append(tmp_path: Path, fast_switching: None) -> None:
    """A reader's first look at a segment's largest timestamp races the first append after a
    roll; the append's timestamp must win, or retention.ms deletes fresh records."""
    clock = ManualClock(1_000_000)
    config = LogConfig.from_properties({"retention.ms": "100000"})
    for trial in range(30):
        log = Log.open(tmp_path / f"t-{trial}", config, clock)
        log.append(records(5, ts=10))  # old records
        seg = log.roll()
        errors = run_threads(
            [
                lambda seg=seg: seg.max_timestamp_so_far,  # type: ignore[misc]
                lambda log=log: log.append(records(3, ts=clock.milliseconds())),  # type: ignore[misc]
                lambda log=log: log.list_offsets(-3),  # type: ignore[misc]
            ]
        )
        assert not errors
        assert seg.max_timestamp_so_far >= clock.milliseconds()
        log.delete_old_segments()
        assert log.read_records(log.log_start_offset)[-1].offset == 7
        log.close()


# --- 2. one writer per partition directory -------------------------------------------------------


def test_a_second_log_on_the_same_partition_is_refused(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0") as log:
        log.append(records(1))
        with pytest.raises(LogDirectoryLockedError, match="t-0"):
            Log.open(tmp_path / "t-0")
    with Log.open(tmp_path / "t-0") as again:  # released on close
        assert again.log_end_offset == 1


def test_a_second_process_cannot_append(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0") as log:
        log.append(records(3))
        code = (
            "import sys; from kafkalog import Log, KafkaLogError\n"
            f"try:\n    Log.open({str(tmp_path / 't-0')!r})\n"
            "except KafkaLogError as e:\n    print(type(e).__name__, e); sys.exit(3)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": SRC},
            check=False,
        )
        assert done.returncode == 3, done.stderr
        assert "LogDirectoryLockedError" in done.stdout
        assert f"locked by process {os.getpid()} (" in done.stdout  # who holds it, named
        log.append(records(2))
    with Log.open(tmp_path / "t-0") as again:
        assert again.log_end_offset == 5


def test_a_log_inside_a_managed_log_dir_is_refused_and_vice_versa(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
        with pytest.raises(LogDirectoryLockedError):
            Log.open(tmp_path / "t-0")
    with Log.open(tmp_path / "t-0"), pytest.raises(LogDirectoryLockedError):
        LogManager(tmp_path)
    with LogManager(tmp_path) as manager:  # everything was released
        assert manager.topics() == {"t": 1}


def test_a_log_opened_before_any_manager_keeps_a_manager_out(tmp_path: Path) -> None:
    """A LogManager holds no partition's lock (its log directory's covers them all), yet a Log
    opened on its own where no manager had been (no log directory ``.lock`` to share) still
    keeps a manager from opening its partition."""
    with Log.open(tmp_path / "t-0") as log:
        log.append(records(1))
        assert not (tmp_path / ".lock").exists()
        with pytest.raises(LogDirectoryLockedError, match="t-0"):
            LogManager(tmp_path)
    with LogManager(tmp_path) as manager:
        assert manager.get_log("t", 0).log_end_offset == 1


# What a Kafka broker's JVM does to each log directory's .lock (FileChannel.tryLock): an fcntl
# record lock on the whole file, held while it runs. Prints whether it got the lock.
_JVM_LIKE_LOCK = """
import fcntl, sys, time
f = open(sys.argv[1], "a+")
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    print("refused", flush=True)
    sys.exit(0)
print("locked", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(fcntl, "F_OFD_SETLK"), reason="Linux's OFD locks")
def test_a_kafka_broker_and_kafkalog_keep_out_of_each_others_directory(tmp_path: Path) -> None:
    """flock and fcntl locks never meet, so kafkalog also takes an OFD record lock: a process
    holding the JVM's kind of lock on ``.lock`` keeps LogManager and Log.open out (naming the
    file), and kafkalog's lock keeps that process out. held_by_writer sees both kinds."""
    (tmp_path / "t-0").mkdir()
    lock = tmp_path / ".lock"
    with subprocess.Popen(
        [sys.executable, "-c", _JVM_LIKE_LOCK, str(lock)], stdout=subprocess.PIPE, text=True
    ) as broker:
        try:
            assert broker.stdout is not None and broker.stdout.readline() == "locked\n"
            assert held_by_writer(tmp_path)
            with pytest.raises(LogDirectoryLockedError, match=r"fcntl lock.*stop it first"):
                LogManager(tmp_path)
            with pytest.raises(LogDirectoryLockedError, match="fcntl lock"):
                Log.open(tmp_path / "t-0")  # takes the log directory's lock shared
        finally:
            broker.kill()
    with LogManager(tmp_path):
        refused = subprocess.run(
            [sys.executable, "-c", _JVM_LIKE_LOCK, str(lock)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert refused.stdout == "refused\n"


def test_a_crashed_writer_leaves_no_lock(tmp_path: Path) -> None:
    code = (
        "import os; from kafkalog import Log, Record\n"
        f"log = Log.open({str(tmp_path / 't-0')!r})\n"
        "log.append([Record(b'x')]); log.flush(); os._exit(9)\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, timeout=60, check=False
    )
    with Log.open(tmp_path / "t-0") as log:
        assert log.log_end_offset == 1


# --- 8. readers racing writers ----------------------------------------------------------------


def _reader_loop(log: Log, stop: threading.Event, problems: list[BaseException]) -> None:
    while not stop.is_set():
        try:
            start = log.log_start_offset
            end = log.log_end_offset
            for offset in {start, (start + end) // 2, max(start, end - 1), end}:
                info = log.read(offset, 4096)
                try:
                    data = info.read()
                except LogClosedError:
                    # file.delete.delay.ms is 0 here: the grace Kafka gives a fetch in flight
                    # (a slice read after Log.read returned) is zero, so its file may be gone
                    continue
                for batch in MemoryRecords(data).batches():
                    assert batch.last_offset >= offset
            log.list_offsets(-3)
            log.offset_for_timestamp(1_500)
        except OffsetOutOfRangeError:
            continue  # the start moved between reading it and using it
        except BaseException as err:
            problems.append(err)
            return


@pytest.mark.parametrize("writer", ["append", "truncate", "retention", "compaction"])
def test_readers_never_fail_because_a_writer_moved(
    tmp_path: Path, fast_switching: None, writer: str
) -> None:
    clock = ManualClock(10_000)
    props = {
        "internal.segment.bytes": "4096",
        "file.delete.delay.ms": "0",
        "retention.bytes": "20000",
    }
    if writer == "compaction":
        props["cleanup.policy"] = "compact"
    manager = LogManager(tmp_path, LogConfig.from_properties(props), clock)
    log = manager.create_topic("t", 1)[0]
    for _ in range(10):
        log.append(records(20))
    stop = threading.Event()
    problems: list[BaseException] = []
    readers = [threading.Thread(target=_reader_loop, args=(log, stop, problems)) for _ in range(3)]
    for r in readers:
        r.start()
    try:
        for round_ in range(40):
            log.append(records(10, ts=1_000 + round_ * 10))
            if writer == "truncate" and round_ % 3 == 2:
                manager.truncate_to("t", 0, max(log.log_start_offset, log.log_end_offset - 15))
            elif writer == "retention":
                log.delete_old_segments()
            elif writer == "compaction" and round_ % 5 == 4:
                log.roll()
                manager.run_cleaner()
            elif writer == "append":
                log.flush()
    finally:
        stop.set()
        for r in readers:
            r.join(60)
    manager.close()
    assert problems == [], problems[:3]


def test_a_read_racing_segment_close_never_reads_another_file(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    log.append(records(5))
    seg: LogSegment = log.active_segment
    before = seg.log.read(0, seg.size)
    with seg.log.mapped() as view:  # a reader inside the file ...
        seg.log.close_handler()  # ... while retention closes it
        assert bytes(view) == before
    with pytest.raises(KafkaLogError):
        seg.log.read(0, 10)
    log.close_without_flush()


def test_read_records_racing_a_segment_deletion_retries_instead_of_reporting_a_closed_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With file.delete.delay.ms=0 the slice a read returned can be gone before it is read
    (seen in the opfuzz test): read_records must read again on the new segment list, which
    here says OFFSET_OUT_OF_RANGE, and never blame a closed log that is open."""
    config = LogConfig.from_properties({"file.delete.delay.ms": "0", "retention.ms": "-1"})
    log = Log.open(tmp_path / "t-0", config)
    try:
        log.append(records(5))
        log.roll()
        log.append(records(5))
        real_read = LogReader.read
        moved: list[bool] = []

        def read_then_retention_moves(*args: object, **kwargs: object) -> object:
            info = real_read(*args, **kwargs)  # type: ignore[arg-type]
            if not moved:  # between the read and the decode, retention deletes segment 0
                moved.append(True)
                log.maybe_increment_log_start_offset(5)
                assert log.delete_old_segments() == 1
            return info

        monkeypatch.setattr(LogReader, "read", read_then_retention_moves)
        with pytest.raises(OffsetOutOfRangeError):
            log.read_records(0)
        assert [r.offset for r in log.read_records(5)] == [5, 6, 7, 8, 9]
    finally:
        log.close()
