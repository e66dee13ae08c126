"""Spark benchmarks on local[2]: batch read through ``format("kafkalog")`` beside Spark's Arrow
ingest ceiling, and the sink's write rate.

The topic holds 2,000,000 records (2 partitions, 9-byte keys, 100-byte values, no headers,
uncompressed batches of 500). The baseline is a Python data source in this file that yields
pre-built Arrow batches of the same schema and shapes (10,000 rows each, built once per task
and yielded repeatedly) — what Spark can take in from a Python source at all on this machine.
Both queries end in the ``noop`` sink and run in interleaved rounds after a warm-up; the ratio is
the median of per-round ratios. The write row times ``df.write.format("kafkalog")`` of 500,000
rows from ``spark.range`` (staging on the executors, the driver's append) and reports rows/s.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bench import spark_kafka
from bench.harness import Row, in_temp_dir
from kafkalog import LogManager, MemoryRecords
from kafkalog.spark.arrow_read import arrow_schema
from kafkalog.spark.schema import kafka_schema

PER_PARTITION = 1_000_000  # long enough that per-query planning (~0.2 s) does not dominate
BATCH = 500
ROUNDS = 5
WRITE_ROWS = 500_000
NOW = 1_700_000_000_000


class ArrowCeilingSource(DataSource):
    """Yields the same pre-built Arrow batch, as many rows as the topic holds."""

    @classmethod
    def name(cls) -> str:
        return "arrowceiling"

    def schema(self) -> Any:
        return kafka_schema(False)

    def reader(self, schema: Any) -> Any:
        return _CeilingReader()


class _CeilingReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(2)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        n = 10_000
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([b"key-%05d" % i for i in range(n)], pa.binary()),
                pa.array([b"%0100d" % i for i in range(n)], pa.binary()),
                pa.array(["bench"] * n, pa.string()),
                pa.array([partition.value] * n, pa.int32()),
                pa.array(range(n), pa.int64()),
                pa.array([NOW * 1000] * n, pa.timestamp("us", tz="UTC")),
                pa.array([0] * n, pa.int32()),
            ],
            schema=arrow_schema(False),
        )
        for _ in range(PER_PARTITION // n):
            yield batch


def _build(root: Path) -> None:
    with LogManager([root]) as manager:
        manager.create_topic("bench", 2)
        manager.create_topic("sink", 2)
        for p in range(2):
            log = manager.get_log("bench", p)
            for start in range(0, PER_PARTITION, BATCH):
                rows = range(start, start + BATCH)
                table = pa.table(
                    {
                        "key": pa.array([b"key-%05d" % (i % 100_000) for i in rows], pa.binary()),
                        "value": pa.array([b"%0100d" % i for i in rows], pa.binary()),
                        "timestamp": pa.array([NOW + i for i in rows], pa.int64()),
                    }
                )
                log.append_records(MemoryRecords.from_arrow(table))


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-spark-", _run)


def _run(root: Path) -> list[Row]:
    import kafkalog.spark

    repo = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])
    _build(root)
    rows_total = 2 * PER_PARTITION
    conf = {"spark.driver.memory": "2g", "spark.jars.packages": spark_kafka.connector_package()}
    spark = kafkalog.spark.local_session("kafkalog-bench", **conf)
    try:
        spark.dataSource.register(ArrowCeilingSource)

        def ours() -> None:
            spark.read.format("kafkalog").option("path", str(root)).option(
                "subscribe", "bench"
            ).load().write.format("noop").mode("overwrite").save()

        def ceiling() -> None:
            spark.read.format("arrowceiling").load().write.format("noop").mode("overwrite").save()

        ours()
        ceiling()  # warm-up: JVM, Python workers
        pairs = []
        for _ in range(ROUNDS):
            a = _timed(ours)
            b = _timed(ceiling)
            pairs.append((rows_total / a, rows_total / b))
        read_ours = statistics.median(p[0] for p in pairs)
        read_ceiling = statistics.median(p[1] for p in pairs)
        ratio = statistics.median(p[0] / p[1] for p in pairs)

        frame = (
            spark.range(WRITE_ROWS, numPartitions=2)
            .selectExpr("CAST(id % 100000 AS STRING) AS key", "repeat('x', 100) AS value")
            .cache()
        )
        frame.count()

        def write() -> None:
            frame.write.format("kafkalog").option("path", str(root)).option("topic", "sink").mode(
                "append"
            ).save()

        def write_parquet() -> None:
            frame.write.format("parquet").mode("overwrite").save(str(root / "parquet"))

        write()
        write_parquet()
        w_pairs = []
        for _ in range(ROUNDS):
            a = _timed(write)
            b = _timed(write_parquet)
            w_pairs.append((WRITE_ROWS / a, WRITE_ROWS / b))
        write_ours = statistics.median(p[0] for p in w_pairs)
        write_parquet_rate = statistics.median(p[1] for p in w_pairs)
        frame.unpersist()
        against_kafka = spark_kafka.run(spark, root)
    finally:
        spark.stop()
    print(f"spark: read {read_ours:,.0f} rows/s, ceiling {read_ceiling:,.0f}", file=sys.stderr)
    return [
        Row(
            "spark",
            "batch read, 2M rows, noop sink (local[2])",
            "rows/s",
            read_ours,
            "Arrow ingest ceiling (pre-built batches)",
            read_ceiling,
            target=0.8,
            notes="2 partitions of 9 B keys and 100 B values; records decoded to Arrow columns by "
            "the compiled loop; the ceiling is Spark taking the same rows as pre-built Arrow "
            "batches",
            paired_ratio=ratio,
        ),
        Row(
            "spark",
            "sink write, 500k rows (stage + driver append)",
            "rows/s",
            write_ours,
            "Spark parquet write of the same rows",
            write_parquet_rate,
            notes="rows of a string key (up to 5 B) and a 100 B value from a cached DataFrame; "
            "ours: v2 batches staged by the executors, appended and flushed by the driver",
        ),
        *against_kafka,
    ]
