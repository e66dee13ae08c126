"""A remote-enabled log copies its closed segments to remote storage, keeps only its local tail,
and answers every read, offset lookup and READ_COMMITTED fetch as a log that kept everything
local answers it (the differential oracle: the same appends into an untiered log). Restarts
replay ``__remote_log_metadata``; total retention deletes remote segments and moves the log
start offset; a store that is down delays copies and local deletion and loses nothing. The same
tests run on a local directory and on moto's S3 server in its own process."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalog import LogConfig, Record
from kafkalog.clock import ManualClock
from kafkalog.errors import InvalidConfigError, OffsetOutOfRangeError
from kafkalog.log.log import Log
from kafkalog.log.producer_batches import ProducerFields
from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.remote_log_manager import METADATA_TOPIC, RemoteLogManager
from kafkalog.records.remote_log_metadata import RemoteLogSegmentState, TopicIdPartition, decode
from kafkalog.tiered.remote_store import RemoteLogStore
from kafkalog.types import IsolationLevel
from s3_server import S3Server

pytestmark = pytest.mark.one_codec  # the records' codec is tested elsewhere; this is placement

TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "6000",
    "index.interval.bytes": "700",
    "local.retention.bytes": "1",
    "retention.bytes": "-1",
    "retention.ms": "-1",
}
# the untiered twin: the same segments and indexes, every one kept local
PLAIN = LogConfig.from_properties(
    {
        k: v
        for k, v in TOPIC_CONFIG.items()
        if k in ("internal.segment.bytes", "index.interval.bytes")
    }
)
ENABLED = ManagerConfig.from_properties({"remote.log.storage.system.enable": "true"})
_BUCKETS = iter(range(10**6))


@pytest.fixture(params=["local", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "remote")
    server: S3Server = request.getfixturevalue("s3")
    bucket = f"tiered-log-{next(_BUCKETS)}"
    store = RemoteLogStore.from_uri(server.uri(bucket))
    store.filesystem.create_dir(bucket)
    return server.uri(bucket)


def _fill(logs: list[Log], clock: ManualClock, seed: int, count: int = 400) -> None:
    """The same appends into each log: plain records of random sizes, and transactions of one
    producer that commit or abort, with the clock moving so timestamps differ."""
    rng = random.Random(seed)
    seq, epoch, pid = 0, 0, 7 + seed
    i = 0
    while i < count:
        clock.advance(rng.randrange(1, 50))
        if rng.random() < 0.2:
            n = rng.randrange(1, 4)
            batch = [Record(b"t%05d" % (i + k) * rng.randrange(1, 30)) for k in range(n)]
            for log in logs:
                log.append(batch, producer=ProducerFields(pid, epoch, seq, is_transactional=True))
            seq += n
            marker = "commit" if rng.random() < 0.6 else "abort"
            for log in logs:
                log.append_end_txn_marker(pid, epoch, marker)
            i += n
        else:
            batch = [Record(b"v%05d" % i * rng.randrange(1, 60), b"k%d" % (i % 17))]
            for log in logs:
                log.append(batch)
            i += 1


def _all(log: Log, isolation: IsolationLevel | None = None, max_bytes: int = 2500) -> list[Record]:
    """Every record from the log start to the high watermark, read in small fetches."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        info = log.read(offset, max_bytes, isolation=isolation)
        if info.records is None or info.size == 0:
            break
        found = log.read_records(offset, max(max_bytes, info.size), isolation=isolation)
        if found:
            out += found
            offset = found[-1].offset + 1
        else:  # a fetch of only control records or aborted ones: go past the slice
            last = max(b.last_offset for b in info.records.records().batches())
            offset = last + 1
    return out


def _key(records: list[Record]) -> list[tuple[int, bytes | None, bytes | None, int | None]]:
    return [(r.offset, r.key, r.value, r.timestamp) for r in records]


@pytest.fixture
def tiered(tmp_path: Path, store_uri: str) -> Iterator[tuple[LogManager, Log, Log, ManualClock]]:
    clock = ManualClock()
    manager = LogManager(tmp_path / "logs", clock=clock, config=ENABLED)
    manager.create_topic("orders", 1, TOPIC_CONFIG)
    plain = Log.open(tmp_path / "plain" / "orders-0", PLAIN, clock=clock)
    yield manager, manager.get_log("orders", 0), plain, clock
    plain.close()
    manager.close()


def test_reads_across_the_boundary_answer_as_an_untiered_log(
    tiered: tuple[LogManager, Log, Log, ManualClock], store_uri: str
) -> None:
    manager, log, plain, clock = tiered
    _fill([log, plain], clock, seed=1)
    rlm = RemoteLogManager(manager, RemoteLogStore.from_uri(store_uri), clock=clock)
    copied = rlm.run_once()
    assert copied >= 5
    assert log.log_start_offset == 0
    assert log.local_log_start_offset > 0  # local retention went as far as the copies
    assert log.local_log_start_offset == log.segments.first_segment().base_offset  # type: ignore[union-attr]
    assert log.tiering.highest_offset == log.local_log_start_offset - 1
    for isolation in (None, IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        assert _key(_all(log, isolation)) == _key(_all(plain, isolation)), isolation
    # every offset, fetched alone, starts where the untiered log's fetch starts
    for offset in range(0, log.log_end_offset, 7):
        for isolation in (None, IsolationLevel.READ_COMMITTED):
            ours = log.read(offset, 1, isolation=isolation)
            theirs = plain.read(offset, 1, isolation=isolation)
            assert ours.read() == theirs.read(), offset
            assert ours.aborted_transactions == theirs.aborted_transactions, offset
    # timestamps below and above the boundary find the same record
    stamps = sorted({r.timestamp for r in _all(plain) if r.timestamp is not None})
    for ts in [stamps[0] - 1, *stamps[::5], stamps[-1] + 1]:
        assert log.offset_for_timestamp(ts) == plain.offset_for_timestamp(ts), ts
    # the tiered ListOffsets specs
    local_start = log.local_log_start_offset
    assert log.list_offsets(-4).offset == local_start  # type: ignore[union-attr]
    assert log.list_offsets(-5).offset == local_start - 1  # type: ignore[union-attr]
    assert log.list_offsets(-6).offset == local_start  # type: ignore[union-attr]
    assert plain.list_offsets(-4) == plain.list_offsets(-2)
    assert plain.list_offsets(-5).offset == -1  # type: ignore[union-attr]


def test_a_restart_replays_the_metadata_and_reads_the_same(tmp_path: Path, store_uri: str) -> None:
    clock = ManualClock()
    plain = Log.open(tmp_path / "plain" / "orders-0", PLAIN, clock=clock)
    with LogManager(tmp_path / "logs", clock=clock, config=ENABLED) as manager:
        manager.create_topic("orders", 1, TOPIC_CONFIG)
        log = manager.get_log("orders", 0)
        _fill([log, plain], clock, seed=2)
        RemoteLogManager(manager, RemoteLogStore.from_uri(store_uri), clock=clock).run_once()
        local_start, highest = log.local_log_start_offset, log.tiering.highest_offset
    with LogManager(tmp_path / "logs", clock=clock, config=ENABLED) as manager:
        log = manager.get_log("orders", 0)
        assert log.log_start_offset == 0 and log.local_log_start_offset == local_start
        assert log.tiering.highest_offset == -1  # nothing may go before the replay
        rlm = RemoteLogManager(manager, RemoteLogStore.from_uri(store_uri), clock=clock)
        assert log.tiering.highest_offset == highest
        assert _key(_all(log, IsolationLevel.READ_COMMITTED)) == _key(
            _all(plain, IsolationLevel.READ_COMMITTED)
        )
        assert rlm.sweep() == 0  # a clean shutdown leaves nothing half-way
        # the metadata topic holds Kafka's records: two events per copied segment
        events = [
            decode(r.value)  # type: ignore[arg-type]
            for p in range(manager.topics()[METADATA_TOPIC])
            for r in manager.get_log(METADATA_TOPIC, p).read_records(0, 1 << 22)
        ]
        states = [getattr(e, "state", None) for e in events]
        copies = states.count(RemoteLogSegmentState.COPY_SEGMENT_STARTED)
        assert copies == states.count(RemoteLogSegmentState.COPY_SEGMENT_FINISHED) >= 5
    plain.close()


def test_total_retention_deletes_remote_segments_and_moves_the_log_start(
    tiered: tuple[LogManager, Log, Log, ManualClock], store_uri: str
) -> None:
    manager, log, plain, clock = tiered
    _fill([log, plain], clock, seed=3)
    store = RemoteLogStore.from_uri(store_uri)
    rlm = RemoteLogManager(manager, store, clock=clock)
    rlm.run_once()
    tier = rlm.tier("orders", 0)
    assert tier is not None
    before = tier.segments()
    # retention.bytes of the whole log: keep about half of what there is
    total = sum(m.segment_size_in_bytes for m in before) + log.size_in_bytes
    manager.alter_topic_config("orders", {**TOPIC_CONFIG, "retention.bytes": str(total // 2)})
    rlm.run_once()
    after = tier.segments()
    assert 0 < len(after) < len(before)
    assert log.log_start_offset == after[0].start_offset
    remaining = sum(m.segment_size_in_bytes for m in after) + log.size_in_bytes
    assert remaining <= total // 2 + max(m.segment_size_in_bytes for m in before)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    expected = [r for r in _all(plain) if r.offset >= log.log_start_offset]
    assert _key(_all(log)) == _key(expected)
    held = {segment for _start, segment in store.object_sets(tier.topic_id_partition)}
    assert held == {m.segment_id.id for m in after}  # the deleted segments' objects are gone


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_store_that_is_down_delays_copies_and_local_deletion_never_data(
    tmp_path: Path, kind: str
) -> None:
    server = S3Server(tmp_path)
    if kind == "local":
        uri = str(tmp_path / "remote")
        (tmp_path / "remote").write_bytes(b"")  # a file where the store's directory belongs
    else:
        uri = server.uri("came-back")  # nothing listens there yet
    clock = ManualClock()
    plain = Log.open(tmp_path / "plain" / "orders-0", PLAIN, clock=clock)
    try:
        with LogManager(tmp_path / "logs", clock=clock, config=ENABLED) as manager:
            manager.create_topic("orders", 1, TOPIC_CONFIG)
            log = manager.get_log("orders", 0)
            _fill([log, plain], clock, seed=4)
            store = RemoteLogStore.from_uri(uri, timeout_ms=500, attempts=1)
            rlm = RemoteLogManager(manager, store, clock=clock)
            segments = log.number_of_segments
            assert rlm.run_once() == 0  # the store's failure is the pass's, not the caller's
            assert log.tiering.highest_offset == -1
            assert log.number_of_segments == segments  # local retention waits for the copies
            _fill([log, plain], clock, seed=5, count=50)  # producing goes on
            assert _key(_all(log)) == _key(_all(plain))
            if kind == "local":
                (tmp_path / "remote").unlink()
            else:
                server.start()
                store.filesystem.create_dir("came-back")
            assert rlm.run_once() >= 5  # the copies resume
            assert log.local_log_start_offset > 0
            assert _key(_all(log, IsolationLevel.READ_COMMITTED)) == _key(
                _all(plain, IsolationLevel.READ_COMMITTED)
            )
            tier = rlm.tier("orders", 0)
            assert tier is not None
            held = {s for _start, s in store.object_sets(tier.topic_id_partition)}
            assert held == {m.segment_id.id for m in tier.segments(None)}  # no orphan left
            assert all(
                m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in tier.segments(None)
            )
    finally:
        server.stop()
        plain.close()


def test_the_broker_config_makes_a_scheduled_remote_log_manager(tmp_path: Path) -> None:
    clock = ManualClock()
    config = ManagerConfig.from_properties(
        {
            "remote.log.storage.system.enable": "true",
            "rsm.config.kafkalog.store.uri": str(tmp_path / "remote"),
            "remote.log.manager.task.interval.ms": "5000",
        }
    )
    with LogManager(tmp_path / "logs", clock=clock, config=config) as manager:
        manager.create_topic("orders", 1, TOPIC_CONFIG)
        log = manager.get_log("orders", 0)
        _fill([log], clock, seed=6)
        clock.advance(1)
        rlm = RemoteLogManager.from_config(manager, clock=clock)
        rlm.scheduler.tick()
        assert log.tiering.highest_offset == -1  # not due yet
        clock.advance(5000)
        assert "remote-log-manager" in rlm.scheduler.tick()
        assert log.tiering.highest_offset > 0 and log.local_log_start_offset > 0
    off = ManagerConfig.from_properties({"remote.log.storage.system.enable": "false"})
    with (
        LogManager(tmp_path / "other", config=off) as manager,
        pytest.raises(InvalidConfigError, match=r"remote\.log\.storage\.system\.enable"),
    ):
        RemoteLogManager.from_config(manager)


def test_kafkas_config_rules_for_tiered_topics(tmp_path: Path, store_uri: str) -> None:
    clock = ManualClock()
    off = ManagerConfig.from_properties({"remote.log.storage.system.enable": "false"})
    with (
        LogManager(tmp_path / "off", clock=clock, config=off) as manager,
        pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled"),
    ):
        manager.create_topic("orders", 1, {"remote.storage.enable": "true"})
    with LogManager(tmp_path / "logs", clock=clock, config=ENABLED) as manager:
        refused = [
            ({"cleanup.policy": "compact"}, "only supports topics with cleanup.policy=delete"),
            ({"retention.bytes": "1000", "local.retention.bytes": "2000"}, "must not be more"),
            ({"retention.ms": "1000", "local.retention.ms": "-1"}, "must not be -1"),
            (
                {"remote.log.copy.disable": "true", "local.retention.ms": "5", "retention.ms": "9"},
                "must be set to the identical value",
            ),
        ]
        for overrides, message in refused:
            with pytest.raises(InvalidConfigError, match=message):
                manager.create_topic("orders", 1, {"remote.storage.enable": "true", **overrides})
        manager.create_topic("orders", 1, TOPIC_CONFIG)
        log = manager.get_log("orders", 0)
        _fill([log], clock, seed=7)
        rlm = RemoteLogManager(manager, RemoteLogStore.from_uri(store_uri), clock=clock)
        rlm.run_once()
        assert log.local_log_start_offset > 0 and log.log_start_offset == 0
        no_copy = {**TOPIC_CONFIG, "remote.storage.enable": "false"}
        with pytest.raises(InvalidConfigError, match="without deleting remote data"):
            manager.alter_topic_config("orders", no_copy)
        manager.alter_topic_config("orders", {**no_copy, "remote.log.delete.on.disable": "true"})
        rlm.run_once()  # the remote data goes; the log starts where its local segments do
        assert log.log_start_offset == log.local_log_start_offset > 0
        assert rlm.tier("orders", 0) is None
        assert list(RemoteLogStore.from_uri(store_uri).object_sets(log_tip(manager))) == []
        assert log.read_records(log.log_start_offset)[0].offset == log.log_start_offset


def log_tip(manager: LogManager) -> TopicIdPartition:
    topic_id = manager.topic_id("orders")
    assert topic_id is not None
    return TopicIdPartition(topic_id, "orders", 0)
