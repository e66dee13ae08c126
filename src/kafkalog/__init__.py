"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible with a broker's files.

The public surface is what ``__all__`` lists; everything else may change.
"""

from kafkalog.clock import Clock, ManualClock, SystemClock
from kafkalog.errors import (
    CorruptIndexError,
    CorruptionError,
    CorruptRecordError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaLogError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from kafkalog.records import (
    BatchScanner,
    LegacyRecordBatch,
    MemoryRecords,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    ScanStop,
)
from kafkalog.types import CompressionType, ControlRecordType, TimestampType, TopicPartition

__version__ = "0.1.0"

__all__ = [
    "BatchScanner",
    "Clock",
    "CompressionType",
    "ControlRecordType",
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptionError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTopicError",
    "KafkaLogError",
    "LegacyRecordBatch",
    "LogClosedError",
    "ManualClock",
    "MemoryRecords",
    "OffsetOutOfRangeError",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordTooLargeError",
    "ScanStop",
    "SystemClock",
    "TimestampType",
    "TopicPartition",
    "UnsupportedCompressionTypeError",
    "__version__",
]
