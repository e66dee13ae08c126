"""Idempotent and transactional appends on a real Log: duplicates, fencing, markers, the
transaction index, the last stable offset, READ_COMMITTED reads, and all of it after a reopen
or a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import ManualClock, MemoryRecords, Record
from kafkalog.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.records import AbortedTransaction, committed_records
from kafkalog.storage import filenames as fn
from kafkalog.storage.txn_index import AbortedTxn
from kafkalog.types import IsolationLevel

NOW = 1_700_000_000_000
RC = IsolationLevel.READ_COMMITTED


def open_log(directory: Path, **props: object) -> Log:
    config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
    return Log.open(directory, config, ManualClock(NOW))


def values(n: int, tag: str) -> list[Record]:
    return [Record(f"{tag}-{i}".encode(), key=b"k", timestamp=NOW) for i in range(n)]


def txn(pid: int, seq: int, epoch: int = 0) -> ProducerFields:
    return ProducerFields(pid, epoch, seq, is_transactional=True)


def visible(log: Log, isolation: IsolationLevel | None = None) -> list[bytes]:
    return [r.value or b"" for r in log.read_records(0, 1 << 24, isolation=isolation)]


def crash(log: Log) -> Log:
    """Reopen as after a power cut: no clean-shutdown marker, so the tail is recovered."""
    directory, config = log.directory, log.config
    log.close_without_flush()
    (directory / fn.CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    return Log.open(directory, config, ManualClock(NOW))


# --- idempotence (77-78) ---------------------------------------------------------------------


def test_a_retried_batch_returns_its_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p = ProducerFields(7, 0, 0)
    first = log.append(values(3, "a"), producer=p)
    log.append(values(2, "b"), producer=ProducerFields(7, 0, 3))
    size = log.size_in_bytes
    retry = log.append(values(3, "a"), producer=p)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 2)
    assert not first.duplicate
    assert (log.log_end_offset, log.size_in_bytes) == (5, size)


def test_duplicates_of_producer_built_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    batch = MemoryRecords.build(values(2, "x"), producer_id=3, producer_epoch=1, base_sequence=0)
    log.append_records(batch)
    other = MemoryRecords.build(values(1, "y"), producer_id=4, producer_epoch=0, base_sequence=0)
    log.append_records(other)
    again = log.append_records(batch)
    assert again.duplicate and (again.first_offset, again.last_offset) == (0, 1)
    assert log.log_end_offset == 3


def test_sequence_and_epoch_errors_leave_the_log_unchanged(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(values(2, "a"), producer=ProducerFields(9, 2, 0))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(values(1, "gap"), producer=ProducerFields(9, 2, 5))
    with pytest.raises(InvalidProducerEpochError):
        log.append(values(1, "old"), producer=ProducerFields(9, 1, 2))
    with pytest.raises(OutOfOrderSequenceError):  # a new epoch starts at 0
        log.append(values(1, "new"), producer=ProducerFields(9, 3, 2))
    assert log.log_end_offset == 2 and visible(log) == [b"a-0", b"a-1"]
    log.append(values(1, "c"), producer=ProducerFields(9, 2, 2))
    log.append(values(1, "d"), producer=ProducerFields(10, 0, 42))  # unknown: any sequence
    assert log.log_end_offset == 4


# --- transactions, the transaction index and the LSO (79-80) -----------------------------------


def build_mixed(log: Log) -> None:
    """pid 1 commits a-*, pid 2 aborts b-*, pid 3 leaves c-* open; plain d-* in between."""
    log.append(values(2, "a"), producer=txn(1, 0))  # 0-1
    log.append(values(2, "b"), producer=txn(2, 0))  # 2-3
    log.append(values(1, "d"))  # 4
    log.append_end_txn_marker(1, 0, "commit")  # 5
    log.append(values(1, "b2"), producer=txn(2, 2))  # 6
    log.append_end_txn_marker(2, 0, "abort", coordinator_epoch=3)  # 7
    log.append(values(2, "c"), producer=txn(3, 0))  # 8-9
    log.append(values(1, "e"))  # 10


EVERYTHING = [b"a-0", b"a-1", b"b-0", b"b-1", b"d-0", b"b2-0", b"c-0", b"c-1", b"e-0"]
COMMITTED = [b"a-0", b"a-1", b"d-0"]  # stops at c's open transaction (offset 8)


def check_mixed(log: Log) -> None:
    assert log.last_stable_offset == 8
    assert log.high_watermark == log.log_end_offset == 11
    assert visible(log) == EVERYTHING
    assert visible(log, RC) == COMMITTED
    fetch = log.read(0, 1 << 20, isolation=RC)
    assert fetch.aborted_transactions == [AbortedTransaction(2, 2)]
    assert log.read(0, 1 << 20).aborted_transactions is None
    entries = log.active_segment.txn_index.all_aborted()
    assert entries == [AbortedTxn(2, 2, 7, 8)]  # LSO: pid 3 had not begun yet -> marker + 1
    assert log.list_offsets(-1, RC) is not None
    assert log.list_offsets(-1, RC).offset == 8  # type: ignore[union-attr]


def test_mixed_transactions_under_both_isolation_levels(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    build_mixed(log)
    check_mixed(log)
    log.append_end_txn_marker(3, 0, "commit")
    assert log.last_stable_offset == log.log_end_offset == 12
    assert visible(log, RC) == [*COMMITTED, b"c-0", b"c-1", b"e-0"]


def test_transactions_survive_close_and_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    build_mixed(log)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert log.load_result.recovered_segments == []
    check_mixed(log)
    assert [t.producer_id for t in log.ongoing_transactions()] == [3]


@pytest.mark.parametrize("lose", ["nothing", "txn-index", "snapshots", "both"])
def test_transactions_survive_a_crash(tmp_path: Path, lose: str) -> None:
    log = open_log(tmp_path / "t-0", internal_segment_bytes=250)
    build_mixed(log)
    assert log.number_of_segments > 2
    directory = log.directory
    log.close_without_flush()
    for path in directory.iterdir():
        if lose in ("txn-index", "both") and path.name.endswith(fn.TXN_INDEX_FILE_SUFFIX):
            path.unlink()
        if lose in ("snapshots", "both") and path.name.endswith(fn.PRODUCER_SNAPSHOT_FILE_SUFFIX):
            path.unlink()
    (directory / fn.CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    (directory / "recovery-point-offset-checkpoint").unlink(missing_ok=True)
    log = Log.open(directory, log.config, ManualClock(NOW), recovery_point=0)
    assert log.load_result.recovered_segments
    assert log.last_stable_offset == 8
    assert visible(log, RC) == COMMITTED
    assert log.read(0, 1 << 20, isolation=RC).aborted_transactions == [AbortedTransaction(2, 2)]
    aborted = [e for s in log.segments for e in s.txn_index.all_aborted()]
    assert aborted == [AbortedTxn(2, 2, 7, 8)]  # first offset from an earlier segment (59)


def test_follower_abort_markers_index_too(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader-0")
    build_mixed(leader)
    follower = open_log(tmp_path / "follower-0")
    follower.append_as_follower(leader.read(0, 1 << 20).read())
    assert follower.active_segment.txn_index.all_aborted() == [AbortedTxn(2, 2, 7, 8)]
    assert follower.last_stable_offset == 8


def test_lso_never_below_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(values(2, "a"), producer=txn(1, 0))
    log.append(values(2, "x"))
    assert log.last_stable_offset == 0
    log.maybe_increment_log_start_offset(3)
    assert log.last_stable_offset == 3


def test_a_failed_txn_index_write_does_not_advance_the_lso(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(values(2, "a"), producer=txn(1, 0))

    def fail(entry: AbortedTxn) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(log.active_segment.txn_index, "append", fail)
    with pytest.raises(OSError):
        log.append_end_txn_marker(1, 0, "abort")
    assert log.log_end_offset == 3  # the marker's offset is used; offsets stay monotonic
    assert log.last_stable_offset == 0


def test_fenced_markers_write_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(values(1, "a"), producer=txn(1, 0, epoch=2))
    with pytest.raises(InvalidProducerEpochError):
        log.append_end_txn_marker(1, 1, "commit")
    log.append_end_txn_marker(1, 2, "commit", coordinator_epoch=4)
    log.append(values(1, "b"), producer=txn(1, 1, epoch=2))
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_end_txn_marker(1, 2, "abort", coordinator_epoch=3)
    assert log.log_end_offset == 3


# --- truncation, snapshots and expiration (73, 76, 85, 96, 99) -----------------------------------


def test_truncation_reopens_a_transaction_whose_marker_is_cut(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(values(2, "a"), producer=txn(1, 0))
    log.append_end_txn_marker(1, 0, "abort")
    assert log.last_stable_offset == 3
    log.truncate_to(2)
    assert log.last_stable_offset == 0
    assert log.active_segment.txn_index.all_aborted() == []
    log.append_end_txn_marker(1, 0, "commit")
    assert visible(log, RC) == [b"a-0", b"a-1"]


def test_each_roll_writes_a_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(values(2, "a"), producer=ProducerFields(1, 0, 0))
    log.roll()
    log.append(values(1, "b"))
    log.roll()
    assert log.producer_snapshot_offsets() == [2, 3]
    assert fn.producer_snapshot_file(log.directory, 3).exists()
    log.close()
    assert log.producer_snapshot_offsets() == [2, 3]  # nothing new since the last roll


def test_recovery_starts_from_the_nearest_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(5):
        log.append(values(1, f"v{i}"), producer=ProducerFields(1, 0, i))
        log.roll()
    log.append(values(1, "tail"), producer=ProducerFields(1, 0, 5))
    log.flush()
    log = crash(log)
    assert log.load_result.recovered_segments == [5]  # only from the recovery point
    assert log.producers()[1].last_seq == 5
    with pytest.raises(OutOfOrderSequenceError):
        log.append(values(1, "skip"), producer=ProducerFields(1, 0, 7))
    retry = log.append(values(1, "tail"), producer=ProducerFields(1, 0, 5))
    assert retry.duplicate


def test_producers_expire_by_record_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append([Record(b"v", timestamp=NOW - 86_400_000)], producer=ProducerFields(1, 0, 0))
    log.append(values(1, "open"), producer=txn(2, 0))
    assert log.remove_expired_producers() == [1]
    assert list(log.producers()) == [2]


def test_committed_records_matches_the_consumer_rule() -> None:
    def b(offset: int, pid: int, txn_: bool = True) -> MemoryRecords:
        return MemoryRecords.build(
            [Record(b"%d" % offset)],
            base_offset=offset,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=offset,
            is_transactional=txn_,
        )

    from kafkalog.records import build_end_txn_marker
    from kafkalog.types import ControlRecordType

    def m(offset: int, pid: int, kind: ControlRecordType) -> MemoryRecords:
        return MemoryRecords(
            build_end_txn_marker(
                offset=offset,
                producer_id=pid,
                producer_epoch=0,
                marker=kind,
                coordinator_epoch=0,
                timestamp=NOW,
            )
        )

    parts = [
        b(0, 1),
        b(1, 2),
        m(2, 1, ControlRecordType.ABORT),
        b(3, 1),  # pid 1's next transaction: not aborted
        m(4, 2, ControlRecordType.COMMIT),
        m(5, 1, ControlRecordType.COMMIT),
    ]
    data = b"".join(bytes(p) for p in parts)
    batches = list(MemoryRecords(data).batches())
    got = [r.offset for r in committed_records(batches, [AbortedTransaction(1, 0)])]
    assert got == [1, 3]
    assert [r.offset for r in committed_records(batches, [])] == [0, 1, 3]


def test_snapshots_below_the_last_two_segments_are_pruned(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(6):
        log.append(values(1, f"v{i}"), producer=ProducerFields(1, 0, i))
        log.roll()
    # active base 6, the segment before it 5, recovery point 6 -> keep snapshots from 5
    assert log.producer_snapshot_offsets() == [5, 6]
    log = crash(log)
    assert log.producers()[1].last_seq == 5
