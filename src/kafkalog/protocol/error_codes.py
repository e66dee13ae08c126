"""Kafka's error code for each kafkalog error (Kafka's Errors enum, by exception class).

Why: a client decides to retry, reset or fail from the code alone, so the mapping must be
Kafka's: a batch too large is MESSAGE_TOO_LARGE, a sequence gap OUT_OF_ORDER_SEQUENCE_NUMBER.
Refuses: to guess. An error it has no code for is UNKNOWN_SERVER_ERROR, and the broker logs it.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kafkalog.errors import (
    CorruptionError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    TopicExistsError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
)

# most specific first: the first class an error is an instance of gives its code
_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (CorruptionError, ErrorCode.corrupt_message),
    (RecordTooLargeError, ErrorCode.message_too_large),
    (RecordBatchTooLargeError, ErrorCode.record_list_too_large),
    (InvalidTimestampError, ErrorCode.invalid_timestamp),
    (UnsupportedCompressionTypeError, ErrorCode.unsupported_compression_type),
    (OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (TransactionCoordinatorFencedError, ErrorCode.transaction_coordinator_fenced),
    (InvalidRecordError, ErrorCode.invalid_record),
    (OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
    (TopicExistsError, ErrorCode.topic_already_exists),
    (InvalidTopicError, ErrorCode.invalid_topic_exception),
    (InvalidConfigError, ErrorCode.invalid_config),
    (KafkaStorageError, ErrorCode.kafka_storage_error),
    (LogClosedError, ErrorCode.not_leader_or_follower),  # the partition moved away under us
)


def error_code(err: BaseException) -> ErrorCode:
    """Kafka's code for ``err``; UNKNOWN_SERVER_ERROR for anything unexpected."""
    for cls, code in _CODES:
        if isinstance(err, cls):
            return code
    return ErrorCode.unknown_server_error
