"""Spark's own Kafka connector against kafkalog's source and sink, in the same Spark session.

What a Spark user weighs: reading a topic through ``format("kafka")`` from a running Apache
Kafka broker, or through ``format("kafkalog")`` straight from that broker's log directory. The
rows are the same records in the same bytes: Spark's Kafka sink loads 2,000,000 rows (9-byte
keys, 100-byte values, 2 partitions, the producer's defaults: no compression) into the broker,
the broker is stopped cleanly, its log directory copied, and the broker restarted on the
original. Rounds then alternate: the connector reads from the broker, kafkalog reads the copy;
both end in the ``noop`` sink. The write row times 500,000 rows through Spark's Kafka sink to
the broker (acks=all, the broker's page cache, no fsync) against kafkalog's sink into a log
directory (staged on the executors, appended and flushed by the driver).

The broker is the newest pinned in interop/kafka-versions.txt, started by the oracle harness
(tests/kafka_oracle.py); the connector comes from Maven Central (tests/spark_connector.py).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import Row

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the oracle harness lives beside the tests

ROWS = 2_000_000
WRITE_ROWS = 500_000
ROUNDS = 3
READ_TARGET = 3.0  # issue: the kafkalog source at least 3x the connector reading from the broker


def connector_package() -> str:
    from spark_connector import connector_version

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{connector_version()}"


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _frame(spark: Any, rows: int) -> Any:
    frame = (
        spark.range(rows, numPartitions=2)
        .selectExpr(
            "CAST(id % 2 AS INT) AS partition",
            "CAST(format_string('key-%05d', id % 100000) AS BINARY) AS key",
            "CAST(format_string('%0100d', id) AS BINARY) AS value",
        )
        .cache()
    )
    frame.count()
    return frame


def run(spark: Any, root: Path) -> list[Row]:
    import kafkalog
    from kafka_oracle import KAFKA_VERSIONS, KafkaBroker

    version = KAFKA_VERSIONS[-1]
    broker = KafkaBroker(version, root / "broker", {"log.retention.ms": "-1"})
    files = root / "files"
    sink_dir = root / "sink"
    sink_dir.mkdir()
    with kafkalog.LogManager([sink_dir]) as manager:
        manager.create_topic("sink", 2)
    try:
        broker.start()
        _create_topics(broker.bootstrap, ("bench", "sink"))
        kafka = {"kafka.bootstrap.servers": broker.bootstrap}
        _frame(spark, ROWS).write.format("kafka").options(**kafka).option("topic", "bench").save()
        broker.stop()
        shutil.copytree(broker.log_dir, files)
        broker.start()

        def connector_read() -> None:
            spark.read.format("kafka").options(**kafka).option(
                "subscribe", "bench"
            ).load().write.format("noop").mode("overwrite").save()

        def ours_read() -> None:
            spark.read.format("kafkalog").option("path", str(files)).option(
                "subscribe", "bench"
            ).load().write.format("noop").mode("overwrite").save()

        reads = _rounds(ours_read, connector_read, ROWS)
        frame = _frame(spark, WRITE_ROWS)

        def connector_write() -> None:
            frame.write.format("kafka").options(**kafka).option("topic", "sink").save()

        def ours_write() -> None:
            frame.write.format("kafkalog").option("path", str(sink_dir)).option(
                "topic", "sink"
            ).mode("append").save()

        writes = _rounds(ours_write, connector_write, WRITE_ROWS)
        frame.unpersist()
    finally:
        broker.kill()
    connector = connector_package().rsplit(":", 1)[1]
    return [
        Row(
            "spark",
            f"batch read of 2M rows (100 B values), noop sink: files vs Kafka {version}",
            "rows/s",
            reads[0],
            f"Spark's Kafka connector {connector} from the running broker",
            reads[1],
            target=READ_TARGET,
            notes="the same records: kafkalog reads a copy of the broker's own log directory",
            paired_ratio=reads[2],
        ),
        Row(
            "spark",
            "sink write, 500k rows (100 B values)",
            "rows/s",
            writes[0],
            f"Spark's Kafka sink {connector} to Kafka {version} (acks=all)",
            writes[1],
            notes="kafkalog: staged on the executors, appended and flushed by the driver",
            paired_ratio=writes[2],
        ),
    ]


def _create_topics(bootstrap: str, topics: tuple[str, ...]) -> None:
    """Two partitions each; the client goes away with this frame, before the broker restarts."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 2, 1) for t in topics]).values():
        f.result(60)


def _rounds(ours: Any, theirs: Any, rows: int) -> tuple[float, float, float]:
    ours()
    theirs()  # warm-up: JVM, Python workers, the broker's page cache
    pairs = []
    for _ in range(ROUNDS):
        a = _timed(ours)
        b = _timed(theirs)
        pairs.append((rows / a, rows / b))
    return (
        statistics.median(p[0] for p in pairs),
        statistics.median(p[1] for p in pairs),
        statistics.median(p[0] / p[1] for p in pairs),
    )
