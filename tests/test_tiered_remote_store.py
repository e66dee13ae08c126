"""The remote store keeps a closed segment's files as one object set and gives back exactly
their bytes (whole, or any byte range of the ``.log``), deletes idempotently, lists what it
holds for a sweep of orphans, and fails a copy or a read with KafkaStorageError, never a hang
or a half-answer, when the store is down. The same tests run on a local directory and on a
real S3-compatible server in its own process (moto's server)."""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path

import pytest

from kafkalog import Log, LogConfig, Record
from kafkalog.errors import InvalidArgumentError, KafkaStorageError, RemoteResourceNotFoundError
from kafkalog.records.remote_log_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from kafkalog.tiered.remote_store import IndexType, LogSegmentData, RemoteLogStore
from s3_server import S3Server

pytestmark = pytest.mark.one_codec  # files are copied as bytes: the codec is not involved

TP = TopicIdPartition("3JPMkBTsTzGbV7ZVXmQGrg", "orders.eu", 3)


_BUCKETS = iter(range(10**6))


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteLogStore:
    if request.param == "local":
        return RemoteLogStore.from_uri(str(tmp_path / "remote"))
    server: S3Server = request.getfixturevalue("s3")
    bucket = f"kafkalog-{next(_BUCKETS)}"
    store = RemoteLogStore.from_uri(server.uri(bucket))
    store.filesystem.create_dir(bucket)
    return store


def _closed_segment(root: Path) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
    """The first segment of a real log rolled several times, with its files."""
    rng = random.Random(51)
    config = LogConfig.from_properties(
        {"internal.segment.bytes": "40000", "index.interval.bytes": "512"}
    )
    with Log.open(root / "orders.eu-3", config) as log:
        for i in range(200):
            log.append(
                [
                    Record(
                        rng.randbytes(rng.randrange(50, 900)),
                        b"k%d" % i,
                        timestamp=1_700_000_000_000 + i,
                    )
                ]
            )
    files = sorted((root / "orders.eu-3").glob("*.log"))
    assert len(files) >= 2
    first = files[0]
    snapshot = first.with_suffix(".snapshot")
    if not snapshot.exists():
        snapshot.write_bytes(b"")
    end = int(files[1].stem) - 1
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP, "mQk3kM5eSBSlfmU6r1wP-Q"),
        int(first.stem),
        end,
        1_700_000_000_059,
        0,
        1_700_000_100_000,
        first.stat().st_size,
        ((0, 0),),
    )
    data = LogSegmentData(
        first,
        first.with_suffix(".index"),
        first.with_suffix(".timeindex"),
        None,
        snapshot,
        b"0\n1\n0 0\n",
    )
    return metadata, data


def test_a_copied_segment_reads_back_byte_for_byte(store: RemoteLogStore, tmp_path: Path) -> None:
    metadata, data = _closed_segment(tmp_path)
    store.copy_log_segment_data(metadata, data)
    whole = data.log_segment.read_bytes()
    assert store.fetch_log_segment(metadata, 0) == whole
    rng = random.Random(7)
    for _ in range(20):
        start = rng.randrange(len(whole))
        end = rng.randrange(start, len(whole) + 100)
        assert store.fetch_log_segment(metadata, start, end) == whole[start : end + 1]
    assert store.fetch_log_segment(metadata, len(whole) + 5) == b""
    assert store.fetch_index(metadata, IndexType.OFFSET) == data.offset_index.read_bytes()
    assert store.fetch_index(metadata, IndexType.TIMESTAMP) == data.time_index.read_bytes()
    assert store.fetch_index(metadata, IndexType.LEADER_EPOCH) == data.leader_epoch_checkpoint
    with pytest.raises(RemoteResourceNotFoundError):  # this segment had no transaction index
        store.fetch_index(metadata, IndexType.TRANSACTION)
    with pytest.raises(InvalidArgumentError):
        store.fetch_log_segment(metadata, 10, 5)
    assert list(store.object_sets(TP)) == [(0, "mQk3kM5eSBSlfmU6r1wP-Q")]
    name = store.object_name(metadata, ".log")
    assert name.endswith(
        "/orders.eu-3-3JPMkBTsTzGbV7ZVXmQGrg/00000000000000000000-mQk3kM5eSBSlfmU6r1wP-Q.log"
    )


def test_a_delete_is_idempotent_and_leaves_nothing(store: RemoteLogStore, tmp_path: Path) -> None:
    metadata, data = _closed_segment(tmp_path)
    store.copy_log_segment_data(metadata, data)
    store.delete_log_segment_data(metadata)
    store.delete_log_segment_data(metadata)  # a retry after a crash
    assert list(store.object_sets(TP)) == []
    with pytest.raises(RemoteResourceNotFoundError):
        store.fetch_log_segment(metadata, 0)


def test_a_copy_that_fails_midway_leaves_a_listed_orphan(
    store: RemoteLogStore, tmp_path: Path
) -> None:
    metadata, data = _closed_segment(tmp_path)
    data.time_index.unlink()  # the third file cannot be read: two objects are already written
    with pytest.raises(KafkaStorageError):
        store.copy_log_segment_data(metadata, data)
    assert list(store.object_sets(TP)) == [(0, "mQk3kM5eSBSlfmU6r1wP-Q")]
    store.delete_log_segment_data(metadata)
    assert list(store.object_sets(TP)) == []


def test_a_store_that_is_down_fails_the_copy_and_the_read(s3: S3Server, tmp_path: Path) -> None:
    metadata, data = _closed_segment(tmp_path)
    store = RemoteLogStore.from_uri(s3.uri("kafkalog-down"), timeout_ms=1000, attempts=2)
    store.filesystem.create_dir("kafkalog-down")
    store.copy_log_segment_data(metadata, data)
    s3.stop()
    try:
        started = time.monotonic()
        with pytest.raises(KafkaStorageError):
            store.copy_log_segment_data(metadata, data)
        with pytest.raises(KafkaStorageError):
            store.fetch_log_segment(metadata, 0, 100)
        with pytest.raises(KafkaStorageError):
            list(store.object_sets(TP))
        assert time.monotonic() - started < 30  # bounded: 1 s per try, 2 tries per call
    finally:
        s3.start()  # the module's other tests go on with a store that is up (and empty)


def test_only_the_data_of_a_preallocated_log_is_copied(
    store: RemoteLogStore, tmp_path: Path
) -> None:
    metadata, data = _closed_segment(tmp_path)
    whole = data.log_segment.read_bytes()
    padded = tmp_path / "padded.log"
    padded.write_bytes(whole + bytes(4096))  # as a preallocated file ends: zeros
    store.copy_log_segment_data(
        metadata, dataclasses.replace(data, log_segment=padded, log_size=len(whole))
    )
    assert store.fetch_log_segment(metadata, 0) == whole


def test_partitions_are_listed_whatever_dashes_their_names_hold(
    store: RemoteLogStore, tmp_path: Path
) -> None:
    metadata, data = _closed_segment(tmp_path)
    for tp in (
        TopicIdPartition("-BI0AAECAwQFBgcICQoLDA", "a-b--c", 12),  # an id that starts with '-'
        TopicIdPartition("Evg-AwQFBgcICQoLDA0ODw", "orders.eu", 3),
    ):
        copy = dataclasses.replace(
            metadata, segment_id=dataclasses.replace(metadata.segment_id, topic_id_partition=tp)
        )
        store.copy_log_segment_data(copy, data)
        assert tp in store.topic_partitions()
        assert [m.segment_id for m in store.finished_segments(tp)] == [copy.segment_id]
