"""The kafkalog Spark data source on local[2]: batch reads (schema, headers, isolation, options,
splits), streaming reads (checkpoint restart, maxOffsetsPerTrigger, a writer in another
process), the sink (round trip with headers and nulls, murmur2 placement, exactly-once replays).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
import pyarrow as pa
from kafka.partitioner.default import murmur2 as kp_murmur2

from kafkalog import LogManager, MemoryRecords, ProducerFields, Record
from kafkalog.errors import InvalidArgumentError, InvalidConfigError
from kafkalog.log.view import topic_views
from kafkalog.records.partitioner import partition_for_key
from kafkalog.spark.schema import kafka_schema
from kafkalog.spark.sink import KafkaLogStreamWriter
from kafkalog.spark.staging import staging_root

NOW = 1_700_000_000_000
pytestmark = pytest.mark.slow


def make_topic(root: Path, topic: str, partitions: int, per_partition: int) -> None:
    with LogManager([root]) as m:
        m.create_topic(topic, partitions)
        for p in range(partitions):
            log = m.get_log(topic, p)
            for i in range(per_partition):
                headers = [("h", b"x"), ("n", None)] if i % 2 else []
                key = None if i % 5 == 0 else b"k%d" % i
                log.append([Record(b"v%d" % i, key, headers, timestamp=NOW + i)])


def reader(spark: Any, root: Path, **options: str) -> Any:
    r = spark.read.format("kafkalog").option("path", str(root))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_schema_rows_and_isolation(spark: Any, tmp_path: Path) -> None:
    make_topic(tmp_path, "clicks", 2, 20)
    with LogManager([tmp_path]) as m:
        log = m.get_log("clicks", 0)
        log.append([Record(b"gone", b"g", timestamp=NOW)], producer=ProducerFields(9, 0, 0, True))
        log.append_end_txn_marker(9, 0, "abort", 0)
        log.append([Record(b"open", b"o", timestamp=NOW)], producer=ProducerFields(8, 0, 0, True))
    df = reader(spark, tmp_path, subscribe="clicks", includeHeaders="true")
    assert df.schema == kafka_schema(True)
    assert [f.name for f in reader(spark, tmp_path, subscribe="clicks").schema] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"
    ]  # fmt: skip
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert len(rows) == 42  # 40 plain + the aborted and the open record; no marker row
    first, second = rows[0], rows[1]
    assert first.key is None and first.headers is None and first.timestampType == 0
    assert bytes(second.key) == b"k1" and bytes(second.value) == b"v1"
    assert [(h.key, None if h.value is None else bytes(h.value)) for h in second.headers] == [
        ("h", b"x"), ("n", None)
    ]  # fmt: skip
    assert second.timestamp.timestamp() * 1000 == NOW + 1
    committed = reader(
        spark, tmp_path, subscribe="clicks", **{"kafka.isolation.level": "read_committed"}
    )
    values = {bytes(r.value) for r in committed.collect()}
    assert b"gone" not in values and b"open" not in values and len(values) == 20
    split = reader(spark, tmp_path, subscribe="clicks", maxRecordsPerPartition="7")
    assert split.rdd.getNumPartitions() >= 6 and split.count() == 42
    some = reader(spark, tmp_path, assign='{"clicks":[1]}', startingOffsets='{"clicks":{"1":5}}',
                  endingOffsets='{"clicks":{"1":9}}')  # fmt: skip
    assert sorted(r.offset for r in some.collect()) == [5, 6, 7, 8]


def test_bad_options_fail_with_the_option_named(spark: Any, tmp_path: Path) -> None:
    make_topic(tmp_path, "t", 1, 1)
    with pytest.raises(Exception, match="startingOffsets"):
        reader(spark, tmp_path, subscribe="t", startingOffsets="latest").collect()
    with pytest.raises(Exception, match="subscribe"):
        reader(spark, tmp_path).collect()


def test_write_then_read_round_trip_with_murmur2_placement(spark: Any, tmp_path: Path) -> None:
    make_topic(tmp_path, "src", 1, 0)
    with LogManager([tmp_path]) as m:
        m.create_topic("out", 3)
    rows = [(f"user{i}" if i % 4 else None, f"v{i}" if i % 7 else None) for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value string").selectExpr(
        "key",
        "value",
        "CASE WHEN key IS NULL THEN NULL ELSE "
        "array(named_struct('key', 'src', 'value', CAST('web' AS BINARY))) END AS headers",
    )
    df.write.format("kafkalog").option("path", str(tmp_path)).option("topic", "out").option(
        "batchSize", "200"
    ).mode("append").save()
    back = reader(spark, tmp_path, subscribe="out", includeHeaders="true").collect()
    assert len(back) == 60
    for r in back:
        if r.key is not None:
            assert r.partition == (kp_murmur2(bytes(r.key)) & 0x7FFFFFFF) % 3
            assert [(h.key, bytes(h.value)) for h in r.headers] == [("src", b"web")]
        else:
            assert r.headers is None
    got = [
        (None if r.key is None else bytes(r.key).decode(),
         None if r.value is None else bytes(r.value).decode())
        for r in back
    ]  # fmt: skip
    assert sorted(got, key=repr) == sorted(rows, key=repr)
    with pytest.raises(Exception, match="value"):
        spark.createDataFrame([("k",)], "key string").write.format("kafkalog").option(
            "path", str(tmp_path)).option("topic", "out").mode("append").save()  # fmt: skip
    assert not staging_root(tmp_path).exists()  # nothing left staged
    assert all(p.is_file() or "-" in p.name for p in tmp_path.iterdir())  # partitions only


def test_stream_restart_only_reads_new_data_and_caps_triggers(spark: Any, tmp_path: Path) -> None:
    make_topic(tmp_path, "ev", 2, 50)
    out, checkpoint = tmp_path / "out", tmp_path / "ck"

    def run(**options: str) -> Any:
        stream = spark.readStream.format("kafkalog").option("path", str(tmp_path)).option(
            "subscribe", "ev").option("startingOffsets", "earliest")  # fmt: skip
        for k, v in options.items():
            stream = stream.option(k, v)
        query = (
            stream.load().selectExpr("partition", "offset").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
        return query

    first = run(maxOffsetsPerTrigger="30")
    batches = [p for p in first.recentProgress if p["numInputRows"]]
    assert len(batches) >= 3 and all(p["numInputRows"] <= 30 for p in batches)
    # the progress says what is available (reportLatestOffset), not only what the batch took
    assert json.loads(batches[0]["sources"][0]["latestOffset"]) == {"ev": {"0": 50, "1": 50}}
    assert spark.read.parquet(str(out)).count() == 100
    with LogManager([tmp_path]) as m:
        for p in range(2):
            for _i in range(5):
                m.get_log("ev", p).append([Record(b"new", timestamp=NOW)])
    run()
    done = spark.read.parquet(str(out))
    assert done.count() == 110 and done.distinct().count() == 110


WRITER = textwrap.dedent(
    """
    import sys, time
    from kafkalog import LogManager, Record
    with LogManager([sys.argv[1]]) as m:
        for i in range(int(sys.argv[2])):
            m.get_log("live", i % 2).append([Record(b"r%d" % i)])
            time.sleep(0.002)
    """
)


def test_stream_while_another_process_appends(spark: Any, tmp_path: Path) -> None:
    make_topic(tmp_path, "live", 2, 0)
    total = 1500
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(total)])
    out, checkpoint = tmp_path / "out", tmp_path / "ck"

    def query(**trigger: Any) -> Any:
        return (
            spark.readStream.format("kafkalog").option("path", str(tmp_path))
            .option("subscribe", "live").option("startingOffsets", "earliest").load()
            .selectExpr("partition", "offset", "value").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(checkpoint))
            .trigger(**trigger).start()
        )  # fmt: skip

    live = query(processingTime="500 milliseconds")
    assert writer.wait(timeout=120) == 0
    live.stop()
    query(availableNow=True).awaitTermination()  # the rest, from the same checkpoint
    rows = spark.read.parquet(str(out))
    assert rows.count() == total and rows.select("partition", "offset").distinct().count() == total


def test_streaming_sink_is_exactly_once_under_replay(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as m:
        m.create_topic("sink", 2)
    schema = kafka_schema(False)
    options = {
        "path": str(tmp_path),
        "topic": "sink",
        "kafka.transactional.id": "q1",
        "batchSize": "4",
    }
    writer = KafkaLogStreamWriter(options, schema, False)
    batch = pa.RecordBatch.from_pydict(
        {"key": [b"a", b"b", None], "value": [b"1", b"2", b"3"]},
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]),
    )

    def committed() -> int:
        views = topic_views([tmp_path], "sink")
        ends = [v.last_stable_offset() for v in views.values()]
        return sum(
            1 for v, e in zip(views.values(), ends, strict=True) for b in v.batches(0, e)
            if not b.is_control for _ in b
        )  # fmt: skip

    writer.commit([writer.write(iter([batch]))], 0)
    assert committed() == 3
    writer.commit([writer.write(iter([batch]))], 0)  # a replay of batch 0
    assert committed() == 3
    writer.commit([writer.write(iter([batch]))], 1)
    assert committed() == 6
    with pytest.raises(InvalidConfigError, match="transactional"):
        KafkaLogStreamWriter({"path": str(tmp_path)}, schema, False)
    with pytest.raises(InvalidArgumentError, match="topic"):
        KafkaLogStreamWriter({"path": str(tmp_path)}, kafka_schema(False)[:2], False)


def test_write_stream_end_to_end_takes_its_id_from_the_checkpoint(
    spark: Any, tmp_path: Path
) -> None:
    make_topic(tmp_path, "in", 2, 30)
    with LogManager([tmp_path]) as m:
        m.create_topic("copy", 2)

    def run() -> None:
        (
            spark.readStream.format("kafkalog").option("path", str(tmp_path))
            .option("subscribe", "in").option("startingOffsets", "earliest").load()
            .selectExpr("key", "value").writeStream.format("kafkalog")
            .option("path", str(tmp_path)).option("topic", "copy")
            .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
            .start().awaitTermination()
        )  # fmt: skip

    run()
    run()  # nothing new: nothing more written
    assert (
        reader(
            spark, tmp_path, subscribe="copy", **{"kafka.isolation.level": "read_committed"}
        ).count()
        == 60
    )


def test_reads_that_select_nothing_are_empty_not_crashes(spark: Any, tmp_path: Path) -> None:
    make_topic(tmp_path, "full", 2, 5)
    with LogManager([tmp_path]) as m:
        m.create_topic("empty", 2)
    cases = [
        {"subscribe": "empty"},
        {"subscribePattern": "nothing-matches-.*"},
        {"subscribe": "full", "startingOffsets": '{"full": {"0": 5, "1": 5}}'},
        {"subscribe": "full", "startingOffsetsByTimestamp": '{"full": {"0": 9999999999999, '
         '"1": 9999999999999}}', "startingOffsetsByTimestampStrategy": "latest"},
        {"subscribe": "missing", "failOnDataLoss": "false"},
    ]  # fmt: skip
    for options in cases:
        assert reader(spark, tmp_path, **options).count() == 0, options
    with pytest.raises(Exception, match="missing"):
        reader(spark, tmp_path, subscribe="missing").count()
    with pytest.raises(Exception, match="not a directory"):
        reader(spark, tmp_path / "nowhere", subscribe="full").count()


def test_a_streaming_sink_leaves_nothing_staged(spark: Any, tmp_path: Path) -> None:
    logs, out, checkpoint = tmp_path / "logs", tmp_path / "out", tmp_path / "ck"
    make_topic(logs, "src", 2, 30)
    with LogManager([out]) as m:
        m.create_topic("dst", 2)
    for _ in range(2):  # two runs: two sets of micro-batches
        query = (
            reader_stream(
                spark, logs, subscribe="src", maxOffsetsPerTrigger="10", startingOffsets="earliest"
            )
            .selectExpr("key", "value")
            .writeStream.format("kafkalog")
            .option("path", str(out))
            .option("topic", "dst")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
    assert not staging_root(out).exists()
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["dst-0", "dst-1"]
    views = topic_views([out], "dst")
    assert sum(v.log_end_offset() for v in views.values()) >= 60


def reader_stream(spark: Any, root: Path, **options: str) -> Any:
    r = spark.readStream.format("kafkalog").option("path", str(root))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


# --- exactly-once marking: batch ids beyond Int32, sequences past Int32.MAX ------------------


def _stage(tmp_path: Path, name: str, values: list[bytes]) -> Any:
    from kafkalog import MemoryRecords
    from kafkalog.spark.staging import StagedFile

    path = tmp_path / name
    path.write_bytes(
        bytes(MemoryRecords.build([Record(v, None, timestamp=NOW) for v in values]).buffer)
    )
    return StagedFile("t", 0, str(path), len(values))


def _committed_values(log: Any) -> list[bytes]:
    from kafkalog import IsolationLevel, committed_records
    from kafkalog.records.scanner import BatchScanner

    out: list[bytes] = []
    offset = 0
    while offset < log.last_stable_offset:  # one read returns one segment's batches
        info = log.read(offset, 1 << 20, isolation=IsolationLevel.READ_COMMITTED)
        batches = list(BatchScanner(info.records.read()))
        aborted = info.aborted_transactions or []
        out += [bytes(r.value) for r in committed_records(batches, aborted)]
        offset = batches[-1].last_offset + 1
    return out


@pytest.mark.parametrize("first_batch", [0, 2**31 - 2, 2**40])
def test_stream_commits_mark_batch_ids_beyond_int32_and_skip_replays(
    tmp_path: Path, first_batch: int
) -> None:
    from kafkalog import Log
    from kafkalog.spark.sink import batch_producer, commit_transaction

    log = Log.open(tmp_path / "t-0")
    try:
        base = 1_000
        for i, batch_id in enumerate(range(first_batch, first_batch + 4)):
            staged = [_stage(tmp_path, f"b{i}", [b"v%d" % i])]
            assert commit_transaction(log, base, batch_id, staged)
            assert not commit_transaction(log, base, batch_id, staged)  # replayed: skipped
        assert _committed_values(log) == [b"v0", b"v1", b"v2", b"v3"]
        pid, epoch = batch_producer(base, first_batch + 3)
        position = log.producer_position(pid)
        assert position is not None and position.coordinator_epoch == epoch
        assert not position.in_transaction
    finally:
        log.close()


def test_stream_commit_sequences_wrap_past_int32_max(tmp_path: Path) -> None:
    """Kafka's sequences wrap from Int32.MAX to 0 (DefaultRecordBatch.incrementSequence); a
    long-lived streaming query's producer reaches it."""
    from kafkalog import Log
    from kafkalog.spark.sink import batch_producer, commit_transaction

    log = Log.open(tmp_path / "t-0")
    try:
        pid, _ = batch_producer(7, 5)
        near_max = ProducerFields(pid, 0, 2**31 - 3, is_transactional=True)
        log.append([Record(b"early", None, timestamp=NOW)], producer=near_max)
        log.append_end_txn_marker(pid, 0, "commit", 4)
        staged = [_stage(tmp_path, "a", [b"x", b"y", b"z", b"w"]), _stage(tmp_path, "b", [b"q"])]
        assert commit_transaction(log, 7, 5, staged)
        position = log.producer_position(pid)
        assert position is not None and position.next_sequence == 3  # -2, -1(max), 0, 1, 2
        assert _committed_values(log) == [b"early", b"x", b"y", b"z", b"w", b"q"]
    finally:
        log.close()


def test_stream_commit_marking_refuses_a_bad_batch_id_or_producer_id(tmp_path: Path) -> None:
    from kafkalog import KafkaLogError, Log
    from kafkalog.spark.sink import batch_producer

    for bad in (-1, 2**63, "3", None):
        with pytest.raises(KafkaLogError, match="batchId"):
            batch_producer(7, bad)  # type: ignore[arg-type]
    log = Log.open(tmp_path / "t-0")
    try:
        assert log.producer_position(7) is None
        for bad in (-2, 2**63, "7"):
            with pytest.raises(KafkaLogError, match="producer_id"):
                log.producer_position(bad)  # type: ignore[arg-type]
    finally:
        log.close()


def test_rows_are_placed_and_staged_exactly_as_the_same_arrow_batch(tmp_path: Path) -> None:
    """Spark 4.0's streaming writer hands the sink Rows: they go through the one column-wise
    placement (murmur2 for keys, the task's sticky partition otherwise) and encoder."""
    from datetime import UTC, datetime

    from pyspark.sql import Row

    from kafkalog.records.columnar import ARROW_HEADERS_TYPE
    from kafkalog.spark.options import parse_write_options
    from kafkalog.spark.staging import stage_batches

    stamp = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    rows = [
        Row(
            key=None if i % 3 == 0 else b"k%d" % i,
            value=f"v{i}",
            partition=1 if i == 7 else None,
            headers=[{"key": "h", "value": b"x"}, {"key": "n", "value": None}] if i % 2 else None,
            timestamp=stamp,
        )
        for i in range(10)
    ]
    table = pa.RecordBatch.from_arrays(
        [
            pa.array([r.key for r in rows], pa.binary()),
            pa.array([r.value.encode() for r in rows], pa.binary()),
            pa.array([r.partition for r in rows], pa.int32()),
            pa.array([r.headers for r in rows], ARROW_HEADERS_TYPE),
            pa.array([r.timestamp for r in rows], pa.timestamp("us", tz="UTC")),
        ],
        names=["key", "value", "partition", "headers", "timestamp"],
    )
    opts = parse_write_options({"path": str(tmp_path), "topic": "t"})
    staged = {}
    for name, items in (("rows", iter(rows)), ("arrow", iter([table]))):
        files = stage_batches(items, tmp_path / name, opts, {"t": 4}).files
        staged[name] = {f.partition: Path(f.path).read_bytes() for f in files}
    assert staged["rows"] == staged["arrow"]
    by_partition = {
        p: [r.offset for r in MemoryRecords(data).records()] for p, data in staged["rows"].items()
    }
    assert sum(len(v) for v in by_partition.values()) == 10
    keyed = [(i, partition_for_key(b"k%d" % i, 4)) for i in range(10) if i % 3 and i != 7]
    for i, partition in keyed:
        values = [r.value for r in MemoryRecords(staged["rows"][partition]).records()]
        assert f"v{i}".encode() in values
    first = next(iter(MemoryRecords(staged["rows"][1]).records()))
    assert first.timestamp == int(stamp.timestamp() * 1000)


def test_the_python_workers_run_the_codec_the_tests_run_on(spark: Any, record_codec: str) -> None:
    """local_session hands KAFKALOG_PURE_PYTHON to the executors' Python workers, so the
    reference half of the suite exercises the reference codec in Spark's tasks too."""

    def probe(_: Any) -> Any:
        from kafkalog.records.codec import record_codec as chosen

        yield chosen().module is not None

    got = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(probe).collect()
    assert got == [record_codec == "compiled"] * 2


def test_row_timestamps_are_read_as_pyspark_gives_them_naive_local_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PySpark gives a Row's TimestampType as a naive datetime in the local zone; the staged
    record must carry that instant, not the same wall clock read as UTC."""
    import time
    from datetime import datetime

    from pyspark.sql import Row

    from kafkalog.spark.options import parse_write_options
    from kafkalog.spark.staging import stage_batches

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        naive = datetime.fromtimestamp(NOW / 1000)  # how PySpark converts an instant
        rows = [Row(value=b"v", timestamp=naive), Row(value=b"w", timestamp=None)]
        opts = parse_write_options({"path": str(tmp_path), "topic": "t"})
        (staged,) = stage_batches(iter(rows), tmp_path / "job", opts, {"t": 1}).files
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    stamps = [r.timestamp for r in MemoryRecords(Path(staged.path).read_bytes()).records()]
    assert stamps[0] == NOW


def test_spark_reads_what_clients_wrote_through_kafkalog_serve(spark: Any, tmp_path: Path) -> None:
    """librdkafka produces through ``kafkalog serve`` (two codecs, keys, headers, nulls); once
    the server stopped, ``format("kafkalog")`` reads exactly the acknowledged records."""
    from confluent_kafka import Producer

    from kafkalog.server import serve

    acked: list[tuple[int, int, bytes | None, bytes | None]] = []

    def delivered(err: object, msg: Any) -> None:
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    with serve(tmp_path, overrides={"num.partitions": "2"}) as server:
        for codec in ("lz4", "zstd"):
            producer = Producer({"bootstrap.servers": server.bootstrap_servers,
                                 "compression.type": codec, "linger.ms": 5})  # fmt: skip
            for i in range(100):
                key = None if i % 9 == 0 else f"{codec}{i % 7}".encode()
                value = None if i % 13 == 0 else f"{codec}-{i}".encode()
                producer.produce("served", key=key, value=value, headers=[("i", str(i).encode())],
                                 on_delivery=delivered)  # fmt: skip
            assert producer.flush(30) == 0
    rows = (
        spark.read.format("kafkalog").option("path", str(tmp_path)).option("subscribe", "served")
        .option("includeHeaders", "true").load().collect()
    )  # fmt: skip
    got = sorted(
        (r.partition, r.offset, None if r.key is None else bytes(r.key),
         None if r.value is None else bytes(r.value)) for r in rows
    )  # fmt: skip
    assert got == sorted(acked) and len(got) == 200
    assert all(r.headers[0].key == "i" for r in rows)
