"""Staging: what the sink's tasks do before the driver's commit.

Why: a task must not append (offsets would interleave across tasks and an aborted job would
leave records behind), so each task places its rows on partitions, encodes them into Kafka
batches column-wise and writes them to a staging file per partition beside the log directory;
the commit (``kafkalog.spark.sink``) appends those files under the directory's lock. Placement
is a Java producer's: the ``partition`` column, else murmur2 of the key, else a sticky partition
per task. Rows with no timestamp get the time they are staged, as a producer stamps at send.
Refuses: appending, and topics that do not exist when ``auto.create.topics.enable`` is false.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from kafkalog.clock import SYSTEM_CLOCK
from kafkalog.errors import InvalidArgumentError, UnknownTopicOrPartitionError
from kafkalog.records.columnar import ARROW_HEADERS_TYPE
from kafkalog.records.columnar_encode import encode_batches, partitions_for_keys, record_columns
from kafkalog.spark.executor_codec import check_executor_codec
from kafkalog.spark.options import WriteOptions
from kafkalog.types import TopicPartition, validate_topic_name

STAGING_SUFFIX = ".kafkalog-staging"
STALE_STAGING_MS = 24 * 3600 * 1000  # a job directory this old belongs to a driver that died


def staging_root(log_dir: Path) -> Path:
    """Where tasks stage their batches before the commit appends them: beside the first log
    directory, never inside it. A broker (and kafkalog's own loader) takes every directory in
    a log directory for a partition and refuses to start on one that is not; the commit reads
    the staged files back, so they must be on storage the driver sees, as the log is."""
    return log_dir.parent / f".{log_dir.name}{STAGING_SUFFIX}"


def prune_stale(root: Path, now_ms: int) -> None:
    """Remove job directories left by drivers that died before their commit or abort."""
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return
    for job in entries:
        with contextlib.suppress(OSError):
            if now_ms - job.stat().st_mtime * 1000 > STALE_STAGING_MS:
                shutil.rmtree(job, ignore_errors=True)


@dataclass
class StagedFile:
    topic: str
    partition: int
    path: str
    records: int


@dataclass
class StagedFiles(WriterCommitMessage):
    files: list[StagedFile]


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


class _Stager:
    """One task's batches, one staging file per topic-partition."""

    def __init__(self, job_dir: Path, opts: WriteOptions, counts: dict[str, int]) -> None:
        context = TaskContext.get()
        task = f"{context.partitionId()}.{context.attemptNumber()}" if context else "0.0"
        self.job_dir = job_dir
        self.prefix = f"task-{task}-{uuid.uuid4().hex[:8]}"
        self.opts = opts
        self.counts = counts
        self.files: dict[TopicPartition, StagedFile] = {}
        self.sticky = int(task.split(".", maxsplit=1)[0])

    def write(self, tp: TopicPartition, rows: pa.RecordBatch) -> None:
        """Rows of one partition, encoded column-wise into batches and staged."""
        if self.files.get(tp) is None:
            self.job_dir.mkdir(parents=True, exist_ok=True)  # only a task with rows makes it
            path = self.job_dir / f"{tp.topic}-{tp.partition}.{self.prefix}"
            self.files[tp] = StagedFile(tp.topic, tp.partition, str(path), 0)
        staged = self.files[tp]
        columns = record_columns(rows)
        columns["timestamp"] = stamped(columns.get("timestamp"), rows.num_rows)
        batches = encode_batches(
            columns,
            compression=self.opts.compression,
            compression_level=self.opts.compression_level,
            batch_size=self.opts.batch_size,
            as_producer=True,
        )
        with open(staged.path, "ab") as f:
            f.write(b"".join(batches))
        staged.records += rows.num_rows

    def add_arrow(self, batch: pa.RecordBatch) -> None:
        """One Arrow batch: placed per row (the ``partition`` column, else murmur2 of the key,
        else this task's sticky partition), then encoded per partition with no Python row."""
        names = {n.lower(): n for n in batch.schema.names}
        if "topic" in names and self.opts.topic is None:
            topic_col = batch.column(names["topic"])
            if topic_col.null_count:
                raise InvalidArgumentError("a row has a null topic and no 'topic' option is set")
            topics = pc.unique(topic_col).to_pylist()
        else:
            topic_col, topics = None, [self.opts.topic]
        keyless = False
        for topic in topics:
            rows = batch if topic_col is None else batch.filter(pc.equal(topic_col, topic))
            count = self.counts.get(topic)
            if count is None:
                count = self.counts[topic] = auto_created(topic, self.opts)
            n = rows.num_rows
            explicit = (
                rows.column(names["partition"]).cast(pa.int32())
                if "partition" in names
                else pa.nulls(n, pa.int32())
            )
            bounds = pc.min_max(explicit).as_py()
            for bound in (bounds["min"], bounds["max"]):
                if bound is not None and not 0 <= bound < count:
                    raise UnknownTopicOrPartitionError(
                        f"partition {bound} of {topic!r} does not exist"
                    )
            keys = rows.column(names["key"]) if "key" in names else pa.nulls(n, pa.binary())
            keyed = partitions_for_keys(keys, count)
            placed = pc.coalesce(explicit, keyed, pa.scalar(self.sticky % count, pa.int32()))
            keyless = keyless or bool(pc.any(pc.and_(explicit.is_null(), keyed.is_null())).as_py())
            for partition in sorted(pc.unique(placed).to_pylist()):
                self.write(
                    TopicPartition(topic, partition), rows.filter(pc.equal(placed, partition))
                )
        if keyless:
            self.sticky += 1  # the sticky partitioner moves on when a batch completes

    def finish(self) -> StagedFiles:
        return StagedFiles(list(self.files.values()))


def auto_created(topic: str, opts: WriteOptions) -> int:
    """The partition count a write to a topic that does not exist places rows by: the one the
    commit creates it with (``num.partitions``), as a producer's first metadata request makes
    the broker create it; or an error if ``auto.create.topics.enable`` is false."""
    if opts.auto_create_partitions is None:
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist in {', '.join(map(str, opts.log_dirs))}, and "
            "auto.create.topics.enable is false"
        )
    validate_topic_name(topic)
    return opts.auto_create_partitions


def stamped(timestamps: pa.Array | None, rows: int) -> pa.Array:
    """Record timestamps in ms, with the current time where a row has none (Kafka's producer
    stamps a record sent without a timestamp at send: the time index, retention and
    ``startingTimestamp`` all depend on it)."""
    now = pa.scalar(SYSTEM_CLOCK.milliseconds(), pa.int64())
    if timestamps is None:
        return pa.nulls(rows, pa.int64()).fill_null(now)
    return timestamps.fill_null(now) if timestamps.null_count else timestamps


def stage_batches(
    batches: Iterator[Any], job_dir: Path, opts: WriteOptions, counts: dict[str, int]
) -> StagedFiles:
    """Arrow record batches (or Rows, on Spark 4.0's streaming writer) -> staged files. Rows
    become Arrow batches of ``ROW_CHUNK`` rows first, so placement and the sticky rule exist
    once, column-wise."""
    check_executor_codec()
    stager = _Stager(job_dir, opts, counts)
    rows: list[Any] = []
    for item in batches:
        if isinstance(item, pa.RecordBatch):
            stager.add_arrow(item)
            continue
        rows.append(item)
        if len(rows) == ROW_CHUNK:
            stager.add_arrow(_rows_as_arrow(rows))
            rows = []
    if rows:
        stager.add_arrow(_rows_as_arrow(rows))
    return stager.finish()


ROW_CHUNK = 4096
_SINK_COLUMNS = ("key", "value", "topic", "partition", "headers", "timestamp")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _rows_as_arrow(rows: list[Any]) -> pa.RecordBatch:
    """Rows (Spark 4.0's streaming writer has no Arrow form) as the Arrow batch Spark's Arrow
    writer would have given for the same sink columns."""
    dicts = [{k.lower(): v for k, v in row.asDict().items()} for row in rows]
    present = [name for name in _SINK_COLUMNS if name in dicts[0]]
    arrays = []
    for name in present:
        values = [d.get(name) for d in dicts]
        if name in ("key", "value"):
            arrays.append(pa.array([_as_bytes(v) for v in values], pa.binary()))
        elif name == "topic":
            arrays.append(pa.array(values, pa.string()))
        elif name == "partition":
            arrays.append(pa.array(values, pa.int32()))
        elif name == "headers":
            headers = [
                [{"key": h["key"], "value": _as_bytes(h["value"])} for h in hs] if hs else None
                for hs in values
            ]
            arrays.append(pa.array(headers, ARROW_HEADERS_TYPE))
        else:
            # PySpark hands TimestampType to Rows as naive local time: astimezone reads a naive
            # datetime as local (an aware one as itself), where Arrow would read it as UTC
            micros = [
                None if v is None else (v.astimezone(UTC) - _EPOCH) // _MICROSECOND for v in values
            ]
            arrays.append(pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")))
    return pa.RecordBatch.from_arrays(arrays, names=present)
