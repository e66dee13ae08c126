"""A real crash test: a child appends with flush.messages=1 and reports each acknowledged offset;
it is killed with SIGKILL at seeded random moments in a bounded loop. After each kill, reopening
the log must give back every acknowledged record byte for byte."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from crash_child import CONFIG, value_for
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log

ROUNDS = 8
CHILD = Path(__file__).with_name("crash_child.py")


def run_child_until_killed(directory: Path, seed: int, delay: float) -> int:
    """Start the child, let it append for ``delay`` seconds, SIGKILL it; return the highest
    acknowledged offset (-1 if none)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(seed)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith("ready"), ready
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    acked = [int(line) for line in out.split()]
    return max(acked, default=-1)


def test_every_acknowledged_record_survives_sigkill(tmp_path: Path) -> None:
    directory = tmp_path / "crash-0"
    rng = random.Random(20261121)
    highest = -1
    for round_ in range(ROUNDS):
        acked = run_child_until_killed(directory, seed=round_, delay=rng.uniform(0.05, 0.4))
        highest = max(highest, acked)
        log = Log.open(directory, LogConfig.from_properties(CONFIG))
        assert log.log_end_offset >= highest + 1, "an acknowledged record was lost"
        offset = 0
        while offset <= highest:
            recs = log.read_records(offset, 1 << 20)
            assert recs, f"nothing at offset {offset} (acknowledged up to {highest})"
            for rec in recs:
                assert rec.value == value_for(rec.offset), f"offset {rec.offset} differs"
            offset = recs[-1].offset + 1
        log.close_without_flush()  # the next child reopens it as after a crash
    assert highest > 50, "the child should have acknowledged a fair number of records"
