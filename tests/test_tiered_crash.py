"""kill -9 at every step of tiering -- each metadata event, each store call, between two
objects of one copy, before each local deletion, through copies and then total retention --
loses no acknowledged record, leaves no offset readable from neither side, and the next start
finds and removes what was left half-way: no copy stuck in COPY_SEGMENT_STARTED, no deletion
stuck in DELETE_SEGMENT_STARTED, no object set the metadata does not name.

The default run crashes at every fourth step; ``KAFKALOG_TIERED_KILLS=all`` (``make
fault-loops``) at every one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.remote_log_manager import RemoteLogManager
from kafkalog.records.remote_log_metadata import RemoteLogSegmentState
from kafkalog.tiered.remote_store import RemoteLogStore

pytestmark = pytest.mark.one_codec

CHILD = Path(__file__).parent / "tiered_crash_child.py"
RECORDS = 300
ENABLED = ManagerConfig.from_properties({"remote.log.storage.system.enable": "true"})


def _child(log_dir: Path, uri: str, crash_at: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), str(log_dir), uri, str(crash_at), str(RECORDS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _steps(tmp_path: Path) -> int:
    done = _child(tmp_path / "probe" / "logs", str(tmp_path / "probe" / "store"), 0)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split("steps ")[1])


def _value(offset: int) -> bytes:
    return (b"offset-%d;" % offset) * (1 + offset % 7)


def _check(manager: LogManager, rlm: RemoteLogManager, store: RemoteLogStore) -> None:
    log = manager.get_log("orders", 0)
    offset, seen = log.log_start_offset, 0
    while offset < log.high_watermark:
        records = log.read_records(offset, 1 << 16)
        assert records, f"offset {offset} is readable from neither side"
        for record in records:
            assert (record.offset, record.value) == (offset, _value(offset))
            offset += 1
            seen += 1
    assert offset == RECORDS  # every acknowledged record from the log start on
    tier = rlm.tier("orders", 0)
    assert tier is not None
    every = tier.segments(None)
    assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in every)
    held = {segment for _start, segment in store.object_sets(tier.topic_id_partition)}
    assert held == {m.segment_id.id for m in every}  # no orphan, and nothing named is missing


def test_kill_9_at_every_step_of_copy_and_deletion(tmp_path: Path) -> None:
    total = _steps(tmp_path)
    assert total > 40  # copies of several segments, their deletions, local retention
    stride = 1 if os.environ.get("KAFKALOG_TIERED_KILLS") == "all" else 4
    killed = 0
    for crash_at in range(1, total + 1, stride):
        root = tmp_path / f"crash-{crash_at}"
        uri = str(root / "store")
        done = _child(root / "logs", uri, crash_at)
        assert "filled 300" in done.stdout, done.stderr
        assert done.returncode == -9, (crash_at, done.returncode, done.stderr)
        killed += 1
        store = RemoteLogStore.from_uri(uri)
        with LogManager(root / "logs", config=ENABLED) as manager:
            rlm = RemoteLogManager(manager, store)
            rlm.sweep()
            _check(manager, rlm, store)
            rlm.run_once()  # the interrupted work completes
            _check(manager, rlm, store)
            # every closed segment is copied (local retention keeps the last non-empty one:
            # local.retention.bytes 1 is never breached by the segment that holds the last byte)
            assert manager.get_log("orders", 0).tiering.highest_offset == RECORDS - 1
    assert killed == len(range(1, total + 1, stride))
