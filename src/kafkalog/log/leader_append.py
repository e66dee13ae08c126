"""A leader's most common append in one pass: a producer's batch the compiled check took whole,
written at the log end of a segment it fits in (Kafka's UnifiedLog.append with
LogValidator's in-place assignment).

Why: a broker spends most of its produce time here, once per partition of every Produce
request. The general sequence (``LogAppender._append_batches``) stages producer updates, builds
roll facts, validated-records and batch objects and calls a dozen steps; for the batch every
producer sends next none of that can change the outcome, and in Python each layer costs as
much as the write itself. Refuses: anything the general sequence could answer differently. A
batch that needs a roll, a LogAppendTime stamp, a producer check beyond "the next sequence of
the same epoch", or a flush decision it cannot make is handed back (None) untouched, and the
general sequence, the reference this path is tested against, takes it.
"""

from __future__ import annotations

from collections.abc import Callable

from kafkalog.log.append_info import LogAppendInfo
from kafkalog.log.leader_epoch import LeaderEpochCache
from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_state_manager import ProducerStateManager
from kafkalog.log.validator import ProducerBatchCheck
from kafkalog.log.watermarks import Watermarks
from kafkalog.records.batch import (
    set_last_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from kafkalog.types import NO_TIMESTAMP, TimestampType


def append_in_one_pass(
    check: ProducerBatchCheck,
    epoch: int,
    local: LocalLog,
    watermarks: Watermarks,
    producer_state: ProducerStateManager,
    epochs: LeaderEpochCache,
    flush: Callable[[], None],
) -> LogAppendInfo | None:
    """Under the log lock: write ``check``'s batch stamped with its offsets and ``epoch``, or
    None, having changed nothing, when the general sequence must take it."""
    config = local.config
    if config.message_timestamp_type is not TimestampType.CREATE_TIME:
        return None
    batch = check.batch
    header = batch.header
    entry = None
    if header.producer_id >= 0:
        # the same shortcut, and the same conditions, as the general sequence's
        entry = producer_state.next_in_sequence(batch)
        if entry is None:
            return None
    source = batch.buffer
    size = len(source)
    segment = local.active_segment
    first = local.log_end_offset
    last = first + header.last_offset_delta
    max_ts = check.max_timestamp
    if size > config.segment_size or local.roll_due(size, max_ts, last):
        return None
    # Kafka's in-place assignment, by the same setters the general sequence uses (the max
    # timestamp, inside the CRC, rewritten with it only when the producer's differs)
    data = bytearray(source)
    set_last_offset(data, 0, last)
    set_partition_leader_epoch(data, 0, epoch)
    set_max_timestamp(data, 0, TimestampType.CREATE_TIME, max_ts)
    segment.append(last, max_ts, last, data)
    if epoch >= 0:
        epochs.assign(epoch, first)
    end = last + 1
    local.update_log_end_offset(end, segment)
    if entry is not None:
        entry.add_batch(
            header.producer_epoch, batch.last_sequence, last, header.last_offset_delta, max_ts
        )
    producer_state.update_map_end_offset(end)
    watermarks.on_append(end)
    local.delete_due_files()
    if local.flush_due():
        flush()
    return LogAppendInfo(
        first_offset=first,
        last_offset=last,
        max_timestamp=max_ts,
        shallow_offset_of_max_timestamp=last,
        log_append_time=NO_TIMESTAMP,
        log_start_offset=watermarks.log_start_offset,
        record_count=header.records_count,
        batch_count=1,
        valid_bytes=size,
        source_compression=check.compression,
        target_compression=check.compression,
        last_leader_epoch=epoch,
    )
