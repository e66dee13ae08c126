"""Answers a reader gets that must be Kafka's, checked against the rules of Kafka's source:
ListOffsets MAX_TIMESTAMP finds its record below the log start offset while its segment is
there (UnifiedLog.fetchOffsetByTimestamp looks in the segment alone); a timestamp or
MAX_TIMESTAMP lookup at an isolation level answers nothing past what that level may fetch
(ReplicaManager.fetchOffsetForTimestamp); DumpLogSegments says "is empty." of an offset
index only; an isolation level that is not one is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog import Record
from kafkalog.cli.main import cli
from kafkalog.errors import InvalidArgumentError
from kafkalog.log.log import Log
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.log.view import PartitionView
from kafkalog.types import IsolationLevel

TS = 1_700_000_000_000


def test_max_timestamp_after_delete_records_is_the_record_below_the_log_start(
    tmp_path: Path,
) -> None:
    """Kafka 4.3.1 answers (0, ts) for six records of one timestamp after DeleteRecords to 3."""
    with Log.open(tmp_path / "t-0") as log:
        log.append([Record(b"v%d" % i, timestamp=TS) for i in range(6)])
        log.maybe_increment_log_start_offset(3)
        found = log.list_offsets(-3)
        assert found is not None and (found.offset, found.timestamp) == (0, TS)
        view = PartitionView(tmp_path / "t-0")
        assert view.max_timestamp() == (TS, 0)


def test_lookups_under_read_committed_stop_at_the_last_stable_offset(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0") as log:
        log.append([Record(b"plain", timestamp=TS)])
        open_txn = ProducerFields(9, 0, 0, is_transactional=True)
        log.append([Record(b"open", timestamp=TS + 10)], producer=open_txn)
        committed = IsolationLevel.READ_COMMITTED
        uncommitted = IsolationLevel.READ_UNCOMMITTED
        assert log.list_offsets(TS + 5, committed) is None  # offset 1: in the open transaction
        found = log.list_offsets(TS + 5, uncommitted)
        assert found is not None and found.offset == 1
        assert log.list_offsets(-3, committed) is None
        found = log.list_offsets(TS, committed)
        assert found is not None and found.offset == 0
        view = PartitionView(tmp_path / "t-0")
        assert view.list_offset(TS + 5, read_committed=True) is None
        assert view.list_offset(TS + 5) == 1
        assert view.list_offset(-1, read_committed=True) == 1
        log.append_end_txn_marker(9, 0, "commit")
        found = log.list_offsets(TS + 5, committed)
        assert found is not None and found.offset == 1
        # the COMMIT marker, stamped now, holds the largest timestamp: Kafka counts control
        # batches in a segment's maximum too
        found = log.list_offsets(-3, committed)
        assert found is not None and found.offset == 2
        assert PartitionView(tmp_path / "t-0").list_offset(-3, read_committed=True) == 2


@pytest.mark.parametrize("call", ["read", "read_records", "list_offsets"])
def test_an_isolation_level_that_is_not_one_is_refused(tmp_path: Path, call: str) -> None:
    with Log.open(tmp_path / "t-0") as log:
        log.append([Record(b"v")])
        with pytest.raises(InvalidArgumentError, match="IsolationLevel"):
            if call == "read":
                log.read(0, 100, isolation="x")  # type: ignore[arg-type]
            elif call == "read_records":
                list(log.read_records(0, isolation="read_committed"))  # type: ignore[arg-type]
            else:
                log.list_offsets(-1, "x")  # type: ignore[arg-type]


def test_dump_log_says_empty_of_an_offset_index_only(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0") as log:
        log.append([Record(b"v")])
    base = tmp_path / "t-0" / "00000000000000000000"
    for suffix in (".index", ".timeindex"):
        Path(f"{base}{suffix}").write_bytes(b"")
    runner = CliRunner()
    index = runner.invoke(cli, ["dump-log", "--files", f"{base}.index"])
    assert index.output.splitlines() == [f"Dumping {base}.index", f"{base}.index is empty."]
    time_index = runner.invoke(cli, ["dump-log", "--files", f"{base}.timeindex"])
    assert time_index.output.splitlines() == [f"Dumping {base}.timeindex"]
