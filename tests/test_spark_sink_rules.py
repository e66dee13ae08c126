"""The kafkalog sink behaves as Spark's Kafka sink writing through a Kafka broker would, on
local[2]: topics created on first write (``auto.create.topics.enable``, ``num.partitions``),
rows with no timestamp stamped at write, the producer's ``compression.type`` and ``batch.size``
honoured, Complete and Update output modes appending what Spark emits, and the schema and lock
problems reported on the driver, before any work, with the option or column named."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
from kafka.partitioner.default import murmur2 as kp_murmur2

from kafkalog import LogManager, Record
from kafkalog.errors import InvalidArgumentError, UnknownTopicOrPartitionError
from kafkalog.log.view import discover_partitions
from kafkalog.spark.options import parse_write_options
from kafkalog.spark.sink import KafkaLogBatchWriter, committing
from kafkalog.spark.staging import StagedFile
from kafkalog.types import CompressionType, TopicPartition

pytestmark = pytest.mark.slow


def write(df: Any, root: Path, **options: str) -> None:
    w = df.write.format("kafkalog").option("path", str(root)).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def read(spark: Any, root: Path, topic: str) -> list[Any]:
    return (
        spark.read.format("kafkalog").option("path", str(root)).option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed").load().collect()
    )  # fmt: skip


def partitions(root: Path, topic: str) -> list[int]:
    return sorted(tp.partition for tp in discover_partitions([root]) if tp.topic == topic)


def test_a_write_creates_the_topic_it_names_with_num_partitions(spark: Any, tmp_path: Path) -> None:
    rows = [(f"user{i}", f"v{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string")
    write(df, tmp_path, topic="clicks", **{"num.partitions": "3"})
    assert partitions(tmp_path, "clicks") == [0, 1, 2]
    back = read(spark, tmp_path, "clicks")
    assert len(back) == 40
    for r in back:  # placed over the partition count the topic was created with
        assert r.partition == (kp_murmur2(bytes(r.key)) & 0x7FFFFFFF) % 3
    write(df, tmp_path, topic="clicks", **{"num.partitions": "5"})  # exists: stays at 3
    assert partitions(tmp_path, "clicks") == [0, 1, 2]
    assert len(read(spark, tmp_path, "clicks")) == 80


def test_a_topic_column_creates_each_missing_topic_and_keeps_existing_ones(
    spark: Any, tmp_path: Path
) -> None:
    with LogManager([tmp_path]) as m:
        m.create_topic("known", 2)
    rows = [(t, f"k{i}", f"v{i}") for i in range(30) for t in ("known", "new-a", "new-b")]
    df = spark.createDataFrame(rows, "topic string, key string, value string")
    write(df, tmp_path)
    assert partitions(tmp_path, "known") == [0, 1]
    assert partitions(tmp_path, "new-a") == partitions(tmp_path, "new-b") == [0]
    assert {len(read(spark, tmp_path, t)) for t in ("known", "new-a", "new-b")} == {30}


def test_with_auto_create_off_a_missing_topic_fails_before_any_work(
    spark: Any, tmp_path: Path
) -> None:
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match=r"auto\.create\.topics\.enable is false"):
        write(df, tmp_path, topic="nope", **{"auto.create.topics.enable": "false"})
    with pytest.raises(Exception, match=r"auto\.create\.topics\.enable is false"):
        write(
            df.selectExpr("'nope' AS topic", "key", "value"),
            tmp_path,
            **{"auto.create.topics.enable": "false"},
        )
    with pytest.raises(Exception, match=r"illegal|invalid|topic"):
        write(df, tmp_path, topic="bad/name")
    assert discover_partitions([tmp_path]) == {}


def test_rows_without_a_timestamp_are_stamped_at_write(spark: Any, tmp_path: Path) -> None:
    before = int(time.time() * 1000)
    df = spark.createDataFrame([("a",), ("b",)], "value string")
    write(df, tmp_path, topic="no-ts")
    nulls = spark.createDataFrame([("c", None), ("d", None)], "value string, timestamp timestamp")
    write(nulls, tmp_path, topic="no-ts")
    after = int(time.time() * 1000)
    stamps = [int(r.timestamp.timestamp() * 1000) for r in read(spark, tmp_path, "no-ts")]
    assert len(stamps) == 4
    assert all(before - 1 <= ts <= after + 1 for ts in stamps), (before, stamps, after)


@pytest.mark.parametrize("codec", ["zstd", "lz4", "gzip", "snappy"])
def test_the_producer_compression_type_is_honoured(spark: Any, tmp_path: Path, codec: str) -> None:
    df = spark.createDataFrame(
        [(f"k{i}", "x" * 100) for i in range(200)], "key string, value string"
    )
    write(df, tmp_path, topic="z", **{"kafka.compression.type": codec, "kafka.batch.size": "4096"})
    with LogManager([tmp_path]) as m:
        log = m.get_log("z", 0)
        batches = [b for s in log.segments for b in s.batches()]
    assert {b.compression for b in batches} == {CompressionType[codec.upper()]}
    assert len(batches) > 1  # kafka.batch.size bounds each batch
    assert len(read(spark, tmp_path, "z")) == 200


def test_compression_options_are_checked_as_the_producer_checks_them(tmp_path: Path) -> None:
    for options, named in [
        ({"kafka.compression.type": "brotli"}, "kafka.compression.type"),
        ({"kafka.compression.type": "ZSTD"}, "kafka.compression.type"),  # case-sensitive
        ({"kafka.compression.type": "zstd", "kafka.compression.zstd.level": "23"}, "zstd.level"),
        ({"kafka.compression.gzip.level": "fast"}, "gzip.level"),
        ({"kafka.batch.size": "0"}, "kafka.batch.size"),
        ({"num.partitions": "-1"}, "num.partitions"),
    ]:
        with pytest.raises(Exception, match=named):
            parse_write_options({"path": str(tmp_path), **options})
    opts = parse_write_options(
        {"path": str(tmp_path), "kafka.compression.type": "lz4", "includeHeaders": "true",
         "kafka.acks": "all", "kafka.linger.ms": "5"}
    )  # fmt: skip
    assert opts.compression is CompressionType.LZ4 and opts.compression_level is None


def test_a_headers_column_of_the_wrong_shape_fails_on_the_driver_naming_it(
    spark: Any, tmp_path: Path
) -> None:
    wrong = spark.createDataFrame([("v",)], "value string").selectExpr(
        "value", "array(named_struct('k', 'a', 'v', CAST('b' AS BINARY))) AS headers"
    )
    with pytest.raises(Exception, match="column 'headers' must be"):
        write(wrong, tmp_path, topic="h")
    also_wrong = spark.createDataFrame([("v",)], "value string").selectExpr(
        "value", "array('a', 'b') AS headers"
    )
    with pytest.raises(InvalidArgumentError, match="column 'headers' must be"):
        KafkaLogBatchWriter({"path": str(tmp_path), "topic": "h"}, also_wrong.schema, False)
    right = spark.createDataFrame([("v",)], "value string").selectExpr(
        "value", "array(named_struct('key', 'a', 'value', CAST('b' AS BINARY))) AS headers"
    )
    write(right, tmp_path, topic="h", includeHeaders="true")
    assert len(read(spark, tmp_path, "h")) == 1


def counting_query(spark: Any, tmp_path: Path) -> Any:
    logs = tmp_path / "logs"
    with LogManager([logs]) as m:
        m.create_topic("events", 1)
        log = m.get_log("events", 0)
        for i in range(30):
            log.append([Record(b"v", b"user%d" % (i % 3))])
    return (
        spark.readStream.format("kafkalog").option("path", str(logs))
        .option("subscribe", "events").option("startingOffsets", "earliest").load()
        .groupBy("key").count()
        .selectExpr("key", "CAST(count AS STRING) AS value")
    )  # fmt: skip


COUNTS = {b"user0": b"10", b"user1": b"10", b"user2": b"10"}


def to_counts(counts: Any, out: Path, mode: str, checkpoint: Path) -> Any:
    return (
        counts.writeStream.format("kafkalog").outputMode(mode).option("path", str(out))
        .option("topic", "counts").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )  # fmt: skip


def test_a_streaming_aggregation_is_written_in_complete_mode(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    query = to_counts(counting_query(spark, tmp_path), out, "complete", tmp_path / "ck")
    query.awaitTermination(180)
    assert query.exception() is None
    assert {bytes(r.key): bytes(r.value) for r in read(spark, out, "counts")} == COUNTS


def test_update_mode_is_spark_s_refusal_and_foreach_batch_is_the_way(
    spark: Any, tmp_path: Path
) -> None:
    """Spark refuses Update mode for every Python data source before kafkalog is called (its
    PythonWriteBuilder supports truncation, not SupportsStreamingUpdateAsAppend). The README's
    way: foreachBatch with the batch writer. If Spark lifts the refusal, this test says so."""
    out = tmp_path / "out"
    out.mkdir()
    refused = to_counts(counting_query(spark, tmp_path), out, "update", tmp_path / "ck1")
    with pytest.raises(Exception, match="does not support Update mode"):
        refused.awaitTermination(180)

    def append(batch: Any, _batch_id: int) -> None:
        batch.write.format("kafkalog").option("path", str(out)).option("topic", "counts").mode(
            "append"
        ).save()

    (tmp_path / "logs").rename(tmp_path / "logs-old")
    query = (
        counting_query(spark, tmp_path).writeStream.outputMode("update").foreachBatch(append)
        .option("checkpointLocation", str(tmp_path / "ck2")).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(180)
    assert query.exception() is None
    assert {bytes(r.key): bytes(r.value) for r in read(spark, out, "counts")} == COUNTS


def test_a_commit_beside_a_lock_holder_says_why_it_cannot_append(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as m:
        m.create_topic("t", 1)
        opts = parse_write_options({"path": str(tmp_path)})
        staged = [StagedFile("t", 0, str(tmp_path / "unused"), 0)]
        with (
            pytest.raises(Exception, match=r"no other process .* may hold it") as caught,
            committing(opts, staged),
        ):
            pass
    assert "is locked" in str(caught.value)


def test_a_commit_to_a_topic_removed_since_planning_fails_by_name(tmp_path: Path) -> None:
    opts = parse_write_options({"path": str(tmp_path), "auto.create.topics.enable": "false"})
    staged = [StagedFile("gone", 0, str(tmp_path / "unused"), 0)]
    with pytest.raises(UnknownTopicOrPartitionError, match="'gone'"), committing(opts, staged):
        pass
    with LogManager([tmp_path]) as m:
        m.create_topic("small", 1)
    opts = parse_write_options({"path": str(tmp_path), "num.partitions": "4"})
    staged = [StagedFile("small", 3, str(tmp_path / "unused"), 0)]
    with committing(opts, staged) as manager, pytest.raises(UnknownTopicOrPartitionError):
        manager.get_log("small", 3)
    assert TopicPartition("small", 3) not in discover_partitions([tmp_path])


def test_a_batch_overwrite_is_refused_and_a_complete_mode_truncate_is_not(tmp_path: Path) -> None:
    from kafkalog.errors import InvalidConfigError
    from kafkalog.spark.schema import kafka_schema
    from kafkalog.spark.sink import KafkaLogStreamWriter

    schema = kafka_schema(False)[:2]  # key, value
    options = {"path": str(tmp_path), "topic": "t", "checkpointLocation": str(tmp_path / "ck")}
    with pytest.raises(InvalidConfigError, match=r'only appends.*mode\("append"\)'):
        KafkaLogBatchWriter(options, schema, True)
    KafkaLogStreamWriter(options, schema, True)  # Spark's Complete mode: appends, as Kafka's
