"""What an append reports (Kafka's LogAppendInfo)."""

from __future__ import annotations

from dataclasses import dataclass

from kafkalog.types import CompressionType


@dataclass(frozen=True, slots=True, kw_only=True)
class LogAppendInfo:
    """First/last offset, max timestamp and its (shallow) offset, counts and sizes.

    ``first_offset`` is -1 when unknown (legacy follower data). ``duplicate`` is set when an
    idempotent retry was recognised and nothing was written.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    batch_count: int
    valid_bytes: int
    source_compression: CompressionType
    target_compression: CompressionType
    last_leader_epoch: int = -1
    duplicate: bool = False

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1
