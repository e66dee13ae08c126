"""What OffsetCommit and TxnOffsetCommit share: Kafka's per-partition checks of a commit, the
records of the partitions that pass, and the answer with each partition's code.

Why: a transactional commit is checked exactly as a plain one (an unknown partition, metadata
over ``offset.metadata.max.bytes``, the group's own error for all); only where the records go
and when they count differ (group_offsets, txn_apis). Refuses: I/O.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.context import CoordinatorContext
from kafkalog.coordinator.offsets_store import (
    OffsetAndMetadata,
    OffsetRows,
    PartitionOffsets,
    offset_commit_key,
    offset_commit_value,
)
from kafkalog.protocol.wire import make
from kafkalog.server.context import NO_THROTTLE

Commit = tuple[tuple[str, int], OffsetAndMetadata]  # a partition and the offset committed to it


def commit_rows(
    ctx: CoordinatorContext,
    group_id: str,
    topics: Any,
    error: ErrorCode | None,
    may_read: Callable[[str], bool] = lambda topic: True,
    member_check: Callable[[str, int], ErrorCode | None] | None = None,
) -> tuple[dict[tuple[str, int], ErrorCode], OffsetRows, list[Commit]]:
    """Kafka's per-partition checks of an OffsetCommit or TxnOffsetCommit: each partition's
    code, the records of those that pass, and their offsets (one per record, in the records'
    order). A topic the principal may not READ (``may_read``) is refused first, then
    ``error`` (the group's) fails the rest, then ``member_check`` each partition (a consumer
    group member's older epoch, KIP-1251)."""
    known = ctx.manager.topics()
    now = int(time.time() * 1000)
    codes: dict[tuple[str, int], ErrorCode] = {}
    rows: OffsetRows = []
    commits: list[Commit] = []
    for topic in topics:
        readable = may_read(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if not readable:
                codes[tp] = ErrorCode.topic_authorization_failed
            elif error is not None:
                codes[tp] = error
            elif member_check is not None and (refusal := member_check(*tp)) is not None:
                codes[tp] = refusal
            elif not 0 <= p.partition_index < known.get(topic.name, 0):
                codes[tp] = ErrorCode.unknown_topic_or_partition
            elif len(metadata.encode()) > ctx.settings.offset_metadata_max_bytes:
                codes[tp] = ErrorCode.offset_metadata_too_large
            else:
                value = OffsetAndMetadata(
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1), metadata, now
                )
                commits.append((tp, value))
                rows.append((offset_commit_key(group_id, *tp), offset_commit_value(value)))
                codes[tp] = ErrorCode.none
    return codes, rows, commits


def placed(commits: list[Commit], first_record_offset: int) -> PartitionOffsets:
    """The commits as written from ``first_record_offset`` on: each knows its record's offset,
    and of two for one partition the later record's counts, as the log replays them."""
    return {
        tp: dataclasses.replace(value, record_offset=first_record_offset + i)
        for i, (tp, value) in enumerate(commits)
    }


def commit_response(
    mod: Any, api: str, topics: Any, codes: dict[tuple[str, int], ErrorCode]
) -> Any:
    """The ``<api>Response`` (OffsetCommit or TxnOffsetCommit) with each partition's code."""
    return make(
        mod,
        f"{api}Response",
        throttle_time=NO_THROTTLE,
        topics=tuple(
            make(
                mod,
                f"{api}ResponseTopic",
                name=topic.name,
                partitions=tuple(
                    make(
                        mod,
                        f"{api}ResponsePartition",
                        partition_index=p.partition_index,
                        error_code=codes[(topic.name, p.partition_index)],
                    )
                    for p in topic.partitions
                ),
            )
            for topic in topics
        ),
    )
