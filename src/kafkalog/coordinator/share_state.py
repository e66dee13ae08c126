"""Share-partitions' durable state in ``__share_group_state``, read and written in Kafka's own
record format (KIP-932's share coordinator).

Why: a share group (Kafka's queues) keeps, for each topic-partition its members consume, a
start offset below which every record is settled, and the delivery state and count of the
batches above it. Kafka's share coordinator keeps this in ``__share_group_state``: a
ShareSnapshot record with the whole state, then ShareUpdate records carrying only the start
offset and the batches that changed, merged into what came before. Reading a broker's
directory, taking one over, and later serving share groups all need that state exactly as
Kafka folds it: a later batch never loses to an older one on the offsets they share, because
the winner is the one with the higher delivery count, then the higher state
(PersisterStateBatchCombiner), and offsets below the start offset are dropped.

Refuses: records of versions it cannot read (skipped, as Kafka's loader skips them);
transactional writes (the share coordinator writes none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from kafkalog.coordinator.offsets_store import keyed_records
from kafkalog.errors import KafkaLogError
from kafkalog.log.log import Log
from kafkalog.records.coordinator import decode
from kafkalog.records.schema_writer import encode_key, encode_versioned

# A record's delivery state as persisted (Kafka's RecordState ids; ACQUIRED is never written:
# an acquired record is persisted as AVAILABLE, so a restart delivers it again)
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4
SHARE_SNAPSHOT, SHARE_UPDATE = 0, 1  # the records' types (their keys' api keys)
NO_OFFSET = -1  # an update's start offset when it does not move it


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Offsets ``first_offset``..``last_offset`` (inclusive), all in one delivery state with
    one delivery count (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int

    @property
    def delivery(self) -> tuple[int, int]:
        """What decides which of two batches holds an offset both cover: count, then state."""
        return (self.delivery_count, self.delivery_state)


def combine_state_batches(
    so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int
) -> list[StateBatch]:
    """Kafka's PersisterStateBatchCombiner, step for step, so the batches written are the
    ones Kafka would write: the parts below ``start_offset`` dropped (unless it is -1); then,
    in the order (first offset, last offset, count, state), the first two neighbours that
    overlap, or touch with the same delivery, are resolved into one to three batches (on the
    offsets both hold the higher (count, state) wins; the same delivery merges) and the
    search goes on from there. Batches passed over are final: a neighbour a later
    resolution leaves beside them is not merged with them, as in Kafka."""
    kept = []
    for b in (*so_far, *new):
        if start_offset != NO_OFFSET and b.last_offset < start_offset:
            continue
        if start_offset != NO_OFFSET and b.first_offset < start_offset:
            b = dataclasses.replace(b, first_offset=start_offset)
        kept.append(b)
    if len(kept) < 2:
        return kept
    pending = sorted(set(kept), key=_order)
    done: list[StateBatch] = []
    while True:
        at = next((i for i in range(len(pending) - 1) if _pair(pending[i], pending[i + 1])), None)
        if at is None:
            return done + pending
        done += pending[:at]
        resolved = _resolve(pending[at], pending[at + 1])
        pending = sorted(set(pending[at + 2 :]) | set(resolved), key=_order)


def _order(b: StateBatch) -> tuple[int, int, int, int]:
    return (b.first_offset, b.last_offset, b.delivery_count, b.delivery_state)


def _pair(prev: StateBatch, candidate: StateBatch) -> bool:
    return candidate.first_offset <= prev.last_offset or (
        prev.last_offset + 1 == candidate.first_offset and prev.delivery == candidate.delivery
    )


def _resolve(prev: StateBatch, candidate: StateBatch) -> list[StateBatch]:
    """Two batches that overlap (``candidate`` sorts after ``prev``), or touch with the same
    delivery, as the batches that replace them."""
    if prev.delivery == candidate.delivery:
        return [dataclasses.replace(prev, last_offset=max(prev.last_offset, candidate.last_offset))]
    older = candidate.delivery < prev.delivery  # prev keeps the offsets both hold

    def part(b: StateBatch, first: int, last: int) -> StateBatch:
        return dataclasses.replace(b, first_offset=first, last_offset=last)

    head = part(prev, prev.first_offset, candidate.first_offset - 1)
    if candidate.first_offset == prev.first_offset:
        if not older:  # (with the same last offset too: it sorts after prev)
            return [candidate]
        return [prev, part(candidate, prev.last_offset + 1, candidate.last_offset)]
    if candidate.last_offset < prev.last_offset:
        tail = part(prev, candidate.last_offset + 1, prev.last_offset)
        return [prev] if older else [head, candidate, tail]
    if candidate.last_offset == prev.last_offset:
        return [prev] if older else [head, candidate]
    if older:
        return [prev, part(candidate, prev.last_offset + 1, candidate.last_offset)]
    return [head, candidate]


SharePartitionKey = tuple[str, str, int]  # group id, topic id (Kafka's base64 form), partition


@dataclass(slots=True)
class ShareGroupOffset:
    """One share-partition's state as the share coordinator holds it (its ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    state_batches: list[StateBatch]


def _batches(rows: Iterable[dict[str, int]]) -> list[StateBatch]:
    return [
        StateBatch(r["firstOffset"], r["lastOffset"], r["deliveryState"], r["deliveryCount"])
        for r in rows
    ]


def _value(decoded: dict[str, object], name: str, default: int) -> int:
    value = decoded.get(name, default)
    assert isinstance(value, int)
    return value


def replay(
    state: dict[SharePartitionKey, ShareGroupOffset],
    key: bytes,
    value: bytes | None,
) -> None:
    """Fold one ``__share_group_state`` record into ``state`` (Kafka's
    ShareCoordinatorShard.replay): a snapshot replaces the share-partition's state (a
    tombstone removes it), an update merges into it."""
    try:
        record = decode("share-group-state", key, value)
    except KafkaLogError:
        return
    if record.key is None:
        return
    k = (record.key["groupId"], record.key["topicId"], record.key["partition"])
    v = record.value
    if v is None:
        state.pop(k, None)
        return
    rows = v.get("stateBatches", [])
    assert isinstance(rows, list)
    if record.record_type == SHARE_SNAPSHOT:
        state[k] = ShareGroupOffset(
            _value(v, "snapshotEpoch", 0),
            _value(v, "stateEpoch", 0),
            _value(v, "leaderEpoch", 0),
            _value(v, "startOffset", 0),
            _value(v, "deliveryCompleteCount", -1),
            _value(v, "createTimestamp", 0),
            _value(v, "writeTimestamp", 0),
            _batches(rows),
        )
        return
    start = _value(v, "startOffset", NO_OFFSET)
    leader_epoch = _value(v, "leaderEpoch", -1)
    current = state.get(k)
    if current is None:  # an update with no snapshot before it stands alone
        state[k] = ShareGroupOffset(
            _value(v, "snapshotEpoch", 0), 0, leader_epoch, start,
            _value(v, "deliveryCompleteCount", -1), -1, -1, _batches(rows),
        )  # fmt: skip
        return
    current.start_offset = current.start_offset if start == NO_OFFSET else start
    current.leader_epoch = current.leader_epoch if leader_epoch == -1 else leader_epoch
    current.delivery_complete_count = _value(v, "deliveryCompleteCount", -1)
    current.state_batches = combine_state_batches(
        current.state_batches, _batches(rows), current.start_offset
    )


def load_share_state(logs: Iterable[Log]) -> dict[SharePartitionKey, ShareGroupOffset]:
    """Every share-partition's state from the ``__share_group_state`` partitions."""
    state: dict[SharePartitionKey, ShareGroupOffset] = {}
    for log in logs:
        for key, value in keyed_records(log):
            replay(state, key, value)
    return state


def _key(name: str, k: SharePartitionKey) -> bytes:
    return encode_key(name, {"groupId": k[0], "topicId": k[1], "partition": k[2]})


def _rows(batches: Iterable[StateBatch]) -> list[dict[str, int]]:
    return [
        {"firstOffset": b.first_offset, "lastOffset": b.last_offset,
         "deliveryState": b.delivery_state, "deliveryCount": b.delivery_count}
        for b in batches
    ]  # fmt: skip


def snapshot_record(k: SharePartitionKey, s: ShareGroupOffset) -> tuple[bytes, bytes]:
    """The ShareSnapshot record (key, value) of a share-partition's whole state, as Kafka's
    ShareCoordinatorRecordHelpers.newShareSnapshotRecord writes it (value version 0)."""
    value = encode_versioned(
        "ShareSnapshotValue",
        0,
        {
            "snapshotEpoch": s.snapshot_epoch,
            "stateEpoch": s.state_epoch,
            "leaderEpoch": s.leader_epoch,
            "startOffset": s.start_offset,
            "deliveryCompleteCount": s.delivery_complete_count,
            "createTimestamp": s.create_timestamp,
            "writeTimestamp": s.write_timestamp,
            "stateBatches": _rows(s.state_batches),
        },
    )
    return _key("ShareSnapshotKey", k), value


def update_record(
    k: SharePartitionKey,
    snapshot_epoch: int,
    leader_epoch: int,
    start_offset: int,
    delivery_complete_count: int,
    batches: Iterable[StateBatch],
) -> tuple[bytes, bytes]:
    """The ShareUpdate record (key, value) of a change: the new start offset (-1: unchanged)
    and the batches whose delivery changed (newShareUpdateRecord, value version 0)."""
    value = encode_versioned(
        "ShareUpdateValue",
        0,
        {
            "snapshotEpoch": snapshot_epoch,
            "leaderEpoch": leader_epoch,
            "startOffset": start_offset,
            "deliveryCompleteCount": delivery_complete_count,
            "stateBatches": _rows(batches),
        },
    )
    return _key("ShareUpdateKey", k), value
