"""Driver-side planning: which partitions, which offset ranges, and how to split them.

Why: Spark's driver decides every range (its executors never reset offsets), and planning must
stay cheap on big logs: it reads directory listings, index files and batch headers, never
record data (a timestamp lookup decodes only the batch that holds the answer). Ranges split
like Spark's KafkaOffsetRangeCalculator, but on batch boundaries taken from the offset index,
so no task decodes a batch only to drop most of it. Refuses: pyspark imports (this module is
plain Python and tested without a JVM).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kafkalog.errors import InvalidConfigError, OffsetOutOfRangeError
from kafkalog.log.store_view import StoreView
from kafkalog.log.view import PartitionView, discover_partitions, read_index_entries
from kafkalog.records.remote_log_metadata import TopicIdPartition
from kafkalog.spark.options import EARLIEST, LATEST, OffsetSpec, ReadOptions
from kafkalog.storage import filenames as fn
from kafkalog.types import TopicPartition

View = PartitionView | StoreView


@dataclass(frozen=True)
class OffsetRange:
    """One Spark task's work: everything ``read()`` needs, since the reader object that
    planned it never reaches the executor."""

    topic: str
    partition: int
    directory: str
    start: int
    end: int
    read_committed: bool
    include_headers: bool
    fail_on_data_loss: bool
    store_uri: str | None = None  # read from the remote store alone (its topic id below)
    topic_id: str | None = None

    def view(self) -> PartitionView | StoreView:
        """What an executor reads the range through: the partition's directory, or the
        remote store."""
        if self.store_uri is None:
            return PartitionView(Path(self.directory))
        assert self.topic_id is not None
        return StoreView(
            self.store_uri, TopicIdPartition(self.topic_id, self.topic, self.partition)
        )

    @property
    def size(self) -> int:
        return self.end - self.start


class DataLossError(OffsetOutOfRangeError):
    """Offsets Spark asked for are gone (retention, DeleteRecords, a deleted topic)."""


def data_loss(message: str, fail: bool) -> None:
    """Spark's failOnDataLoss: raise, or warn and carry on from what is there."""
    text = (
        f"{message}. Some data may have been lost because they are not available any more. "
        "If you want your query to fail in such cases, set failOnDataLoss to true"
        if not fail
        else f"{message}. Set failOnDataLoss to false to carry on from the data that remains"
    )
    if fail:
        raise DataLossError(text)
    warnings.warn(text, stacklevel=2)


def selected_partitions(opts: ReadOptions) -> dict[TopicPartition, View]:
    """The partitions the subscribe/subscribePattern/assign option selects, found on disk, as
    frozen views: each directory is listed once per plan, and every question the plan asks
    of a partition gets an answer from the same moment. With ``remoteStorageUri`` alone, the
    partitions the store holds, as StoreViews."""
    if opts.remote_storage_uri is not None:
        return _selected_in_store(opts, opts.remote_storage_uri)
    found = discover_partitions(list(opts.log_dirs))
    if opts.assign is not None:
        missing = [tp for tp in opts.assign if tp not in found]
        if missing:
            data_loss(f"assigned partitions {missing} do not exist", opts.fail_on_data_loss)
        return {tp: PartitionView(found[tp], frozen=True) for tp in opts.assign if tp in found}
    if opts.subscribe is not None:
        absent = sorted(set(opts.subscribe) - {tp.topic for tp in found})
        if absent:
            data_loss(f"subscribed topics {absent} do not exist", opts.fail_on_data_loss)
    pattern = re.compile(opts.subscribe_pattern) if opts.subscribe_pattern else None
    chosen: dict[TopicPartition, View] = {}
    for tp, path in sorted(found.items()):
        if (opts.subscribe is not None and tp.topic in opts.subscribe) or (
            pattern is not None and pattern.fullmatch(tp.topic)
        ):
            chosen[tp] = PartitionView(path, frozen=True)
    return chosen


def _selected_in_store(opts: ReadOptions, uri: str) -> dict[TopicPartition, View]:
    from kafkalog.tiered.remote_store import RemoteLogStore

    held = {
        TopicPartition(t.topic, t.partition): t
        for t in RemoteLogStore.from_uri(uri).topic_partitions()
    }
    if opts.assign is not None:
        wanted = [tp for tp in opts.assign if tp in held]
        missing = [tp for tp in opts.assign if tp not in held]
        if missing:
            data_loss(f"assigned partitions {missing} are not in {uri}", opts.fail_on_data_loss)
    else:
        pattern = re.compile(opts.subscribe_pattern) if opts.subscribe_pattern else None
        wanted = [
            tp
            for tp in sorted(held)
            if (opts.subscribe is not None and tp.topic in opts.subscribe)
            or (pattern is not None and pattern.fullmatch(tp.topic))
        ]
        if opts.subscribe is not None:
            absent = sorted(set(opts.subscribe) - {tp.topic for tp in held})
            if absent:
                data_loss(f"subscribed topics {absent} are not in {uri}", opts.fail_on_data_loss)
    return {tp: StoreView(uri, held[tp]) for tp in wanted}


def upper_bound(view: View, read_committed: bool) -> int:
    """What a consumer may read up to: the LSO under read_committed, else the log end."""
    return view.last_stable_offset() if read_committed else view.log_end_offset()


def resolve(
    spec: OffsetSpec,
    tp: TopicPartition,
    view: View,
    opts: ReadOptions,
    *,
    start: bool,
) -> int:
    """One partition's offset for a starting or ending spec."""
    latest = upper_bound(view, opts.read_committed)
    if spec.kind == "earliest":
        return view.log_start_offset()
    if spec.kind == "latest":
        return latest
    if spec.kind == "offsets":
        assert spec.offsets is not None
        if tp not in spec.offsets:
            which = "startingOffsets" if start else "endingOffsets"
            raise InvalidConfigError(
                which, f"must list every assigned partition; {tp.topic}-{tp.partition} is missing"
            )
        value = spec.offsets[tp]
        if value == EARLIEST:
            return view.log_start_offset()
        if value == LATEST:
            return latest
        return value
    timestamp = spec.timestamp
    if spec.kind == "timestamps":
        assert spec.offsets is not None
        if tp not in spec.offsets:
            which = "startingOffsetsByTimestamp" if start else "endingOffsetsByTimestamp"
            raise InvalidConfigError(which, f"has no timestamp for {tp.topic}-{tp.partition}")
        timestamp = spec.offsets[tp]
    assert timestamp is not None
    found = view.offset_for_timestamp(timestamp)
    if found is not None:
        return min(found, latest)
    if start and opts.by_timestamp_strategy == "error":
        raise InvalidConfigError(
            "startingOffsetsByTimestamp",
            f"no offset of {tp.topic}-{tp.partition} has a timestamp >= {timestamp} "
            "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)",
        )
    return latest


def batch_boundaries(view: View, start: int, end: int) -> list[int]:
    """Offsets in (start, end) where a batch begins, from segment names and index entries
    (an entry's offset is the last offset of its batch, so the next batch begins after it);
    none for a StoreView (its ranges are cut at any offset)."""
    if isinstance(view, StoreView):
        return []
    out = []
    for seg in view.segments():
        if seg.base_offset >= end:
            break
        if start < seg.base_offset:
            out.append(seg.base_offset)
        for relative, _ in read_index_entries(
            fn.offset_index_file(view.directory, seg.base_offset)
        ):
            boundary = seg.base_offset + relative + 1
            if start < boundary < end:
                out.append(boundary)
    return sorted(set(out))


def _pieces(opts: ReadOptions, ranges: list[OffsetRange]) -> list[int]:
    """How many pieces each range becomes (Spark's proportional share, plus the cap)."""
    parts = [1] * len(ranges)
    total = sum(r.size for r in ranges)
    if opts.min_partitions and len(ranges) < opts.min_partitions and total > 0:
        parts = [max(1, round(r.size / total * opts.min_partitions)) for r in ranges]
    if opts.max_records_per_partition:
        cap = opts.max_records_per_partition
        parts = [max(p, math.ceil(r.size / cap)) for p, r in zip(parts, ranges, strict=True)]
    return parts


def split_ranges(
    opts: ReadOptions,
    ranges: list[OffsetRange],
    views: Mapping[TopicPartition, View] | None = None,
) -> list[OffsetRange]:
    """Each range cut into its share of pieces on batch boundaries; ``views`` are the plan's
    (selected_partitions), so the directories are not listed again."""
    ranges = [r for r in ranges if r.size > 0]
    out = []
    for r, parts in zip(ranges, _pieces(opts, ranges), strict=True):
        if parts == 1:
            out.append(r)
            continue
        view = (views or {}).get(TopicPartition(r.topic, r.partition))
        if view is None or str(view.directory) != r.directory:
            view = r.view()
        boundaries = batch_boundaries(view, r.start, r.end)
        cuts = set()
        for i in range(1, parts):
            ideal = r.start + r.size * i // parts
            at = bisect.bisect_left(boundaries, ideal)
            near = boundaries[max(0, at - 1) : at + 1]
            best = min(near, key=lambda b: abs(b - ideal), default=None)
            slack = max(1, r.size // (2 * parts))
            # the index is sparse (one entry per index.interval.bytes): with no boundary close
            # by, cut at the offset itself; both tasks then read the batch that straddles it
            cuts.add(best if best is not None and abs(best - ideal) <= slack else ideal)
        points = [r.start, *sorted(cuts), r.end]
        for a, b in itertools.pairwise(points):
            out.append(dataclasses.replace(r, start=a, end=b))
    return out


def make_range(
    opts: ReadOptions, tp: TopicPartition, view: View, start: int, end: int
) -> OffsetRange:
    store = view if isinstance(view, StoreView) else None
    return OffsetRange(
        tp.topic,
        tp.partition,
        str(view.directory),
        start,
        end,
        opts.read_committed,
        opts.include_headers,
        opts.fail_on_data_loss,
        store.uri if store is not None else None,
        store.topic_id_partition.topic_id if store is not None else None,
    )


def check_start(opts: ReadOptions, tp: TopicPartition, view: View, start: int) -> int:
    """A start below the log start offset is data loss (SPARK-25005: gaps above it are not)."""
    log_start = view.log_start_offset()
    if start < log_start:
        data_loss(
            f"offset {start} of {tp.topic}-{tp.partition} is below its log start offset "
            f"{log_start}",
            opts.fail_on_data_loss,
        )
        return log_start
    return start


def plan_batch(opts: ReadOptions) -> list[OffsetRange]:
    ranges = []
    views = selected_partitions(opts)
    for tp, view in views.items():
        start = resolve(opts.starting, tp, view, opts, start=True)
        end = resolve(opts.ending, tp, view, opts, start=False)
        start = check_start(opts, tp, view, start)
        latest = upper_bound(view, opts.read_committed)
        if start > latest:  # the start is what is wrong, whatever the end says
            raise InvalidConfigError(
                "startingOffsets",
                f"starts {tp.topic}-{tp.partition} at {start}, after its latest offset {latest}",
            )
        if end < start:
            raise InvalidConfigError(
                "endingOffsets",
                f"ends {tp.topic}-{tp.partition} at {end}, before its start {start}",
            )
        ranges.append(make_range(opts, tp, view, start, end))
    return split_ranges(opts, ranges, views)
