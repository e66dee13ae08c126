"""The ``kafkalog`` sink: DataFrames into topics, batch and streaming.

Why: the Kafka sink's columns (``value``; optional ``key``, ``headers``, ``topic``, ``partition``,
``timestamp``) and placement (Kafka's murmur2 for a keyed row with a null partition) so records land
where a Java producer would put them. Tasks build Kafka batches from Arrow and stage them as files;
only the driver's commit appends, under the log directory's lock, so offsets stay contiguous and an
aborted job leaves nothing behind. Streaming commits are exactly-once: each partition's micro-batch
is one transaction whose COMMIT marker carries the batch id (in its coordinator epoch and, past
Int32, its producer id; ``batch_producer``), so a replayed batch id finds itself committed and is
skipped. Refuses: Overwrite (as the Kafka sink does) and rows with no topic.
"""

from __future__ import annotations

import contextlib
import hashlib
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
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from kafkalog.clock import SYSTEM_CLOCK
from kafkalog.errors import InvalidArgumentError, InvalidConfigError, UnknownTopicOrPartitionError
from kafkalog.log.view import discover_partitions
from kafkalog.manager.log_manager import LogManager
from kafkalog.records.batch import RECORDS_COUNT_OFFSET, increment_sequence, set_producer
from kafkalog.records.columnar import ARROW_HEADERS_TYPE
from kafkalog.records.columnar_encode import encode_batches, partitions_for_keys, record_columns
from kafkalog.records.scanner import iter_positions
from kafkalog.spark.options import WriteOptions, parse_write_options
from kafkalog.spark.schema import SPARK_HEADERS_TYPE
from kafkalog.types import INT32_MAX, INT64_MAX, TopicPartition, check_int

STAGING_SUFFIX = ".kafkalog-staging"
STALE_STAGING_MS = 24 * 3600 * 1000  # a job directory this old belongs to a driver that died


def staging_root(log_dir: Path) -> Path:
    """Where tasks stage their batches before the commit appends them: beside the first log
    directory, never inside it. A broker (and kafkalog's own loader) takes every directory in
    a log directory for a partition and refuses to start on one that is not; the commit reads
    the staged files back, so they must be on storage the driver sees, as the log is."""
    return log_dir.parent / f".{log_dir.name}{STAGING_SUFFIX}"


def _prune_stale(root: Path, now_ms: int) -> None:
    """Remove job directories left by drivers that died before their commit or abort."""
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return
    for job in entries:
        with contextlib.suppress(OSError):
            if now_ms - job.stat().st_mtime * 1000 > STALE_STAGING_MS:
                shutil.rmtree(job, ignore_errors=True)


_COLUMN_TYPES: dict[str, tuple[Any, ...]] = {
    "key": (StringType(), BinaryType()),
    "value": (StringType(), BinaryType()),
    "topic": (StringType(),),
    "partition": (IntegerType(),),
    "headers": (SPARK_HEADERS_TYPE,),
    "timestamp": (TimestampType(),),
}


@dataclass
class StagedFile:
    topic: str
    partition: int
    path: str
    records: int


@dataclass
class StagedFiles(WriterCommitMessage):
    files: list[StagedFile]


def check_columns(schema: StructType, topic_option: str | None) -> None:
    """The Kafka sink's schema rules, checked on the driver before any task runs."""
    names = {f.name.lower(): f for f in schema.fields}
    if "value" not in names:
        raise InvalidArgumentError("the kafkalog sink needs a 'value' column (string or binary)")
    if topic_option is None and "topic" not in names:
        raise InvalidArgumentError("the kafkalog sink needs a 'topic' column or the 'topic' option")
    for name, allowed in _COLUMN_TYPES.items():
        field = names.get(name)
        if field is not None and not any(
            field.dataType == t or (name == "headers" and isinstance(field.dataType, ArrayType))
            for t in allowed
        ):
            raise InvalidArgumentError(
                f"column '{name}' must be {' or '.join(t.simpleString() for t in allowed)}, "
                f"not {field.dataType.simpleString()}"
            )


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
        batches = encode_batches(
            record_columns(rows), batch_size=self.opts.batch_size, as_producer=True
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
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
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


def stage_batches(
    batches: Iterator[Any], job_dir: Path, opts: WriteOptions, counts: dict[str, int]
) -> StagedFiles:
    """Arrow record batches (or Rows, on Spark 4.0's streaming writer) -> staged files. Rows
    become Arrow batches of ``ROW_CHUNK`` rows first, so placement and the sticky rule exist
    once, column-wise."""
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


def _staged_in_order(messages: list[Any]) -> list[StagedFile]:
    return [f for m in messages if m is not None for f in m.files]


class _Writer:
    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise InvalidConfigError(
                "mode", "the kafkalog sink only appends (Overwrite is not supported, as in Kafka)"
            )
        self.opts = parse_write_options(options)
        check_columns(schema, self.opts.topic)
        partitions = discover_partitions(list(self.opts.log_dirs))
        self.counts: dict[str, int] = {}
        for tp in partitions:
            self.counts[tp.topic] = max(self.counts.get(tp.topic, 0), tp.partition + 1)
        if self.opts.topic is not None and self.opts.topic not in self.counts:
            raise UnknownTopicOrPartitionError(f"topic {self.opts.topic!r} does not exist")
        root = staging_root(self.opts.log_dirs[0])
        _prune_stale(root, SYSTEM_CLOCK.milliseconds())
        self.job_dir = root / uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> StagedFiles:
        return stage_batches(iterator, self.job_dir, self.opts, self.counts)

    def _cleanup(self) -> None:
        shutil.rmtree(self.job_dir, ignore_errors=True)  # failed tasks' messages are None
        with contextlib.suppress(OSError):
            self.job_dir.parent.rmdir()  # only if no other job is staging


class KafkaLogBatchWriter(_Writer, DataSourceArrowWriter):
    def commit(self, messages: list[Any]) -> None:
        try:
            staged_files = _staged_in_order(messages)
            touched = {TopicPartition(f.topic, f.partition) for f in staged_files}
            with LogManager(list(self.opts.log_dirs), partitions=touched) as manager:
                for staged in staged_files:
                    log = manager.get_log(staged.topic, staged.partition)
                    append_staged(log, memoryview(Path(staged.path).read_bytes()))
        finally:
            self._cleanup()

    def abort(self, messages: list[Any]) -> None:
        self._cleanup()


def append_staged(log: Any, data: memoryview) -> None:
    """Append a staged file's batches one by one, as a producer's requests carry them."""
    for position, size, _ in list(iter_positions(data)):
        log.append_records(data[position : position + size])


def producer_id_for(transactional_id: str) -> int:
    """A stable producer id per transactional id (the sink has no coordinator to ask)."""
    return int.from_bytes(hashlib.sha256(transactional_id.encode()).digest()[:8], "big") >> 2


class KafkaLogStreamWriter(_Writer, DataSourceStreamWriter):
    """Exactly-once micro-batches: one transaction per partition per batch id."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        lowered = {k.lower(): v for k, v in options.items()}
        txn_id = self.opts.transactional_id or lowered.get("checkpointlocation")
        if not txn_id:
            raise InvalidConfigError(
                "kafka.transactional.id",
                "is needed for exactly-once streaming writes (or set checkpointLocation)",
            )
        self.producer_id = producer_id_for(
            str(Path(txn_id).absolute()) if not self.opts.transactional_id else txn_id
        )
        # Spark makes this writer more than once for one query (the tasks' copy and the one
        # that commits need not be the same object), so the job directory is the query's, not
        # the object's: the commit or abort of each micro-batch removes what its tasks staged
        self.job_dir = self.job_dir.with_name(f"stream-{self.producer_id:016x}")

    def commit(self, messages: list[Any], batchId: int) -> None:
        try:
            by_partition: dict[TopicPartition, list[StagedFile]] = {}
            for staged in _staged_in_order(messages):
                by_partition.setdefault(TopicPartition(staged.topic, staged.partition), []).append(
                    staged
                )
            with LogManager(list(self.opts.log_dirs), partitions=by_partition) as manager:
                for tp, files in sorted(by_partition.items()):
                    commit_transaction(
                        manager.get_log(tp.topic, tp.partition), self.producer_id, batchId, files
                    )
        finally:
            self._cleanup()

    def abort(self, messages: list[Any], batchId: int) -> None:
        self._cleanup()


def batch_producer(producer_id: int, batch_id: int) -> tuple[int, int]:
    """The producer id and coordinator epoch that mark micro-batch ``batch_id``. A marker's
    coordinator epoch is an int32 and Spark's batch ids are longs, so each run of 2^31 batch ids
    gets the next producer id: (``producer_id`` + batch_id // 2^31, batch_id % 2^31). Within
    one producer id the epochs only grow, as Kafka's marker fencing requires."""
    check_int("batchId", batch_id, 0, INT64_MAX)
    return producer_id + (batch_id >> 31), batch_id & INT32_MAX


def commit_transaction(log: Any, producer_id: int, batch_id: int, files: list[StagedFile]) -> bool:
    """Append ``files`` as one transaction marked with ``batch_id``; False if that batch id
    was already committed here (a replay). A transaction left open by a crash is aborted."""
    producer_id, marker_epoch = batch_producer(producer_id, batch_id)
    position = log.producer_position(producer_id)
    epoch = 0
    sequence = 0
    if position is not None:
        if not position.in_transaction and position.coordinator_epoch >= marker_epoch:
            return False
        if position.in_transaction:
            log.append_end_txn_marker(producer_id, epoch, "abort", marker_epoch)
        sequence = position.next_sequence
    for staged in files:
        data = bytearray(Path(staged.path).read_bytes())
        # the staged batches are our own, so a header walk suffices; the append re-checks CRCs
        for position_in_file, _, _ in list(iter_positions(data)):
            at = position_in_file + RECORDS_COUNT_OFFSET
            count = int.from_bytes(data[at : at + 4], "big")
            set_producer(data, position_in_file, producer_id, epoch, sequence, True)
            sequence = increment_sequence(sequence, count)
        append_staged(log, memoryview(data))
    log.append_end_txn_marker(producer_id, epoch, "commit", marker_epoch)
    return True
