"""One exception tree for all of kafkalog.

Why: callers must be able to catch "anything kafkalog says is wrong" with one ``except``, and tell
*corrupt data* (a file or buffer is damaged) from *misuse or state* (a bad argument, an offset out
of range). Each error names what was wrong and where. Refuses: bare builtins escaping the library
(a ``struct.error`` or a codec's own exception is always wrapped, with ``raise ... from err``).
"""

from __future__ import annotations


class KafkaLogError(Exception):
    """Root of every error kafkalog raises."""


# --- corruption branch: the bytes are wrong -----------------------------------------------------


class CorruptionError(KafkaLogError):
    """Data on disk or in a buffer is damaged. Carries where, when known."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        where = []
        if file is not None:
            where.append(f"file {file}")
        if position is not None:
            where.append(f"position {position}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.reason = message
        self.file = file
        self.position = position
        self.offset = offset


class CorruptRecordError(CorruptionError):
    """A record batch or record is malformed: bad size, magic, CRC or record structure."""


class CorruptIndexError(CorruptionError):
    """An offset, time or transaction index fails its sanity check."""


class CorruptSnapshotError(CorruptionError):
    """A producer-state snapshot file is unreadable (version, CRC, truncation)."""


class CorruptCheckpointError(CorruptionError):
    """A checkpoint file (recovery point, log start offset, leader epochs) is malformed."""


# --- misuse / state branch: the request is wrong ------------------------------------------------


class InvalidRecordError(KafkaLogError, ValueError):
    """Records that are well formed but not acceptable (e.g. a keyless record on a compacted topic,
    a builder asked for an impossible batch). ``record_errors``: (index in the batch, why) of
    each record refused, when the refusal is per record (Kafka's RecordValidationException)."""

    def __init__(self, message: str, *, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class UnsupportedCompressionTypeError(KafkaLogError, ValueError):
    """A compression codec id or name Kafka does not define, or one not allowed for the magic."""

    def __init__(self, message: str, *, codec_id: int | None = None) -> None:
        super().__init__(message)
        self.codec_id = codec_id


class RecordTooLargeError(KafkaLogError, ValueError):
    """A batch is larger than ``max.message.bytes``."""


class RecordBatchTooLargeError(KafkaLogError, ValueError):
    """An append is larger than ``segment.bytes``."""


class InvalidTimestampError(KafkaLogError, ValueError):
    """A record timestamp is outside the topic's allowed bounds; ``record_errors`` as for
    InvalidRecordError."""

    def __init__(self, message: str, *, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidConfigError(KafkaLogError, ValueError):
    """A configuration value is missing, of the wrong type or out of range; names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"invalid value for '{key}': {message}")
        self.key = key
        self.detail = message  # without the key's prefix, as Kafka words its own errors


class InvalidTopicError(KafkaLogError, ValueError):
    """A topic or partition directory name breaks Kafka's naming rules."""


class OffsetOutOfRangeError(KafkaLogError, IndexError):
    """An offset outside ``[log_start_offset, log_end_offset]`` was requested."""


class InvalidOffsetError(KafkaLogError, ValueError):
    """An offset that breaks an ordering rule (index appends, segment bases)."""


class KafkaStorageError(KafkaLogError, OSError):
    """The disk failed an operation: full, read-only, out of descriptors, an I/O error (Kafka's
    ``KafkaStorageException``). Says what was being done and to which file; ``errno`` is the
    operating system's."""

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotARegularFileError(KafkaLogError, ValueError):
    """A path kafkalog must create, write or truncate is a symbolic link or a directory."""


class LogClosedError(KafkaLogError):
    """An operation was attempted on a closed log, segment or index."""


class UnexpectedAppendOffsetError(KafkaLogError, ValueError):
    """A follower append whose first offset is below the log end offset."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class OffsetsOutOfOrderError(KafkaLogError, ValueError):
    """A follower append whose batches' offsets do not increase."""


class InvalidArgumentError(KafkaLogError, ValueError):
    """An argument of the wrong type or out of range (a negative size, a str where bytes go)."""


# --- producer state: idempotence and transactions (Kafka's ProducerAppendInfo) ---------------


class ProducerStateError(KafkaLogError, ValueError):
    """An idempotent or transactional append that breaks the producer's state. Carries the
    producer id and the offset the batch would have had."""

    def __init__(self, message: str, *, producer_id: int, offset: int | None = None) -> None:
        super().__init__(message)
        self.producer_id = producer_id
        self.offset = offset


class OutOfOrderSequenceError(ProducerStateError):
    """A batch's first sequence does not follow the producer's last one (Kafka's
    OutOfOrderSequenceException)."""


class InvalidProducerEpochError(ProducerStateError):
    """A batch or marker from an older producer epoch than the one seen last (a fenced
    producer)."""


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch while the producer's transaction is open."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """A marker written by a coordinator epoch older than the one seen last (a zombie
    coordinator)."""


# --- the log manager ----------------------------------------------------------------------------


class LogDirectoryLockedError(KafkaLogError):
    """Another process (or LogManager) holds the ``.lock`` of a log directory."""


class TopicExistsError(KafkaLogError, ValueError):
    """A topic being created already has partitions in the log directories."""


class UnknownTopicOrPartitionError(KafkaLogError, KeyError):
    """No log exists for the requested topic partition."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class RemoteResourceNotFoundError(KafkaLogError, KeyError):
    """Tiered storage knows no remote segment (or remote data) by that id (Kafka's
    RemoteResourceNotFoundException)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# --- the cleaner --------------------------------------------------------------------------------


class LogCleaningAbortedError(KafkaLogError):
    """A cleaning round was abandoned (its log was truncated, deleted or changed under it); the
    round left no file behind and the log is as it was."""
