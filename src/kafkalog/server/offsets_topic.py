"""Committed offsets in ``__consumer_offsets``, in Kafka's own record format, and read back.

Why: a consumer group's progress must survive a restart, and live where Kafka keeps it, so
``kafka-dump-log --offsets-decoder`` (Kafka's or kafkalog's) reads it and a Kafka broker started
on the same directory would find it. Each commit is one record: key OffsetCommitKey (type 1:
group, topic, partition), value OffsetCommitValue version 3 (offset, leader epoch, metadata,
commit timestamp); a null value deletes the offset. A group's records go to partition
``abs(groupId.hashCode()) % offsets.topic.num.partitions``, as Kafka's GroupCoordinator places
them. Refuses: group metadata records (members and assignments are not persisted: a restart
starts every group empty, with its offsets, as after all members left).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kafkalog import records
from kafkalog.errors import KafkaLogError, TopicExistsError
from kafkalog.log.log import Log
from kafkalog.manager.log_manager import LogManager
from kafkalog.records.coordinator import decode
from kafkalog.records.partitioner import java_string_hash
from kafkalog.records.scanner import AnyBatch

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


def load_offsets(logs: list[Log]) -> GroupOffsets:
    """Every group's committed offsets from the ``__consumer_offsets`` partitions: the last
    record of each key wins, a tombstone removes it. Records of other types (group metadata,
    KIP-848 records a Kafka broker wrote) are skipped."""
    out: GroupOffsets = {}
    for log in logs:
        position = log.log_start_offset
        while position < log.log_end_offset:
            info = log.read(position, 1 << 20)
            if info.records is None:
                break
            batches = list(records.MemoryRecords(info.records.read()).batches())
            apply_batches(out, batches, position)
            position = max(position + 1, batches[-1].next_offset) if batches else position + 1
    return out


def apply_batches(out: GroupOffsets, batches: Iterable[AnyBatch], start: int = 0) -> None:
    """Fold the records at or after ``start`` of ``__consumer_offsets`` batches into ``out``
    (later records win, tombstones delete): load_offsets' rule, for readers of the files."""
    for batch in batches:
        if batch.is_control:
            continue
        for record in batch:
            if record.key is not None and record.offset >= start:
                _apply(out, record.key, record.value)


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
