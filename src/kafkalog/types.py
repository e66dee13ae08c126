"""The glossary: offset and timestamp types, enums and identifiers shared by every layer.

Why: the sentinels and integer bounds of Kafka's formats, and enums that carry Kafka's wire ids,
declared once so no layer re-declares them. Refuses: any logic
beyond naming and parsing these values.
"""

from __future__ import annotations

import base64
import binascii
import enum
import re
from typing import NamedTuple

from kafkalog.errors import (
    InvalidArgumentError,
    InvalidTopicError,
    UnsupportedCompressionTypeError,
)

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def check_int(name: str, value: object, low: int, high: int) -> int:
    """``value`` if it is an int (not a bool) in ``[low, high]``; InvalidArgumentError naming
    ``name`` otherwise. Values enter the library here, so that a 2**70 never reaches a
    ``struct.pack`` or a checkpoint."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} {value} is outside [{low}, {high}]")
    return value


def check_buffer(name: str, value: object) -> memoryview:
    """``value`` as a byte view if it is bytes-like; InvalidArgumentError otherwise."""
    try:
        view = memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidArgumentError(
            f"{name} must be bytes-like, not {type(value).__name__}"
        ) from None
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def check_offset(name: str, value: object) -> int:
    """An offset: an int in ``[0, 2**63 - 1]`` (Kafka's int64 offsets are never negative)."""
    return check_int(name, value, 0, INT64_MAX)


class TimestampType(enum.IntEnum):
    """Kafka's timestamp types, with the ids Spark's ``timestampType`` column reports."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def display_name(self) -> str:
        """The name Kafka prints (``CreateTime``, ``LogAppendTime``, ``NoTimestampType``)."""
        return _TIMESTAMP_TYPE_NAMES[self]

    @classmethod
    def parse(cls, value: TimestampType | str | int) -> TimestampType:
        """Accept a member, a Kafka name (``CreateTime``, ``LogAppendTime``) or an id."""
        if isinstance(value, TimestampType):
            return value
        if isinstance(value, int):
            return cls(value)
        for member, name in _TIMESTAMP_TYPE_NAMES.items():
            if value == name or value.upper() == member.name:
                return member
        raise ValueError(f"unknown timestamp type {value!r} (expected CreateTime or LogAppendTime)")


_TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


class CompressionType(enum.IntEnum):
    """Kafka's compression codecs with their attribute ids (bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """The name Kafka uses in configs and tools (``none``, ``gzip``, ...)."""
        return self.name.lower()

    @classmethod
    def from_id(cls, codec_id: int) -> CompressionType:
        """The codec of a batch's attribute bits; UnsupportedCompressionTypeError if unknown."""
        # a tuple index, not the enum's call (ten times its cost, once per batch read)
        if type(codec_id) is int and 0 <= codec_id < len(_COMPRESSION_TYPES):
            return _COMPRESSION_TYPES[codec_id]
        try:
            return cls(codec_id)
        except ValueError:
            raise UnsupportedCompressionTypeError(
                f"unknown compression type id: {codec_id}", codec_id=codec_id
            ) from None

    @classmethod
    def parse(cls, value: CompressionType | str | int | None) -> CompressionType:
        """Accept an enum, a codec id, or a Kafka name (``uncompressed`` means none)."""
        if value is None:
            return cls.NONE
        if isinstance(value, CompressionType):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls.from_id(value)
        if not isinstance(value, str):
            raise UnsupportedCompressionTypeError(f"unknown compression type {value!r}")
        name = value.strip().lower()
        if name == "uncompressed":
            return cls.NONE
        for member in cls:
            if member.kafka_name == name:
                return member
        raise UnsupportedCompressionTypeError(
            f"unknown compression type {value!r} (expected one of none, gzip, snappy, lz4, zstd)"
        )


_COMPRESSION_TYPES = tuple(CompressionType)  # by id: the ids run 0 to 4


class ControlRecordType(enum.IntEnum):
    """Types of control records (key schema v0). Unknown ids are tolerated on read."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


class IsolationLevel(enum.Enum):
    """Consumer isolation: what a read may return."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


def check_isolation(value: object) -> IsolationLevel | None:
    """``value`` if it is an IsolationLevel or None; InvalidArgumentError otherwise (a typo'd
    string must not silently read uncommitted data)."""
    if value is None or isinstance(value, IsolationLevel):
        return value
    raise InvalidArgumentError(
        f"isolation must be an IsolationLevel ({', '.join(m.name for m in IsolationLevel)}) "
        f"or None, not {value!r}"
    )


_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249


def validate_topic_name(topic: str) -> str:
    """Kafka's topic-name rules: legal characters, at most 249 characters, not ``.`` or ``..``."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(topic)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC.match(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )
    return topic


# Kafka's Topic.CLUSTER_METADATA_TOPIC_NAME: a KRaft node's metadata log, whose directory sits
# in the first log directory unless metadata.log.dir says otherwise. Not a topic of the log
# manager's (Kafka's LogManager.loadLogs leaves it to the Raft layer), and never created.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
# Kafka's internal topics (org.apache.kafka.common.internals.Topic): the coordinators' state,
# which tools leave out when asked to (--exclude-internal) and clients may not write
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC, SHARE_GROUP_STATE_TOPIC})


def is_internal_topic(topic: str | None) -> bool:
    return topic in INTERNAL_TOPICS


def validate_new_topic_name(topic: str) -> str:
    """``validate_topic_name``, and not the metadata log's name (Kafka prohibits creating it)."""
    validate_topic_name(topic)
    if topic == CLUSTER_METADATA_TOPIC:
        raise InvalidTopicError(f"Creation of internal topic {topic} is prohibited.")
    return topic


class TopicPartition(NamedTuple):
    """A topic and a partition number; its directory name is ``<topic>-<partition>``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


# --- Kafka's Uuid (org.apache.kafka.common.Uuid): topic IDs, directory IDs -----------------

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID
METADATA_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # Uuid.METADATA_TOPIC_ID (__cluster_metadata)
RESERVED_UUIDS = frozenset({ZERO_UUID, METADATA_TOPIC_ID})


def uuid_bytes(topic_id: str) -> bytes:
    """The 16 bytes of a Kafka Uuid string, or InvalidArgumentError saying why not."""
    if not isinstance(topic_id, str) or len(topic_id) != 22:
        raise InvalidArgumentError(f"topic ID {topic_id!r} is not 22 URL-safe base64 characters")
    try:
        raw = base64.b64decode(topic_id + "==", altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidArgumentError(f"topic ID {topic_id!r} is not URL-safe base64") from err
    if len(raw) != 16 or uuid_string(raw) != topic_id:
        raise InvalidArgumentError(f"topic ID {topic_id!r} is not a 16-byte Uuid")
    return raw


def uuid_string(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
