"""A real crash test: a child appends with flush.messages=1 and reports each acknowledged append;
it is killed with SIGKILL at seeded random moments in a bounded loop. After each kill, reopening
the log must give back every acknowledged record byte for byte; in transaction mode, the
READ_COMMITTED view and the last stable offset must also match an independent model built from
the log's batches, and every acknowledged marker must be in the log."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crash_child import CONFIG, value_for
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.records import committed_records, decode_control_key
from kafkalog.testing.model import ModelLog
from kafkalog.types import ControlRecordType, IsolationLevel

ROUNDS = 8
CHILD = Path(__file__).with_name("crash_child.py")


def run_child_until_killed(directory: Path, seed: int, delay: float, mode: str) -> list[str]:
    """Start the child, let it append for ``delay`` seconds, SIGKILL it; return the lines it
    printed for acknowledged appends."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(seed), mode],
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
    if not out.endswith("\n"):
        # killed mid-print (a full pipe buffer splits a line): that ack never completed
        out = out[: out.rfind("\n") + 1]
    return [line for line in out.splitlines() if line.strip()]


def check_uncommitted(log: Log, highest: int) -> None:
    assert log.log_end_offset >= highest + 1, "an acknowledged record was lost"
    offset = 0
    while offset <= highest:
        fetch = log.read(offset, 1 << 20)
        assert fetch.records is not None, f"nothing at {offset} (acknowledged up to {highest})"
        batches = list(fetch.records.records().batches())
        for batch in batches:
            if not batch.is_control:
                for rec in batch.records():
                    assert rec.value == value_for(rec.offset), f"offset {rec.offset} differs"
        offset = batches[-1].next_offset


def model_of(log: Log) -> tuple[ModelLog, dict[int, ControlRecordType]]:
    """Replay the log's batches, in order, into the obviously-right model."""
    model, markers = ModelLog(), {}
    offset = 0
    while offset < log.log_end_offset:
        fetch = log.read(offset, 1 << 20)
        assert fetch.records is not None
        for batch in fetch.records.records().batches():
            if batch.is_control:
                kind = decode_control_key(batch.records()[0].key).type
                markers[batch.base_offset] = kind
                assert (
                    model.append_marker(batch.producer_id, kind.name.lower()) == batch.base_offset
                )
            else:
                values = [r.value for r in batch.records()]
                first, _ = model.append(
                    values, batch.producer_id, batch.base_sequence, batch.is_transactional
                )
                assert first == batch.base_offset
            offset = batch.next_offset
    return model, markers


def check_committed(log: Log, acked_markers: dict[int, str]) -> None:
    model, markers = model_of(log)
    for offset, kind in acked_markers.items():
        assert markers.get(offset) is ControlRecordType[kind.upper()], f"marker {offset} lost"
    assert log.last_stable_offset == model.last_stable_offset
    got, offset = [], 0
    while True:
        fetch = log.read(offset, 1 << 20, isolation=IsolationLevel.READ_COMMITTED)
        if fetch.records is None:
            break
        batches = list(fetch.records.records().batches())
        assert fetch.aborted_transactions is not None
        got += [(r.offset, r.value) for r in committed_records(batches, fetch.aborted_transactions)]
        offset = batches[-1].next_offset
    assert got == model.read_committed_from(0)


@pytest.mark.parametrize("mode", ["plain", "txn"])
def test_every_acknowledged_record_survives_sigkill(tmp_path: Path, mode: str) -> None:
    directory = tmp_path / "crash-0"
    rng = random.Random(20261121)
    highest = -1
    acked_markers: dict[int, str] = {}
    open_at_kill = 0
    for round_ in range(ROUNDS):
        lines = run_child_until_killed(directory, round_, rng.uniform(0.05, 0.4), mode)
        for line in lines:
            *kind, offset = line.split()
            highest = max(highest, int(offset))
            if kind and kind[0] in ("commit", "abort"):
                acked_markers[int(offset)] = kind[0]
        log = Log.open(directory, LogConfig.from_properties(CONFIG))
        check_uncommitted(log, highest)
        if mode == "txn":
            check_committed(log, acked_markers)
            open_at_kill += bool(log.ongoing_transactions())
        log.close_without_flush()  # the next child reopens it as after a crash
    assert highest > 50, "the child should have acknowledged a fair number of records"
    if mode == "txn":
        kinds = set(acked_markers.values())
        assert kinds == {"commit", "abort"}, kinds
        assert open_at_kill > 0, "no kill landed inside a transaction"
