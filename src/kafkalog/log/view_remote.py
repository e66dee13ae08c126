"""What a PartitionView reads of a tiered partition's remote segments (KIP-405), found from the
files alone: the store a log directory's remote log manager writes to (named in
``kafkalog-remote-storage.json``), the partition's segments replayed from the
``__remote_log_metadata`` partitions beside it, its leader epochs from its checkpoint.

Why: the commands that only read (``consume``, ``get-offsets``) and Spark read a directory
they do not own; for a tiered topic its first records are in the store, and a view that ignored
them would start at the local log start offset and silently miss the rest.
Refuses: writing anything (it reads the metadata topic through views, never a Log), and
trusting the store's bytes unchecked (batches are CRC-checked like local ones).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalog.errors import CorruptCheckpointError, KafkaLogError
from kafkalog.records.remote_log_metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
    decode,
)
from kafkalog.records.scanner import AnyBatch, BatchScanner
from kafkalog.storage import filenames as fn
from kafkalog.storage.checkpoints import LeaderEpochCheckpointFile
from kafkalog.storage.partition_metadata import read_partition_metadata

if TYPE_CHECKING:  # the tier's module loads pyarrow's filesystems: only a tiered view needs it
    from kafkalog.tiered.remote_tier import RemoteTier

STORE_FILE = "kafkalog-remote-storage.json"
METADATA_TOPIC = "__remote_log_metadata"


def store_uri(log_dir: Path) -> str | None:
    """The remote store a log directory's remote log manager writes to, if it has one."""
    try:
        found = json.loads((log_dir / STORE_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise KafkaLogError(f"{log_dir / STORE_FILE} is not readable: {err}") from err
    uri = found.get("uri") if isinstance(found, dict) else None
    return uri if isinstance(uri, str) else None


class RemoteSide:
    """One partition's remote segments and leader epochs, as the files said when it was made."""

    def __init__(self, tier: RemoteTier, epochs: list[tuple[int, int]]) -> None:
        self.tier = tier
        self._epochs = epochs
        self._starts = [start for _epoch, start in epochs]

    @classmethod
    def load(
        cls, directory: Path, metadata_batches: Callable[[Path], Iterable[AnyBatch]]
    ) -> RemoteSide | None:
        """The remote side of the partition in ``directory``, None when its log directory has
        no store or the metadata names no finished segment of it. ``metadata_batches`` reads a
        metadata partition's batches (a view's)."""
        uri = store_uri(directory.parent)
        meta = read_partition_metadata(directory)
        if uri is None or meta is None:
            return None
        # pyarrow's filesystems load only for a tiered partition
        from kafkalog.tiered.remote_store import RemoteLogStore  # noqa: PLC0415
        from kafkalog.tiered.remote_tier import RemoteTier  # noqa: PLC0415

        tp = fn.parse_partition_dir_name(directory.name)
        tip = TopicIdPartition(meta.topic_id, tp.topic, tp.partition)
        tier = RemoteTier(RemoteLogStore.from_uri(uri), tip)
        tier.initialize(_events_of(tip, directory.parent, metadata_batches))
        if not tier.segments():
            return None
        try:
            epochs = LeaderEpochCheckpointFile(directory / fn.LEADER_EPOCH_CHECKPOINT).read()
        except (CorruptCheckpointError, FileNotFoundError):
            epochs = []
        return cls(tier, epochs)

    def epoch_for(self, offset: int) -> int | None:
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1][0] if i else None

    @property
    def start_offset(self) -> int:
        """Where the remote segments begin."""
        return self.tier.segments()[0].start_offset

    def batches(self, start: int, end: int) -> Iterator[AnyBatch]:
        """The CRC-checked batches of the remote segments holding offsets in [start, end)."""
        offset = start
        while offset < end:
            epoch = self.epoch_for(offset)
            segment = self.tier.segment_for(epoch, offset) if epoch is not None else None
            if segment is None:
                return
            data, _position = self.tier.segment_bytes_from(segment, offset)
            name = self.tier.store.object_name(segment, fn.LOG_FILE_SUFFIX)
            scan = BatchScanner(data, base_offset=segment.start_offset, file=name)
            for batch in scan:
                if batch.last_offset < offset:
                    continue
                if batch.base_offset >= end:
                    return
                yield batch
            if scan.error is not None:
                raise scan.error
            offset = segment.end_offset + 1


def _events_of(
    tip: TopicIdPartition, log_dir: Path, metadata_batches: Callable[[Path], Iterable[AnyBatch]]
) -> Iterator[RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate]:
    for partition_dir in sorted(log_dir.glob(f"{METADATA_TOPIC}-*")):
        if not partition_dir.name.removeprefix(f"{METADATA_TOPIC}-").isdigit():
            continue
        for batch in metadata_batches(partition_dir):
            if batch.is_control:
                continue
            for record in batch:
                if record.value is None:
                    continue
                event = decode(record.value)
                if (
                    isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate)
                    and event.segment_id.topic_id_partition == tip
                ):
                    yield event
