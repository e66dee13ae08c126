"""Files a real Apache Kafka broker wrote, read by kafkalog: it must agree with the broker.

Each supported Kafka version (interop/kafka-versions.txt) runs once per session: its clients
produce every codec, headers, null keys and values, idempotent and transactional records, a
compacted and a retention-trimmed topic; the broker is stopped cleanly; then kafkalog opens a
copy of its log directory and every answer is compared with what the broker told its clients.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from kafka_scenarios import Acked, BrokerWritten, kafka_uuid
from kafkalog import IsolationLevel, Log, LogConfig, LogManager, ManualClock
from kafkalog.records.scanner import BatchScanner
from kafkalog.storage.partition_metadata import read_partition_metadata
from kafkalog.storage.producer_snapshot import read_snapshot

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


@pytest.fixture
def data_copy(written: BrokerWritten, tmp_path: Path) -> Path:
    """A private copy of the stopped broker's log directory (kafkalog may write into it)."""
    return Path(shutil.copytree(written.data_dir, tmp_path / "data"))


def file_bytes(root: Path, suffixes: tuple[str, ...]) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix in suffixes
    }


def all_batches(log: Log, isolation: IsolationLevel | None = None) -> Iterator[object]:
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20, isolation=isolation)
        if info.records is None or info.records.size == 0:
            return
        batches = list(BatchScanner(info.records.read()))
        yield from batches
        offset = batches[-1].last_offset + 1


def read_back(log: Log, isolation: IsolationLevel | None = None) -> dict[int, Acked]:
    out: dict[int, Acked] = {}
    offset = log.log_start_offset
    end = log.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else None
    while offset < (end if end is not None else log.log_end_offset):
        records = log.read_records(offset, 1 << 20, isolation=isolation)
        info = log.read(offset, 1 << 20, isolation=isolation)
        assert info.records is not None
        last = list(BatchScanner(info.records.read()))[-1].last_offset
        for r in records:
            hdrs = tuple((k, v) for k, v in r.headers)
            out[r.offset] = Acked(r.offset, r.timestamp, r.key, r.value, hdrs)
        offset = last + 1
    return out


def expected_console(lines: list[str]) -> list[tuple[bytes, bytes, tuple[tuple[str, bytes], ...]]]:
    out = []
    for line in lines:
        headers, key, value = line.split("\t")
        hdrs = tuple((h.split(":")[0], h.split(":")[1].encode()) for h in headers.split(","))
        out.append((key.encode(), value.encode(), hdrs))
    return out


# --- opening: a clean shutdown recovers nothing, a crash recovers without loss ---------------


def test_clean_open_recovers_nothing(written: BrokerWritten, data_copy: Path) -> None:
    before = file_bytes(data_copy, (".log", ".index", ".timeindex", ".txnindex"))
    with LogManager(data_copy) as manager:
        logs = manager.logs()
        assert {tp.topic for tp in logs} >= set(written.list_offsets)
        for tp, log in logs.items():
            assert log.load_result.recovered_segments == [], tp
            if tp.topic in written.list_offsets:
                assert log.log_end_offset == written.list_offsets[tp.topic]["latest"][0], tp
    after = file_bytes(data_copy, (".log", ".index", ".timeindex", ".txnindex"))
    assert after.keys() == before.keys()
    changed = [name for name in before if before[name] != after[name]]
    assert changed == []


def test_open_without_clean_marker_recovers_without_loss(
    written: BrokerWritten, data_copy: Path
) -> None:
    (data_copy / ".kafka_cleanshutdown").unlink()
    before = file_bytes(data_copy, (".log",))
    with LogManager(data_copy) as manager:
        for tp, log in manager.logs().items():
            assert log.load_result.truncated_bytes == 0, tp
            if tp.topic in written.list_offsets:
                assert log.log_end_offset == written.list_offsets[tp.topic]["latest"][0], tp
    assert file_bytes(data_copy, (".log",)) == before


# --- records: every acknowledged record, byte for byte ----------------------------------------


@pytest.mark.parametrize("topic", ["codec-none", "codec-gzip", "codec-snappy", "codec-lz4",
                                   "codec-zstd", "retained", "txn"])  # fmt: skip
def test_records_equal_what_was_acknowledged(
    written: BrokerWritten, data_copy: Path, topic: str
) -> None:
    with Log.open(data_copy / f"{topic}-0") as log:
        got = read_back(log)
        start = written.list_offsets[topic]["earliest"][0]
        want = {a.offset: a for a in written.acked[topic] if a.offset >= start}
        assert got == want


def test_read_committed_drops_exactly_the_aborted(written: BrokerWritten, data_copy: Path) -> None:
    with Log.open(data_copy / "txn-0") as log:
        got = read_back(log, IsolationLevel.READ_COMMITTED)
        aborted = written.aborted_offsets["txn"]
        assert aborted, "the scenario aborts transactions"
        want = {a.offset: a for a in written.acked["txn"] if a.offset not in aborted}
        assert got == want
        assert log.last_stable_offset == written.list_offsets["txn"]["latest_committed"][0]
        listed: list[int] = []
        for segment in log.segments:  # a fetch never crosses a segment
            info = log.read(segment.base_offset, 1 << 24, isolation=IsolationLevel.READ_COMMITTED)
            listed += [t.first_offset for t in info.aborted_transactions or []]
        assert listed == written.aborted_first_offsets["txn"]


def test_compacted_topic_keeps_the_latest_value_of_every_key(
    written: BrokerWritten, data_copy: Path
) -> None:
    acked = written.acked["compacted"]
    with Log.open(
        data_copy / "compacted-0", LogConfig(cleanup_policy=frozenset({"compact"}))
    ) as log:
        got = read_back(log)
    by_offset = {a.offset: a for a in acked}
    for offset, record in got.items():
        assert by_offset[offset] == record  # nothing invented or altered
    latest: dict[bytes | None, int] = {}
    for a in acked:
        latest[a.key] = a.offset
    assert set(latest.values()) <= set(got)  # the latest of every key survives
    assert len(got) < len(acked)  # the broker's cleaner did remove records


def test_console_and_perf_producers(written: BrokerWritten, data_copy: Path) -> None:
    with Log.open(data_copy / "console-0") as log:
        got = read_back(log)
    assert [(a.key, a.value, a.headers) for a in got.values()] == expected_console(
        written.console_lines
    )
    with Log.open(data_copy / "perf-0") as log:
        got = read_back(log)
        assert sorted(got) == list(range(written.perf_records))
        assert all(a.key is None and len(a.value or b"") == 100 for a in got.values())


# --- offsets: ListOffsets, log start, topic IDs, producer state ------------------------------


def test_list_offsets_agree_with_the_broker(written: BrokerWritten, data_copy: Path) -> None:
    for topic, answers in written.list_offsets.items():
        with Log.open(data_copy / f"{topic}-0") as log:
            for name, (offset, timestamp) in answers.items():
                if name == "latest_committed":
                    got = log.list_offsets(LATEST, IsolationLevel.READ_COMMITTED)
                elif isinstance(name, tuple):
                    got = log.list_offsets(name[1])
                else:
                    target = {
                        "earliest": EARLIEST,
                        "latest": LATEST,
                        "max_timestamp": MAX_TIMESTAMP,
                    }
                    got = log.list_offsets(target[name])  # type: ignore[index]
                if offset == -1:  # Kafka: no record at or after the timestamp
                    assert got is None or got.offset == -1, (topic, name, got)
                    continue
                assert got is not None, (topic, name)
                assert (got.offset, got.timestamp) == (offset, timestamp), (topic, name)


def test_topic_ids_from_partition_metadata(written: BrokerWritten, data_copy: Path) -> None:
    for topic, topic_id in written.topic_ids.items():
        meta = read_partition_metadata(data_copy / f"{topic}-0")
        assert meta is not None
        assert meta.topic_id == kafka_uuid(topic_id)


def test_producer_state_agrees_with_describe_producers(
    written: BrokerWritten, data_copy: Path
) -> None:
    """The broker's snapshot holds exactly what DescribeProducers said. Opening the log drops the
    idempotent producer, whose records carry 2023 timestamps: Kafka's own restart does the same
    (ProducerStateManager#loadFromSnapshot skips producers past producer.id.expiration.ms), so
    the open is checked with a clock at which neither producer has expired."""
    rows = [line.split("\t") for line in written.describe_producers["txn"].splitlines()[1:]]
    want = {
        int(r[0]): (int(r[1]), int(r[2]), int(r[3]), int(r[4]))
        for r in (list(map(str.strip, row)) for row in rows)
    }
    latest = max(data_copy.joinpath("txn-0").glob("*.snapshot"))
    got = {
        e.producer_id: (e.producer_epoch, e.coordinator_epoch, e.last_sequence, e.timestamp)
        for e in read_snapshot(latest)
    }
    assert got == want
    before_expiry = ManualClock(min(ts for _, _, _, ts in want.values()))
    with Log.open(data_copy / "txn-0", clock=before_expiry) as log:
        entries = log.producers()
        got = {
            pid: (e.producer_epoch, e.coordinator_epoch, e.last_seq, e.last_timestamp)
            for pid, e in entries.items()
        }
    assert got == want


def test_leader_epochs_and_log_start(written: BrokerWritten, data_copy: Path) -> None:
    with Log.open(data_copy / "retained-0") as log:
        assert log.log_start_offset == written.list_offsets["retained"]["earliest"][0] > 0
        # LeaderEpochFileCache#truncateFromStart moved epoch 0's start up to the log start
        assert log.leader_epochs() == [(0, log.log_start_offset)]
        assert {b.partition_leader_epoch for b in all_batches(log)} == {0}


# --- the tools ------------------------------------------------------------------------------


def test_verify_finds_nothing(data_copy: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kafkalog", "verify", "--log-dirs", str(data_copy)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- Spark: the kafkalog source over the broker's files -------------------------------------


@pytest.fixture(scope="module")
def spark():  # type: ignore[no-untyped-def]
    pytest.importorskip("pyspark")
    import kafkalog.spark

    session = kafkalog.spark.local_session("kafkalog-oracle")
    yield session
    session.stop()


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_spark_source_returns_the_acknowledged_rows(
    written: BrokerWritten,
    data_copy: Path,
    spark,
    isolation: str,  # type: ignore[no-untyped-def]
) -> None:
    topics = ["txn", "codec-zstd", "codec-snappy", "retained"]
    df = (
        spark.read.format("kafkalog")
        .option("path", str(data_copy))
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", isolation)
        .load()
    )
    got = {
        (r.topic, r.offset): Acked(
            r.offset,
            int(r.timestamp.timestamp() * 1000),
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []),
        )
        for r in df.collect()
    }
    want = {}
    for topic in topics:
        start = written.list_offsets[topic]["earliest"][0]
        skip = written.aborted_offsets.get(topic, set()) if isolation == "read_committed" else set()
        for a in written.acked[topic]:
            if a.offset >= start and a.offset not in skip:
                want[(topic, a.offset)] = a
    assert got == want
