"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible with a broker's files.

The public surface is what ``__all__`` lists; everything else may change.
"""

import os as _os

from kafkalog.clock import Clock, ManualClock, SystemClock
from kafkalog.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptionError,
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidOffsetError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaLogError,
    KafkaStorageError,
    LogCleaningAbortedError,
    LogClosedError,
    LogDirectoryLockedError,
    NotARegularFileError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    OutOfOrderSequenceError,
    ProducerStateError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    RemoteResourceNotFoundError,
    TopicExistsError,
    TransactionCoordinatorFencedError,
    UnexpectedAppendOffsetError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
)
from kafkalog.log.append_info import LogAppendInfo
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.manager import AlterConfigOp, AlterConfigOpType, LogManager, ManagerConfig
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
from kafkalog.storage.file_records import FileSlice, TimestampAndOffset
from kafkalog.storage.segment import FetchDataInfo, LogOffsetMetadata
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
    "AlterConfigOp",
    "AlterConfigOpType",
    "BatchScanner",
    "Clock",
    "CompressionType",
    "ControlRecordType",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "CorruptionError",
    "FetchDataInfo",
    "FileSlice",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidOffsetError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "IsolationLevel",
    "KafkaLogError",
    "KafkaStorageError",
    "LegacyRecordBatch",
    "Log",
    "LogAppendInfo",
    "LogCleaningAbortedError",
    "LogClosedError",
    "LogConfig",
    "LogDirectoryLockedError",
    "LogManager",
    "LogOffsetMetadata",
    "ManagerConfig",
    "ManualClock",
    "MemoryRecords",
    "NotARegularFileError",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "OutOfOrderSequenceError",
    "ProducerFields",
    "ProducerStateError",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "RemoteResourceNotFoundError",
    "ScanStop",
    "SystemClock",
    "TimestampAndOffset",
    "TimestampType",
    "TopicExistsError",
    "TopicPartition",
    "TransactionCoordinatorFencedError",
    "UnexpectedAppendOffsetError",
    "UnknownTopicOrPartitionError",
    "UnsupportedCompressionTypeError",
    "committed_records",
    "serve",
    "__version__",
]


def __getattr__(name: str) -> object:
    # ``kafkalog.serve`` loads the protocol codecs and asyncio only when a server is wanted
    if name == "serve":
        from kafkalog.server import serve  # noqa: PLC0415

        return serve
    raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")


if _os.environ.get("KAFKALOG_PURE_PYTHON", "") not in ("", "0"):
    from kafkalog.records.codec import use_fast_path

    use_fast_path(False)  # the reference codec everywhere (the test suite's second run)
