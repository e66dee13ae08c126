"""The cleaner's aborted-transaction list: collected only when a transactional batch needs it,
and, for a segment loaded from disk, decided by a header-only search for ABORT markers.

A log without transactions never pays for that search; a log whose ``.txnindex`` is missing or
emptied still has its aborted data removed, whichever segment of a group holds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import Log, LogConfig, ManualClock, ProducerFields, Record
from kafkalog.cleaner import CleanerConfig, LogCleaner
from kafkalog.cleaner.policy import CleanedTransactionMetadata
from kafkalog.records import MemoryRecords
from kafkalog.records.batch import RecordBatch
from kafkalog.records.builder import build_end_txn_marker
from kafkalog.records.scanner import CONTROL_PROBE_SIZE, probe_control
from kafkalog.storage.file_records import FileRecords
from kafkalog.storage.segment import LogSegment
from kafkalog.storage.txn_index import AbortedTxn
from kafkalog.types import ControlRecordType, IsolationLevel, TopicPartition

NOW = 1_700_000_000_000


def batch(offset: int, *, producer_id: int = -1, transactional: bool = False) -> RecordBatch:
    data = MemoryRecords.build(
        [Record(b"v", b"k")],
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=transactional,
    )
    (only,) = list(data.batches())
    assert isinstance(only, RecordBatch)
    return only


def test_the_list_is_collected_at_the_first_transactional_batch_and_only_once() -> None:
    calls: list[int] = []

    def collect() -> list[AbortedTxn]:
        calls.append(1)
        return [AbortedTxn(producer_id=7, first_offset=5, last_offset=9, last_stable_offset=5)]

    txns = CleanedTransactionMetadata()
    txns.add_aborted_transactions_when_needed(collect)
    assert not txns.on_batch_read(batch(0)) and not txns.on_batch_read(batch(6))
    assert calls == []  # plain batches never consult it
    assert txns.on_batch_read(batch(7, producer_id=7, transactional=True))  # aborted
    assert not txns.on_batch_read(batch(8, producer_id=8, transactional=True))  # committed
    assert calls == [1]


def test_a_marker_alone_also_collects_the_list() -> None:
    collected: list[int] = []
    txns = CleanedTransactionMetadata()

    def collect() -> list[AbortedTxn]:
        collected.append(1)
        return []

    txns.add_aborted_transactions_when_needed(collect)
    marker = build_end_txn_marker(
        offset=3, producer_id=7, producer_epoch=0, marker=ControlRecordType.ABORT,
        coordinator_epoch=0, timestamp=NOW,
    )  # fmt: skip
    (control,) = list(MemoryRecords(marker).batches())
    assert txns.on_control_batch_read(control)  # no data left: the marker may go
    assert collected == [1]


def compact_log(path: Path, clock: ManualClock) -> Log:
    config = LogConfig.from_properties(
        {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    )
    return Log.open(path, config, clock)


def clean(log: Log, clock: ManualClock) -> None:
    cleaner = LogCleaner(CleanerConfig(), lambda: {TopicPartition("t", 0): log}, clock)
    (result,) = cleaner.run_once()
    assert result.error is None


def test_a_log_without_transactions_is_cleaned_without_a_marker_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(NOW)
    with compact_log(tmp_path / "t-0", clock) as log:
        for i in range(20):
            log.append([Record(b"%d" % i, b"k%d" % (i % 3), timestamp=NOW)])
            if i % 7 == 6:
                log.roll()
        log.roll()
    log = compact_log(tmp_path / "t-0", clock)  # every segment loaded, none trusted yet

    def refuse(self: LogSegment) -> bool:
        raise AssertionError(f"{self.log.path.name}: searched for markers without a transaction")

    monkeypatch.setattr(LogSegment, "txn_index_trusted", refuse)
    clean(log, clock)
    assert sorted(r.key or b"" for r in log.read_records(0)) == [b"k0", b"k1", b"k2"]
    log.close()


@pytest.mark.parametrize("index", ["deleted", "emptied"])
def test_aborted_data_in_a_later_segment_of_a_group_is_removed_without_its_txnindex(
    tmp_path: Path, index: str
) -> None:
    """The group's first segment holds only plain data, so the list is first needed in the
    second, through the collectors both segments queued."""
    clock = ManualClock(NOW)
    directory = tmp_path / "t-0"
    with compact_log(directory, clock) as log:
        log.append([Record(b"plain", b"p", timestamp=NOW)])
        log.roll()
        txn = ProducerFields(9, 0, 0, is_transactional=True)
        log.append([Record(b"aborted", b"a", timestamp=NOW)], producer=txn)
        log.append_end_txn_marker(9, 0, "abort", 0)
        log.append([Record(b"kept", b"k", timestamp=NOW)])
        log.roll()
    for found in directory.glob("*.txnindex"):
        if index == "deleted":
            found.unlink()
        else:
            found.write_bytes(b"")
    log = compact_log(directory, clock)
    clean(log, clock)
    values = [r.value for s in log.segments for b in s.batches() for r in b]
    assert b"aborted" not in values and b"plain" in values and b"kept" in values
    committed = log.read_records(0, isolation=IsolationLevel.READ_COMMITTED)
    assert sorted(r.value or b"" for r in committed) == [b"kept", b"plain"]
    log.close()


def test_probe_control_reads_size_and_control_flag_from_a_header_only() -> None:
    marker = build_end_txn_marker(
        offset=0, producer_id=1, producer_epoch=0, marker=ControlRecordType.COMMIT,
        coordinator_epoch=0, timestamp=NOW,
    )  # fmt: skip
    plain = MemoryRecords.build([Record(b"v", b"k")]).buffer
    legacy = MemoryRecords.build([Record(b"v", b"k")], magic=1).buffer
    assert probe_control(marker[:CONTROL_PROBE_SIZE], len(marker)) == (len(marker), True)
    assert probe_control(plain[:CONTROL_PROBE_SIZE], len(plain)) == (len(plain), False)
    assert probe_control(legacy[:CONTROL_PROBE_SIZE], len(legacy)) == (len(legacy), False)
    assert probe_control(marker[:CONTROL_PROBE_SIZE], len(marker) - 1) is None  # torn
    assert probe_control(marker[:10], len(marker)) is None  # not even a size and magic
    bad_magic = bytearray(marker[:CONTROL_PROBE_SIZE])
    bad_magic[16] = 7
    assert probe_control(bytes(bad_magic), len(marker)) is None


def test_control_batches_finds_markers_between_data_and_stops_at_a_torn_tail(
    tmp_path: Path,
) -> None:
    def marker(offset: int) -> bytes:
        return build_end_txn_marker(
            offset=offset, producer_id=1, producer_epoch=0, marker=ControlRecordType.ABORT,
            coordinator_epoch=0, timestamp=NOW,
        )  # fmt: skip

    def data(offset: int) -> bytes:
        return bytes(MemoryRecords.build([Record(b"v" * 50, b"k")], base_offset=offset).buffer)

    file = FileRecords(tmp_path / "00000000000000000000.log")
    for part in (data(0), marker(1), data(2), marker(3)):
        file.append(part)
    file.append(marker(4)[:40])  # a torn write: never reported as a marker
    found = [next(iter(MemoryRecords(b).batches())).base_offset for b in file.control_batches()]
    assert found == [1, 3]
    file.close()
