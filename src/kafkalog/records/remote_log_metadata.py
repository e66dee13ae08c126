"""Records of ``__remote_log_metadata``: tiered storage's state (KIP-405) in Kafka's own format.

Why: Kafka's TopicBasedRemoteLogMetadataManager keeps, for every segment copied to remote
storage, the events of its life (copy started, copy finished, delete started, delete finished)
and, for a deleted topic-partition, its deletion's, as records of this topic. A value is the
metadata serde's frame (frame version 1, then the api key and version as unsigned varints,
Kafka's AbstractApiMessageSerde) around the flexible message of Kafka's own schema (generated
into ``coordinator_schemas``); the key is null, and the partition is RemoteLogMetadataTopic
Partitioner's. Written this way, a Kafka broker taking a directory over, and Kafka's
RemoteLogMetadataFormatter, read kafkalog's records, and kafkalog reads a broker's.

Refuses: frame versions other than 1, record types Kafka 4.3.1 does not know, versions it does
not define, bytes after the message, a segment without leader epochs, with a state id Kafka
has not defined or with offsets Kafka's RemoteLogSegmentMetadata refuses. Which state changes
are allowed is ``segment_transition_allowed`` / ``partition_delete_transition_allowed``:
Kafka's rules, for the manager that replays the records to apply.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from kafkalog.errors import CorruptRecordError, InvalidArgumentError
from kafkalog.records.coordinator_schemas import COORDINATOR_SCHEMAS
from kafkalog.records.partitioner import murmur2
from kafkalog.records.schema_reader import Field, SchemaReader
from kafkalog.records.schema_writer import SchemaWriter
from kafkalog.records.varint import encode_unsigned
from kafkalog.types import uuid_bytes

TOPIC = "__remote_log_metadata"
FRAME_VERSION = 1
# api key -> the schema's name (MetadataRecordType of the storage module)
RECORD_TYPES = {
    0: "RemoteLogSegmentMetadataRecord",
    1: "RemoteLogSegmentMetadataUpdateRecord",
    2: "RemotePartitionDeleteMetadataRecord",
    3: "RemoteLogSegmentMetadataSnapshotRecord",
}
_TYPE_OF = {name: key for key, name in RECORD_TYPES.items()}


class RemoteLogSegmentState(enum.IntEnum):
    """A remote segment's life (Kafka's RemoteLogSegmentState ids)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class RemotePartitionDeleteState(enum.IntEnum):
    """A deleted topic-partition's remote data going (Kafka's RemotePartitionDeleteState ids)."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_SEGMENT_NEXT = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: (
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: (RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,),
}
_PARTITION_NEXT = {
    RemotePartitionDeleteState.DELETE_PARTITION_MARKED: (
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
    ),
    RemotePartitionDeleteState.DELETE_PARTITION_STARTED: (
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ),
}


def segment_transition_allowed(
    source: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> bool:
    """Kafka's RemoteLogSegmentState.isValidTransition: a segment starts at COPY_SEGMENT_STARTED,
    a repeated state is allowed (a retry), and a copy that never finished may go straight to
    deletion."""
    if source is None:
        return target is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    return source is target or target in _SEGMENT_NEXT.get(source, ())


def partition_delete_transition_allowed(
    source: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
) -> bool:
    """Kafka's RemotePartitionDeleteState.isValidTransition."""
    if source is None:
        return target is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    return source is target or target in _PARTITION_NEXT.get(source, ())


@dataclass(frozen=True)
class TopicIdPartition:
    """A partition with its topic's id, as Kafka names remote data (ids print as Kafka prints
    a Uuid: URL-safe base64 without padding)."""

    topic_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class RemoteLogSegmentId:
    """One copy of a segment in remote storage: a new id for every copy attempt."""

    topic_id_partition: TopicIdPartition
    id: str


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    """A segment in remote storage at one event of its life (RemoteLogSegmentMetadataRecord)."""

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]  # (leader epoch, its start offset)
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False


@dataclass(frozen=True)
class RemoteLogSegmentMetadataUpdate:
    """A later event of a segment's life (RemoteLogSegmentMetadataUpdateRecord)."""

    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None


@dataclass(frozen=True)
class RemotePartitionDeleteMetadata:
    """A deleted topic-partition's remote data going (RemotePartitionDeleteMetadataRecord)."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True)
class RemoteLogSegmentMetadataSnapshot:
    """A segment's metadata without its topic-partition (RemoteLogSegmentMetadataSnapshot
    Record): what a snapshot of one partition's remote segments holds."""

    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    state: RemoteLogSegmentState
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False


RemoteLogMetadata = (
    RemoteLogSegmentMetadata
    | RemoteLogSegmentMetadataUpdate
    | RemotePartitionDeleteMetadata
    | RemoteLogSegmentMetadataSnapshot
)


def _tp(tp: TopicIdPartition) -> dict[str, Any]:
    return {"name": tp.topic, "id": tp.topic_id, "partition": tp.partition}


def _segment_id(sid: RemoteLogSegmentId) -> dict[str, Any]:
    return {"topicIdPartition": _tp(sid.topic_id_partition), "id": sid.id}


def _segment_problem(start: int, end: int, epochs: tuple[tuple[int, int], ...]) -> str:
    """What RemoteLogSegmentMetadata's constructor refuses, or ""."""
    if start < 0:
        return f"a remote segment's start offset {start} is negative"
    if end < start:
        return f"a remote segment's end offset {end} is below its start offset {start}"
    if not epochs:
        return "a remote segment needs at least one leader epoch"
    return ""


def _segment_body(
    m: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot,
) -> dict[str, Any]:
    """The fields a segment's record and its snapshot record share."""
    return {
        "startOffset": m.start_offset,
        "endOffset": m.end_offset,
        "brokerId": m.broker_id,
        "maxTimestampMs": m.max_timestamp_ms,
        "eventTimestampMs": m.event_timestamp_ms,
        # a sorted map in Kafka's RemoteLogSegmentMetadata: written by epoch
        "segmentLeaderEpochs": [
            {"leaderEpoch": e, "offset": o} for e, o in sorted(m.segment_leader_epochs)
        ],
        "segmentSizeInBytes": m.segment_size_in_bytes,
        "customMetadata": m.custom_metadata,
        "remoteLogSegmentState": int(m.state),
        "txnIndexEmpty": m.txn_index_empty,
    }


def _fields(metadata: RemoteLogMetadata) -> tuple[str, dict[str, Any]]:
    if isinstance(metadata, RemoteLogSegmentMetadata):
        problem = _segment_problem(
            metadata.start_offset, metadata.end_offset, metadata.segment_leader_epochs
        )
        if problem:
            raise InvalidArgumentError(problem)
        return "RemoteLogSegmentMetadataRecord", {
            "remoteLogSegmentId": _segment_id(metadata.segment_id),
            **_segment_body(metadata),
        }
    if isinstance(metadata, RemoteLogSegmentMetadataSnapshot):
        if not metadata.segment_leader_epochs:
            raise InvalidArgumentError("a remote segment needs at least one leader epoch")
        return "RemoteLogSegmentMetadataSnapshotRecord", {
            "segmentId": metadata.segment_id,
            **_segment_body(metadata),
        }
    if isinstance(metadata, RemoteLogSegmentMetadataUpdate):
        return "RemoteLogSegmentMetadataUpdateRecord", {
            "remoteLogSegmentId": _segment_id(metadata.segment_id),
            "brokerId": metadata.broker_id,
            "eventTimestampMs": metadata.event_timestamp_ms,
            "customMetadata": metadata.custom_metadata,
            "remoteLogSegmentState": int(metadata.state),
        }
    return "RemotePartitionDeleteMetadataRecord", {
        "topicIdPartition": _tp(metadata.topic_id_partition),
        "brokerId": metadata.broker_id,
        "eventTimestampMs": metadata.event_timestamp_ms,
        "remotePartitionDeleteState": int(metadata.state),
    }


def encode(metadata: RemoteLogMetadata) -> bytes:
    """The record value Kafka's RemoteLogMetadataSerde.serialize writes for ``metadata``."""
    name, values = _fields(metadata)
    return encode_record(name, values)


def encode_record(name: str, values: Mapping[str, Any]) -> bytes:
    """One record of schema ``name`` (fields by their JSON names) in the serde's frame."""
    fields = cast("tuple[Field, ...]", COORDINATOR_SCHEMAS[name][3])
    writer = SchemaWriter(flexible=True)
    writer.out += encode_unsigned(FRAME_VERSION) + encode_unsigned(_TYPE_OF[name])
    writer.out += encode_unsigned(0)  # every record type has only version 0
    writer.struct(fields, 0, values)
    return bytes(writer.out)


def decode_record(value: bytes) -> tuple[str, dict[str, Any]]:
    """(schema name, fields by JSON name) of a record value, as the serde reads it."""
    reader = SchemaReader(value, flexible=True, what="a remote log metadata record")
    frame = reader.uvarint()
    if frame != FRAME_VERSION:
        raise CorruptRecordError(
            f"a remote log metadata record of frame version {frame}; only 1 is defined"
        )
    api_key, version = reader.uvarint(), reader.uvarint()
    name = RECORD_TYPES.get(api_key)
    if name is None:
        raise CorruptRecordError(f"a remote log metadata record of unknown type {api_key}")
    if version != 0:
        raise CorruptRecordError(f"{name} version {version}; only 0 is defined")
    fields = cast("tuple[Field, ...]", COORDINATOR_SCHEMAS[name][3])
    out = reader.struct(fields, 0)
    if reader.pos != len(value):
        raise CorruptRecordError(f"{len(value) - reader.pos} byte(s) after {name}")
    return name, out


def _read_tp(v: Mapping[str, Any]) -> TopicIdPartition:
    if v["name"] is None:  # Kafka's reader refuses a null where the schema allows none
        raise CorruptRecordError("non-nullable field name was serialized as null")
    return TopicIdPartition(v["id"], v["name"], v["partition"])


def _read_segment_id(v: Mapping[str, Any]) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(_read_tp(v["topicIdPartition"]), v["id"])


def _segment_state(code: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(code)
    except ValueError:
        raise CorruptRecordError(f"a remote segment in the unknown state {code}") from None


def _epochs(entries: list[dict[str, Any]] | None) -> tuple[tuple[int, int], ...]:
    # Kafka's sorted map: the last of a repeated epoch wins, and they come back by epoch
    return tuple(sorted({e["leaderEpoch"]: e["offset"] for e in entries or ()}.items()))


def decode(value: bytes) -> RemoteLogMetadata:
    """The metadata a record value holds, as Kafka's RemoteLogMetadataSerde.deserialize reads
    it; what it refuses is a CorruptRecordError."""
    name, v = decode_record(value)
    if name == "RemotePartitionDeleteMetadataRecord":
        code = v["remotePartitionDeleteState"]
        try:
            state = RemotePartitionDeleteState(code)
        except ValueError:
            raise CorruptRecordError(f"a partition deletion in the unknown state {code}") from None
        return RemotePartitionDeleteMetadata(
            _read_tp(v["topicIdPartition"]), state, v["eventTimestampMs"], v["brokerId"]
        )
    segment_state = _segment_state(v["remoteLogSegmentState"])
    if name == "RemoteLogSegmentMetadataUpdateRecord":
        return RemoteLogSegmentMetadataUpdate(
            _read_segment_id(v["remoteLogSegmentId"]),
            v["eventTimestampMs"],
            segment_state,
            v["brokerId"],
            v["customMetadata"],
        )
    epochs = _epochs(v["segmentLeaderEpochs"])
    if name == "RemoteLogSegmentMetadataSnapshotRecord":
        if not epochs:
            raise CorruptRecordError("a remote segment with no leader epochs")
        return RemoteLogSegmentMetadataSnapshot(
            v["segmentId"], v["startOffset"], v["endOffset"], v["maxTimestampMs"],
            v["brokerId"], v["eventTimestampMs"], v["segmentSizeInBytes"], epochs,
            segment_state, v["customMetadata"], v.get("txnIndexEmpty", False),
        )  # fmt: skip
    problem = _segment_problem(v["startOffset"], v["endOffset"], epochs)
    if problem:
        raise CorruptRecordError(problem)
    return RemoteLogSegmentMetadata(
        _read_segment_id(v["remoteLogSegmentId"]), v["startOffset"], v["endOffset"],
        v["maxTimestampMs"], v["brokerId"], v["eventTimestampMs"], v["segmentSizeInBytes"],
        epochs, segment_state, v["customMetadata"], v.get("txnIndexEmpty", False),
    )  # fmt: skip


def _java_tp(tp: TopicIdPartition) -> str:
    return f"{tp.topic_id}:{tp.topic}-{tp.partition}"


def _java_segment_id(sid: RemoteLogSegmentId) -> str:
    return f"RemoteLogSegmentId{{topicIdPartition={_java_tp(sid.topic_id_partition)}, id={sid.id}}}"


def _java_custom(custom: bytes | None) -> str:
    return (
        "Optional.empty" if custom is None else f"Optional[CustomMetadata{{{len(custom)} bytes}}]"
    )


def _java_epochs(epochs: tuple[tuple[int, int], ...]) -> str:
    return "{" + ", ".join(f"{e}={o}" for e, o in epochs) + "}"


def _java_txn(empty: bool, shown: bool) -> str:
    return f", txnIdxEmpty={str(empty).lower()}" if shown else ""


def describe(m: RemoteLogMetadata, *, txn_index_empty: bool = True) -> str:
    """``m`` as Kafka's toString() prints it (what ``kafka-dump-log --remote-log-metadata-
    decoder`` shows for each record); ``txn_index_empty=False`` leaves that field out of a
    segment's, as Kafka 3.9 prints it."""
    if isinstance(m, RemoteLogSegmentMetadata):
        return (
            f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_java_segment_id(m.segment_id)}, "
            f"startOffset={m.start_offset}, endOffset={m.end_offset}, brokerId={m.broker_id}, "
            f"maxTimestampMs={m.max_timestamp_ms}, eventTimestampMs={m.event_timestamp_ms}, "
            f"segmentLeaderEpochs={_java_epochs(m.segment_leader_epochs)}, "
            f"segmentSizeInBytes={m.segment_size_in_bytes}, "
            f"customMetadata={_java_custom(m.custom_metadata)}, state={m.state.name}"
            f"{_java_txn(m.txn_index_empty, txn_index_empty)}}}"
        )
    if isinstance(m, RemoteLogSegmentMetadataUpdate):
        return (
            f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={_java_segment_id(m.segment_id)}"
            f", customMetadata={_java_custom(m.custom_metadata)}, state={m.state.name}, "
            f"eventTimestampMs={m.event_timestamp_ms}, brokerId={m.broker_id}}}"
        )
    if isinstance(m, RemotePartitionDeleteMetadata):
        return (
            f"RemotePartitionDeleteMetadata{{topicPartition={_java_tp(m.topic_id_partition)}, "
            f"state={m.state.name}, eventTimestampMs={m.event_timestamp_ms}, "
            f"brokerId={m.broker_id}}}"
        )
    return (
        f"RemoteLogSegmentMetadataSnapshot{{segmentId={m.segment_id}, "
        f"startOffset={m.start_offset}, endOffset={m.end_offset}, "
        f"maxTimestampMs={m.max_timestamp_ms}, "
        f"segmentLeaderEpochs={_java_epochs(m.segment_leader_epochs)}, "
        f"segmentSizeInBytes={m.segment_size_in_bytes}, "
        f"customMetadata={_java_custom(m.custom_metadata)}, state={m.state.name}"
        f"{_java_txn(m.txn_index_empty, txn_index_empty)}}}"
    )


def _java_long_hash(value: int) -> int:
    return (value ^ (value >> 32)) & 0xFFFFFFFF  # Long.hashCode on the unsigned bits


def metadata_partition(topic_id: str, partition: int, partitions: int) -> int:
    """The ``__remote_log_metadata`` partition of a topic-partition's records: Kafka's
    RemoteLogMetadataTopicPartitioner (murmur2 of the big-endian Objects.hash of the topic
    id's low and high 64 bits and the partition, made positive, modulo ``partitions``)."""
    if partitions <= 0:
        raise InvalidArgumentError(f"partitions must be positive, not {partitions}")
    raw = uuid_bytes(topic_id)
    high, low = (int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big"))
    h = 1
    for element in (_java_long_hash(low), _java_long_hash(high), partition & 0xFFFFFFFF):
        h = (31 * h + element) & 0xFFFFFFFF
    return (murmur2(h.to_bytes(4, "big")) & 0x7FFFFFFF) % partitions
