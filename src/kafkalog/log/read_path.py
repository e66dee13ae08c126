"""The Log's reader: fetches bounded by the high watermark or the last stable offset, and the
timestamp and ListOffsets lookups (Kafka's UnifiedLog.read, fetchOffsetByTimestamp).

Why: reads never take the log lock; they work from the segment list's snapshot and the offsets
the writer publishes (LocalLog, Watermarks), so the reader holds only those and the leader
epoch cache, and cannot change any of them. Below the local log start offset (tiered storage,
KIP-405) it reads the partition's remote tier, so a caller never knows where records live.
Refuses: any mutation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from kafkalog.errors import InvalidArgumentError, LogClosedError, OffsetOutOfRangeError
from kafkalog.log.leader_epoch import LeaderEpochCache
from kafkalog.log.local_log import LocalLog
from kafkalog.log.watermarks import Watermarks
from kafkalog.records import (
    AbortedTransaction,
    BatchScanner,
    Record,
    ScanStop,
    committed_records,
)
from kafkalog.storage.file_records import TimestampAndOffset
from kafkalog.storage.segment import FetchDataInfo, LogOffsetMetadata, LogSegment
from kafkalog.types import (
    INT32_MAX,
    INT64_MAX,
    NO_TIMESTAMP,
    IsolationLevel,
    check_int,
    check_isolation,
    check_offset,
)

if TYPE_CHECKING:  # the tier's module loads pyarrow's filesystems: only a tiered log needs it
    from kafkalog.tiered.remote_tier import RemoteTier

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # KIP-1023
MAX_READ_RETRIES = 8
T = TypeVar("T")


class LogReader:
    """Reads one partition's Log without its lock; a read racing a segment's removal is made
    again on the new segment list."""

    def __init__(
        self,
        local: LocalLog,
        watermarks: Watermarks,
        epochs: LeaderEpochCache,
        is_closed: Callable[[], bool],
        remote: Callable[[], tuple[RemoteTier | None, int] | None] = lambda: None,
    ) -> None:
        self._local = local
        self._watermarks = watermarks
        self._epochs = epochs
        self._is_closed = is_closed
        # (the remote tier if attached, the highest offset it holds) when remote storage is
        # enabled for the log, else None
        self._remote = remote

    def local_log_start_offset(self) -> int:
        """Where local segments start (Kafka's localLogStartOffset): the log start offset
        unless retention deleted local segments that remote storage holds."""
        first = self._local.segments.first_segment()
        start = self._watermarks.log_start_offset
        return start if first is None else max(start, first.base_offset)

    def _retrying(self, read: Callable[[], T]) -> T:
        """Run a lock-free read again if a segment it had chosen was closed under it (deleted by
        retention or replaced by a compaction swap): the next try sees the new segment list."""
        for _ in range(MAX_READ_RETRIES):
            try:
                return read()
            except LogClosedError:
                if self._is_closed():
                    raise
        return read()

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
        isolation: IsolationLevel | None = None,
    ) -> FetchDataInfo:
        """Read from ``start_offset`` (see ``_read``); a read racing the removal of its segment
        is made again on the new segment list."""
        # a negative start is Kafka's OFFSET_OUT_OF_RANGE, not a bad argument
        check_int("start_offset", start_offset, -INT64_MAX - 1, INT64_MAX)
        check_int("max_bytes", max_bytes, 0, INT32_MAX)
        if max_offset is not None:
            check_offset("max_offset", max_offset)
        check_isolation(isolation)
        return self._retrying(
            lambda: self._read(start_offset, max_bytes, max_offset, min_one_message, isolation)
        )

    def _read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None,
        min_one_message: bool,
        isolation: IsolationLevel | None,
    ) -> FetchDataInfo:
        """Read from ``start_offset``: whole batches as a file slice, up to ``max_bytes`` (the
        first batch whole if ``min_one_message``), never past the high watermark or ``max_offset``.

        ``isolation=READ_COMMITTED`` stops at the last stable offset and reports the aborted
        transactions overlapping the result (``committed_records`` drops them).
        """
        local, marks = self._local, self._watermarks
        leo = local.log_end_offset_metadata
        log_start = marks.log_start_offset
        if start_offset < log_start or start_offset > leo.message_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range [{log_start}, {leo.message_offset}] of "
                f"{local.directory.name}"
            )
        committed = isolation is IsolationLevel.READ_COMMITTED
        remote = self._remote()
        if remote is not None and start_offset < self.local_log_start_offset():
            return self._read_remote(remote, start_offset, max_bytes, min_one_message, committed)
        upper = marks.last_stable_offset_metadata() if committed else marks.high_watermark_metadata
        if max_offset is not None and max_offset < upper.message_offset:
            upper = local.offset_metadata(max(max_offset, start_offset))
        aborted: list[AbortedTransaction] | None = [] if committed else None
        if start_offset >= upper.message_offset:
            meta = (
                upper
                if start_offset == upper.message_offset
                else local.offset_metadata(start_offset)
            )
            return FetchDataInfo(meta, None, aborted_transactions=aborted)
        found = local.read(start_offset, max_bytes, upper, min_one_message)
        if found is None:
            return FetchDataInfo(local.log_end_offset_metadata, None, aborted_transactions=aborted)
        seg, info = found
        if aborted is None:
            return info
        return FetchDataInfo(
            info.fetch_offset_metadata,
            info.records,
            info.first_entry_incomplete,
            self._aborted_transactions(start_offset, seg, info),
        )

    def _read_remote(
        self,
        remote: tuple[RemoteTier | None, int],
        start_offset: int,
        max_bytes: int,
        min_one_message: bool,
        committed: bool,
    ) -> FetchDataInfo:
        """A read below the local log start offset, from the remote segment holding it (Kafka's
        RemoteLogManager.read); OffsetOutOfRangeError when no finished copy holds it."""
        tier = remote[0]
        epoch = self._epochs.epoch_for_offset(start_offset)
        found = None
        if tier is not None and epoch is not None:
            found = tier.read(start_offset, epoch, max_bytes, min_one_message)
        if found is None:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} of {self._local.directory.name} is below the local log "
                f"start offset {self.local_log_start_offset()} and in no remote segment"
            )
        assert tier is not None
        records = found.records
        meta = LogOffsetMetadata(start_offset, found.segment.start_offset, records.position)
        if not committed:
            return FetchDataInfo(meta, records)
        upper = tier.fetch_upper_bound(found)
        aborted, complete = tier.aborted_transactions(
            start_offset, upper, self._epochs.epoch_for_offset
        )
        txns = [AbortedTransaction(t.producer_id, t.first_offset) for t in aborted]
        if not complete:  # the rest are in local segments' indexes
            first = self._local.segments.first_segment()
            txns += [
                AbortedTransaction(t.producer_id, t.first_offset)
                for t in self._local.collect_aborted_transactions(start_offset, upper, first)
            ]
        return FetchDataInfo(meta, records, aborted_transactions=txns)

    def _aborted_transactions(
        self, start_offset: int, seg: LogSegment, info: FetchDataInfo
    ) -> list[AbortedTransaction]:
        """The aborted transactions overlapping [start, upper bound of the fetch)."""
        position = info.fetch_offset_metadata.relative_position_in_segment
        upper = seg.offset_index.fetch_upper_bound_offset(position, info.size)
        if upper is None:
            following = self._local.segments.higher_segment(seg.base_offset)
            upper = following.base_offset if following is not None else self._local.log_end_offset
        return [
            AbortedTransaction(t.producer_id, t.first_offset)
            for t in self._local.collect_aborted_transactions(start_offset, upper, seg)
        ]

    def read_records(
        self,
        start_offset: int,
        max_bytes: int = 1 << 20,
        isolation: IsolationLevel | None = None,
    ) -> list[Record]:
        """Convenience: the records at or after ``start_offset`` in one read (control records
        and earlier records of the first batch are skipped; with READ_COMMITTED, aborted
        records too). The slice is read at once, so a segment deleted in between (with
        ``file.delete.delay.ms`` elapsed) makes the whole read run again, like ``read``."""
        check_isolation(isolation)
        return self._retrying(lambda: self._read_records(start_offset, max_bytes, isolation))

    def _read_records(
        self, start_offset: int, max_bytes: int, isolation: IsolationLevel | None
    ) -> list[Record]:
        info = self.read(start_offset, max_bytes, isolation=isolation)
        if info.records is None:
            return []
        # the decoded batches are checked against their segment: a base offset is outside the
        # CRC, and a flipped bit there must be an error, not a record at a wrong offset
        scan = BatchScanner(
            info.records.read(),
            verify_crc=False,
            base_offset=info.fetch_offset_metadata.segment_base_offset,
            file=str(self._local.directory),
        )
        batches = list(scan)
        if scan.stop is ScanStop.BAD_OFFSET and scan.error is not None:
            raise scan.error
        if info.aborted_transactions is not None:
            return list(committed_records(batches, info.aborted_transactions, start_offset))
        out: list[Record] = []
        for batch in batches:
            if not batch.is_control:
                out.extend(r for r in batch if r.offset >= start_offset)
        return out

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``timestamp`` (Kafka's
        UnifiedLog.fetchOffsetByTimestamp), or None."""
        check_int("timestamp", timestamp, -3, INT64_MAX)
        return self._retrying(lambda: self._offset_for_timestamp(timestamp))

    def _offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        if timestamp < 0:
            return self._list_offsets(timestamp, None)
        remote = self._remote()
        if remote is not None and remote[0] is not None:  # remote segments first, as Kafka
            found = remote[0].offset_for_timestamp(
                timestamp, self._watermarks.log_start_offset, self._epochs.epoch_for_offset
            )
            if found is not None:
                return found
        for seg in self._local.segments:
            if seg.largest_timestamp() >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self._watermarks.log_start_offset)
                if found is not None:
                    return found
        return None

    def list_offsets(
        self, target: int, isolation: IsolationLevel | None = None
    ) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest, -1 latest, -3 max timestamp, -4 earliest local, -5 latest
        tiered, -6 earliest pending upload, or a timestamp >= 0.

        LATEST is the log end offset, or with an isolation level what a consumer of that level
        may read: the high watermark (READ_UNCOMMITTED) or the last stable offset. The tiered
        specs are Kafka's UnifiedLog.fetchOffsetByTimestamp's: -4 is the local log start
        offset, -5 the highest offset in remote storage, -6 the first offset not yet copied;
        without remote storage -4 is the log start offset and -5 and -6 are offset -1."""
        check_int("timestamp", target, EARLIEST_PENDING_UPLOAD_TIMESTAMP, INT64_MAX)
        check_isolation(isolation)
        return self._retrying(lambda: self._list_offsets(target, isolation))

    def _tiered_offset(
        self, target: int, remote: tuple[RemoteTier | None, int] | None
    ) -> TimestampAndOffset | None:
        """ListOffsets -5 and -6 (Kafka's UnifiedLog.fetchOffsetByTimestamp and
        fetchEarliestPendingUploadOffset)."""
        if remote is None:
            return TimestampAndOffset(NO_TIMESTAMP, -1, -1)
        highest, epoch_for = remote[1], self._epochs.epoch_for_offset
        if target == LATEST_TIERED_TIMESTAMP:
            epoch = epoch_for(highest)
            return TimestampAndOffset(NO_TIMESTAMP, highest, -1 if highest == -1 else epoch)
        log_start = self._watermarks.log_start_offset
        if highest == -1:
            if self.local_log_start_offset() == log_start:  # nothing copied yet
                return self._list_offsets(EARLIEST_TIMESTAMP, None)
            return TimestampAndOffset(NO_TIMESTAMP, -1, -1)  # copies not known yet
        pending = max(highest + 1, log_start)
        return TimestampAndOffset(NO_TIMESTAMP, pending, epoch_for(pending))

    def _list_offsets(
        self, target: int, isolation: IsolationLevel | None
    ) -> TimestampAndOffset | None:
        marks = self._watermarks
        remote = self._remote()
        if target == EARLIEST_LOCAL_TIMESTAMP and remote is not None:
            local_start = self.local_log_start_offset()
            return TimestampAndOffset(
                NO_TIMESTAMP, local_start, self._epochs.epoch_for_offset(local_start)
            )
        if target in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            return self._tiered_offset(target, remote)
        if target in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            first = self._epochs.earliest()
            epoch = first[0] if first and first[1] <= marks.log_start_offset else None
            return TimestampAndOffset(NO_TIMESTAMP, marks.log_start_offset, epoch)
        if target == LATEST_TIMESTAMP:
            if isolation is IsolationLevel.READ_COMMITTED:
                latest = marks.last_stable_offset_metadata().message_offset
            elif isolation is IsolationLevel.READ_UNCOMMITTED:
                latest = marks.high_watermark
            else:
                latest = self._local.log_end_offset
            return TimestampAndOffset(NO_TIMESTAMP, latest, self._epochs.latest_epoch())
        if target == MAX_TIMESTAMP:
            best = None
            for seg in self._local.segments:
                if seg.max_timestamp_so_far >= 0 and (
                    best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far
                ):
                    best = seg
            if best is None:
                return None
            ts = best.max_timestamp_so_far
            # the record holding it, even below the log start offset: Kafka's
            # UnifiedLog.fetchOffsetByTimestamp looks in the segment alone
            found = best.find_offset_by_timestamp(ts, best.base_offset)
        elif target < 0:
            raise InvalidArgumentError(f"unknown special timestamp {target}")
        else:
            found = self._offset_for_timestamp(target)
        if found is None or isolation is None:
            return found
        # what that isolation level may fetch bounds the answer (Kafka's
        # ReplicaManager.fetchOffsetForTimestamp): an offset past it is no answer yet
        if isolation is IsolationLevel.READ_COMMITTED:
            fetchable = marks.last_stable_offset_metadata().message_offset
        else:
            fetchable = marks.high_watermark
        return found if found.offset < fetchable else None
