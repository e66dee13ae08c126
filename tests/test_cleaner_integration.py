"""Compaction end to end: a property test against a dict model, a real crash (os._exit) at every
rename of a swap, readers running through compaction and retention, and the LogManager."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog import Log, LogConfig, LogManager, ManagerConfig, ManualClock, Record
from kafkalog.cleaner import CleanerConfig, LogCleaner
from kafkalog.cleaner.manager import CleaningState
from kafkalog.errors import InvalidConfigError, LogCleaningAbortedError
from kafkalog.storage import filenames as fn
from kafkalog.types import TopicPartition

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)
RETENTION = 1000


def config(**extra: str) -> LogConfig:
    return LogConfig.from_properties(
        {
            "cleanup.policy": "compact",
            "internal.segment.bytes": "600",
            "delete.retention.ms": str(RETENTION),
            "min.cleanable.dirty.ratio": "0.01",
            **extra,
        }
    )


def latest(log: Log) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for seg in log.segments:
        for batch in seg.batches():
            if batch.is_control:
                continue
            for r in batch.records():
                assert r.key is not None
                out[r.key] = (r.offset, r.value)
    return out


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("roll")),
        st.tuples(st.just("clean")),
        st.tuples(st.just("advance"), st.integers(1, 2 * RETENTION)),
    ),
    max_size=40,
)


@settings(max_examples=40)
@given(ops=ops, map_keys=st.integers(2, 50))
def test_compaction_keeps_exactly_the_latest_value_per_key(
    tmp_path_factory: object, ops: list[tuple[object, ...]], map_keys: int
) -> None:
    path = tmp_path_factory.mktemp("prop") / "t-0"  # type: ignore[attr-defined]
    clock = ManualClock(NOW)
    log = Log.open(path, config(), clock)
    cleaner = LogCleaner(
        CleanerConfig(dedupe_buffer_size=24 * map_keys, io_buffer_size=1024),
        lambda: {TP: log},
        clock,
    )
    model: dict[bytes, tuple[int, bytes | None]] = {}

    def check() -> None:
        got = latest(log)
        for key, (offset, value) in model.items():
            if value is not None:
                assert got[key] == (offset, value)
            else:  # a tombstone is either still there or gone, never an older value
                assert got.get(key, (offset, None)) == (offset, None)
        assert set(got) <= set(model)

    def put(key: bytes, value: bytes | None) -> None:
        info = log.append([Record(value, key, timestamp=clock.milliseconds())])
        model[key] = (info.first_offset, value)

    for op in ops:
        if op[0] == "put":
            put(b"k%d" % op[1], None if op[2] else b"v%d" % log.log_end_offset)  # type: ignore[str-bytes-safe]
        elif op[0] == "roll":
            log.roll()
        elif op[0] == "clean":
            for result in cleaner.run_once():
                assert result.error is None
            check()
        else:
            clock.advance(op[1])  # type: ignore[arg-type]
    # finish: everything cleaned once (horizons stamped), then again past the horizon
    put(b"end", b"1")
    log.roll()
    cleaner.run_once()
    check()
    clock.advance(RETENTION)
    put(b"end", b"2")
    log.roll()
    for _ in range(3):
        cleaner.run_once()
    check()
    got = latest(log)
    assert all(value is not None for _, value in got.values()), "tombstones past their horizon"
    log.close()
    reopened = Log.open(path, config(), clock)
    assert latest(reopened) == got
    reopened.close()


# --- a real crash at every rename of the swap -------------------------------------------------

CHILD = r"""
import os, sys
from pathlib import Path
from kafkalog import Log, LogConfig, ManualClock, Record
from kafkalog.cleaner import CleanerConfig, LogCleaner
from kafkalog.types import TopicPartition

path, crash_at = Path(sys.argv[1]), int(sys.argv[2])
clock = ManualClock(1_700_000_000_000)
cfg = LogConfig.from_properties({"cleanup.policy": "compact", "internal.segment.bytes": "600",
                                 "min.cleanable.dirty.ratio": "0.01"})
log = Log.open(path, cfg, clock)
for i in range(45):
    log.append([Record(b"v%d" % i, b"k%d" % (i % 9), timestamp=clock.milliseconds())])
log.roll()
log.flush()
calls = 0
real = os.replace
def crashing(src, dst):
    global calls
    calls += 1
    if calls == crash_at:
        os._exit(17)
    real(src, dst)
os.replace = crashing
LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), lambda: {TopicPartition("t", 0): log},
           clock).run_once()
print(calls)
"""


def run_child(path: Path, crash_at: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(crash_at)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_crash_at_every_rename_of_a_compaction_recovers_a_consistent_log(
    tmp_path: Path,
) -> None:
    full = run_child(tmp_path / "full" / "t-0", 0)
    assert full.returncode == 0, full.stderr
    renames = int(full.stdout.split()[-1])
    per_swap = 12  # 4 files: .cleaned -> .swap, old -> .deleted, .swap -> live
    assert renames >= per_swap + 1
    expected = {b"k%d" % (i % 9): (i, b"v%d" % i) for i in range(45)}
    # every step of the first swap, the first of the next, and the very last rename
    for crash_at in [*range(1, per_swap + 2), renames]:
        path = tmp_path / f"crash{crash_at}" / "t-0"
        child = run_child(path, crash_at)
        assert child.returncode == 17, child.stderr
        log = Log.open(path, config(), ManualClock(NOW))
        got = latest(log)
        assert {k: got[k] for k in expected} == expected, f"crash at rename {crash_at}"
        assert log.log_end_offset == 45
        offsets = [o for seg in log.segments for b in seg.batches() for o in [b.base_offset]]
        assert offsets == sorted(set(offsets)), f"overlapping data after crash {crash_at}"
        assert not list(path.glob("*" + fn.CLEANED_FILE_SUFFIX))
        assert not list(path.glob("*" + fn.SWAP_FILE_SUFFIX))
        log.close()


# --- readers never fail while compaction and retention run ------------------------------------


def test_readers_see_no_errors_during_compaction_and_retention(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = Log.open(
        tmp_path / "t-0",
        config(**{"cleanup.policy": "compact,delete", "retention.bytes": "3000"}),
        clock,
    )
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), lambda: {TP: log}, clock)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            try:
                offset = log.log_start_offset
                while offset < log.high_watermark:
                    info = log.read(offset, 4096)
                    if info.records is None:
                        break
                    for batch in info.records.records().batches():
                        for r in batch.records():
                            assert r.value == b"%d" % r.offset
                        offset = max(offset, batch.next_offset)
                    reads[0] += 1
                time.sleep(0.002)  # let the writer and the cleaner have the GIL too
            except Exception as err:
                if "out of range" in str(err) and offset < log.log_start_offset:
                    continue  # retention moved the start past us: Kafka's OffsetOutOfRange
                errors.append(err)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(600):
            log.append([Record(b"%d" % i, b"k%d" % (i % 37), timestamp=clock.milliseconds())])
            if i % 50 == 49:
                log.roll()
                cleaner.run_once()
                clock.advance(100_000)  # let file.delete.delay.ms expire
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert reads[0] > 0
    log.close()


# --- the LogManager drives the cleaner --------------------------------------------------------


def test_manager_runs_the_cleaner_and_keeps_its_checkpoint(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    mgr = LogManager(tmp_path, clock=clock)
    (log,) = mgr.create_topic(
        "keyed", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    )
    (plain,) = mgr.create_topic("plain")
    for i in range(50):
        log.append([Record(b"v%d" % i, b"k%d" % (i % 5), timestamp=NOW)])
        plain.append([Record(b"v", b"k", timestamp=NOW)])
    log.roll()
    plain.roll()
    results = mgr.run_cleaner()
    assert [r.topic_partition for r in results] == [TopicPartition("keyed", 0)]
    assert len(latest(log)) == 5 and len(next(iter(plain.segments)).batches()) == 50
    checkpoint = (tmp_path / fn.CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")
    assert checkpoint[:3] == ["0", "1", "keyed 0 50"]
    mgr.delete_topic("keyed")
    assert (tmp_path / fn.CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")[:2] == ["0", "0"]
    mgr.close()


def test_the_scheduler_runs_the_cleaner_and_compact_delete_gets_retention(
    tmp_path: Path,
) -> None:
    clock = ManualClock(NOW)
    manager_config = ManagerConfig.from_properties(
        {"log.cleaner.backoff.ms": "1000", "log.initial.task.delay.ms": "0"}
    )
    assert manager_config.cleaner.backoff_ms == 1000
    mgr = LogManager(tmp_path, clock=clock, config=manager_config)
    (log,) = mgr.create_topic(
        "both",
        1,
        {
            "cleanup.policy": "compact,delete",
            "retention.ms": "10000",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    for i in range(20):
        log.append([Record(b"v%d" % i, b"k%d" % (i % 2), timestamp=NOW)])
    log.roll()
    assert "kafka-log-cleaner" in mgr.scheduler.tick()
    assert len(latest(log)) == 2
    clock.advance(20_000)
    assert mgr.run_retention() == 0  # compacted logs get retention from the cleaner
    mgr.run_cleaner()
    assert log.log_start_offset == 20 and latest(log) == {}
    mgr.close()


def test_no_cleaner_threads_as_kafka_allows_and_run_cleaner_still_cleans(tmp_path: Path) -> None:
    manager_config = ManagerConfig.from_properties({"log.cleaner.threads": "0"})
    assert manager_config.cleaner.num_threads == 0
    assert manager_config.cleaner.dedupe_buffer_per_thread == 128 * 1024 * 1024
    with LogManager(tmp_path, clock=ManualClock(NOW), config=manager_config) as mgr:
        (log,) = mgr.create_topic(
            "keyed", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
        )
        for i in range(20):
            log.append([Record(b"v%d" % i, b"k%d" % (i % 2), timestamp=NOW)])
        log.roll()
        assert not [t for t in threading.enumerate() if "cleaner" in t.name.lower()]
        mgr.run_cleaner()
        assert len(latest(log)) == 2


def test_cleaner_config_errors_name_the_key() -> None:
    for props in (
        {"log.cleaner.threads": "-1"},  # 0 is allowed, as in Kafka: no cleaner threads
        {"log.cleaner.io.buffer.load.factor": "1.5"},
        {"log.cleaner.enable": "maybe"},
        {"log.cleaner.dedupe.buffer.size": "10"},
        {"log.cleaner.bogus": "1"},
    ):
        try:
            ManagerConfig.from_properties(props)
        except InvalidConfigError as err:
            assert next(iter(props)) in str(err)
        else:
            raise AssertionError(f"{props} was accepted")


def test_truncation_aborts_cleaning_and_clamps_the_checkpoint(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    mgr = LogManager(tmp_path, clock=clock)
    (log,) = mgr.create_topic("k", 1, {"cleanup.policy": "compact"})
    for i in range(40):
        log.append([Record(b"v%d" % i, b"k%d" % (i % 4), timestamp=NOW)])
    log.roll()
    mgr.run_cleaner()
    tp = TopicPartition("k", 0)
    assert mgr.cleaner.manager.all_cleaner_checkpoints() == {tp: 40}
    assert mgr.truncate_to("k", 0, 38)
    assert mgr.cleaner.manager.all_cleaner_checkpoints() == {tp: 38}
    assert mgr.cleaner.manager.state(tp) is None  # resumed
    mgr.close()


def test_an_aborted_round_ends_paused(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = Log.open(tmp_path / "t-0", config(), clock)
    for i in range(20):
        log.append([Record(b"v", b"k%d" % (i % 2), timestamp=NOW)])
    log.roll()
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), lambda: {TP: log}, clock)
    manager = cleaner.manager
    assert manager.grab_filthiest_compacted_log() is not None
    waiter = threading.Thread(target=manager.abort_and_pause_cleaning, args=(TP,))
    waiter.start()
    deadline = time.monotonic() + 10
    while manager.state(TP) is not CleaningState.ABORTED and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        manager.check_cleaning_aborted(TP)
    except LogCleaningAbortedError:
        pass
    else:
        raise AssertionError("the round was not told to stop")
    manager.done_cleaning(TP, log.directory.parent, 20)
    waiter.join(10)
    assert not waiter.is_alive() and manager.state(TP) is CleaningState.PAUSED
    assert manager.all_cleaner_checkpoints() == {}  # an aborted round records nothing
    manager.resume_cleaning(TP)
    assert manager.state(TP) is None
    log.close()


def test_cleaner_threads_compact_in_the_background(tmp_path: Path) -> None:
    config_ = ManagerConfig.from_properties(
        {
            "log.cleaner.backoff.ms": "10",
            "log.cleaner.threads": "2",
            "log.initial.task.delay.ms": "0",
        }
    )
    mgr = LogManager(tmp_path, config=config_)  # the real clock: real threads
    logs = mgr.create_topic("k", 2, {"cleanup.policy": "compact"})
    for log in logs:
        for i in range(30):
            log.append([Record(b"v%d" % i, b"k%d" % (i % 3))])
        log.roll()
    mgr.start()

    def cleaned() -> set[int]:
        return {r.topic_partition.partition for r in mgr.cleaner.results}

    # a round swaps the cleaned segment in before it records its result: wait for both
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        any(len(data_of(x)) != 3 for x in logs) or cleaned() != {0, 1}
    ):
        time.sleep(0.02)
    try:
        assert [len(data_of(x)) for x in logs] == [3, 3]
        assert cleaned() == {0, 1}
    finally:
        mgr.close()


def test_close_does_not_wait_on_cleaner_threads_that_need_the_manager(tmp_path: Path) -> None:
    """A cleaner thread waking while close() runs must not block on the manager's lock: close()
    joins those threads, so it would wait forever. The slow scheduler shutdown widens the window
    in which the old close() held the lock with the cleaner threads still running."""
    config_ = ManagerConfig.from_properties(
        {"log.cleaner.backoff.ms": "5", "log.cleaner.threads": "2"}
    )
    mgr = LogManager(tmp_path, config=config_)
    mgr.create_topic("k", 1, {"cleanup.policy": "compact"})
    mgr.start()
    stop_scheduler = mgr.scheduler.shutdown

    def slow_shutdown() -> None:
        time.sleep(0.3)  # several cleaner backoffs: each wakes and lists the logs
        stop_scheduler()

    mgr.scheduler.shutdown = slow_shutdown  # type: ignore[method-assign]
    closer = threading.Thread(target=mgr.close, daemon=True)
    closer.start()
    closer.join(20)
    assert not closer.is_alive(), "LogManager.close() deadlocked with its cleaner threads"
    assert not mgr.cleaner.running


def test_listing_logs_never_waits_for_the_manager_lock(tmp_path: Path) -> None:
    with LogManager(tmp_path) as mgr:
        mgr.create_topic("t", 2)
        got: list[int] = []
        with mgr._lock:  # held as create_topic or delete_topic would hold it
            reader = threading.Thread(target=lambda: got.append(len(mgr.logs())), daemon=True)
            reader.start()
            reader.join(5)
        assert got == [2]


def data_of(log: Log) -> list[object]:
    return [r for s in log.segments for b in s.batches() for r in b.records()]
