"""Reliability on damaged files, out-of-range values, symbolic links, a full disk and crashes
inside topic creation: corrupt bytes are detected and never served, acknowledged records
survive, and every failure is a typed KafkaLogError.
"""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog import (
    CorruptRecordError,
    InvalidArgumentError,
    IsolationLevel,
    KafkaLogError,
    KafkaStorageError,
    Log,
    LogConfig,
    LogManager,
    ManualClock,
    ProducerFields,
    Record,
    UnknownTopicOrPartitionError,
    committed_records,
)
from kafkalog.cli.main import cli
from kafkalog.errors import CorruptCheckpointError, LogDirectoryLockedError, NotARegularFileError
from kafkalog.log.view import PartitionView
from kafkalog.storage import filenames as fn
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.storage.partition_metadata import read_partition_metadata

SRC = str(Path(__file__).resolve().parents[1] / "src")


def records(n: int, ts: int = 1_000) -> list[Record]:
    return [Record(b"value-%d" % i, key=b"k%d" % i, timestamp=ts + i) for i in range(n)]


def small_segments() -> LogConfig:
    return LogConfig.from_properties(
        {"internal.segment.bytes": "2048", "index.interval.bytes": "100"}
    )


def batch_positions(path: Path) -> list[int]:
    data, out, pos = path.read_bytes(), [], 0
    while pos + 12 <= len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out


# --- 4. offsets outside the CRC ------------------------------------------------------------------


def _flip_base_offset_bit(tmp_path: Path) -> tuple[Path, int]:
    """A 3-segment log with a flipped high bit in the base offset of a middle batch of the
    middle segment; returns the partition directory and the flipped batch's true offset."""
    d = tmp_path / "t-0"
    with Log.open(d, small_segments()) as log:
        for _ in range(20):
            log.append(records(10))
        assert log.number_of_segments >= 3
        seg = list(log.segments)[1]
    positions = batch_positions(seg.log.path)
    at = positions[len(positions) // 2]
    data = bytearray(seg.log.path.read_bytes())
    true_offset = struct.unpack_from(">q", data, at)[0]
    struct.pack_into(">q", data, at, true_offset | (1 << 36))
    seg.log.path.write_bytes(data)
    return d, true_offset


def test_a_flipped_base_offset_is_never_served(tmp_path: Path) -> None:
    d, _ = _flip_base_offset_bit(tmp_path)
    # a clean shutdown: no recovery ran, so the damage is met by the readers
    with Log.open(d, small_segments()) as log, pytest.raises(CorruptRecordError, match="follow"):
        for offset in range(0, 200, 3):
            data = log.read(offset, 1 << 20).read()
            for rec in log.read_records(offset):
                assert rec.offset < 200, rec
            assert data
    view = PartitionView(d)
    with pytest.raises(CorruptRecordError):
        list(view.batches(0))


def test_recovery_truncates_at_a_flipped_base_offset(tmp_path: Path) -> None:
    d, flipped = _flip_base_offset_bit(tmp_path)
    (d / fn.CLEAN_SHUTDOWN_FILE).unlink()
    OffsetCheckpointFile(d / fn.RECOVERY_POINT_CHECKPOINT).write(
        {fn.parse_partition_dir_name(d.name): 0}
    )
    with Log.open(d, small_segments()) as log:
        assert log.log_end_offset == flipped  # everything before the damage, nothing after
        offsets = [r.offset for r in log.read_records(0, 1 << 20)]
        assert offsets == list(range(len(offsets))) and offsets[-1] < flipped
        log.append(records(1))
        assert log.log_end_offset == flipped + 1


# --- 5. offsets above int64 --------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda log: log.roll(2**70),
        lambda log: log.truncate_fully_and_start_at(2**70),
        lambda log: log.truncate_to(2**64),
        lambda log: log.maybe_increment_log_start_offset(-5),
        lambda log: log.read(2**63, 100),
        lambda log: log.read(0, -1),
        lambda log: log.list_offsets(2**64),
    ],
)
def test_out_of_range_offsets_are_refused_where_they_enter(tmp_path: Path, call: object) -> None:
    with Log.open(tmp_path / "t-0") as log:
        log.append(records(3))
        with pytest.raises(InvalidArgumentError):
            call(log)  # type: ignore[operator]
        log.append(records(1))
        assert log.log_end_offset == 4


def test_log_open_refuses_an_out_of_range_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="log_start_offset"):
        Log.open(tmp_path / "t-0", log_start_offset=2**70)
    with Log.open(tmp_path / "t-0") as log:  # the failed open left no lock behind
        assert log.log_end_offset == 0


def test_an_out_of_range_checkpoint_means_recover_from_scratch(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)[0].append(records(5))
    for name in (fn.LOG_START_OFFSET_CHECKPOINT, fn.RECOVERY_POINT_CHECKPOINT):
        (tmp_path / name).write_text(f"0\n1\nt 0 {2**70}\n")
    with LogManager(tmp_path) as manager:
        log = manager.get_log("t")
        assert (log.log_start_offset, log.log_end_offset) == (0, 5)
        assert [r.offset for r in log.read_records(0)] == [0, 1, 2, 3, 4]


# --- 6. damaged indexes and a stale clean-shutdown marker --------------------------------------


def test_garbage_in_a_middle_index_is_rebuilt_and_no_record_is_skipped(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    with Log.open(d, small_segments()) as log:
        for _ in range(20):
            log.append(records(10))
        middle = list(log.segments)[1]
    index = middle.offset_index_file
    assert index.stat().st_size >= 16
    index.write_bytes(os.urandom(index.stat().st_size))
    with Log.open(d, small_segments()) as log:
        got = []
        offset = 0
        while offset < log.log_end_offset:
            batch_records = log.read_records(offset, 300)
            assert batch_records, f"nothing read at {offset}"
            got += [r.offset for r in batch_records]
            offset = got[-1] + 1
        assert got == list(range(200))


def test_decreasing_entries_in_the_active_index_are_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    with Log.open(d, LogConfig.from_properties({"index.interval.bytes": "100"})) as log:
        for _ in range(10):
            log.append(records(5))
        index = log.active_segment.offset_index_file
    data = bytearray(index.read_bytes())
    assert len(data) >= 24
    data[8:16], data[16:24] = data[16:24], data[8:16]  # two entries out of order
    index.write_bytes(data)
    with Log.open(d) as log:
        assert [r.offset for r in log.read_records(0, 1 << 20)] == list(range(50))


def test_a_stale_clean_marker_over_a_torn_tail_is_recovered(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    with Log.open(d) as log:
        log.append(records(5))
        log.append(records(5))
        path = log.active_segment.log.path
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x01\x00garbage")  # a torn batch
    with Log.open(d) as log:  # the marker is still there
        assert log.log_end_offset == 10
        log.append(records(3))
    with Log.open(d) as log:
        assert [r.offset for r in log.read_records(0, 1 << 20)] == list(range(13))


def test_verify_reports_a_deleted_middle_segment(tmp_path: Path) -> None:
    with LogManager(tmp_path, small_segments()) as manager:
        log = manager.create_topic("t", 1)[0]
        for _ in range(20):
            log.append(records(10))
        middle = list(log.segments)[1]
    for path in tmp_path.joinpath("t-0").glob(f"{middle.base_offset:020d}.*"):
        path.unlink()
    result = CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)])
    assert result.exit_code == 1
    assert "gap" in result.output


@pytest.mark.parametrize("owner", ["manager", "log"])
def test_verify_reports_a_deleted_first_segment(tmp_path: Path, owner: str) -> None:
    """The log start offset (a checkpoint, or the first leader epoch's start) says where a
    cleanly closed partition's data begins: a first segment gone since is a loss."""
    if owner == "manager":
        with LogManager(tmp_path, small_segments()) as manager:
            log = manager.create_topic("t", 1)[0]
            for _ in range(20):
                log.append(records(10))
    else:
        with Log.open(tmp_path / "t-0", small_segments()) as log:
            for _ in range(20):
                log.append(records(10))
    verified = CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)])
    assert verified.exit_code == 0, verified.output
    for path in tmp_path.joinpath("t-0").glob(f"{0:020d}.*"):
        path.unlink()
    result = CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)])
    assert result.exit_code == 1
    assert "offsets 0 (the log start offset) to" in result.output


def test_verify_takes_segments_retention_deleted_for_no_loss(tmp_path: Path) -> None:
    config = LogConfig.from_properties(
        {"internal.segment.bytes": "2048", "index.interval.bytes": "100", "retention.bytes": "2000"}
    )
    with LogManager(tmp_path, config) as manager:
        log = manager.create_topic("t", 1)[0]
        for _ in range(20):
            log.append(records(10, ts=int(time.time() * 1000)))  # young: size retention only
        assert manager.run_retention() > 0
        assert log.log_start_offset > 0
        log.maybe_increment_log_start_offset(log.log_start_offset + 3)  # inside a segment
    result = CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)])
    assert result.exit_code == 0, result.output


# --- 10. unreadable and stray files --------------------------------------------------------------


def test_a_non_utf8_checkpoint_means_recover_everything(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)[0].append(records(4))
    (tmp_path / fn.RECOVERY_POINT_CHECKPOINT).write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(tmp_path / fn.RECOVERY_POINT_CHECKPOINT).read()
    with LogManager(tmp_path) as manager:
        assert manager.get_log("t").log_end_offset == 4
    assert CliRunner().invoke(cli, ["verify", "--log-dirs", str(tmp_path)]).exit_code == 0


def test_a_topic_config_file_that_is_not_an_object_is_a_typed_error(tmp_path: Path) -> None:
    LogManager(tmp_path).close()
    (tmp_path / "kafkalog-topic-configs.json").write_text("[1, 2]")
    with pytest.raises(CorruptCheckpointError, match="topic configs"):
        LogManager(tmp_path)
    (tmp_path / "kafkalog-topic-configs.json").write_text("{}")
    LogManager(tmp_path).close()  # the failed start released the lock


def test_a_lock_that_is_a_directory_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / ".lock").mkdir()
    with pytest.raises(NotARegularFileError, match="directory"):
        LogManager(tmp_path)


def test_stray_files_with_segment_suffixes_are_ignored(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    with Log.open(d) as log:
        log.append(records(2))
    (d / "notes.log").write_text("not a segment")
    (d / "backup.index").write_bytes(b"\x00" * 8)
    (d / "junk.log.swap").write_bytes(b"x")
    with Log.open(d) as log:
        assert log.log_end_offset == 2
    assert (d / "notes.log").exists()


# --- 11. crash-atomic topic creation and deletion ---------------------------------------------

_CRASH_IN_CREATE = """
import os, sys
from kafkalog import LogManager
from kafkalog.manager import log_manager
original = log_manager.LogManager._open_log
def crash(self, path, tp, *rest):
    if tp.partition == 1:
        os._exit(9)
    return original(self, path, tp, *rest)
log_manager.LogManager._open_log = crash
LogManager(sys.argv[1]).create_topic("t", 2)
"""

_CRASH_IN_DELETE = """
import os, sys
from kafkalog import LogManager
from kafkalog.manager import topic_intents
original = topic_intents.mark_for_deletion
calls = []
def crash(path):
    calls.append(path)
    if len(calls) == 2:
        os._exit(9)
    return original(path)
topic_intents.mark_for_deletion = crash
LogManager(sys.argv[1]).delete_topic("t")
"""


def _run_child(code: str, log_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code, str(log_dir)],
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=60,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 9, done.stderr


def test_a_crash_inside_create_topic_completes_the_topic(tmp_path: Path) -> None:
    """Its intent was durable before any partition was made: the topic exists, whole."""
    _run_child(_CRASH_IN_CREATE, tmp_path)
    assert not (tmp_path / "t-1").is_dir()  # the crash left one of two partitions
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {"t": 2}
        assert manager.get_log("t", 1).log_end_offset == 0


def test_a_crash_inside_delete_topic_completes_the_deletion(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        for log in manager.create_topic("t", 3):
            log.append(records(2))
    _run_child(_CRASH_IN_DELETE, tmp_path)
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {}


# --- 12. a full disk and no descriptors left ---------------------------------------------------


def _failing(errno_: int, real: object) -> object:
    def fail(*args: object) -> object:
        raise OSError(errno_, os.strerror(errno_))

    return fail


def test_a_full_disk_fails_the_append_and_keeps_the_log_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d)
    log.append(records(3))
    log.flush()
    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", _failing(errno.ENOSPC, os.pwrite))
        with pytest.raises(KafkaStorageError, match="No space left") as raised:
            log.append(records(2))
        assert raised.value.errno == errno.ENOSPC
    assert log.log_end_offset == 3
    log.append(records(2))  # the disk has room again
    log.close()
    with Log.open(d) as again:
        assert [r.offset for r in again.read_records(0)] == [0, 1, 2, 3, 4]


def test_a_full_disk_at_close_still_unlocks_and_leaves_no_temporaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path)
    manager.create_topic("t", 2)[0].append(records(3))
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", _failing(errno.ENOSPC, os.fsync))
        m.setattr(os, "fdatasync", _failing(errno.ENOSPC, os.fdatasync))
        with pytest.raises(KafkaStorageError):
            manager.close()
    assert not list(tmp_path.rglob("*.tmp"))
    with LogManager(tmp_path) as again:  # unlocked, and recovered since no marker was written
        assert again.get_log("t").log_end_offset == 3


def test_no_descriptors_left_leaves_no_half_created_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path)
    real_open = os.open
    opened = []

    def open_some(path: object, *args: object, **kwargs: object) -> int:
        opened.append(path)
        if len(opened) > 4:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(os, "open", open_some)
        with pytest.raises(KafkaStorageError, match="Too many open files"):
            manager.create_topic("t", 3)
    assert manager.topics() == {}
    assert not any(
        p.name.startswith("t-") and p.is_dir() and not p.name.endswith("-delete")
        for p in tmp_path.iterdir()
    )
    manager.create_topic("t", 3)
    manager.close()
    with LogManager(tmp_path) as again:
        assert again.topics() == {"t": 3}


# --- 14. symbolic links ------------------------------------------------------------------------


def test_recovery_never_truncates_a_symlinked_target(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    with Log.open(d) as log:
        log.append(records(2))
    outside = tmp_path / "precious.bin"
    outside.write_bytes(b"precious data that is not a batch" * 10)
    victim = d / "00000000000000000100.log"
    victim.symlink_to(outside)
    (d / fn.CLEAN_SHUTDOWN_FILE).unlink()
    with Log.open(d) as log:
        assert log.log_end_offset == 2
    assert outside.read_bytes() == b"precious data that is not a batch" * 10


def test_a_planted_tmp_symlink_does_not_redirect_a_checkpoint(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    d = tmp_path / "logs"
    LogManager(d).close()
    (d / (fn.RECOVERY_POINT_CHECKPOINT + ".tmp")).symlink_to(outside)
    with LogManager(d) as manager:
        manager.create_topic("t", 1)[0].append(records(1))
        manager.run_checkpoints()
    assert outside.read_text() == "keep me"


def test_recover_refuses_a_directory_that_is_not_a_partition(tmp_path: Path) -> None:
    d = tmp_path / "not a partition"
    d.mkdir()
    result = CliRunner().invoke(cli, ["recover", str(d)])
    assert result.exit_code != 0
    assert list(d.iterdir()) == []


# --- 3. recover on a live log ---------------------------------------------------------------------


def test_recover_refuses_a_live_log_and_leaves_it_alone(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        log = manager.create_topic("t", 1)[0]
        log.append(records(5))
        result = CliRunner().invoke(cli, ["recover", str(tmp_path / "t-0")])
        assert result.exit_code != 0
        assert "locked" in result.output
        log.append(records(5))
        assert [r.offset for r in log.read_records(0)] == list(range(10))
    with Log.open(tmp_path / "t-0", had_clean_shutdown=True) as again:
        assert again.log_end_offset == 10


def test_every_error_here_is_a_kafkalog_error() -> None:
    for error in (KafkaStorageError, NotARegularFileError, LogDirectoryLockedError):
        assert issubclass(error, KafkaLogError)
    assert ManualClock  # imported for the fixtures' clocks elsewhere


# --- 7. read_committed without a trustworthy .txnindex ------------------------------------------


def _transactional_log(d: Path) -> None:
    """pid 1 commits a-*, pid 2 aborts b-* (spread over two segments), plain d-* between."""
    config = LogConfig.from_properties({"internal.segment.bytes": "1024"})
    with Log.open(d, config) as log:
        log.append(records(2), producer=ProducerFields(1, 0, 0, is_transactional=True))
        log.append(
            [Record(b"aborted-%d" % i) for i in range(3)],
            producer=ProducerFields(2, 0, 0, is_transactional=True),
        )
        for _ in range(6):
            log.append(records(4))
        log.append_end_txn_marker(1, 0, "commit")
        log.append_end_txn_marker(2, 0, "abort")
        log.append(records(1))
        assert log.number_of_segments > 1


def _read_all(log: Log, isolation: IsolationLevel | None) -> list[bytes | None]:
    out: list[bytes | None] = []
    offset = 0
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20, isolation=isolation)
        if info.records is None:
            break
        out += [r.value for r in log.read_records(offset, 1 << 20, isolation=isolation)]
        offset = _next(info)
    return out


def _next(info: object) -> int:
    batches = list(info.records.records().batches())  # type: ignore[attr-defined]
    return int(batches[-1].next_offset)


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_read_committed_never_serves_aborted_records_without_a_txn_index(
    tmp_path: Path, damage: str
) -> None:
    d = tmp_path / "t-0"
    _transactional_log(d)
    indexes = list(d.glob("*" + fn.TXN_INDEX_FILE_SUFFIX))
    assert indexes
    for path in indexes:
        if damage == "deleted":
            path.unlink()
        else:
            path.write_bytes(b"")
    with Log.open(d) as log:
        values = _read_all(log, IsolationLevel.READ_COMMITTED)
        everything = _read_all(log, None)
    assert any(v and v.startswith(b"aborted") for v in everything)
    assert not any(v and v.startswith(b"aborted") for v in values)
    assert len(values) == len(everything) - 3
    view = PartitionView(d)
    end = view.last_stable_offset()
    served = [
        r.value for r in committed_records(view.batches(0, end), view.aborted_transactions(0, end))
    ]
    assert served == values


# --- 18. a writer that crashed inside a transaction ---------------------------------------------


def test_a_hanging_transaction_is_aborted_after_the_timeout(tmp_path: Path) -> None:
    clock = ManualClock(10_000_000)
    with LogManager(tmp_path, clock=clock) as manager:
        log = manager.create_topic("t", 1)[0]
        log.append(records(2))
        log.append(
            [Record(b"half-%d" % i) for i in range(3)],
            producer=ProducerFields(42, 0, 0, is_transactional=True),
        )  # ... and the writer dies before its marker
        log.append(records(1))
        assert log.last_stable_offset == 2
        log.active_segment.log.set_last_modified_ms(clock.milliseconds())
        assert manager.run_transaction_timeouts() == 0  # not idle long enough yet
        clock.advance(60_000)
        assert manager.run_transaction_timeouts() == 1
        assert log.last_stable_offset == log.log_end_offset
        committed = log.read_records(0, 1 << 20, isolation=IsolationLevel.READ_COMMITTED)
        assert [r.value for r in committed if r.value and r.value.startswith(b"half")] == []
        assert len(committed) == 3


def test_a_hanging_transaction_found_at_start_is_aborted(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        log = manager.create_topic("t", 1)[0]
        old = [Record(b"half", timestamp=1_000)]  # written (and stamped) long ago
        log.append(old, producer=ProducerFields(7, 0, 0, is_transactional=True))
        path = log.active_segment.log.path
    os.utime(path, (1_000, 1_000))  # last written long ago
    with LogManager(tmp_path) as manager:  # e.g. the Spark sink's next commit
        assert manager.get_log("t").last_stable_offset == manager.get_log("t").log_end_offset


def test_the_spark_reader_fails_or_says_what_it_skipped_at_a_flipped_offset(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pyarrow")
    from kafkalog.spark.arrow_read import read_range
    from kafkalog.spark.planning import DataLossError, OffsetRange

    d, flipped = _flip_base_offset_bit(tmp_path)

    def rows(fail: bool) -> list[int]:
        r = OffsetRange("t", 0, str(d), 0, 200, False, False, fail)
        return [o for b in read_range(r) for o in b.column("offset").to_pylist()]

    with pytest.raises(DataLossError, match="corrupt"):
        rows(True)
    with pytest.warns(UserWarning, match="skipped"):
        kept = rows(False)
    assert kept and max(kept) < flipped and kept == sorted(kept)


_CRASH_IN_ADD_PARTITIONS = """
import os, sys
from kafkalog import LogManager
from kafkalog.manager import log_manager
original = log_manager.LogManager._open_log
def crash(self, path, tp, *rest):
    if tp.partition == 3:
        os._exit(9)
    return original(self, path, tp, *rest)
log_manager.LogManager._open_log = crash
LogManager(sys.argv[1]).create_partitions("t", 4)
"""


def test_a_crash_inside_create_partitions_rolls_back_only_the_new_partitions(
    tmp_path: Path,
) -> None:
    with LogManager(tmp_path) as manager:
        for log in manager.create_topic("t", 2, {"cleanup.policy": "compact"}):
            log.append(records(2))
        topic_id = manager.topic_id("t")
    _run_child(_CRASH_IN_ADD_PARTITIONS, tmp_path)
    assert (tmp_path / "t-2").is_dir()  # the crash left one of two new partitions
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {"t": 2}
        assert manager.topic_overrides("t") == {"cleanup.policy": "compact"}
        assert [r.offset for r in manager.get_log("t", 1).read_records(0)] == [0, 1]
        added = manager.create_partitions("t", 4)
        assert [log.directory.name for log in added] == ["t-2", "t-3"]
        assert manager.topic_id("t") == topic_id
        meta = read_partition_metadata(tmp_path / "t-3")
        assert meta is not None and meta.topic_id == topic_id
        with pytest.raises(InvalidArgumentError, match="currently has 4 partitions"):
            manager.create_partitions("t", 3)
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.create_partitions("nope", 3)
