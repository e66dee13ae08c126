"""The demo's data is a newcomer's first log: dated about now, so the first ``kafkalog
retention`` they run (retention.ms is 7 days) keeps it, as it keeps any fresh topic."""

from __future__ import annotations

import time
from pathlib import Path

from kafkalog import LogConfig, LogManager
from kafkalog.demo import HISTORY_MS, generate


def test_demo_events_are_dated_now_and_survive_retention(tmp_path: Path) -> None:
    config = LogConfig.from_properties({"internal.segment.bytes": str(64 << 10)})
    with LogManager([tmp_path], config) as manager:
        manager.create_topic("clicks", 4)
        now = int(time.time() * 1000)
        generate(manager, 5_000, seed=1, start_ms=now - HISTORY_MS)
        for p in range(4):
            manager.get_log("clicks", p).roll()
        assert config.retention_ms > HISTORY_MS
        assert manager.run_retention() == 0
        assert sum(log.log_end_offset for log in manager.logs().values()) == 5_000
