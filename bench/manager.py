"""LogManager benchmarks: start-up of a manager holding 1,000 partitions.

The baseline is the raw file-system work any loader must do for the same directories: list
every partition directory and open, stat and close each of its files.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.harness import Row, in_temp_dir
from kafkalog import LogConfig, LogManager, ManagerConfig, ManualClock, Record

NOW = 1_700_000_000_000
PARTITIONS = 1000


def run() -> list[Row]:
    return in_temp_dir("kafkalog-bench-manager-", _run)


def _run(root: Path) -> list[Row]:
    dirs = [root / "d0", root / "d1"]
    config = ManagerConfig.from_properties({"num.recovery.threads.per.data.dir": 2})
    with LogManager(dirs, LogConfig(), ManualClock(NOW), config=config) as m:
        for t in range(PARTITIONS // 10):
            for log in m.create_topic(f"topic-{t:03d}", 10):
                log.append([Record(b"v" * 100, key=b"k%d" % i, timestamp=NOW) for i in range(10)])

    def start_up() -> float:
        start = time.perf_counter()
        m = LogManager(dirs, LogConfig(), ManualClock(NOW), config=config)
        elapsed = time.perf_counter() - start
        assert len(m.logs()) == PARTITIONS
        m.close()
        return elapsed

    def raw_walk() -> float:
        start = time.perf_counter()
        for d in dirs:
            for part in os.scandir(d):
                if part.is_dir():
                    for f in os.scandir(part.path):
                        fd = os.open(f.path, os.O_RDONLY)
                        os.fstat(fd)
                        os.close(fd)
        return time.perf_counter() - start

    start_up(), raw_walk()  # warm-up
    ours = sorted(start_up() for _ in range(3))[1]
    raw = sorted(raw_walk() for _ in range(3))[1]
    return [
        Row(
            "manager",
            f"start-up after a clean shutdown, {PARTITIONS} partitions in 2 dirs",
            "partitions/s",
            PARTITIONS / ours,
            "list + open/stat/close every file",
            PARTITIONS / raw,
            notes=f"{ours * 1000:.0f} ms to load; report only",
        )
    ]
