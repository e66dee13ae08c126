"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible with a broker's files.

The public surface is what ``__all__`` lists; everything else may change.
"""

import os as _os

from kafkalog.clock import Clock, ManualClock, SystemClock
from kafkalog.errors import (
    CorruptIndexError,
    CorruptionError,
    CorruptRecordError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaLogError,
    LogClosedError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerStateError,
    RecordTooLargeError,
    TransactionCoordinatorFencedError,
    UnsupportedCompressionTypeError,
)
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.manager import LogManager, ManagerConfig
from kafkalog.records import (
    AbortedTransaction,
    BatchScanner,
    LegacyRecordBatch,
    MemoryRecords,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    ScanStop,
    committed_records,
)
from kafkalog.types import (
    CompressionType,
    ControlRecordType,
    IsolationLevel,
    TimestampType,
    TopicPartition,
)

__version__ = "0.1.0"

__all__ = [
    "AbortedTransaction",
    "BatchScanner",
    "Clock",
    "CompressionType",
    "ControlRecordType",
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptionError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "IsolationLevel",
    "KafkaLogError",
    "LegacyRecordBatch",
    "Log",
    "LogClosedError",
    "LogConfig",
    "LogManager",
    "ManagerConfig",
    "ManualClock",
    "MemoryRecords",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerFields",
    "ProducerStateError",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordTooLargeError",
    "ScanStop",
    "SystemClock",
    "TimestampType",
    "TopicPartition",
    "TransactionCoordinatorFencedError",
    "UnsupportedCompressionTypeError",
    "committed_records",
    "__version__",
]

if _os.environ.get("KAFKALOG_PURE_PYTHON", "") not in ("", "0"):
    from kafkalog.records.fastpath import use_fast_path

    use_fast_path(False)  # the reference codec everywhere (the test suite's second run)
