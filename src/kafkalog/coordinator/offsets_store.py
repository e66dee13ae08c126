"""Committed offsets in ``__consumer_offsets``, in Kafka's own record format, and read back.

Why: a consumer group's progress must survive a restart, and live where Kafka keeps it, so
``kafka-dump-log --offsets-decoder`` (Kafka's or kafkalog's) reads it and a Kafka broker started
on the same directory would find it. Each commit is one record: key OffsetCommitKey (type 1:
group, topic, partition), value OffsetCommitValue version 3 (offset, leader epoch, metadata,
commit timestamp); a null value deletes the offset. A group's records go to partition
``abs(groupId.hashCode()) % offsets.topic.num.partitions``, as Kafka's GroupCoordinator places
them. A transactional commit (TxnOffsetCommit) is a transactional batch of such records: it
counts only once the partition's COMMIT marker of its producer follows, and never after an
ABORT; then it replaces a partition's offset only if its record is later in the log than the
record of the offset it would replace (Kafka's OffsetMetadataManager.replayEndTransactionMarker:
a plain commit made after a transactional one, before its COMMIT, keeps its place).

A classic group's membership is a GroupMetadata record (key type 2: group; value
GroupMetadataValue version 3, the one Kafka 4.x writes: protocol type, generation, protocol,
leader, state timestamp, and each member's ids, timeouts, subscription and assignment), written
when the group's leader hands in the assignment and when the group becomes empty, as Kafka's
GroupMetadataManager does; the latest one is the group a restart loads. A KIP-848 consumer
group's records are collected in order for ``ConsumerGroups`` to replay. Refuses: share and
streams group records (skipped when read).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kafkalog import records
from kafkalog.coordinator.consumer_group import RECORD_NAMES
from kafkalog.coordinator.share_group import SHARE_RECORD_NAMES
from kafkalog.errors import KafkaLogError, TopicExistsError
from kafkalog.log.log import Log
from kafkalog.manager.log_manager import LogManager
from kafkalog.records.control import decode_control_key
from kafkalog.records.coordinator import decode
from kafkalog.records.partitioner import java_string_hash
from kafkalog.records.scanner import AnyBatch
from kafkalog.records.schema_writer import encode_key, encode_versioned
from kafkalog.types import OFFSETS_TOPIC, ControlRecordType

# offsets.topic.* defaults: compacted, 100 MiB segments, the producer's compression
OFFSETS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "segment.bytes": "104857600",
}
_OFFSET_COMMIT_VALUE_VERSION = 3
_GROUP_METADATA_KEY, _GROUP_METADATA_VALUE_VERSION = 2, 3


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    # Where its record sits in __consumer_offsets (-1 before it is written): a transactional
    # commit counts only over an offset whose record is older. Not part of the commit's value.
    record_offset: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class StoredMember:
    """One member in a GroupMetadataValue: its subscription is its metadata for the group's
    protocol, its assignment what the leader gave it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    """A classic group as its GroupMetadataValue keeps it."""

    protocol_type: str  # "" for none
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # wall-clock ms of the state's start; -1 unknown
    members: tuple[StoredMember, ...] = ()


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions`` (abs of MIN_VALUE is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return encode_key(
        "OffsetCommitKey", {"group": group_id, "topic": topic, "partition": partition}
    )


def offset_commit_value(value: OffsetAndMetadata) -> bytes:
    fields = {
        "offset": value.offset,
        "leaderEpoch": value.leader_epoch,
        "metadata": value.metadata,
        "commitTimestamp": value.commit_timestamp,
    }
    return encode_versioned("OffsetCommitValue", _OFFSET_COMMIT_VALUE_VERSION, fields)


def group_metadata_key(group_id: str) -> bytes:
    return encode_key("GroupMetadataKey", {"group": group_id})


def group_metadata_value(group: StoredGroup) -> bytes:
    members = [
        {
            "memberId": m.member_id,
            "groupInstanceId": m.group_instance_id,
            "clientId": m.client_id,
            "clientHost": m.client_host,
            "rebalanceTimeout": m.rebalance_timeout_ms,
            "sessionTimeout": m.session_timeout_ms,
            "subscription": m.subscription,
            "assignment": m.assignment,
        }
        for m in group.members
    ]
    fields = {
        "protocolType": group.protocol_type,
        "generation": group.generation,
        "protocol": group.protocol,
        "leader": group.leader,
        "currentStateTimestamp": group.current_state_timestamp,
        "members": members,
    }
    return encode_versioned("GroupMetadataValue", _GROUP_METADATA_VALUE_VERSION, fields)


def _stored_group(value: dict[str, Any]) -> StoredGroup:
    """A decoded GroupMetadataValue (any version: fields a version lacks take Kafka's
    defaults, a rebalance timeout of -1 becomes the session timeout)."""
    members = tuple(
        StoredMember(
            m["memberId"],
            m.get("groupInstanceId"),
            m["clientId"],
            m["clientHost"],
            m["sessionTimeout"] if m.get("rebalanceTimeout", -1) == -1 else m["rebalanceTimeout"],
            m["sessionTimeout"],
            m["subscription"] or b"",
            m["assignment"] or b"",
        )
        for m in value["members"] or ()
    )
    return StoredGroup(
        value["protocolType"] or "",
        value["generation"],
        value["protocol"],
        value["leader"],
        value.get("currentStateTimestamp", -1),
        members,
    )


PartitionOffsets = dict[tuple[str, int], OffsetAndMetadata]
GroupOffsets = dict[str, PartitionOffsets]
OffsetRows = list[tuple[bytes, bytes | None]]
PendingOffsets = dict[int, GroupOffsets]  # by producer id: offsets of a transaction not ended
StoredGroups = dict[
    str, StoredGroup | None
]  # the latest GroupMetadata of each group; None: deleted


# each consumer group's records (type, key, value or None), in log order
ConsumerGroupRecords = dict[str, list[tuple[int, dict[str, Any], dict[str, Any] | None]]]


class LoadedOffsetsTopic(NamedTuple):
    """What ``__consumer_offsets`` holds for the coordinator at start-up."""

    committed: GroupOffsets
    open_transactions: dict[tuple[int, int], GroupOffsets]  # by (producer id, partition)
    groups: StoredGroups
    consumer_groups: ConsumerGroupRecords


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


def keyed_records(log: Log) -> Iterator[tuple[bytes, bytes | None]]:
    """The (key, value) of every keyed data record of a coordinator topic's partition, in
    offset order (control batches and unkeyed records skipped)."""
    for position, batches in read_whole_log(log):
        for batch in batches:
            if batch.is_control:
                continue
            for record in batch:
                if record.key is not None and record.offset >= position:
                    yield record.key, record.value


def load_offsets(logs: Mapping[int, Log]) -> LoadedOffsetsTopic:
    """Every group's committed offsets and latest GroupMetadata from the ``__consumer_offsets``
    partitions (by partition number), by ``apply_batches``' rule, and the offsets of
    transactions still open. Records of other types (KIP-848 records a Kafka broker wrote) are
    skipped."""
    out: GroupOffsets = {}
    open_offsets: dict[tuple[int, int], GroupOffsets] = {}
    groups: StoredGroups = {}
    consumer_groups: ConsumerGroupRecords = {}
    for partition, log in logs.items():
        pending: PendingOffsets = {}
        for position, batches in read_whole_log(log):
            apply_batches(out, batches, position, pending, groups, consumer_groups)
        for producer_id, staged in pending.items():
            if staged:
                open_offsets[(producer_id, partition)] = staged
    return LoadedOffsetsTopic(out, open_offsets, groups, consumer_groups)


def apply_batches(
    out: GroupOffsets,
    batches: Iterable[AnyBatch],
    start: int = 0,
    pending: PendingOffsets | None = None,
    groups: StoredGroups | None = None,
    consumer_groups: ConsumerGroupRecords | None = None,
) -> None:
    """Fold the records at or after ``start`` of ``__consumer_offsets`` batches into ``out``
    as Kafka's OffsetMetadataManager replays them: a plain commit replaces the offset, a
    tombstone deletes it (and the group's offsets for it in open transactions), a
    transactional commit waits in ``pending`` for its producer's marker (``settle``). Each
    GroupMetadata record replaces its group's entry in ``groups`` when that is given, and a
    consumer group's records are kept in order in ``consumer_groups``."""
    pending = {} if pending is None else pending
    groups = {} if groups is None else groups
    consumer_groups = {} if consumer_groups is None else consumer_groups
    for batch in batches:
        if batch.is_control:
            staged = pending.pop(batch.producer_id, {})
            first = next(iter(batch), None)
            if first is not None and first.offset >= start and is_commit_marker(first.key):
                for group, offsets in staged.items():
                    settle(out.setdefault(group, {}), offsets)
            continue
        producer_id = batch.producer_id if batch.is_transactional else None
        for record in batch:
            if record.key is not None and record.offset >= start:
                replay(out, pending, record.key, record.value, record.offset, producer_id,
                       groups, consumer_groups)  # fmt: skip


def settle(committed: PartitionOffsets, staged: PartitionOffsets) -> None:
    """A committed transaction's offsets of one group into the group's ``committed``: each
    only over an offset whose record is older than its own (a plain commit written after it
    stays)."""
    for tp, offset in staged.items():
        current = committed.get(tp)
        if current is None or offset.record_offset > current.record_offset:
            committed[tp] = offset


def drop_staged(pending: Iterable[GroupOffsets], group: str, tp: tuple[str, int]) -> None:
    """A tombstone's effect on open transactions: their offset for ``tp`` of ``group`` goes."""
    for staged in pending:
        offsets = staged.get(group)
        if offsets is not None:
            offsets.pop(tp, None)


def is_commit_marker(key: bytes | None) -> bool:
    try:
        return decode_control_key(key).type is ControlRecordType.COMMIT
    except KafkaLogError:
        return False


def create_if_missing(
    manager: LogManager, topic: str, partitions: int, config: Mapping[str, str]
) -> bool:
    """Create a coordinator's topic with its partition count and configs unless it exists
    (Kafka's AutoTopicCreationManager.creatableTopic); True if this call created it. A
    creator racing this one is no error: one of them wins."""
    if topic in manager.topics():
        return False
    with contextlib.suppress(TopicExistsError):
        manager.create_topic(topic, partitions, config)
        return True
    return False


def append_offset_records(
    manager: LogManager,
    group_id: str,
    rows: list[tuple[bytes, bytes | None]],
    partitions_if_new: int,
) -> int:
    """Write commit records (or tombstones) to the group's ``__consumer_offsets`` partition,
    creating the topic (``offsets.topic.num.partitions``) on the first commit. Returns the
    offset of the first record (the others follow it, in order)."""
    create_if_missing(manager, OFFSETS_TOPIC, partitions_if_new, OFFSETS_TOPIC_CONFIG)
    partitions = manager.topics()[OFFSETS_TOPIC]
    log = manager.get_log(OFFSETS_TOPIC, partition_for(group_id, partitions))
    return log.append([records.Record(value, key) for key, value in rows]).first_offset


def replay(
    out: GroupOffsets,
    pending: PendingOffsets,
    key: bytes,
    value: bytes | None,
    record_offset: int,
    producer_id: int | None,
    groups: StoredGroups,
    consumer_groups: ConsumerGroupRecords | None = None,
) -> None:
    """One record at ``record_offset``, of a transaction of ``producer_id`` or of none: an
    offset commit (Kafka's OffsetMetadataManager.replay) or a group's metadata
    (GroupMetadataManager.replay)."""
    try:
        decoded = decode("offsets", key, value)
        if decoded.record_type == _GROUP_METADATA_KEY and decoded.key is not None:
            stored = None if decoded.value is None else _stored_group(decoded.value)
            groups[decoded.key["group"]] = stored
            return
        modern = decoded.record_type in RECORD_NAMES or decoded.record_type in SHARE_RECORD_NAMES
        if modern and decoded.key is not None:
            if consumer_groups is not None:
                records_of = consumer_groups.setdefault(decoded.key["groupId"], [])
                records_of.append((decoded.record_type, decoded.key, decoded.value))
            return
    except KafkaLogError:
        return  # a record this version cannot read: Kafka's loader skips unknown types too
    if decoded.record_type not in (0, 1) or decoded.key is None:
        return
    group, tp = decoded.key["group"], (decoded.key["topic"], decoded.key["partition"])
    if decoded.value is None:
        out.get(group, {}).pop(tp, None)
        drop_staged(pending.values(), group, tp)
        return
    v = decoded.value
    offset = OffsetAndMetadata(
        v["offset"],
        v.get("leaderEpoch", -1),
        v.get("metadata") or "",
        v["commitTimestamp"],
        record_offset,
    )
    target = out if producer_id is None else pending.setdefault(producer_id, {})
    target.setdefault(group, {})[tp] = offset
