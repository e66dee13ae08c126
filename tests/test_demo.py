"""``make demo`` as a newcomer meets it: data dated about now, so the first ``kafkalog
retention`` they run (retention.ms is 7 days) keeps it; progress as it goes, no Spark noise,
and a closing hint that runs as printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


@pytest.mark.slow
@pytest.mark.one_codec  # the demo as make demo runs it
def test_make_demo_shows_progress_without_spark_noise_and_a_command_that_runs(
    tmp_path: Path,
) -> None:
    """What a newcomer sees: a line per step as it finishes, none of Spark's WARN banner, and a
    closing hint whose command works as printed (kafkalog is not on PATH before activation)."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    proc = subprocess.run([sys.executable, "-m", "kafkalog.demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    steps = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("done ")]
    assert len(steps) == 7 and "clickstream written" in steps[0] and "cleaner" in steps[-1]
    # Spark's log lines ("... WARN NativeCodeLoader: ..."), its banner, its loopback advice
    for noise in (" WARN ", "log4j profile", "Setting default log level", "loopback"):
        assert noise not in output, noise
    hint = re.search(r"\(try: (.+? topics --log-dirs \S+ --describe)\)", " ".join(output.split()))
    assert hint is not None, proc.stdout[-500:]
    shown = subprocess.run(hint[1].split(), cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, check=False)  # fmt: skip
    assert shown.returncode == 0 and "Topic: clicks" in shown.stdout, shown.stderr
