"""The KRaft control records of ``__cluster_metadata`` segments and ``.checkpoint`` snapshots, as
kafka-dump-log prints them (SnapshotHeader, SnapshotFooter, LeaderChange, KRaftVersion,
KRaftVoters, each as its message's JSON).

Why: a data engineer dumping a KRaft metadata log or snapshot must get Kafka's lines, not a
crash or a bare control type. The messages are Kafka's own schemas (kio generates them from
Kafka's JSON definitions); this only renders them as Kafka's generated JsonConverters do:
camelCase field names in schema order, UUIDs in Kafka's base64. Refuses: the metadata records
themselves (TopicRecord, PartitionRecord ...; Kafka's --cluster-metadata-decoder), which are
printed as Kafka prints them without that decoder.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import uuid
from typing import Any

from kafkalog.types import ControlRecordType

# control type -> (the label Kafka 4 prints, kio's module and message class); kio is imported
# when a KRaft record is first met: it takes a fifth of a second, and most dumps have none
_MESSAGES: dict[ControlRecordType, tuple[str, str, str]] = {
    ControlRecordType.LEADER_CHANGE:
        ("LeaderChange:", "leader_change_message", "LeaderChangeMessage"),
    ControlRecordType.SNAPSHOT_HEADER:
        ("SnapshotHeader", "snapshot_header_record", "SnapshotHeaderRecord"),
    ControlRecordType.SNAPSHOT_FOOTER:
        ("SnapshotFooter", "snapshot_footer_record", "SnapshotFooterRecord"),
    ControlRecordType.KRAFT_VERSION:
        ("KRaftVersion", "k_raft_version_record", "KRaftVersionRecord"),
    ControlRecordType.KRAFT_VOTERS: ("KRaftVoters", "voters_record", "VotersRecord"),
}  # fmt: skip


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _json_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_camel(f.name): _json_value(getattr(value, f.name))
                for f in dataclasses.fields(value)}  # fmt: skip
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    if isinstance(value, uuid.UUID):  # Kafka's Uuid.toString
        return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
    return value


def kraft_control_text(kind: ControlRecordType, value: bytes | None) -> str | None:
    """``SnapshotHeader {"version":0,...}`` for a KRaft control record, as Kafka 4 prints it
    after the record's metadata; None for other control types. A value that does not parse
    is said to be so (a damaged record must not stop the dump)."""
    known = _MESSAGES.get(kind)
    if known is None:
        return None
    label, module, name = known
    from kio.serial import entity_reader  # noqa: PLC0415 - see _MESSAGES

    message = getattr(importlib.import_module(f"kio.schema.{module}.v0"), name)
    try:
        decoded, _ = entity_reader(message)(memoryview(value or b""), 0)
    except Exception as err:
        return f"{label} (unreadable: {type(err).__name__})"
    return f"{label} {json.dumps(_json_value(decoded), separators=(',', ':'))}"
