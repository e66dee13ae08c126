"""Tiered storage: reading records from their remote copy beside reading the same records from
local segments, in the same run -- through ``Log.read`` (a store in a directory, and a real S3
server on loopback) and through ``kafkalog serve`` with librdkafka as the consumer.

And a Spark batch read from the store alone beside one of local files.

Report-only rows: the issue sets no target; they show what a remote read costs over a local
one on this machine (the directory store pays a file open and ranged read per fetch; moto, the
S3 server here, is itself Python and far slower than a real object store).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import Row, in_temp_dir, interleaved
from kafkalog import ManualClock, Record
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.remote_log_manager import RemoteLogManager
from kafkalog.tiered.remote_store import RemoteLogStore

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the S3 server and port helpers live beside the tests

MIB = 1 << 20
RECORD = 1000  # bytes of value
TOTAL = 48 * MIB
SEGMENT = 4 * MIB
FETCH = MIB  # a consumer's max.partition.fetch.bytes
SEGMENTS = {"internal.segment.bytes": str(SEGMENT), "retention.ms": "-1", "retention.bytes": "-1"}
TIERED = {**SEGMENTS, "remote.storage.enable": "true", "local.retention.bytes": "1"}
ENABLED = {"remote.log.storage.system.enable": "true"}


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-tiered-", _run)


def _fill(logs: list[Log]) -> int:
    batch = [Record(b"v" * RECORD, b"k%d" % i) for i in range(100)]
    n = 0
    while n * (RECORD + 20) < TOTAL:
        for log in logs:
            log.append(batch)
        n += len(batch)
    for log in logs:
        log.roll()
    return n


def _read_all(log: Log, end: int) -> int:
    """Every batch below ``end`` in consumer-sized fetches, as a consumer reads; bytes read."""
    offset, total = 0, 0
    while offset < end:
        info = log.read(offset, FETCH)
        data = info.read()
        assert data, offset
        total += len(data)
        batches = info.records.records().batches(verify_crc=False)  # type: ignore[union-attr]
        offset = max(b.last_offset for b in batches) + 1
    return total


def _log_rows(root: Path, store_name: str, uri: str) -> Row:
    clock = ManualClock()
    config = ManagerConfig.from_properties(ENABLED)
    with LogManager(root / f"logs-{store_name}", clock=clock, config=config) as manager:
        manager.create_topic("tiered", 1, TIERED)
        log = manager.get_log("tiered", 0)
        plain = Log.open(
            root / f"plain-{store_name}" / "tiered-0", LogConfig.from_properties(SEGMENTS), clock
        )
        _fill([log, plain])
        RemoteLogManager(manager, RemoteLogStore.from_uri(uri), clock=clock).run_once()
        end = log.local_log_start_offset
        size = _read_all(plain, end)
        (remote, local), (ratio, _) = interleaved(
            [lambda: _read_all(log, end), lambda: _read_all(plain, end)],
            size / 1e6,
            rounds=3,
            min_time=0.5,
        )
        plain.close()
    return Row(
        "tiered",
        f"Log.read of {size / MIB:.0f} MiB of 1 KB records in 1 MiB fetches, remote copy "
        f"({store_name}) vs local segments",
        "MB/s",
        remote,
        "the same records in local segments",
        local,
        paired_ratio=ratio,
        notes=f"{SEGMENT // MIB} MiB segments",
    )


def _serve_row(root: Path) -> Row:
    from confluent_kafka import Consumer, TopicPartition

    from kafka_oracle import free_port

    port = free_port()
    logs = root / "serve"
    config = ManagerConfig.from_properties(ENABLED)
    with LogManager(logs, config=config) as manager:  # the same records in two topics
        manager.create_topic("tiered", 1, TIERED)
        manager.create_topic("local", 1, SEGMENTS)
        count = _fill([manager.get_log("tiered", 0), manager.get_log("local", 0)])
        store = RemoteLogStore.from_uri(str(root / "serve-remote"))
        RemoteLogManager(manager, store).run_once()
        remote_end = manager.get_log("tiered", 0).local_log_start_offset
    command = [sys.executable, "-m", "kafkalog", "serve", "--log-dirs", str(logs),
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
               "--override", "remote.log.storage.system.enable=true",
               "--override", f"rsm.config.kafkalog.store.uri={root / 'serve-remote'}"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                time.sleep(0.2)

        def consume(topic: str) -> None:
            consumer = Consumer(
                {"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "bench",
                 "enable.auto.commit": False}
            )  # fmt: skip
            consumer.assign([TopicPartition(topic, 0, 0)])
            seen = 0
            while seen < remote_end:  # never ask for more than there is: consume would wait
                found = consumer.consume(min(10_000, remote_end - seen), 10)
                seen += sum(1 for m in found if m.error() is None)
            consumer.close()

        (remote, local), (ratio, _) = interleaved(
            [lambda: consume("tiered"), lambda: consume("local")],
            remote_end,
            rounds=3,
            min_time=0.5,
        )
    finally:
        proc.terminate()
        proc.wait(30)
    return Row(
        "tiered",
        f"kafkalog serve Fetch of {remote_end:,} 1 KB records (librdkafka consumer), from the "
        "remote copy (a directory store) vs from local segments",
        "records/s",
        remote,
        "the same records in local segments",
        local,
        paired_ratio=ratio,
        notes=f"{count:,} records written; the first {remote_end:,} are remote",
    )


def _spark_rows(root: Path, stores: list[tuple[str, str]]) -> list[Row]:
    """A Spark batch read (local[2], noop sink) of the same records: from the store alone
    (``remoteStorageUri``) vs from an untiered topic's local files, for each store."""
    import kafkalog.spark

    spark = kafkalog.spark.local_session("kafkalog-bench-tiered", **{"spark.driver.memory": "2g"})
    try:
        return [
            _spark_row(spark, root / f"spark-{n}", name, uri)
            for n, (name, uri) in enumerate(stores)
        ]
    finally:
        spark.stop()


def _spark_row(spark: Any, root: Path, store_name: str, uri: str) -> Row:
    import statistics

    clock = ManualClock()
    config = ManagerConfig.from_properties(ENABLED)
    with LogManager(root / "spark-logs", clock=clock, config=config) as manager:
        manager.create_topic("tiered", 1, TIERED)
        manager.create_topic("local", 1, SEGMENTS)
        count = _fill([manager.get_log("tiered", 0), manager.get_log("local", 0)])
        RemoteLogManager(manager, RemoteLogStore.from_uri(uri), clock=clock).run_once()
        remote_end = manager.get_log("tiered", 0).local_log_start_offset

    def remote() -> None:
        spark.read.format("kafkalog").option("remoteStorageUri", uri).option(
            "subscribe", "tiered"
        ).load().write.format("noop").mode("overwrite").save()

    def local() -> None:
        spark.read.format("kafkalog").option("path", str(root / "spark-logs")).option(
            "assign", '{"local":[0]}'
        ).option("endingOffsets", f'{{"local":{{"0":{remote_end}}}}}').load().write.format(
            "noop"
        ).mode("overwrite").save()

    remote()
    local()  # warm-up: JVM, Python workers
    pairs = []
    for _ in range(3):
        started = time.perf_counter()
        remote()
        a = time.perf_counter() - started
        started = time.perf_counter()
        local()
        b = time.perf_counter() - started
        pairs.append((remote_end / a, remote_end / b))
    return Row(
        "tiered",
        f"Spark batch read (local[2], noop sink) of {remote_end:,} 1 KB records from the store "
        f"alone (remoteStorageUri, {store_name}) vs an untiered topic's local files",
        "records/s",
        statistics.median(p[0] for p in pairs),
        "the same records in local segments",
        statistics.median(p[1] for p in pairs),
        paired_ratio=statistics.median(p[0] / p[1] for p in pairs),
        notes=f"{count:,} records written",
    )


def _run(root: Path) -> list[Row]:
    from s3_server import S3Server

    rows = [_log_rows(root, "directory", str(root / "remote"))]

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "kafkalog-bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "kafkalog-bench")
    server = S3Server(root)
    server.start()
    try:
        for bucket in ("bench", "bench-spark"):
            RemoteLogStore.from_uri(server.uri(bucket)).filesystem.create_dir(bucket)
        rows.append(_log_rows(root, "moto's S3 server", server.uri("bench")))
        rows.append(_serve_row(root))
        stores = [("a directory store", str(root / "spark-remote")),
                  ("moto's S3 server", server.uri("bench-spark"))]  # fmt: skip
        rows += _spark_rows(root, stores)
    finally:
        server.stop()
    return rows
