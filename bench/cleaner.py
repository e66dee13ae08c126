"""Compaction benchmark: one cleaning round over a dirty log, beside a raw read of its bytes.

Two logs, each 120,000 keyed records (2,000 distinct keys) in batches of 100 as a producer
writes them: 1 KiB values across 64 MiB segments, and 100-byte values across 4 MiB segments.
The round maps every key, recopies every segment group (flushing the result and swapping it in,
as Kafka does) and records the cleaner checkpoint. Each round starts from a fresh copy of the
same directory (the copy is not timed). The baseline reads the same dirty segment files start
to finish with plain file I/O, from the page cache, in the same run: the floor any cleaner must
pay. Target (fast-path issue): 0.3 of that read, checked on the 1 KiB / 64 MiB log, and
printed on the 100-byte log's row too, which misses it: its 14 MB come as four 4 MiB groups,
each flushed and swapped with fsyncs that take longer, together, than the whole round may at
0.3 of a 1-2 ms read; the row's notes split its time so that is visible.

In those two logs a key's newest record always sits in the last batches, so the cleaner keeps
or drops whole batches and never rebuilds one. A third log gives each of its 2,000 keys a
stretch of the log of its own (each record's key drawn at random, seeded, from the 11 whose
stretch it is in), so a key's newest record can sit in any batch: most batches keep a record or
two and lose the rest, and are rebuilt record by record, while the output stays as small as the
first two logs' (no larger fsync to pay): target 0.15 of the raw read (the performance issue).
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from pathlib import Path

from bench.harness import Row, in_temp_dir
from kafkalog import Log, LogConfig, ManualClock, Record
from kafkalog.cleaner import CleanerConfig, LogCleaner
from kafkalog.cleaner.cleaner import CleanerStats
from kafkalog.types import TopicPartition

NOW = 1_700_000_000_000
RECORDS = 120_000
KEYS = 2_000
BATCH = 100
ROUNDS = 7
STRIDE = RECORDS // KEYS
# (value bytes, segment.bytes, target, keys scattered at random across batches)
WORKLOADS = (
    (100, 4 << 20, 0.3, False),
    (1000, 64 << 20, 0.3, False),
    (1000, 64 << 20, 0.15, True),
)


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-cleaner-", _run)


def _config(segment_bytes: int) -> LogConfig:
    return LogConfig.from_properties(
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment_bytes),
            "min.cleanable.dirty.ratio": "0.01",
        }
    )


def _build(path: Path, value_size: int, segment_bytes: int, scattered: bool) -> int:
    clock = ManualClock(NOW)
    rng = random.Random(7)
    # scattered: record i picks one of the 11 keys that are current around it, so each key
    # is written for a while and then never again, and its newest record lands anywhere
    keys = [
        rng.randrange(max(0, i // STRIDE - 10), i // STRIDE + 1) if scattered else i % KEYS
        for i in range(RECORDS)
    ]
    with Log.open(path, _config(segment_bytes), clock) as log:
        for start in range(0, RECORDS, BATCH):
            log.append(
                [
                    Record(b"%0*d" % (value_size, i), b"key-%05d" % keys[i], timestamp=NOW + i)
                    for i in range(start, start + BATCH)
                ]
            )
        log.roll()
        return sum(s.size for s in log.segments)


class _TimingClock(ManualClock):
    """Wall time at the data's fixed date; real nanoseconds, so the round's stats time it."""

    def nanoseconds(self) -> int:
        return time.perf_counter_ns()


def _clean(path: Path, segment_bytes: int) -> tuple[float, CleanerStats]:
    log = Log.open(path, _config(segment_bytes), ManualClock(NOW))
    clock = _TimingClock(NOW)
    cleaner = LogCleaner(CleanerConfig(), lambda: {TopicPartition("t", 0): log}, clock)
    start = time.perf_counter()
    results = cleaner.run_once()
    elapsed = time.perf_counter() - start
    stats = results[0].stats
    assert stats is not None and len(results) == 1
    log.close()
    return elapsed, stats


def _raw_read(path: Path) -> float:
    start = time.perf_counter()
    for f in sorted(path.glob("*.log")):
        with open(f, "rb", buffering=0) as fh:
            while fh.read(1 << 20):
                pass
    return time.perf_counter() - start


def _run(root: Path) -> list[Row]:
    return [
        _workload(root / f"v{value}-{scattered}", value, segment, t, scattered)
        for value, segment, t, scattered in WORKLOADS
    ]


def _workload(
    root: Path, value_size: int, segment_bytes: int, target: float, scattered: bool
) -> Row:
    source = root / "source" / "t-0"
    dirty_bytes = _build(source, value_size, segment_bytes, scattered)
    ours: list[float] = []
    raw: list[float] = []
    stats: list[CleanerStats] = []
    for i in range(ROUNDS + 1):  # the first round warms up
        work = root / f"round{i}" / "t-0"
        shutil.copytree(source, work)
        raw_s = _raw_read(work)
        elapsed, round_stats = _clean(work, segment_bytes)
        shutil.rmtree(work.parent)
        if i:
            ours.append(elapsed)
            raw.append(raw_s)
            stats.append(round_stats)
    shutil.rmtree(source.parent)
    t, r = statistics.median(ours), statistics.median(raw)
    mb = dirty_bytes / 1e6
    last = stats[-1]

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.1f} ms"

    key_scan = ms([s.map_elapsed_ns / 1e9 for s in stats])
    groups = ms([(s.elapsed_ns - s.map_elapsed_ns) / 1e9 for s in stats])
    rest = ms([o - s.elapsed_ns / 1e9 for o, s in zip(ours, stats, strict=True)])
    return Row(
        "cleaner",
        f"compaction round: {RECORDS:,} records, "
        + (
            f"{KEYS:,} keys, each in a stretch of its own (most batches rebuilt)"
            if scattered
            else f"{KEYS:,} keys in turn (whole batches kept or dropped)"
        )
        + f", {value_size} B values, {mb:.1f} MB dirty in {segment_bytes >> 20} MiB segments",
        "MB/s",
        mb / t,
        "raw read of the dirty segment files",
        mb / r,
        notes=(
            f"{last.messages_read / t:,.0f} records/s; {last.messages_written:,} of "
            f"{last.messages_read:,} records kept; {mb:.1f} MB -> "
            f"{last.bytes_written / 1e6:.2f} MB; {t * 1000:.1f} ms a round: key scan {key_scan}, "
            f"{last.segments_written} groups recopied, flushed and swapped in {groups}, "
            f"choosing the log and the checkpoint {rest}"
        ),
        target=target,
        extra={},
        paired_ratio=statistics.median(b / o for b, o in zip(raw, ours, strict=True)),
    )
