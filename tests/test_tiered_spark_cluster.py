"""A Spark standalone cluster of two workers reads a tiered topic from an S3 store alone: the
writer's log directory is moved out of reach before the job starts, so the driver plans from
the store's folders and manifests and each executor fetches its segments' byte ranges itself.
Every copied record arrives, at both isolation levels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from kafkalog.clock import ManualClock
from kafkalog.log.log import Log
from kafkalog.log.store_view import StoreView
from kafkalog.log.view import PartitionView
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.remote_log_manager import RemoteLogManager
from kafkalog.records.committed import committed_records
from kafkalog.tiered.remote_store import RemoteLogStore
from s3_server import S3Server
from test_spark_cluster import standalone
from test_tiered_log import ENABLED, PLAIN, TOPIC_CONFIG, _fill

pytestmark = [pytest.mark.one_codec, pytest.mark.slow]

DRIVER = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    import kafkalog.spark
    master, uri = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master(master).appName("kafkalog-tiered-cluster")
             .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
             .getOrCreate())
    kafkalog.spark.register(spark)
    import time
    deadline = time.monotonic() + 120
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    while status.size() < 3 and time.monotonic() < deadline:  # the driver and two executors
        time.sleep(0.5)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    out = {"executors": status.size() - 1}
    for isolation in ("read_uncommitted", "read_committed"):
        df = (spark.read.format("kafkalog").option("remoteStorageUri", uri)
              .option("subscribe", "orders").option("kafka.isolation.level", isolation)
              .option("minPartitions", "4").load())
        rows = df.select("offset", "value").orderBy("offset").collect()
        out[isolation] = [[r.offset, bytes(r.value).hex()] for r in rows]
    print("RESULT", json.dumps(out))
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    credentials = {
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "kafkalog-test"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "kafkalog-test"),
    }  # the executors open the bucket themselves
    root = tmp_path_factory.mktemp("tiered-standalone")
    with standalone(root, workers=2, cores=1, env=credentials) as master:
        yield master


def test_two_workers_read_a_tiered_topic_from_s3_alone(
    two_workers: str, s3: S3Server, tmp_path: Path
) -> None:
    uri = s3.uri("tiered-cluster")
    RemoteLogStore.from_uri(uri).filesystem.create_dir("tiered-cluster")
    clock = ManualClock()
    with (
        LogManager(tmp_path / "logs", clock=clock, config=ENABLED) as manager,
        Log.open(tmp_path / "plain" / "orders-0", PLAIN, clock=clock) as plain,
    ):
        manager.create_topic("orders", 1, TOPIC_CONFIG)
        _fill([manager.get_log("orders", 0), plain], clock, seed=21, count=1500)
        RemoteLogManager(manager, RemoteLogStore.from_uri(uri), clock=clock).run_once()
    (tmp_path / "logs").rename(tmp_path / "out-of-reach")
    store = RemoteLogStore.from_uri(uri)
    (tip,) = store.topic_partitions()
    end = store.finished_segments(tip)[-1].end_offset + 1
    lso = StoreView(uri, tip).last_stable_offset()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, two_workers, uri],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    view = PartitionView(tmp_path / "plain" / "orders-0")
    batches = list(view.batches(0))
    uncommitted = [[r.offset, r.value.hex()] for b in batches if not b.is_control for r in b]
    aborted = view.aborted_transactions(0, view.log_end_offset())
    committed = [[r.offset, r.value.hex()] for r in committed_records(batches, aborted, 0)]
    assert result["read_uncommitted"] == [x for x in uncommitted if x[0] < end]
    assert result["read_committed"] == [x for x in committed if x[0] < lso]
    assert result["executors"] == 2  # one on each worker, neither with the log directory
