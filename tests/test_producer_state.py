"""Producer state: entries, sequence and epoch rules, transactions, snapshots (Kafka's
ProducerStateManager and ProducerStateManagerTest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import MemoryRecords, Record
from kafkalog.errors import (
    CorruptSnapshotError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafkalog.log.producer_state import ProducerStateEntry
from kafkalog.log.producer_state_manager import ProducerStateConfig, ProducerStateManager
from kafkalog.log.validator import AppendOrigin
from kafkalog.records import AnyBatch, build_empty_batch, build_end_txn_marker
from kafkalog.storage import filenames as fn
from kafkalog.storage.producer_snapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
)
from kafkalog.storage.segment import LogOffsetMetadata
from kafkalog.types import INT32_MAX, ControlRecordType

PID = 1000
TS = 1_700_000_000_000


def data_batch(
    offset: int, seq: int, n: int = 1, epoch: int = 0, txn: bool = False, pid: int = PID
) -> AnyBatch:
    recs = [Record(b"v", key=b"k", timestamp=TS) for _ in range(n)]
    built = MemoryRecords.build(
        recs,
        base_offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )
    head = built.first_batch()
    assert head is not None
    return head


def marker(
    offset: int, kind: ControlRecordType, epoch: int = 0, coordinator_epoch: int = 0, pid: int = PID
) -> AnyBatch:
    data = build_end_txn_marker(
        offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        marker=kind,
        coordinator_epoch=coordinator_epoch,
        timestamp=TS,
    )
    head = MemoryRecords(data).first_batch()
    assert head is not None
    return head


def append(
    state: ProducerStateManager, batch: AnyBatch, origin: AppendOrigin = AppendOrigin.CLIENT
) -> None:
    """One append as the Log applies it: stage, update, complete, advance the map end."""
    info = state.prepare_update(batch.producer_id, origin)
    txn = info.append(batch)
    state.update(info)
    if txn is not None:
        state.complete_txn(txn)
    state.update_map_end_offset(batch.last_offset + 1)


@pytest.fixture
def state(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


# --- snapshot file format -------------------------------------------------------------------


def test_snapshot_vectors_from_the_spec() -> None:
    assert encode_snapshot([]) == bytes.fromhex("000148674bc700000000")
    one = bytes.fromhex(
        "000120f035d40000000100000000000003e8000000000004000000000000002a00000004"
        "0000018bcfe56800ffffffffffffffffffffffff"
    )
    entries = decode_snapshot(one)
    assert entries == [SnapshotEntry(1000, 0, 4, 42, 4, 1_700_000_000_000, -1, -1)]
    assert encode_snapshot(entries) == one


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b"",  # empty
        lambda b: b[:5],  # shorter than the header
        lambda b: b[:-3],  # a truncated entry
        lambda b: b"\x00\x02" + b[2:],  # unknown version
        lambda b: b[:-1] + bytes([b[-1] ^ 1]),  # CRC mismatch
    ],
)
def test_damaged_snapshots_are_corrupt(damage: object) -> None:
    good = encode_snapshot([SnapshotEntry(1, 2, 3, 4, 5, 6, 7, 8)])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(damage(good))  # type: ignore[operator]


def test_snapshot_round_trips_every_field(state: ProducerStateManager, tmp_path: Path) -> None:
    append(state, data_batch(0, 0, n=3, epoch=2, txn=True))
    info = state.prepare_update(7, AppendOrigin.CLIENT)
    info.append(data_batch(3, 10, n=2, epoch=5, pid=7))
    state.update(info)
    state.producers[7].coordinator_epoch = 9
    state.update_map_end_offset(5)
    path = state.take_snapshot()
    assert path == fn.producer_snapshot_file(tmp_path, 5)
    by_pid = {e.producer_id: e for e in read_snapshot(path)}
    assert by_pid[PID] == SnapshotEntry(PID, 2, 2, 2, 2, TS, -1, 0)
    assert by_pid[7] == SnapshotEntry(7, 5, 11, 4, 1, TS, 9, -1)
    reloaded = ProducerStateManager(tmp_path)
    reloaded.truncate_and_reload(0, 5, TS)
    assert reloaded.map_end_offset == 5
    assert reloaded.producers[PID].current_txn_first_offset == 0
    assert reloaded.producers[7].last_seq == 11
    assert [t.producer_id for t in reloaded.ongoing_transactions()] == [PID]


def test_entry_without_batches_is_written_as_minus_one() -> None:
    entry = ProducerStateEntry(5, producer_epoch=1, last_timestamp=TS)
    e = entry.to_snapshot_entry()
    assert (e.last_sequence, e.last_offset, e.offset_delta) == (-1, -1, 0)
    back = ProducerStateEntry.from_snapshot_entry(e)
    assert back.is_empty and back.producer_epoch == 1


# --- sequences and epochs (114-117) ------------------------------------------------------------


def test_sequences_must_follow_and_wrap(state: ProducerStateManager) -> None:
    append(state, data_batch(0, INT32_MAX - 1, n=2))
    append(state, data_batch(2, 0))  # Int32.MAX -> 0 is in sequence
    with pytest.raises(OutOfOrderSequenceError):
        append(state, data_batch(3, 5))
    append(state, data_batch(3, 1))
    assert state.producers[PID].last_seq == 1


def test_a_new_epoch_must_start_at_zero_unless_unknown(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 17))  # an unknown producer may start anywhere
    with pytest.raises(OutOfOrderSequenceError):
        append(state, data_batch(1, 3, epoch=1))
    append(state, data_batch(1, 0, epoch=1))
    assert state.producers[PID].producer_epoch == 1


def test_old_epochs_are_fenced(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 0, epoch=3))
    with pytest.raises(InvalidProducerEpochError) as err:
        append(state, data_batch(1, 1, epoch=2))
    assert err.value.producer_id == PID


def test_replication_accepts_gaps_and_old_epochs(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 0, epoch=3), AppendOrigin.REPLICATION)
    append(state, data_batch(1, 40), AppendOrigin.REPLICATION)  # older epoch: only logged
    append(state, data_batch(2, 99, epoch=3), AppendOrigin.REPLICATION)
    assert state.producers[PID].last_seq == 99


def test_a_failed_append_changes_nothing(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 0))
    info = state.prepare_update(PID, AppendOrigin.CLIENT)
    info.append(data_batch(1, 1))
    with pytest.raises(OutOfOrderSequenceError):
        info.append(data_batch(2, 5))
    assert state.producers[PID].last_seq == 0  # nothing was applied


def test_markers_bump_the_epoch_and_old_ones_are_fenced(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 0, n=2, txn=True))
    append(state, marker(2, ControlRecordType.COMMIT, epoch=1))
    entry = state.producers[PID]
    assert entry.producer_epoch == 1 and entry.is_empty  # sequence history cleared
    with pytest.raises(InvalidProducerEpochError):
        append(state, marker(3, ControlRecordType.ABORT, epoch=0), AppendOrigin.COORDINATOR)


def test_zombie_coordinators_are_fenced(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 0, txn=True))
    append(state, marker(1, ControlRecordType.COMMIT, coordinator_epoch=5))
    append(state, data_batch(2, 1, txn=True))
    with pytest.raises(TransactionCoordinatorFencedError):
        append(state, marker(3, ControlRecordType.ABORT, coordinator_epoch=4))


def test_non_transactional_write_inside_a_transaction_fails(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 0, txn=True))
    with pytest.raises(InvalidTxnStateError):
        append(state, data_batch(1, 1))


# --- duplicates --------------------------------------------------------------------------------


def test_the_last_five_batches_are_remembered(state: ProducerStateManager) -> None:
    for i in range(6):
        append(state, data_batch(i * 2, i * 2, n=2))
    entry = state.producers[PID]
    assert len(entry.batch_metadata) == 5
    assert entry.find_duplicate_batch(data_batch(0, 0, n=2)) is None  # evicted
    dup = entry.find_duplicate_batch(data_batch(99, 2, n=2))
    assert dup is not None and (dup.first_offset, dup.last_offset) == (2, 3)
    assert entry.find_duplicate_batch(data_batch(99, 2, n=2, epoch=1)) is None
    assert entry.find_duplicate_batch(data_batch(99, 2, n=1)) is None  # exact range only


# --- transactions and the first unstable offset (118, 122) -------------------------------------


def test_first_unstable_offset_follows_transactions_and_the_hw(
    state: ProducerStateManager,
) -> None:
    append(state, data_batch(0, 0, txn=True))
    append(state, data_batch(1, 0, txn=True, pid=2))
    assert state.first_unstable_offset() == LogOffsetMetadata(0)
    append(state, marker(2, ControlRecordType.COMMIT))
    # completed but not replicated: still unstable until the HW passes the marker
    assert state.first_unstable_offset() == LogOffsetMetadata(0)
    state.on_high_watermark_updated(3)
    assert state.first_unstable_offset() == LogOffsetMetadata(1)
    append(state, marker(3, ControlRecordType.ABORT, pid=2))
    state.on_high_watermark_updated(4)
    assert state.first_unstable_offset() is None


def test_lso_of_a_completed_transaction(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 0, txn=True))
    append(state, data_batch(1, 0, txn=True, pid=2))
    info = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    txn = info.append(marker(5, ControlRecordType.ABORT))
    assert txn is not None and txn.is_aborted and txn.first_offset == 0
    state.update(info)
    assert state.last_stable_offset(txn) == 1  # the other producer's open transaction
    state.complete_txn(txn)
    info = state.prepare_update(2, AppendOrigin.COORDINATOR)
    txn2 = info.append(marker(6, ControlRecordType.ABORT, pid=2))
    assert txn2 is not None and state.last_stable_offset(txn2) == 7


def test_markers_without_data_complete_nothing(state: ProducerStateManager) -> None:
    info = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    assert info.append(marker(0, ControlRecordType.ABORT)) is None
    append(state, data_batch(1, 0, txn=True))
    emptied = MemoryRecords(
        build_empty_batch(
            base_offset=2,
            last_offset_delta=0,
            max_timestamp=TS,
            producer_id=PID,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
        )
    ).first_batch()
    assert emptied is not None
    # a control batch the cleaner emptied closes nothing: the transaction stays open
    info = state.prepare_update(PID, AppendOrigin.REPLICATION)
    assert info.append(emptied) is None
    assert state.producers[PID].current_txn_first_offset == 1


# --- snapshots on disk (119-121) ---------------------------------------------------------------


def test_snapshots_only_when_the_map_end_moved(state: ProducerStateManager) -> None:
    append(state, data_batch(0, 0))
    assert state.take_snapshot() is not None
    assert state.take_snapshot() is None
    append(state, data_batch(1, 1))
    assert state.take_snapshot() is not None
    assert state.snapshot_offsets() == [1, 2]


def test_corrupt_latest_snapshot_falls_back_to_an_older_one(
    state: ProducerStateManager, tmp_path: Path
) -> None:
    append(state, data_batch(0, 0))
    state.take_snapshot()
    append(state, data_batch(1, 1))
    newest = state.take_snapshot()
    assert newest is not None
    newest.write_bytes(newest.read_bytes()[:-4])
    reloaded = ProducerStateManager(tmp_path)
    reloaded.truncate_and_reload(0, 2, TS)
    assert reloaded.map_end_offset == 1
    assert reloaded.producers[PID].last_seq == 0
    assert not newest.exists()


def test_truncate_and_reload_removes_snapshots_outside_the_log(
    state: ProducerStateManager, tmp_path: Path
) -> None:
    for i in range(4):
        append(state, data_batch(i, i))
        state.take_snapshot()
    assert state.snapshot_offsets() == [1, 2, 3, 4]
    state.truncate_and_reload(1, 3, TS)
    assert state.snapshot_offsets() == [2, 3]
    assert state.map_end_offset == 3 and state.producers[PID].last_seq == 2
    state.delete_snapshots_before(3)
    assert state.snapshot_offsets() == [3]


def test_stray_snapshots_keep_the_clean_shutdown_one(tmp_path: Path) -> None:
    for offset in (0, 5, 7, 10, 12):
        fn.producer_snapshot_file(tmp_path, offset).write_bytes(encode_snapshot([]))
    state = ProducerStateManager(tmp_path)
    state.remove_stray_snapshots([0, 10])
    assert state.snapshot_offsets() == [0, 10, 12]
    state.remove_stray_snapshots([0, 20])  # a stray below the last segment base goes too
    assert state.snapshot_offsets() == [0]


def test_expiration_spares_open_transactions(tmp_path: Path) -> None:
    config = ProducerStateConfig(producer_id_expiration_ms=1000)
    state = ProducerStateManager(tmp_path, config)
    append(state, data_batch(0, 0))
    append(state, data_batch(1, 0, txn=True, pid=2))
    assert state.remove_expired_producers(TS + 999) == []
    assert state.remove_expired_producers(TS + 1000) == [PID]
    assert list(state.producers) == [2]
    state.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, config)
    reloaded.truncate_and_reload(0, 2, TS + 10**9)  # dropped on reload only if no open txn
    assert list(reloaded.producers) == [2]


def test_expired_producers_are_dropped_on_reload(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path, ProducerStateConfig(producer_id_expiration_ms=1000))
    append(state, data_batch(0, 0))
    state.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, ProducerStateConfig(producer_id_expiration_ms=1000))
    reloaded.truncate_and_reload(0, 1, TS + 1000)
    assert reloaded.producers == {}


def test_config_reads_kafka_keys() -> None:
    config = ProducerStateConfig.from_properties({"producer.id.expiration.ms": "5000"})
    assert config.producer_id_expiration_ms == 5000
    with pytest.raises(InvalidConfigError, match=r"producer\.id\.expiration\.ms"):
        ProducerStateConfig.from_properties({"producer.id.expiration.ms": "-1"})
