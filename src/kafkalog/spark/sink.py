"""The ``kafkalog`` sink: DataFrames into topics, batch and streaming.

Why: the Kafka sink's columns (``value``; optional ``key``, ``headers``, ``topic``, ``partition``,
``timestamp``), checked on the driver before any work, and a broker's side of a produce: tasks
stage Kafka batches (``kafkalog.spark.staging``) and only the driver's commit appends, under the
log directory's lock, so offsets stay contiguous and an aborted job leaves nothing behind. The
commit creates the topics a write names that do not exist yet, as a broker does
(``auto.create.topics.enable``, ``num.partitions``). Streaming commits are exactly-once: each
partition's micro-batch is one transaction whose COMMIT marker carries the batch id (in its
coordinator epoch and, past Int32, its producer id; ``batch_producer``), so a replayed batch id
finds itself committed and is skipped. Complete output mode appends each result table whole, as
the Kafka sink does. Refuses: a batch Overwrite (as the Kafka sink does).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from kafkalog.clock import SYSTEM_CLOCK
from kafkalog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    LogDirectoryLockedError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.view import discover_partitions
from kafkalog.manager.log_manager import LogManager
from kafkalog.records.batch import increment_sequence, set_producer
from kafkalog.records.scanner import iter_positions
from kafkalog.records.v2_layout import RECORDS_COUNT_OFFSET
from kafkalog.spark.options import WriteOptions, parse_write_options
from kafkalog.spark.schema import SPARK_HEADERS_TYPE
from kafkalog.spark.staging import (
    StagedFile,
    StagedFiles,
    auto_created,
    prune_stale,
    stage_batches,
    staging_root,
)
from kafkalog.types import INT32_MAX, INT64_MAX, TopicPartition, check_int

__all__ = ["KafkaLogBatchWriter", "KafkaLogStreamWriter", "StagedFile", "StagedFiles"]

logger = logging.getLogger("kafkalog.spark")
_COLUMN_TYPES: dict[str, tuple[Any, ...]] = {
    "key": (StringType(), BinaryType()),
    "value": (StringType(), BinaryType()),
    "topic": (StringType(),),
    "partition": (IntegerType(),),
    "headers": (SPARK_HEADERS_TYPE,),
    "timestamp": (TimestampType(),),
}


def _headers_type_ok(data_type: Any) -> bool:
    """Spark's rule for the headers column: an array of (key string, value binary) structs,
    in that order; nullability aside."""
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = data_type.elementType.fields
    return [(f.name, f.dataType) for f in fields] == [
        ("key", StringType()),
        ("value", BinaryType()),
    ]


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
            field.dataType == t or (name == "headers" and _headers_type_ok(field.dataType))
            for t in allowed
        ):
            raise InvalidArgumentError(
                f"column '{name}' must be {' or '.join(t.simpleString() for t in allowed)}, "
                f"not {field.dataType.simpleString()}"
            )


def _staged_in_order(messages: list[Any]) -> list[StagedFile]:
    return [f for m in messages if m is not None for f in m.files]


def _partition_counts(opts: WriteOptions) -> dict[str, int]:
    counts: dict[str, int] = {}
    for tp in discover_partitions(list(opts.log_dirs)):
        counts[tp.topic] = max(counts.get(tp.topic, 0), tp.partition + 1)
    return counts


@contextlib.contextmanager
def committing(opts: WriteOptions, staged: list[StagedFile]) -> Iterator[LogManager]:
    """A manager of the partitions ``staged`` appends to, with the topics the tasks found
    missing created (all ``num.partitions`` of them). A topic another job created meanwhile
    is used as it is; a partition it lacks fails the commit by name."""
    touched = {TopicPartition(f.topic, f.partition) for f in staged}
    existing = _partition_counts(opts)
    missing = sorted({tp.topic for tp in touched} - existing.keys())
    count = opts.auto_create_partitions
    if missing and count is None:  # the tasks already refused; the log may have changed since
        raise UnknownTopicOrPartitionError(f"topic {missing[0]!r} does not exist")
    opened = touched | {TopicPartition(t, p) for t in missing for p in range(count or 0)}
    try:
        manager = LogManager(list(opts.log_dirs), partitions=opened, num_partitions=count or 1)
    except LogDirectoryLockedError as err:
        raise LogDirectoryLockedError(
            f"{err}: the kafkalog sink's commit appends under the log directory's lock, so no "
            "other process (a `kafkalog serve`, a LogManager) may hold it meanwhile"
        ) from None
    with manager:
        for topic in missing:
            with contextlib.suppress(TopicExistsError):
                manager.create_topic(topic)
                logger.info("created topic %r with %d partitions on first write", topic, count)
        yield manager


class _Writer:
    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise InvalidConfigError(
                "mode",
                "the kafkalog sink only appends, as Spark's Kafka sink does: write with "
                '.mode("append") (Spark gives Python data sources no ErrorIfExists mode, so '
                "its message suggests Overwrite; Kafka's sink refuses Overwrite too)",
            )
        self.opts = parse_write_options(options)
        check_columns(schema, self.opts.topic)
        self.counts = _partition_counts(self.opts)
        if self.opts.topic is not None and self.opts.topic not in self.counts:
            self.counts[self.opts.topic] = auto_created(self.opts.topic, self.opts)
        root = staging_root(self.opts.log_dirs[0])
        prune_stale(root, SYSTEM_CLOCK.milliseconds())
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
            with committing(self.opts, staged_files) as manager:
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
        # a streaming query in Complete mode asks for a truncate; Kafka's sink ignores it and
        # appends each result table whole, and so does this one
        super().__init__(options, schema, overwrite=False)
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
            staged_files = _staged_in_order(messages)
            for staged in staged_files:
                by_partition.setdefault(TopicPartition(staged.topic, staged.partition), []).append(
                    staged
                )
            with committing(self.opts, staged_files) as manager:
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
