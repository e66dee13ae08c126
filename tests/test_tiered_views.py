"""What only reads a tiered partition -- a PartitionView, ``kafkalog consume`` and
``get-offsets``, the Spark source -- finds its first records in remote storage by itself (the
store its log directory names, the segments ``__remote_log_metadata`` names), reads them
exactly as an untiered twin of the same appends answers, at both isolation levels, and writes
nothing while doing so."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kafkalog.cli.main import cli
from kafkalog.clock import ManualClock
from kafkalog.log.log import Log
from kafkalog.log.store_view import StoreView
from kafkalog.log.view import PartitionView
from kafkalog.log.view_remote import RemoteSide
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.remote_log_manager import RemoteLogManager
from kafkalog.records.committed import committed_records
from kafkalog.tiered.remote_store import MANIFEST_SUFFIX, RemoteLogStore
from kafkalog.tiered.remote_tier import RemoteTier
from s3_server import S3Server
from test_tiered_log import ENABLED, PLAIN, TOPIC_CONFIG, _fill

pytestmark = pytest.mark.one_codec

_BUCKETS = iter(range(10**6))


@pytest.fixture(params=["local", "s3"])
def tiered_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A log directory whose topic ``orders`` is mostly in remote storage (closed cleanly),
    and the directory of its untiered twin's partition."""
    if request.param == "local":
        uri = str(tmp_path / "remote")
    else:
        server: S3Server = request.getfixturevalue("s3")
        bucket = f"tiered-views-{next(_BUCKETS)}"
        RemoteLogStore.from_uri(server.uri(bucket)).filesystem.create_dir(bucket)
        uri = server.uri(bucket)
    clock = ManualClock()
    with (
        LogManager(tmp_path / "logs", clock=clock, config=ENABLED) as manager,
        Log.open(tmp_path / "plain" / "orders-0", PLAIN, clock=clock) as plain,
    ):
        manager.create_topic("orders", 1, TOPIC_CONFIG)
        log = manager.get_log("orders", 0)
        _fill([log, plain], clock, seed=11)
        RemoteLogManager(manager, RemoteLogStore.from_uri(uri), clock=clock).run_once()
        assert log.local_log_start_offset > 0
    yield tmp_path / "logs", tmp_path / "plain" / "orders-0"


def _records(view: PartitionView, read_committed: bool) -> list[tuple[int, bytes | None]]:
    batches = list(view.batches(view.log_start_offset()))
    if read_committed:
        aborted = view.aborted_transactions(view.log_start_offset(), view.log_end_offset())
        found = committed_records(batches, aborted, view.log_start_offset())
    else:
        found = (r for b in batches if not b.is_control for r in b)
    return [(r.offset, r.value) for r in found]


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_a_view_reads_the_remote_segments_as_an_untiered_twin(
    tiered_dir: tuple[Path, Path],
) -> None:
    logs, plain_dir = tiered_dir
    before = _hashes(logs)
    view, twin = PartitionView(logs / "orders-0"), PartitionView(plain_dir)
    local_start = min(p.base_offset for p in view.segments())
    assert local_start > 0 and view.log_start_offset() == 0 == twin.log_start_offset()
    for read_committed in (False, True):
        assert _records(view, read_committed) == _records(twin, read_committed)
    stamps = sorted({r.timestamp for b in twin.batches(0) for r in b if r.timestamp})
    for ts in stamps[::9]:
        assert view.offset_for_timestamp(ts) == twin.offset_for_timestamp(ts), ts
    assert view.list_offset(-2) == 0
    assert _hashes(logs) == before  # a view writes nothing


def test_consume_and_get_offsets_start_at_offset_0(tiered_dir: tuple[Path, Path]) -> None:
    logs, plain_dir = tiered_dir
    before = _hashes(logs)
    runner = CliRunner()
    earliest = runner.invoke(
        cli, ["get-offsets", "--log-dirs", str(logs), "--topic", "orders", "--time", "earliest"]
    )
    assert earliest.exit_code == 0, earliest.output
    assert earliest.output.strip() == "orders:0:0"
    twin = [v for _o, v in _records(PartitionView(plain_dir), False)]
    consumed = runner.invoke(
        cli,
        ["consume", "--log-dirs", str(logs), "--topic", "orders", "--from-beginning",
         "--max-messages", str(len(twin))],
    )  # fmt: skip
    assert consumed.exit_code == 0, consumed.output
    lines = consumed.output.splitlines()
    assert lines[: len(twin)] == [v.decode() for v in twin if v is not None]
    assert _hashes(logs) == before


def test_spark_reads_a_tiered_topic_whole(spark: Any, tiered_dir: tuple[Path, Path]) -> None:
    logs, plain_dir = tiered_dir
    for isolation, read_committed in (("read_uncommitted", False), ("read_committed", True)):
        rows = (
            spark.read.format("kafkalog")
            .option("path", str(logs))
            .option("subscribe", "orders")
            .option("kafka.isolation.level", isolation)
            .load()
            .orderBy("offset")
            .collect()
        )
        got = [(r.offset, bytes(r.value)) for r in rows]
        assert got == _records(PartitionView(plain_dir), read_committed)


def test_the_store_alone_says_what_it_holds_and_reads_back(
    tiered_dir: tuple[Path, Path], tmp_path: Path
) -> None:
    """A reader with the store and nothing else (no log directory, no metadata topic): the
    store's prefixes name the partition, its manifests the whole copies, and their batches are
    the records an untiered twin holds in that range."""
    logs, plain_dir = tiered_dir
    uri = json.loads((logs / "kafkalog-remote-storage.json").read_text())["uri"]
    store = RemoteLogStore.from_uri(uri)
    (tip,) = [t for t in store.topic_partitions() if t.topic == "orders"]
    tier = RemoteTier.from_store(store, tip)
    segments = tier.segments()
    assert segments and segments[0].start_offset == 0
    end = segments[-1].end_offset + 1
    side = RemoteSide(tier, tier.leader_epochs())
    got = [(r.offset, r.value) for b in side.batches(0, end) if not b.is_control for r in b]
    twin = [(o, v) for o, v in _records(PartitionView(plain_dir), False) if o < end]
    assert got == twin
    # a deletion takes the manifest first: the set is no longer whole to a store reader
    store.filesystem.delete_file(store.object_name(segments[0], MANIFEST_SUFFIX))
    assert [m.segment_id for m in store.finished_segments(tip)] == [
        m.segment_id for m in segments[1:]
    ]


def test_spark_reads_the_store_alone_without_the_log_directory(
    spark: Any, tiered_dir: tuple[Path, Path], tmp_path: Path
) -> None:
    """``remoteStorageUri`` without ``path``: partitions from the store's folders, ranges
    from its manifests, the last stable offset from the last copy's producer snapshot; the
    writer's directory is moved out of reach first."""
    logs, plain_dir = tiered_dir
    uri = json.loads((logs / "kafkalog-remote-storage.json").read_text())["uri"]
    logs.rename(tmp_path / "out-of-reach")
    store = RemoteLogStore.from_uri(uri)
    (tip,) = [t for t in store.topic_partitions() if t.topic == "orders"]
    end = store.finished_segments(tip)[-1].end_offset + 1
    lso = StoreView(uri, tip).last_stable_offset()
    assert 0 < lso <= end
    for isolation, read_committed, upto in (
        ("read_uncommitted", False, end),
        ("read_committed", True, lso),
    ):
        rows = (
            spark.read.format("kafkalog")
            .option("remoteStorageUri", uri)
            .option("subscribe", "orders")
            .option("kafka.isolation.level", isolation)
            .option("minPartitions", "4")  # several tasks per partition, cut at any offset
            .load()
            .orderBy("offset")
            .collect()
        )
        got = [(r.offset, bytes(r.value)) for r in rows]
        twin = _records(PartitionView(plain_dir), read_committed)
        assert got == [(o, v) for o, v in twin if o < upto], isolation
