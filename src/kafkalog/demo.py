"""``make demo``: the main pipeline, end to end, on embedded defaults (``demo-data/``, local[2]).

Why: a fresh clone should show what kafkalog is for in one command. The pipeline:
1. the library writes a clickstream (user key, JSON value, headers) into a 4-partition topic,
   keyed records placed by murmur2 as a Java producer would place them;
2. a Spark batch job reads the topic with ``format("kafkalog")``, aggregates per user and writes
   the result through the sink into a compacted topic;
3. a Structured Streaming job counts page views incrementally with a checkpoint: run, append
   more events, run again, and only the new events are read;
4. the batch job runs again on the grown topic, the cleaner compacts the stats topic down to
   the latest value per user, and a summary is printed.
Refuses: anything a user would need to configure.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import kafkalog.spark
from kafkalog import LogManager, Record
from kafkalog.log.config import LogConfig
from kafkalog.log.view import topic_views
from kafkalog.records.partitioner import partition_for_key

DATA = Path("demo-data")
LOGS = DATA / "logs"
PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/help"]
# the events end about now: with fixed old dates, the first `kafkalog retention` a newcomer runs
# on the demo data (retention.ms is 7 days) would delete the whole clicks topic
HISTORY_MS = 3_600_000
console = Console()


def generate(manager: LogManager, count: int, seed: int, start_ms: int) -> None:
    """``count`` click events from 2,000 users, appended in producer-sized batches."""
    rng = random.Random(seed)
    partitions = manager.topics()["clicks"]
    pending: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    for i in range(count):
        user = f"user-{rng.randrange(2000):04d}"
        event = {"user": user, "page": rng.choice(PAGES), "ms": rng.randrange(5, 900)}
        headers = [("source", rng.choice([b"web", b"ios", b"android"]))]
        key = user.encode()
        record = Record(json.dumps(event).encode(), key, headers, timestamp=start_ms + i)
        p = partition_for_key(key, partitions)
        pending[p].append(record)
        if len(pending[p]) == 500:
            manager.get_log("clicks", p).append(pending[p], compression="lz4")
            pending[p] = []
    for p, records in pending.items():
        if records:
            manager.get_log("clicks", p).append(records, compression="lz4")


def batch_job(spark: Any) -> int:
    """Per-user totals from every click, written to the compacted ``user-stats`` topic."""
    clicks = (
        spark.read.format("kafkalog")
        .option("path", str(LOGS))
        .option("subscribe", "clicks")
        .option("includeHeaders", "true")
        .load()
    )
    stats = (
        clicks.selectExpr(
            "CAST(key AS STRING) AS user",
            "get_json_object(CAST(value AS STRING), '$.ms') AS ms",
            "CAST(headers[0].value AS STRING) AS source",
        )
        .groupBy("user")
        .agg({"*": "count", "ms": "sum"})
    )
    out = stats.selectExpr(
        "user AS key",
        "to_json(named_struct('clicks', `count(1)`, 'total_ms', CAST(`sum(ms)` AS BIGINT)))"
        " AS value",
    )
    rows = out.count()
    out.write.format("kafkalog").option("path", str(LOGS)).option("topic", "user-stats").mode(
        "append"
    ).save()
    return int(rows)


def streaming_job(spark: Any) -> int:
    """Page views per page, incrementally: only events past the checkpoint are read."""
    query = (
        spark.readStream.format("kafkalog")
        .option("path", str(LOGS))
        .option("subscribe", "clicks")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50000")
        .load()
        .selectExpr(
            "get_json_object(CAST(value AS STRING), '$.page') AS page", "partition", "offset"
        )
        .writeStream.format("parquet")
        .option("path", str(DATA / "page-views"))
        .option("checkpointLocation", str(DATA / "checkpoints" / "page-views"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def records_in(topic: str) -> int:
    total = 0
    for view in topic_views([LOGS], topic).values():
        end = view.last_stable_offset()
        for batch in view.batches(view.log_start_offset(), end):
            if not batch.is_control:
                total += len(batch)
    return total


def cli_hint() -> str:
    """How to run ``kafkalog`` from here: the venv's script, as it is not on PATH until the
    venv is activated."""
    script = Path(sys.executable).parent / "kafkalog"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script) if script.exists() else "kafkalog"


def main() -> None:
    began = time.monotonic()
    shutil.rmtree(DATA, ignore_errors=True)
    LOGS.mkdir(parents=True)
    steps: list[tuple[str, str]] = []

    def done(step: str, result: str) -> None:  # progress as it happens, the table at the end
        steps.append((step, result))
        console.print(f"  [green]done[/] {step}: {result} [dim]({time.monotonic() - began:.0f} s)")

    config = LogConfig.from_properties({"segment.bytes": str(4 << 20)})
    with LogManager([LOGS], config) as manager:
        manager.create_topic("clicks", 4)
        manager.create_topic(
            "user-stats",
            2,
            {
                "cleanup.policy": "compact",
                # small segments so the cleaner has closed ones to compact; segment.bytes
                # takes 1 MiB at least since Kafka 4, which keeps this key for such cases
                "internal.segment.bytes": "65536",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        start_ms = int(time.time() * 1000) - HISTORY_MS
        generate(manager, 200_000, seed=1, start_ms=start_ms)
    done("library: clickstream written to clicks (4 partitions)", "200,000 events")

    console.print("[bold]Starting Spark (local[2]); the first job takes longest...[/bold]")
    spark = kafkalog.spark.local_session("kafkalog-demo")
    try:
        t = time.monotonic()
        users = batch_job(spark)
        done(f"spark batch: per-user stats -> user-stats ({time.monotonic() - t:.1f} s)",
             f"{users:,} users")  # fmt: skip
        t = time.monotonic()
        first = streaming_job(spark)
        done(f"spark stream, run 1: page views ({time.monotonic() - t:.1f} s)",
             f"{first:,} events read")  # fmt: skip
        with LogManager([LOGS], config) as manager:
            generate(manager, 20_000, seed=2, start_ms=start_ms + 200_000)
        done("library: more clicks appended", "20,000 events")
        t = time.monotonic()
        second = streaming_job(spark)
        done(f"spark stream, run 2 from the checkpoint ({time.monotonic() - t:.1f} s)",
             f"{second:,} events read (only the new ones)")  # fmt: skip
        users = batch_job(spark)
        done("spark batch again: stats for the grown topic", f"{users:,} users")
        views = spark.read.parquet(str(DATA / "page-views"))
        by_page = sorted((r["page"], r["count"]) for r in views.groupBy("page").count().collect())
    finally:
        spark.stop()
    before = records_in("user-stats")
    with LogManager([LOGS], config) as manager:
        for p in range(manager.topics()["user-stats"]):
            manager.get_log("user-stats", p).roll()  # what segment.ms does on a broker: the
            # active segment is never cleaned, so roll it to make the latest stats cleanable
        results = manager.run_cleaner()
    after = records_in("user-stats")
    done(f"cleaner: compacted user-stats ({len(results)} round(s))",
         f"{before:,} -> {after:,} records (latest per user)")  # fmt: skip

    table = Table(title="kafkalog demo pipeline")
    table.add_column("step")
    table.add_column("result", justify="right")
    for step, result in steps:
        table.add_row(step, result)
    console.print(table)
    pages = Table(title="page views (streaming output, both runs)")
    pages.add_column("page")
    pages.add_column("views", justify="right")
    for page, count in by_page:
        pages.add_row(page, f"{count:,}")
    console.print(pages)
    ok = first == 200_000 and second == 20_000 and after == users
    console.print(
        f"{'[green]OK' if ok else '[red]UNEXPECTED'}[/] in {time.monotonic() - began:.0f} s; "
        f"data in {DATA}/ (try: {cli_hint()} topics --log-dirs {LOGS} --describe)"
    )
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
