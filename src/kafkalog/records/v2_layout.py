"""The v2 record batch's header layout (Kafka's DefaultRecordBatch): its fields, their byte
offsets and the attribute bits.

Why: the header is declared once and every byte offset derived from it; the batch type, the
record codec's batch walks and the scanner all read it, and the compiled ``_v2_format.h`` holds
the same table for C. Refuses: anything but constants.
"""

from __future__ import annotations

import struct

# --- the wire schema -----------------------------------------------------------------------------

V2_HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("records_count", "i"),
)

HEADER_STRUCT = struct.Struct(">" + "".join(code for _, code in V2_HEADER_FIELDS))


def _ladder() -> dict[str, int]:
    offsets, at = {}, 0
    for name, code in V2_HEADER_FIELDS:
        offsets[name] = at
        at += struct.calcsize(">" + code)
    return offsets


FIELD_OFFSETS = _ladder()
BASE_OFFSET_OFFSET = FIELD_OFFSETS["base_offset"]
BATCH_LENGTH_OFFSET = FIELD_OFFSETS["batch_length"]
PARTITION_LEADER_EPOCH_OFFSET = FIELD_OFFSETS["partition_leader_epoch"]
MAGIC_OFFSET = FIELD_OFFSETS["magic"]
CRC_OFFSET = FIELD_OFFSETS["crc"]
ATTRIBUTES_OFFSET = FIELD_OFFSETS["attributes"]
LAST_OFFSET_DELTA_OFFSET = FIELD_OFFSETS["last_offset_delta"]
MAX_TIMESTAMP_OFFSET = FIELD_OFFSETS["max_timestamp"]
PRODUCER_ID_OFFSET = FIELD_OFFSETS["producer_id"]
RECORDS_COUNT_OFFSET = FIELD_OFFSETS["records_count"]
RECORD_BATCH_OVERHEAD = HEADER_STRUCT.size  # 61
LOG_OVERHEAD = BATCH_LENGTH_OFFSET + 4  # 12: offset + size, common to every magic
CRC_START = ATTRIBUTES_OFFSET  # the CRC covers attributes .. end of batch
MAGIC = 2

# attribute bits
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


assert RECORD_BATCH_OVERHEAD == 61 and CRC_START == 21 and RECORDS_COUNT_OFFSET == 57
