"""Records of Kafka's internal topics ``__consumer_offsets``, ``__transaction_state`` and
``__share_group_state``.

Why: ``kafka-dump-log --offsets-decoder`` / ``--transaction-log-decoder`` /
``--share-group-state-decoder`` print these records as
the coordinators' generated JSON converters do (``{"type":..,"data":..}`` keys and
``{"version":..,"data":..}`` values, tagged fields only when not at their default); Kafka 3.9's
transaction-log decoder printed a text form instead (``TransactionLog.formatRecordKeyAndValue``).
The layouts are the coordinator record schemas (OffsetCommitKey/Value, GroupMetadataKey,
TransactionLogKey/Value): a big-endian int16 type or version, then the fields, flexible versions
with compact lengths and tagged fields (KIP-482).
A classic group's GroupMetadataValue is decoded too, and for the "consumer" protocol type each
member's subscription and assignment (ConsumerProtocolSubscription/Assignment), as
DumpLogSegments' OffsetsMessageParser replaces those bytes; bytes print as base64 (Jackson's
BinaryNode). KIP-848 consumer groups' records (ConsumerGroupMetadata, member metadata, target
and current assignments, regular expressions), share groups' and streams groups' records, and
the share coordinator's ShareSnapshot / ShareUpdate are decoded by their schemas too.
Refuses: record types Kafka 4.3.1 does not know (reported as unknown, as Kafka reports them).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, cast

from kafkalog.errors import CorruptRecordError
from kafkalog.records.coordinator_schemas import COORDINATOR_SCHEMAS
from kafkalog.records.schema_reader import Field, SchemaReader


def _fields(name: str) -> tuple[Field, ...]:
    return cast("tuple[Field, ...]", COORDINATOR_SCHEMAS[name][3])


def _flexible_from(name: str) -> int:
    first = COORDINATOR_SCHEMAS[name][2]
    return first if isinstance(first, int) else 1 << 15


# (key fields, value fields, first flexible value version), by Kafka's own JSON schemas
_OFFSET_COMMIT = (
    _fields("OffsetCommitKey"),
    _fields("OffsetCommitValue"),
    _flexible_from("OffsetCommitValue"),
)
_GROUP_METADATA = (
    _fields("GroupMetadataKey"),
    _fields("GroupMetadataValue"),
    _flexible_from("GroupMetadataValue"),
)
_TRANSACTION_LOG = (
    _fields("TransactionLogKey"),
    _fields("TransactionLogValue"),
    _flexible_from("TransactionLogValue"),
)


def _by_type(*names: str) -> dict[int, tuple[Any, ...]]:
    """Records by their type (the key schema's api key): key fields, value fields, and the
    value's first flexible version."""
    return {
        cast("int", COORDINATOR_SCHEMAS[f"{name}Key"][0]): (
            _fields(f"{name}Key"),
            _fields(f"{name}Value"),
            _flexible_from(f"{name}Value"),
        )
        for name in names
    }


# The group records besides offsets and classic groups: KIP-848 consumer groups (types 3-8,
# 16), KIP-932 share groups (10-15) and KIP-1071 streams groups (17, 19-23)
_GROUP_RECORDS = _by_type(
    "ConsumerGroupMetadata", "ConsumerGroupPartitionMetadata", "ConsumerGroupMemberMetadata",
    "ConsumerGroupTargetAssignmentMetadata", "ConsumerGroupTargetAssignmentMember",
    "ConsumerGroupCurrentMemberAssignment", "ConsumerGroupRegularExpression",
    "ShareGroupMetadata", "ShareGroupMemberMetadata", "ShareGroupTargetAssignmentMetadata",
    "ShareGroupTargetAssignmentMember", "ShareGroupCurrentMemberAssignment",
    "ShareGroupStatePartitionMetadata",
    "StreamsGroupMetadata", "StreamsGroupTopology", "StreamsGroupMemberMetadata",
    "StreamsGroupTargetAssignmentMetadata", "StreamsGroupTargetAssignmentMember",
    "StreamsGroupCurrentMemberAssignment",
)  # fmt: skip
# ``__share_group_state``: a share-partition's whole state (ShareSnapshot, type 0) and the
# changes written after it (ShareUpdate, type 1), by the share coordinator
_SHARE_STATE = _by_type("ShareSnapshot", "ShareUpdate")
# The consumer's embedded protocol (never flexible): what a member subscribed to and what the
# group leader assigned it.
_SUBSCRIPTION = _fields("ConsumerProtocolSubscription")
_ASSIGNMENT = _fields("ConsumerProtocolAssignment")
_NOT_NULL = {"topics", "ownedPartitions", "assignedPartitions", "topic", "partitions"}

# TransactionState names, by the status byte (TransactionState in the transaction coordinator)
TRANSACTION_STATES = (
    "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
    "Dead", "PrepareEpochFence",
)  # fmt: skip


@dataclass(frozen=True)
class CoordinatorRecord:
    record_type: int  # the key's leading int16
    key: dict[str, Any] | None  # None: a type this module does not decode
    value_version: int | None  # None: a tombstone
    value: dict[str, Any] | None


def _schema(topic: str, record_type: int) -> tuple[Any, ...] | None:
    if topic == "offsets":
        if record_type in (0, 1):  # legacy key versions 0 and 1 are both offset commits
            return _OFFSET_COMMIT
        if record_type == 2:
            return _GROUP_METADATA
        return _GROUP_RECORDS.get(record_type)
    if topic == "share-group-state":
        return _SHARE_STATE.get(record_type)
    return _TRANSACTION_LOG if record_type == 0 else None


def decode(topic: str, key: bytes, value: bytes | None) -> CoordinatorRecord:
    """Decode one record of ``topic`` ("offsets", "transactions" or "share-group-state")."""
    reader = SchemaReader(key, flexible=False)
    record_type = reader.fixed("int16")
    schema = _schema(topic, record_type)
    if schema is None:
        return CoordinatorRecord(record_type, None, None, None)
    key_fields, value_fields, first_flexible = schema
    decoded_key = reader.struct(key_fields, 0)
    if value is None:
        return CoordinatorRecord(record_type, decoded_key, None, None)
    if value_fields is None:
        return CoordinatorRecord(record_type, decoded_key, -1, None)
    version = SchemaReader(value, flexible=False).fixed("int16")
    reader = SchemaReader(value, flexible=version >= first_flexible)
    reader.pos = 2
    return CoordinatorRecord(
        record_type, decoded_key, version, reader.struct(value_fields, version)
    )


def _json(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=_base64)


def _base64(value: object) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON")


def _embedded(data: bytes | None, fields: tuple[Field, ...]) -> Any:
    """A member's subscription or assignment decoded (its own int16 version first), or the
    bytes unchanged when they do not parse, as OffsetsMessageParser.replaceField does."""
    if data is None:
        return None
    try:
        reader = SchemaReader(data, flexible=False)
        version = reader.fixed("int16")
        if not 0 <= version <= 3:
            return data
        decoded = reader.struct(fields, version)
    except CorruptRecordError:
        return data
    if _has_null(decoded):
        return data  # a non-nullable field serialized as null: Kafka's reader throws
    return decoded


def consumer_protocol(data: bytes, name: str) -> tuple[int, dict[str, Any]] | None:
    """A classic consumer's ConsumerProtocolSubscription or ConsumerProtocolAssignment
    (``name``): its version and fields, or None when the bytes do not parse as one."""
    decoded = _embedded(data, _SUBSCRIPTION if name.endswith("Subscription") else _ASSIGNMENT)
    if not isinstance(decoded, dict):
        return None
    return int.from_bytes(data[:2], "big", signed=True), decoded


def _has_null(obj: Any) -> bool:
    if isinstance(obj, dict):
        return any((k in _NOT_NULL and v is None) or _has_null(v) for k, v in obj.items())
    if isinstance(obj, list):
        return any(_has_null(v) for v in obj)
    return False


def _consumer_members(value: dict[str, Any]) -> dict[str, Any]:
    if value.get("protocolType") != "consumer" or not value.get("members"):
        return value
    members = [
        {
            **m,
            "subscription": _embedded(m["subscription"], _SUBSCRIPTION),
            "assignment": _embedded(m["assignment"], _ASSIGNMENT),
        }
        for m in value["members"]
    ]
    return {**value, "members": members}


def format_json(record: CoordinatorRecord, offset: int, key_type: int) -> tuple[str, str | None]:
    """(key, payload) as Kafka 4.x's CoordinatorRecordMessageParser prints them; ``key_type``
    is what the "type" field shows (the record's api key in 4.x, the key version in 3.9)."""
    if record.key is None:
        return f"Unknown record type {record.record_type} at offset {offset}, skipping.", None
    key = _json({"type": str(key_type), "data": record.key})
    if record.value_version is None:
        return key, "<DELETE>"
    if record.value is None:
        return key, f"kafkalog does not decode value type {record.record_type}"
    value = _consumer_members(record.value) if record.record_type == 2 else record.value
    return key, _json({"version": str(record.value_version), "data": value})


def format_transaction_text(record: CoordinatorRecord) -> tuple[str, str | None]:
    """Kafka 3.9's text form (TransactionLog.formatRecordKeyAndValue)."""
    if record.key is None:
        return f"unknown::version={record.record_type}", None
    key = f"transaction_metadata::transactionalId={record.key['transactionalId']}"
    v = record.value
    if v is None:
        return key, "<DELETE>"
    status = v["transactionStatus"]
    state = TRANSACTION_STATES[status] if 0 <= status < len(TRANSACTION_STATES) else str(status)
    partitions = ",".join(
        f"{p['topic']}-{pid}" for p in v["transactionPartitions"] or [] for pid in p["partitionIds"]
    )
    return key, (
        f"producerId:{v['producerId']},producerEpoch:{v['producerEpoch']},state={state},"
        f"partitions=[{partitions}],txnLastUpdateTimestamp="
        f"{v['transactionLastUpdateTimestampMs']},txnTimeoutMs={v['transactionTimeoutMs']}"
    )
