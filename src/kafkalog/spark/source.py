"""The ``kafkalog`` source's readers: batch and streaming reads of Kafka-format log dirs.

Why: Spark's Kafka source needs a broker; this one reads the files, with the Kafka source's
schema, options and offset JSON, so a job moves between ``format("kafka")`` and
``format("kafkalog")`` unchanged. The driver plans from listings and indexes; each executor
task reads its OffsetRange into Arrow. Streaming offsets are Spark's Kafka form
``{"topic":{"partition":next}}`` with sorted keys. Refuses: a user-supplied schema (as Spark's
Kafka source does) and state shared between planning and reading.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from kafkalog.errors import InvalidConfigError
from kafkalog.spark.arrow_read import arrow_schema, read_range
from kafkalog.spark.options import ReadOptions
from kafkalog.spark.planning import (
    OffsetRange,
    check_start,
    data_loss,
    make_range,
    plan_batch,
    resolve,
    selected_partitions,
    split_ranges,
    upper_bound,
)
from kafkalog.spark.schema import kafka_schema
from kafkalog.types import TopicPartition

try:  # Spark 4.2+: admission control and a real availableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


Offsets = dict[str, dict[str, int]]


def to_json_offsets(offsets: dict[TopicPartition, int]) -> Offsets:
    """Spark's Kafka offset JSON as a dict: topics and partitions in sorted order."""
    out: Offsets = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_json_offsets(offsets: Offsets | str) -> dict[TopicPartition, int]:
    parsed = json.loads(offsets) if isinstance(offsets, str) else offsets
    return {
        TopicPartition(topic, int(p)): int(o)
        for topic, parts in parsed.items()
        for p, o in parts.items()
    }


class RangePartition(InputPartition):
    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range


def check_schema(schema: StructType | None, include_headers: bool) -> None:
    if schema is not None and schema != kafka_schema(include_headers):
        raise InvalidConfigError(
            "schema", "the kafkalog source has a fixed schema (Kafka's); do not set one"
        )


class KafkaLogBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        return [RangePartition(r) for r in plan_batch(self.opts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return  # a plan with no range: Spark hands its one empty default partition
        yield from read_range(partition.range, arrow_schema(partition.range.include_headers))


def _now_ms() -> int:
    return int(time.time() * 1000)


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over growing logs. ``latestOffset(start, limit)`` is Spark 4.2+'s
    admission-control form; 4.0/4.1 call it with no arguments, and then the limits apply from
    the end of the last planned batch. ``minOffsetsPerTrigger`` holds a batch back until that
    many new offsets are there or ``maxTriggerDelay`` has passed since the last batch, as Spark's
    Kafka source does (never under Trigger.AvailableNow, which must end); ``maxOffsetsPerTrigger``
    caps it."""

    def __init__(self, opts: ReadOptions, clock: Callable[[], int] = _now_ms) -> None:
        self.opts = opts
        self.clock = clock
        self._available_now: dict[TopicPartition, int] | None = None
        self._last_end: dict[TopicPartition, int] | None = None
        self._last_trigger_ms = 0  # the first batch is never held back, as in Spark

    def _latest(self) -> dict[TopicPartition, int]:
        latest = {
            tp: upper_bound(view, self.opts.read_committed)
            for tp, view in selected_partitions(self.opts).items()
        }
        if self._available_now is not None:
            latest = {tp: min(o, self._available_now.get(tp, o)) for tp, o in latest.items()}
        return latest

    def initialOffset(self) -> Offsets:
        views = selected_partitions(self.opts)
        return to_json_offsets(
            {
                tp: resolve(self.opts.starting, tp, v, self.opts, start=True)
                for tp, v in views.items()
            }
        )

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:
        latest = self._latest()
        cap = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif limit is None:  # Spark 4.0/4.1: no limit (nor start) handed over
            cap = self.opts.max_offsets_per_trigger
            if start is None and self._last_end is not None:
                start = to_json_offsets(self._last_end)
        if start is None:
            return to_json_offsets(latest)
        begin = from_json_offsets(start)
        if self._hold_back(begin, latest):
            return start  # no new offsets: Spark plans no batch this trigger
        if cap is not None:
            latest = rate_limit(begin, latest, cap)
        return to_json_offsets(latest)

    def _hold_back(
        self, begin: dict[TopicPartition, int], latest: dict[TopicPartition, int]
    ) -> bool:
        """Spark Kafka's ``delayBatch``: too few new offsets, and not yet maxTriggerDelay."""
        wanted = self.opts.min_offsets_per_trigger
        if wanted is None or self._available_now is not None:
            return False
        now = self.clock()
        if now - self._last_trigger_ms < self.opts.max_trigger_delay_ms:
            new = sum(max(0, o - begin.get(tp, o)) for tp, o in latest.items())
            if new < wanted:
                return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> Offsets:
        """The offsets available now, for the query's progress (Spark 4.2+), whatever the
        limits let the next batch take."""
        return to_json_offsets(self._latest())

    def partitions(self, start: Offsets, end: Offsets) -> list[RangePartition]:
        begin, finish = from_json_offsets(start), from_json_offsets(end)
        self._last_end = finish
        views = selected_partitions(self.opts)
        for tp in begin:
            if tp not in finish and tp not in views:
                data_loss(
                    f"partition {tp.topic}-{tp.partition} is gone", self.opts.fail_on_data_loss
                )
        ranges = []
        for tp, stop in sorted(finish.items()):
            view = views.get(tp)
            if view is None:
                continue
            first = begin.get(tp)
            if first is None:  # a partition that appeared since: from its start, as Spark does
                first = view.log_start_offset()
            first = check_start(self.opts, tp, view, first)
            if stop < first:
                data_loss(
                    f"{tp.topic}-{tp.partition} went back from {first} to {stop}",
                    self.opts.fail_on_data_loss,
                )
                continue
            ranges.append(make_range(self.opts, tp, view, first, stop))
        return [RangePartition(r) for r in split_ranges(self.opts, ranges, views)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return  # a plan with no range: Spark hands its one empty default partition
        yield from read_range(partition.range, arrow_schema(partition.range.include_headers))

    def commit(self, end: Offsets) -> None:
        """Spark never commits Kafka offsets back; neither do we (the checkpoint is the truth)."""


def rate_limit(
    start: dict[TopicPartition, int], latest: dict[TopicPartition, int], cap: int
) -> dict[TopicPartition, int]:
    """Spread ``cap`` offsets over the partitions in proportion to their backlog (Spark's
    maxOffsetsPerTrigger rule; a partition with a backlog gets at least one)."""
    backlog = {tp: max(0, o - start.get(tp, o)) for tp, o in latest.items()}
    total = sum(backlog.values())
    if total <= cap:
        return latest
    out = {}
    for tp, o in latest.items():
        first = start.get(tp, o)
        share = backlog[tp] * cap // total
        if backlog[tp]:
            share = max(1, share)
        out[tp] = min(o, first + share)
    return out
