"""A tiered partition read from its remote store alone (KIP-405 objects), for a reader that
shares nothing with the writer: a Spark executor on another machine, with the bucket and no
log directory.

Why: the store is self-describing -- a folder per topic-partition, a manifest per whole copy --
so planning and reading need neither the writer's directory nor its metadata topic. The view
answers what the Spark source asks of a PartitionView over the remote segments only: where the
copies begin and end, the last stable offset at their end (from the last copy's producer
snapshot: the first offset of a transaction still open there), timestamps, batches.
Refuses: the local tail (not in the store; read it through the log directory or a broker), and
any write.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from kafkalog.log.view_remote import RemoteSide
from kafkalog.records.committed import AbortedTransaction, aborted_from_markers
from kafkalog.records.remote_log_metadata import TopicIdPartition
from kafkalog.records.scanner import AnyBatch
from kafkalog.storage.producer_snapshot import decode_snapshot
from kafkalog.types import TopicPartition

if TYPE_CHECKING:  # pyarrow's filesystems load only where a store is read
    from kafkalog.tiered.remote_tier import RemoteTier


class StoreView:
    """One partition's whole remote copies, as the store listed them when the view was made."""

    frozen = True

    def __init__(self, uri: str, topic_id_partition: TopicIdPartition) -> None:
        # pyarrow's filesystems load only where a store is read
        from kafkalog.tiered.remote_store import RemoteLogStore  # noqa: PLC0415
        from kafkalog.tiered.remote_tier import RemoteTier  # noqa: PLC0415

        self.uri = uri
        self.topic_id_partition = topic_id_partition
        tip = topic_id_partition
        self.topic_partition = TopicPartition(tip.topic, tip.partition)
        self.directory = f"{uri}#{tip.topic}-{tip.partition}-{tip.topic_id}"
        tier: RemoteTier = RemoteTier.from_store(RemoteLogStore.from_uri(uri), tip)
        self._side = RemoteSide(tier, tier.leader_epochs())
        self._segments = tier.segments()
        self._lso: int | None = None

    def segments(self) -> list[object]:
        return []

    def log_start_offset(self) -> int:
        return self._segments[0].start_offset if self._segments else 0

    def log_end_offset(self) -> int:
        return self._segments[-1].end_offset + 1 if self._segments else 0

    def last_stable_offset(self) -> int:
        """The first offset of a transaction open at the end of the copies (the producer
        snapshot copied with the last segment is the state there), else the end."""
        if self._lso is None:
            end = self.log_end_offset()
            if self._segments:
                from kafkalog.tiered.remote_store import IndexType  # noqa: PLC0415

                last = self._segments[-1]
                store = self._side.tier.store
                entries = decode_snapshot(store.fetch_index(last, IndexType.PRODUCER_SNAPSHOT))
                open_at = [
                    e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0
                ]
                end = min([end, *open_at])
            self._lso = end
        return self._lso

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        found = self._side.tier.offset_for_timestamp(
            timestamp, self.log_start_offset(), self._side.epoch_for
        )
        return None if found is None else found.offset

    def batches(self, start: int, end: int | None = None) -> Iterator[AnyBatch]:
        """The CRC-checked batches holding offsets in [start, end) (to the copies' end)."""
        stop = self.log_end_offset() if end is None else min(end, self.log_end_offset())
        yield from self._side.batches(max(start, self.log_start_offset()), stop)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTransaction]:
        return aborted_from_markers(self.batches(start), start, end)
