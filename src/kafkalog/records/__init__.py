"""kafkalog.records: Kafka's record formats, sans-IO (Kafka's org.apache.kafka.common.record).

Bytes or memoryviews in, values out: varints, CRCs, codecs, v2 batches and records, legacy v0/v1
messages, control records, a builder and the one batch scanner. No file, clock or logging here.
"""

from kafkalog.records.batch import RecordBatch, RecordBatchHeader, decode_header
from kafkalog.records.builder import (
    RecordBatchBuilder,
    build_empty_batch,
    build_end_txn_marker,
)
from kafkalog.records.committed import (
    AbortedTransaction,
    committed_batches,
    committed_records,
)
from kafkalog.records.control import (
    ControlRecordKey,
    EndTransactionMarker,
    decode_control_key,
    decode_end_txn_marker,
)
from kafkalog.records.legacy import LegacyRecord, LegacyRecordBatch
from kafkalog.records.memory_records import MemoryRecords
from kafkalog.records.record import Header, Record
from kafkalog.records.scanner import (
    AnyBatch,
    BatchScanner,
    ScanStop,
    decode_batch,
    next_batch_size,
    scan,
)
from kafkalog.records.v2_layout import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD

__all__ = [
    "AbortedTransaction",
    "LOG_OVERHEAD",
    "RECORD_BATCH_OVERHEAD",
    "AnyBatch",
    "BatchScanner",
    "ControlRecordKey",
    "EndTransactionMarker",
    "Header",
    "LegacyRecord",
    "LegacyRecordBatch",
    "MemoryRecords",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordBatchHeader",
    "ScanStop",
    "build_empty_batch",
    "committed_batches",
    "committed_records",
    "build_end_txn_marker",
    "decode_batch",
    "decode_control_key",
    "decode_end_txn_marker",
    "decode_header",
    "next_batch_size",
    "scan",
]
