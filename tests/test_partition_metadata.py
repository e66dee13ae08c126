"""``partition.metadata`` (KIP-516 topic IDs) in Kafka's PartitionMetadataFile layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog import CorruptCheckpointError, InvalidArgumentError, LogManager
from kafkalog.cli.main import cli
from kafkalog.storage.partition_metadata import (
    random_topic_id,
    read_partition_metadata,
    write_partition_metadata,
)
from kafkalog.types import ZERO_UUID, uuid_bytes

# A topic ID a Kafka 4.3 broker gave a topic, and the file it wrote for it.
BROKER_ID = "857Qn4AUTFqGvHv20styaA"
BROKER_FILE = b"version: 0\ntopic_id: 857Qn4AUTFqGvHv20styaA"


def test_written_byte_for_byte_as_kafka_writes_it(tmp_path: Path) -> None:
    write_partition_metadata(tmp_path, BROKER_ID)
    assert (tmp_path / "partition.metadata").read_bytes() == BROKER_FILE
    meta = read_partition_metadata(tmp_path)
    assert meta is not None and meta.topic_id == BROKER_ID and meta.version == 0


def test_absent_file_is_no_topic_id(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None


@pytest.mark.parametrize(
    "text",
    [
        b"version: 1\ntopic_id: 857Qn4AUTFqGvHv20styaA",
        b"version: 0\n",
        b"version: 0\ntopic_id: 857Qn4AUTFqGvHv20sty",
        b"version: 0\ntopic_id: 857Qn4AUTFqGvHv20sty+A",
        b"topic_id 857Qn4AUTFqGvHv20styaA",
        b"\xff\xfe",
    ],
)
def test_damaged_file_is_a_corrupt_checkpoint(tmp_path: Path, text: bytes) -> None:
    (tmp_path / "partition.metadata").write_bytes(text)
    with pytest.raises(CorruptCheckpointError, match=r"partition\.metadata"):
        read_partition_metadata(tmp_path)


@pytest.mark.parametrize("bad", ["", "short", "857Qn4AUTFqGvHv20styaA=", 17, ZERO_UUID])
def test_bad_topic_ids_are_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        write_partition_metadata(tmp_path, bad)  # type: ignore[arg-type]
    assert not (tmp_path / "partition.metadata").exists()


def test_random_ids_are_valid_and_never_look_like_options() -> None:
    for _ in range(2000):
        tid = random_topic_id()
        assert len(uuid_bytes(tid)) == 16 and not tid.startswith("-")


def test_created_topics_carry_one_id_shown_by_describe(tmp_path: Path) -> None:
    with LogManager(tmp_path) as manager:
        manager.create_topic("orders", 3)
        manager.create_topic("imported", 1, topic_id=BROKER_ID)
        tid = manager.topic_id("orders")
        assert tid is not None
        ids = {read_partition_metadata(tmp_path / f"orders-{p}").topic_id for p in range(3)}  # type: ignore[union-attr]
        assert ids == {tid}
        assert manager.topic_id("imported") == BROKER_ID
        with pytest.raises(InvalidArgumentError):
            manager.create_topic("bad", 1, topic_id="not-a-uuid")
        assert "bad" not in manager.topics()
    out = CliRunner().invoke(cli, ["topics", "--log-dirs", str(tmp_path), "--describe"]).output
    assert f"Topic: orders\tTopicId: {tid}\tPartitionCount: 3\tReplicationFactor: 1" in out
    assert f"Topic: imported\tTopicId: {BROKER_ID}\t" in out
