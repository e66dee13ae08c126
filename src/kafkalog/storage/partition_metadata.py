"""``partition.metadata``: the topic ID a partition directory belongs to (KIP-516).

Why: a KRaft broker names topics by a 16-byte ``Uuid`` as well as by name, and deletes a partition
directory whose topic ID it does not know, or that disagrees with its metadata. The file is
Kafka's ``PartitionMetadataFile``: two lines, ``version: 0`` and ``topic_id: <id>`` (no trailing
newline), the ID in ``org.apache.kafka.common.Uuid#toString`` form (URL-safe base64, no padding).
Refuses: any version other than 0, and IDs Kafka reserves (all zeros, the metadata topic's).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kafkalog.errors import CorruptCheckpointError, InvalidArgumentError
from kafkalog.storage.atomic import write_atomically
from kafkalog.storage.faults import storage_call
from kafkalog.storage.filenames import PARTITION_METADATA
from kafkalog.types import RESERVED_UUIDS, uuid_bytes, uuid_string

VERSION = 0


def random_topic_id() -> str:
    """A fresh ID as ``Uuid.randomUuid`` makes them: never reserved, never starting with '-'
    (KAFKA-12381: such an ID reads as an option on a command line)."""
    while True:
        text = uuid_string(os.urandom(16))
        if text not in RESERVED_UUIDS and not text.startswith("-"):
            return text


@dataclass(frozen=True)
class PartitionMetadata:
    version: int
    topic_id: str


def parse_partition_metadata(text: str, where: str) -> PartitionMetadata:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fields: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise CorruptCheckpointError(f"{where}: malformed line {line!r}")
        fields[name.strip()] = value.strip()
    if fields.get("version") != str(VERSION):
        raise CorruptCheckpointError(f"{where}: unrecognized version {fields.get('version')!r}")
    topic_id = fields.get("topic_id")
    if topic_id is None:
        raise CorruptCheckpointError(f"{where}: no topic_id line")
    try:
        uuid_bytes(topic_id)
    except InvalidArgumentError as err:
        raise CorruptCheckpointError(f"{where}: {err}") from err
    return PartitionMetadata(VERSION, topic_id)


def read_partition_metadata(partition_dir: Path) -> PartitionMetadata | None:
    """The directory's topic ID, None if it has no ``partition.metadata``."""
    path = Path(partition_dir) / PARTITION_METADATA
    if not path.exists():
        return None
    data = storage_call(path.read_bytes, what=f"reading {path}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptCheckpointError(f"{path}: not UTF-8 text") from err
    return parse_partition_metadata(text, str(path))


def write_partition_metadata(partition_dir: Path, topic_id: str, *, sync: bool = True) -> None:
    """Write the file atomically, byte for byte as Kafka's PartitionMetadataFile does;
    ``sync=False`` leaves the fsyncs to the caller (a batch of new partitions syncs together)."""
    uuid_bytes(topic_id)
    if topic_id in RESERVED_UUIDS:
        raise InvalidArgumentError(f"topic ID {topic_id} is reserved by Kafka")
    text = f"version: {VERSION}\ntopic_id: {topic_id}"
    write_atomically(Path(partition_dir) / PARTITION_METADATA, text.encode("ascii"), sync=sync)
