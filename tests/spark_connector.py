"""The same Spark queries run through Spark's own Kafka connector and through kafkalog's source.

Why: ``format("kafkalog")`` promises the rows ``format("kafka")`` returns, so a job can switch
from a broker to its files. Run as a script (``python tests/spark_connector.py BOOTSTRAP OUT GO``)
this starts a Spark session with ``spark-sql-kafka-0-10`` from Maven Central
(``spark.jars.packages``), waits for the file GO, runs every query in ``QUERIES`` against a
running broker and pickles the results; the oracle tests run the same queries over the
broker's log directory after it stopped and compare. A separate process because a package
must be on the JVM's class path when the JVM starts, and the test process's JVM may already be
running; started ahead, so its JVM starts while the broker is being written.

What it refuses to do: adapt a query to one side. Both get the same options, apart from where
the data is (``kafka.bootstrap.servers`` or ``path``).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kafkalog"
CENTRAL = "https://repo1.maven.org/maven2/org/apache/spark/spark-sql-kafka-0-10_2.13"
TS = 1_700_000_000_000  # kafka_scenarios.BASE_TS: record i of a codec topic has TS + 10 * i
CODEC_TOPICS = "codec-none,codec-gzip,codec-snappy,codec-lz4,codec-zstd"

# name -> (batch or stream, the options both sides get)
QUERIES: dict[str, tuple[str, dict[str, str]]] = {
    "earliest-to-latest, every codec, headers": (
        "batch",
        {"subscribe": CODEC_TOPICS, "includeHeaders": "true"},
    ),
    "compacted and retention-trimmed topics": (
        "batch",
        {"subscribe": "compacted,retained", "startingOffsets": "earliest"},
    ),
    "subscribePattern, earliest to latest": (
        "batch",
        {"subscribePattern": "codec-.*", "startingOffsets": "earliest", "endingOffsets": "latest"},
    ),
    "batch starting at latest is refused": (
        "batch",
        {"subscribe": "codec-none", "startingOffsets": "latest"},
    ),
    "batch ending at earliest is refused": (
        "batch",
        {"subscribe": "codec-none", "endingOffsets": "earliest"},
    ),
    "assign with JSON offsets (-2 earliest, -1 latest)": (
        "batch",
        {
            "assign": json.dumps({"codec-lz4": [0], "codec-gzip": [0], "console": [0]}),
            "startingOffsets": json.dumps(
                {"codec-lz4": {"0": 17}, "codec-gzip": {"0": -2}, "console": {"0": 3}}
            ),
            "endingOffsets": json.dumps(
                {"codec-lz4": {"0": 400}, "codec-gzip": {"0": 250}, "console": {"0": -1}}
            ),
            "includeHeaders": "true",
        },
    ),
    "startingTimestamp and endingTimestamp": (
        "batch",
        {
            "subscribe": "codec-none,codec-zstd",
            "startingTimestamp": str(TS + 1234),
            "endingTimestamp": str(TS + 4321),
        },
    ),
    "startingOffsetsByTimestamp": (
        "batch",
        {
            "subscribe": "codec-snappy,codec-none",
            "startingOffsetsByTimestamp": json.dumps(
                {"codec-snappy": {"0": TS + 995}, "codec-none": {"0": TS - 5}}
            ),
        },
    ),
    "transactions, read_uncommitted": (
        "batch",
        {"subscribe": "txn", "includeHeaders": "true"},
    ),
    "transactions, read_committed": (
        "batch",
        {"subscribe": "txn", "includeHeaders": "true", "kafka.isolation.level": "read_committed"},
    ),
    "stream, Trigger.AvailableNow, maxOffsetsPerTrigger": (
        "stream",
        {
            "subscribe": "codec-zstd,txn,console",
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "500",
            "includeHeaders": "true",
        },
    ),
    "stream, Trigger.AvailableNow, read_committed": (
        "stream",
        {
            "subscribe": "txn",
            "startingOffsets": "earliest",
            "kafka.isolation.level": "read_committed",
        },
    ),
}


def _published(version: str) -> bool:
    """Whether Maven Central holds the connector ``version``. Only a yes is remembered: a
    version missing today may be published tomorrow."""
    CACHE.mkdir(parents=True, exist_ok=True)
    known = CACHE / f"spark-sql-kafka-{version}.published"
    if known.exists():
        return True
    url = f"{CENTRAL}/{version}/spark-sql-kafka-0-10_2.13-{version}.pom"
    try:
        with urllib.request.urlopen(url, timeout=30):
            pass
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        return False
    known.write_text("yes")
    return True


def connector_version() -> str:
    """The connector built for the installed PySpark; if Maven Central does not hold that one
    yet, the newest it holds of the same minor line or below (interop/spark-kafka-versions.txt
    lists them newest first)."""
    import pyspark

    installed = pyspark.__version__
    if _published(installed):
        return installed
    listed = (ROOT / "interop" / "spark-kafka-versions.txt").read_text().splitlines()
    for version in (v.strip() for v in listed if v.strip() and not v.startswith("#")):
        if _published(version):
            return version
    raise AssertionError(f"no spark-sql-kafka-0-10 for PySpark {installed} on Maven Central")


def _plain(value: Any) -> Any:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "asDict"):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "timestamp"):  # datetime: microseconds since the epoch, zone-free
        return round(value.timestamp() * 1_000_000)
    return value


def collect(df: Any) -> tuple[str, list[tuple[Any, ...]]]:
    """The schema as JSON and every row as plain values, ordered by topic, partition, offset."""
    rows = [tuple(_plain(v) for v in r) for r in df.collect()]
    names = df.schema.names
    order = [names.index(c) for c in ("topic", "partition", "offset")]
    rows.sort(key=lambda r: tuple(r[i] for i in order))
    return df.schema.json(), rows


def run_query(spark: Any, fmt: str, where: dict[str, str], name: str, scratch: Path) -> Any:
    """Query ``name`` of ``QUERIES`` through ``format(fmt)``; ``where`` says where the data is.
    A refusal is an answer too: ("refused", message). A stream also reports the rows of each
    micro-batch, as Spark's progress counts them."""
    kind, options = QUERIES[name]
    opts = {**where, **options}
    if kind == "batch":
        try:
            return collect(spark.read.format(fmt).options(**opts).load())
        except Exception as e:  # a refusal is compared like any answer
            return ("refused", str(e))
    table = f"q{list(QUERIES).index(name)}_{fmt}"
    query = (
        spark.readStream.format(fmt).options(**opts).load()
        .writeStream.format("memory").queryName(table)
        .option("checkpointLocation", str(scratch / table))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    try:
        query.awaitTermination(300)
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        return (*collect(spark.table(table)), batches)
    finally:
        query.stop()


class ConnectorReads:
    """This module run as a script against ``bootstrap``, started ahead: its Spark session
    (a JVM, and the connector from Maven's cache: about ten seconds) starts while the broker
    is still being written, and the queries run once ``results`` is asked for."""

    def __init__(self, bootstrap: str, out: Path) -> None:
        self.out, self.go = out, out.with_suffix(".go")
        cmd = [sys.executable, str(Path(__file__)), bootstrap, str(out), str(self.go)]
        path = os.pathsep.join([str(ROOT / "tests"), str(ROOT / "src")])
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": path},
        )  # fmt: skip

    def results(self) -> dict[str, Any]:
        self.go.touch()
        _, err = self.proc.communicate(timeout=900)
        if self.proc.returncode != 0:
            raise AssertionError(f"Spark's Kafka connector run failed:\n{err[-6000:]}")
        with self.out.open("rb") as f:
            results: dict[str, Any] = pickle.load(f)
        return results

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def main(bootstrap: str, out: str, go: str) -> None:
    import kafkalog.spark

    version = connector_version()
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
    conf = {"spark.jars.packages": package}
    spark = kafkalog.spark.local_session("spark-kafka-connector", **conf)
    try:
        spark.range(1).collect()  # the JVM warm before the broker is ready to be read
        deadline = time.monotonic() + 900
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{go} never appeared")
            time.sleep(0.1)
        with tempfile.TemporaryDirectory(prefix="kafkalog-connector-") as scratch:
            where = {"kafka.bootstrap.servers": bootstrap}
            results = {q: run_query(spark, "kafka", where, q, Path(scratch)) for q in QUERIES}
    finally:
        spark.stop()
    results["connector"] = version
    with open(out, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
