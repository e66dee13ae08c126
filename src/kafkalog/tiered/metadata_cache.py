"""One topic-partition's remote segments, folded from their ``__remote_log_metadata`` events as
Kafka's RemoteLogMetadataCache and RemoteLogLeaderEpochState fold them.

Why: a read below the local log start asks "which remote segment holds offset o of leader
epoch e", retention asks "which segments are there, per epoch", and a new copy asks "how far
does remote data reach for epoch e". Kafka answers from this structure, built by replaying the
metadata topic; a kafkalog that answers the same questions the same way (a copy that never
finished is never read, a later copy of an overlapping range replaces the earlier one for its
epochs, a deletion hides a segment at once) reads a broker's remote data as the broker does.

Refuses: an event that breaks the state rules (Kafka logs and drops it; so does this, counting
it in ``dropped``), a new segment whose state is not COPY_SEGMENT_STARTED or whose update is
COPY_SEGMENT_STARTED (InvalidArgumentError), and an update for a segment it never saw once
initialized (RemoteResourceNotFoundError; before that, the base event may have been removed
already, and the update is dropped). No I/O, no clock, no locks: the caller serializes.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections.abc import Iterator

from kafkalog.errors import InvalidArgumentError, RemoteResourceNotFoundError
from kafkalog.records.remote_log_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    segment_transition_allowed,
)

logger = logging.getLogger("kafkalog.tiered")
_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED


class _EpochSegments:
    """One leader epoch's segments (RemoteLogLeaderEpochState): the copied ones by the start
    offset of the epoch within them, and those not referenced (copy in progress, deletion
    started, or replaced by a later copy)."""

    def __init__(self) -> None:
        self.starts: list[int] = []  # sorted start offsets of referenced segments
        self.by_start: dict[int, RemoteLogSegmentId] = {}
        self.unreferenced: dict[RemoteLogSegmentId, None] = {}  # insertion-ordered set
        self.highest_offset: int | None = None

    def copy_started(self, segment: RemoteLogSegmentId) -> None:
        self.unreferenced[segment] = None

    def copy_finished(self, start: int, segment: RemoteLogSegmentId, epoch_end: int) -> None:
        # a copy reaching back over the last referenced ones replaces them, while it reaches
        # at least as far as what this epoch already holds
        highest = self.highest_offset
        while (
            self.starts
            and self.starts[-1] >= start
            and highest is not None
            and highest <= epoch_end
        ):
            last = self.starts.pop()
            self.unreferenced[self.by_start.pop(last)] = None
        if start not in self.by_start:
            bisect.insort(self.starts, start)
        self.by_start[start] = segment
        self.unreferenced.pop(segment, None)
        if highest is None or epoch_end > highest:
            self.highest_offset = epoch_end

    def delete_started(self, start: int, segment: RemoteLogSegmentId) -> None:
        if self.by_start.get(start) == segment:
            del self.by_start[start]
            self.starts.remove(start)
        self.unreferenced[segment] = None

    def delete_finished(self, segment: RemoteLogSegmentId) -> None:
        self.unreferenced.pop(segment, None)

    def floor(self, offset: int) -> RemoteLogSegmentId | None:
        at = bisect.bisect_right(self.starts, offset)
        return self.by_start[self.starts[at - 1]] if at else None


def _epoch_end(epoch: int, segment: RemoteLogSegmentMetadata) -> int:
    """The last offset of ``epoch`` in ``segment``: before the next epoch's start, or the
    segment's end."""
    later = [start for e, start in segment.segment_leader_epochs if e > epoch]
    return later[0] - 1 if later else segment.end_offset


class RemoteLogMetadataCache:
    """A topic-partition's remote segments and their states."""

    def __init__(self, *, initialized: bool = True) -> None:
        self.segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self._epochs: dict[int, _EpochSegments] = {}
        self.initialized = initialized
        self.dropped = 0  # events refused by the state rules, as Kafka drops them

    def mark_initialized(self) -> None:
        """The metadata topic has been read to its end: an update for an unknown segment is
        now an error, not a leftover of a removed one."""
        self.initialized = True

    def _allowed(
        self,
        source: RemoteLogSegmentState | None,
        target: RemoteLogSegmentState,
        segment: RemoteLogSegmentId,
    ) -> bool:
        if segment_transition_allowed(source, target):
            return True
        logger.error(
            "remote segment %s cannot go from %s to %s; the event is dropped",
            segment.id,
            source.name if source is not None else None,
            target.name,
        )
        self.dropped += 1
        return False

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A segment whose copy has started (the first event of its life)."""
        if metadata.state is not _STARTED:
            raise InvalidArgumentError(
                f"a new remote segment must be {_STARTED.name}, not {metadata.state.name}"
            )
        segment = metadata.segment_id
        existing = self.segments.get(segment)
        source = existing.state if existing is not None else None
        if not self._allowed(source, metadata.state, segment):
            return
        for epoch, _start in metadata.segment_leader_epochs:
            self._epochs.setdefault(epoch, _EpochSegments()).copy_started(segment)
        self.segments[segment] = metadata

    def update(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """A later event of a known segment: copy finished, deletion started or finished."""
        segment = update.segment_id
        existing = self.segments.get(segment)
        if existing is None:
            if not self.initialized:  # its first event went with an earlier cleanup
                return
            raise RemoteResourceNotFoundError(f"no remote log segment metadata for {segment}")
        target = update.state
        if not self._allowed(existing.state, target, segment):
            return
        if target is _STARTED:
            raise InvalidArgumentError(f"an update to {_STARTED.name} cannot be applied")
        metadata = dataclasses.replace(
            existing,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            custom_metadata=update.custom_metadata,
            state=target,
        )
        for epoch, start in metadata.segment_leader_epochs:
            entry = self._epochs.setdefault(epoch, _EpochSegments())
            if target is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                entry.copy_finished(start, segment, _epoch_end(epoch, metadata))
            elif target is RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                entry.delete_started(start, segment)
            else:
                entry.delete_finished(segment)
        if target is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            del self.segments[segment]  # the terminal state: nothing is left to find
        else:
            self.segments[segment] = metadata

    def segment_for(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The copied segment that holds ``offset`` of ``leader_epoch``, if any."""
        entry = self._epochs.get(leader_epoch)
        segment = entry.floor(offset) if entry is not None else None
        metadata = self.segments.get(segment) if segment is not None else None
        if metadata is None or offset > _epoch_end(leader_epoch, metadata):
            return None
        return metadata

    def next_segment_with_txn_index(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """From the segment holding ``offset`` on, the first whose transaction index is not
        empty (where an aborted transaction's range is looked up)."""
        metadata = self.segment_for(leader_epoch, offset)
        while metadata is not None and metadata.txn_index_empty:
            metadata = self.segment_for(leader_epoch, metadata.end_offset + 1)
        return metadata

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """The last offset of ``leader_epoch`` a finished copy holds."""
        entry = self._epochs.get(leader_epoch)
        return entry.highest_offset if entry is not None else None

    def segments_for_epoch(self, leader_epoch: int) -> list[RemoteLogSegmentMetadata]:
        """The epoch's segments, referenced ones by start offset, then (when there are any)
        every one sorted by start offset, as Kafka lists them."""
        entry = self._epochs.get(leader_epoch)
        if entry is None:
            return []
        ids = [entry.by_start[s] for s in entry.starts]
        found = [self._known(i) for i in ids]
        if entry.unreferenced:
            found += [self._known(i) for i in entry.unreferenced]
            found.sort(key=lambda m: m.start_offset)
        return found

    def _known(self, segment: RemoteLogSegmentId) -> RemoteLogSegmentMetadata:
        metadata = self.segments.get(segment)
        if metadata is None:
            raise RemoteResourceNotFoundError(f"no remote log segment metadata for {segment}")
        return metadata

    def __iter__(self) -> Iterator[RemoteLogSegmentMetadata]:
        return iter(list(self.segments.values()))
