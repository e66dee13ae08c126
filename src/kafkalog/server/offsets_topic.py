"""Committed offsets in ``__consumer_offsets``, in Kafka's own record format, and read back.

Why: a consumer group's progress must survive a restart, and live where Kafka keeps it, so
``kafka-dump-log --offsets-decoder`` (Kafka's or kafkalog's) reads it and a Kafka broker started
on the same directory would find it. Each commit is one record: key OffsetCommitKey (type 1:
group, topic, partition), value OffsetCommitValue version 3 (offset, leader epoch, metadata,
commit timestamp); a null value deletes the offset. A group's records go to partition
``abs(groupId.hashCode()) % offsets.topic.num.partitions``, as Kafka's GroupCoordinator places
them. A transactional commit (TxnOffsetCommit) is a transactional batch of such records: it
counts only once the partition's COMMIT marker of its producer follows, and never after an
ABORT. Refuses: group metadata records (members and assignments are not persisted: a restart
starts every group empty, with its offsets, as after all members left).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from kafkalog import records
from kafkalog.errors import KafkaLogError, TopicExistsError
from kafkalog.log.log import Log
from kafkalog.manager.log_manager import LogManager
from kafkalog.records.control import decode_control_key
from kafkalog.records.coordinator import decode
from kafkalog.records.partitioner import java_string_hash
from kafkalog.records.scanner import AnyBatch
from kafkalog.types import ControlRecordType

OFFSETS_TOPIC = "__consumer_offsets"
# offsets.topic.* defaults: compacted, 100 MiB segments, the producer's compression
OFFSETS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "segment.bytes": "104857600",
}
_OFFSET_COMMIT_KEY, _OFFSET_COMMIT_VALUE_VERSION = 1, 3


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions`` (abs of MIN_VALUE is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return (
        struct.pack(">h", _OFFSET_COMMIT_KEY)
        + _string(group_id)
        + _string(topic)
        + struct.pack(">i", partition)
    )


def offset_commit_value(value: OffsetAndMetadata) -> bytes:
    return (
        struct.pack(">hqi", _OFFSET_COMMIT_VALUE_VERSION, value.offset, value.leader_epoch)
        + _string(value.metadata)
        + struct.pack(">q", value.commit_timestamp)
    )


GroupOffsets = dict[str, dict[tuple[str, int], OffsetAndMetadata]]
OffsetRows = list[tuple[bytes, bytes | None]]
PendingOffsets = dict[int, OffsetRows]  # by producer id: rows of a transaction not yet ended


def read_whole_log(log: Log) -> Iterator[tuple[int, list[AnyBatch]]]:
    """A coordinator topic's partition from its start to its end, 1 MiB at a time: each read's
    position and its batches (the first may begin below the position)."""
    position = log.log_start_offset
    while position < log.log_end_offset:
        info = log.read(position, 1 << 20)
        if info.records is None:
            return
        batches = list(records.MemoryRecords(info.records.read()).batches())
        yield position, batches
        position = max(position + 1, batches[-1].next_offset) if batches else position + 1


def load_offsets(
    logs: Mapping[int, Log],
) -> tuple[GroupOffsets, dict[tuple[int, int], OffsetRows]]:
    """Every group's committed offsets from the ``__consumer_offsets`` partitions (by
    partition number): the last record of each key wins, a tombstone removes it. Records of
    other types (group metadata, KIP-848 records a Kafka broker wrote) are skipped. Also
    returns the rows of transactions still open, by (producer id, partition)."""
    out: GroupOffsets = {}
    open_rows: dict[tuple[int, int], OffsetRows] = {}
    for partition, log in logs.items():
        pending: PendingOffsets = {}
        for position, batches in read_whole_log(log):
            apply_batches(out, batches, position, pending)
        for producer_id, rows in pending.items():
            open_rows[(producer_id, partition)] = rows
    return out, open_rows


def apply_batches(
    out: GroupOffsets,
    batches: Iterable[AnyBatch],
    start: int = 0,
    pending: PendingOffsets | None = None,
) -> None:
    """Fold the records at or after ``start`` of ``__consumer_offsets`` batches into ``out``
    (later records win, tombstones delete): load_offsets' rule, for readers of the files.
    A transactional batch's rows wait in ``pending`` for their producer's marker."""
    pending = {} if pending is None else pending
    for batch in batches:
        if batch.is_control:
            rows = pending.pop(batch.producer_id, [])
            first = next(iter(batch), None)
            if first is not None and first.offset >= start and is_commit_marker(first.key):
                apply_rows(out, rows)
            continue
        for record in batch:
            if record.key is not None and record.offset >= start:
                if batch.is_transactional:
                    pending.setdefault(batch.producer_id, []).append((record.key, record.value))
                else:
                    _apply(out, record.key, record.value)


def is_commit_marker(key: bytes | None) -> bool:
    try:
        return decode_control_key(key).type is ControlRecordType.COMMIT
    except KafkaLogError:
        return False


def apply_rows(out: GroupOffsets, rows: OffsetRows) -> None:
    for key, value in rows:
        _apply(out, key, value)


def append_offset_records(
    manager: LogManager,
    group_id: str,
    rows: list[tuple[bytes, bytes | None]],
    partitions_if_new: int,
) -> None:
    """Write commit records (or tombstones) to the group's ``__consumer_offsets`` partition,
    creating the topic (``offsets.topic.num.partitions``) on the first commit."""
    if OFFSETS_TOPIC not in manager.topics():
        with contextlib.suppress(TopicExistsError):  # another commit created it meanwhile
            manager.create_topic(OFFSETS_TOPIC, partitions_if_new, OFFSETS_TOPIC_CONFIG)
    partitions = manager.topics()[OFFSETS_TOPIC]
    log = manager.get_log(OFFSETS_TOPIC, partition_for(group_id, partitions))
    log.append([records.Record(value, key) for key, value in rows])


def _apply(out: GroupOffsets, key: bytes, value: bytes | None) -> None:
    try:
        decoded = decode("offsets", key, value)
    except KafkaLogError:
        return  # a record this version cannot read: Kafka's loader skips unknown types too
    if decoded.record_type not in (0, 1) or decoded.key is None:
        return
    group, tp = decoded.key["group"], (decoded.key["topic"], decoded.key["partition"])
    if decoded.value is None:
        out.get(group, {}).pop(tp, None)
        return
    v = decoded.value
    out.setdefault(group, {})[tp] = OffsetAndMetadata(
        v["offset"], v.get("leaderEpoch", -1), v.get("metadata") or "", v["commitTimestamp"]
    )
