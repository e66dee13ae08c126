"""A writer process and lock-free readers in this one: plain, preallocated, rolling, compacting
and transactional logs. Readers must never fail because the writer moved, never see a batch out
of order, and (READ_COMMITTED) never see an aborted record; at the end they see every record.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalog import OffsetOutOfRangeError, committed_records
from kafkalog.log.view import PartitionView

SRC = str(Path(__file__).resolve().parents[1] / "src")

WRITER = """
import sys
from kafkalog import LogConfig, LogManager, ProducerFields, Record
kind, root, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
small = kind in ("rolling", "compacting", "transactional")
props = {"internal.segment.bytes": "4096"} if small else {}
if kind == "preallocated":
    props["preallocate"] = "true"
if kind == "compacting":
    props.update({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                  "segment.ms": "1", "file.delete.delay.ms": "0"})
with LogManager(root, LogConfig.from_properties(props)) as manager:
    log = manager.create_topic("t", 1)[0]
    print("ready", flush=True)
    seq = 0
    for i in range(rounds):
        if kind == "transactional" and i % 3 == 0:
            fields = ProducerFields(9, 0, seq, is_transactional=True)
            log.append([Record(b"txn-%d" % i, key=b"k")], producer=fields)
            seq += 1
            log.append_end_txn_marker(9, 0, "abort" if i % 2 else "commit")
        else:
            log.append([Record(b"v-%d" % i, key=b"k%d" % (i % 7)) for _ in range(3)])
        if kind == "compacting" and i % 25 == 24:
            log.roll()
            manager.run_cleaner()
        if i % 10 == 0:
            log.flush()
"""


def _read_everything(view: PartitionView, committed: bool) -> list[tuple[int, bytes | None]]:
    end = view.last_stable_offset() if committed else view.log_end_offset()
    start = view.log_start_offset()
    batches = list(view.batches(start, end))
    last = -1
    for batch in batches:
        assert batch.base_offset > last, "batches out of order"
        last = batch.last_offset
    if committed:
        recs = committed_records(batches, view.aborted_transactions(start, end), start)
    else:
        recs = (r for b in batches if not b.is_control for r in b)
    return [(r.offset, r.value) for r in recs]


@pytest.mark.parametrize(
    "kind", ["plain", "preallocated", "rolling", "compacting", "transactional"]
)
def test_lock_free_readers_beside_a_writer_process(tmp_path: Path, kind: str) -> None:
    rounds = 150
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, kind, str(tmp_path), str(rounds)],
        env={**os.environ, "PYTHONPATH": SRC},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    view = PartitionView(tmp_path / "t-0")
    reads = 0
    deadline = time.monotonic() + 120
    try:
        while writer.poll() is None and time.monotonic() < deadline:
            try:
                seen = _read_everything(view, committed=kind == "transactional")
            except OffsetOutOfRangeError:
                continue  # the cleaner moved the start between two looks
            offsets = [o for o, _ in seen]
            assert offsets == sorted(set(offsets))
            if kind == "transactional":
                aborted = [v for _, v in seen if v and v.startswith(b"txn-") and int(v[4:]) % 2]
                assert aborted == []
            reads += 1
    finally:
        writer.wait(60)
    assert writer.returncode == 0
    assert reads > 0
    final = _read_everything(view, committed=kind == "transactional")
    if kind in ("plain", "preallocated", "rolling"):
        assert len(final) == rounds * 3
    assert final
