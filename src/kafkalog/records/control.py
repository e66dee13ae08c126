"""Control records: transaction markers and the other control types (Kafka's ControlRecordType,
EndTransactionMarker).

Why: a control batch carries one record whose key names its type; COMMIT and ABORT markers carry
the coordinator epoch. Readers must tolerate unknown types (they are skipped), writers must not
produce them. Refuses: interpreting KRaft payloads (they stay opaque bytes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.types import ControlRecordType

_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


@dataclass(frozen=True, slots=True)
class ControlRecordKey:
    version: int
    type_id: int

    @property
    def type(self) -> ControlRecordType:
        try:
            return ControlRecordType(self.type_id)
        except ValueError:
            return ControlRecordType.UNKNOWN


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker and the coordinator epoch that wrote it."""

    type: ControlRecordType
    coordinator_epoch: int


def decode_control_key(key: bytes | None) -> ControlRecordKey:
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(
            f"control record key needs {_KEY.size} bytes, has {0 if key is None else len(key)}"
        )
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    return ControlRecordKey(version, type_id)


def encode_control_key(record_type: ControlRecordType) -> bytes:
    if record_type is ControlRecordType.UNKNOWN:
        raise InvalidRecordError("cannot write a control record of unknown type")
    return _KEY.pack(CONTROL_KEY_VERSION, int(record_type))


def decode_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    """Decode a COMMIT/ABORT marker from its control record's key and value."""
    control = decode_control_key(key)
    if control.type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise InvalidRecordError(f"control record of type {control.type_id} is not a marker")
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise CorruptRecordError("end transaction marker value is shorter than 6 bytes")
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"end transaction marker has negative version {version}")
    return EndTransactionMarker(control.type, coordinator_epoch)


def encode_end_txn_value(coordinator_epoch: int) -> bytes:
    return _END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
