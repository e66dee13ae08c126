"""The remote log manager (KIP-405): copies the closed segments of remote-enabled logs to a
remote store, records every step in ``__remote_log_metadata``, hands each log its remote tier,
and applies ``retention.*`` to the whole log by deleting remote segments (Kafka's
RemoteLogManager with its RLMCopyTask and RLMExpirationTask, and the topic-based remote log
metadata manager).

Why: local retention may delete a segment only once a copy of it is whole in remote storage
and that fact is durable. Each copy is COPY_SEGMENT_STARTED, then the objects, then
COPY_SEGMENT_FINISHED, each event flushed to the metadata topic before the next step; each
deletion is DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED. A kill -9 between two
steps leaves a segment that started and never finished: it is never read, and ``sweep`` (at
start, and on every pass for what is not being copied) deletes it and any object set the
metadata does not name. A store that fails delays copies, and so local deletion, never data.

Refuses: compacted topics (Kafka's LogConfig refuses remote storage with cleanup.policy
compact), the follower side of replication (kafkalog is one broker), and the store's own I/O
(``kafkalog.tiered``).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from collections.abc import Iterable

from kafkalog.clock import SYSTEM_CLOCK, Clock
from kafkalog.errors import InvalidConfigError, KafkaLogError, KafkaStorageError
from kafkalog.log.log import Log
from kafkalog.log.view_remote import STORE_FILE
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.remote_log_config import RemoteLogManagerConfig
from kafkalog.manager.scheduler import Scheduler
from kafkalog.records import Record
from kafkalog.records.remote_log_metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    decode,
    encode,
    metadata_partition,
)
from kafkalog.storage.atomic import write_atomically
from kafkalog.storage.filenames import producer_snapshot_file
from kafkalog.storage.segment import LogSegment
from kafkalog.tiered.remote_store import LogSegmentData, RemoteLogStore
from kafkalog.tiered.remote_tier import RemoteTier
from kafkalog.types import uuid_string

logger = logging.getLogger("kafkalog.tiered")

METADATA_TOPIC = "__remote_log_metadata"
_State = RemoteLogSegmentState


def epoch_entries_in_range(
    entries: Iterable[tuple[int, int]], start: int, end: int
) -> list[tuple[int, int]]:
    """Kafka's LeaderEpochFileCache.epochEntriesInRange: the entries of [start, end), the one
    in force at ``start`` moved to begin there."""
    kept = [e for e in entries if e[1] < end]
    before = [e for e in kept if e[1] <= start]
    after = [e for e in kept if e[1] > start]
    return ([(before[-1][0], start)] if before else []) + after


def checkpoint_bytes(entries: list[tuple[int, int]]) -> bytes:
    """A leader-epoch checkpoint file's bytes (version 0)."""
    lines = ["0", str(len(entries)), *(f"{epoch} {offset}" for epoch, offset in entries)]
    return ("\n".join(lines) + "\n").encode()


def find_log_start_offset(tier: RemoteTier, log: Log) -> int:
    """Kafka's RemoteLogManager.findLogStartOffset: the first finished remote segment's start
    along the log's leader epochs from the earliest, else the local log start offset."""
    for epoch, _start in log.leader_epochs():
        found = [m for m in tier.segments() if any(e == epoch for e, _ in m.segment_leader_epochs)]
        if found:
            return found[0].start_offset
    return log.local_log_start_offset


def new_segment_id() -> str:
    """A random Uuid as Kafka prints it; like Kafka's Uuid.randomUuid, never one whose text
    starts with '-' (command lines would take it for an option)."""
    while True:
        text = uuid_string(os.urandom(16))
        if not text.startswith("-"):
            return text


class RemoteLogManager:
    """Tiered storage for the remote-enabled logs of one LogManager.

    Thread-safety: ``run_once`` and ``sweep`` take the manager's lock (one pass at a time);
    reads go through each log's RemoteTier and never wait for a pass."""

    def __init__(
        self,
        log_manager: LogManager,
        store: RemoteLogStore,
        config: RemoteLogManagerConfig | None = None,
        *,
        broker_id: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self._logs = log_manager
        self.store = store
        self.config = config or RemoteLogManagerConfig()
        self._broker_id = broker_id
        self._clock = clock or SYSTEM_CLOCK
        self._lock = threading.RLock()
        self._tiers: dict[TopicIdPartition, RemoteTier] = {}
        self._copying: set[RemoteLogSegmentId] = set()
        self._metadata_partitions = self.config.remote_log_metadata_topic_num_partitions
        self.scheduler = Scheduler(self._clock)
        self._name_store()
        self._load()

    @classmethod
    def from_config(
        cls, log_manager: LogManager, *, broker_id: int = 0, clock: Clock | None = None
    ) -> RemoteLogManager:
        """The remote log manager the log manager's broker config describes: the store at
        ``rsm.config.kafkalog.store.uri``, and a pass every
        ``remote.log.manager.task.interval.ms`` on its own scheduler (a copy of a large
        segment must not hold up the log manager's flushes and checkpoints); ``start`` runs
        it on a thread, ``scheduler.tick`` when the caller drives the clock."""
        config = log_manager.config.remote
        if not config.remote_log_storage_system_enable:
            raise InvalidConfigError("remote.log.storage.system.enable", "tiered storage is off")
        if config.store_uri is None:
            raise InvalidConfigError("rsm.config.kafkalog.store.uri", "no remote store is set")
        store = RemoteLogStore.from_uri(
            config.store_uri, timeout_ms=config.store_timeout_ms, attempts=config.store_attempts
        )
        manager = cls(
            log_manager, store, config, broker_id=broker_id, clock=clock or log_manager.clock
        )
        interval = config.remote_log_manager_task_interval_ms
        manager.scheduler.schedule(
            "remote-log-manager", manager.run_once, period_ms=interval, delay_ms=interval
        )
        return manager

    def start(self) -> None:
        """Run the scheduled passes on a thread of their own."""
        self.scheduler.start()

    def close(self) -> None:
        """Stop the passes (a pass under way finishes first); the logs stay the log
        manager's to close."""
        self.scheduler.shutdown()

    def _name_store(self) -> None:
        """Say in each log directory which store its tiered partitions use, so the commands
        that only read (and Spark) find their remote segments without being told."""
        if self.store.uri is None:
            return
        text = json.dumps({"uri": self.store.uri}) + "\n"
        for log_dir in self._logs.log_dirs:
            path = log_dir / STORE_FILE
            if not path.exists() or path.read_text() != text:
                write_atomically(path, text.encode())

    # --- metadata ---------------------------------------------------------------------------

    def _metadata_logs(self) -> list[Log]:
        """The metadata topic's partitions, created on first use (its partition count, once it
        exists, is the one that counts: events are placed by it)."""
        count = self._logs.topics().get(METADATA_TOPIC)
        if count is None:
            return self._logs.create_topic(
                METADATA_TOPIC,
                self._metadata_partitions,
                {"retention.ms": "-1", "cleanup.policy": "delete"},
            )
        self._metadata_partitions = count
        return [self._logs.get_log(METADATA_TOPIC, p) for p in range(count)]

    def _load(self) -> None:
        """Replay the metadata topic into one tier per remote-enabled log and attach them."""
        with self._lock:
            wanted = dict(self._remote_logs())
            events: dict[TopicIdPartition, list[RemoteLogMetadata]] = {t: [] for t in wanted}
            if self._logs.topics().get(METADATA_TOPIC) is not None or wanted:
                for log in self._metadata_logs():
                    for event in _events(log):
                        tip = _topic_id_partition(event)
                        if tip is not None and tip in events:
                            events[tip].append(event)
            for tip, log in wanted.items():
                tier = RemoteTier(self.store, tip)
                tier.initialize(events[tip])
                self._attach(tip, log, tier)

    def _attach(self, tip: TopicIdPartition, log: Log, tier: RemoteTier) -> None:
        """Hand the log its tier, and move its log start offset to where its records begin
        (Kafka's maybeUpdateLogStartOffsetOnBecomingLeader): the log start offset is
        checkpointed only now and then, so after a crash it can lie below remote segments
        whose deletion had begun."""
        self._tiers[tip] = tier
        log.tiering.attach(tier)
        start = find_log_start_offset(tier, log)
        epochs = log.leader_epochs()
        if epochs:  # only a log start offset moved up truncates them from the start: a crash
            # between that and the checkpoint leaves the epochs the later word
            start = max(start, epochs[0][1])
        if start > log.log_start_offset:
            log.maybe_increment_log_start_offset(min(start, log.high_watermark))
            logger.info("log start offset of %s moved to %d, as remote data starts", tip, start)

    def _remote_logs(self) -> list[tuple[TopicIdPartition, Log]]:
        found = []
        for tp, log in self._logs.logs().items():
            if not log.tiering.enabled or log.closed:
                continue
            topic_id = self._logs.topic_id(tp.topic)
            if topic_id is None:
                logger.error("%s has no topic ID; remote storage needs one", tp)
                continue
            found.append((TopicIdPartition(topic_id, tp.topic, tp.partition), log))
        return found

    def _publish(self, tier: RemoteTier, event: RemoteLogMetadata) -> None:
        """Append the event to its metadata partition and flush it, then fold it in: a step
        after this one may rely on it surviving a crash."""
        tip = tier.topic_id_partition
        partition = metadata_partition(tip.topic_id, tip.partition, self._metadata_partitions)
        log = self._metadata_logs()[partition]
        log.append([Record(encode(event), timestamp=self._clock.milliseconds())])
        log.flush()
        tier.apply(event)

    # --- the pass ---------------------------------------------------------------------------

    def run_once(self) -> int:
        """One pass over the remote-enabled logs: copy what is due, delete what total retention
        breaches, sweep what crashed half-way, then local retention. Returns segments copied."""
        copied = 0
        with self._lock:
            self._attach_new_logs()
            try:
                self._stop_disabled()
            except (KafkaStorageError, OSError) as err:
                logger.warning("deleting remote data of disabled topics stopped: %s", err)
            for tip, log in self._remote_logs():
                tier = self._tiers.get(tip)
                if tier is None or log.closed:
                    continue
                try:
                    if not log.config.remote_log_copy_disable:
                        copied += self.copy_log_segments(log, tier)
                    self.expire(log, tier)
                    self._sweep_tier(tier)
                except (KafkaStorageError, OSError) as err:  # the store: try again next pass
                    logger.warning("remote storage pass of %s stopped: %s", tip, err)
                log.delete_old_segments()
        return copied

    def _stop_disabled(self) -> None:
        """Tiers of logs whose ``remote.storage.enable`` was turned off (with
        ``remote.log.delete.on.disable``, as KIP-950 requires): the log start offset moves to
        the local segments, then every remote segment of the partition is deleted."""
        enabled = {tip for tip, _log in self._remote_logs()}
        for tip in [t for t in self._tiers if t not in enabled]:
            tier = self._tiers[tip]
            try:
                log = self._logs.get_log(tip.topic, tip.partition)
            except KafkaLogError:
                log = None  # the topic is gone; its remote data is orphaned, left to a sweep
            if log is not None and not log.closed:
                local_start = log.local_log_start_offset
                if local_start > log.log_start_offset:
                    log.maybe_increment_log_start_offset(min(local_start, log.high_watermark))
                    self._logs.run_log_start_offset_checkpoint()
                for metadata in tier.segments(None):
                    self._delete_segment(tier, metadata)
            del self._tiers[tip]
            logger.info("remote storage of %s turned off; its remote data deleted", tip)

    def _attach_new_logs(self) -> None:
        for tip, log in self._remote_logs():
            if tip not in self._tiers:
                self._attach(tip, log, RemoteTier(self.store, tip))

    def tier(self, topic: str, partition: int) -> RemoteTier | None:
        with self._lock:
            for tip, tier in self._tiers.items():
                if tip.topic == topic and tip.partition == partition:
                    return tier
        return None

    # --- copy -------------------------------------------------------------------------------

    def copy_log_segments(self, log: Log, tier: RemoteTier) -> int:
        """Kafka's RLMCopyTask.copyLogSegmentsToRemote: every closed segment from the one after
        the last copied offset whose next segment starts at or below the last stable offset
        (only committed records go remote), in order."""
        copied_offset = log.tiering.highest_offset
        lso = log.last_stable_offset
        if lso <= 0 or copied_offset >= lso:
            return 0
        from_offset = max(copied_offset + 1, log.log_start_offset)
        segments = list(log.segments)
        candidates = [
            (seg, nxt.base_offset)
            for seg, nxt in itertools.pairwise(segments)
            if nxt.base_offset > from_offset and nxt.base_offset <= lso
        ]
        for seg, next_base in candidates:
            self.copy_log_segment(log, tier, seg, next_base)
        return len(candidates)

    def copy_log_segment(self, log: Log, tier: RemoteTier, seg: LogSegment, next_base: int) -> None:
        """Kafka's RLMCopyTask.copyLogSegment."""
        end_offset = next_base - 1
        epochs = log.leader_epochs()
        segment_epochs = epoch_entries_in_range(epochs, seg.base_offset, next_base)
        if not segment_epochs:
            raise KafkaLogError(f"segment {seg.base_offset} of {log.directory.name} has no epoch")
        snapshot = producer_snapshot_file(log.directory, next_base)
        if not snapshot.exists():
            raise KafkaLogError(f"no producer snapshot at {next_base} of {log.directory.name}")
        segment_id = RemoteLogSegmentId(tier.topic_id_partition, new_segment_id())
        txn_index = seg.txn_index.path if seg.txn_index.path.exists() else None
        started = RemoteLogSegmentMetadata(
            segment_id,
            seg.base_offset,
            end_offset,
            seg.largest_timestamp(),
            self._broker_id,
            self._clock.milliseconds(),
            seg.size,
            tuple(segment_epochs),
            txn_index_empty=txn_index is None or txn_index.stat().st_size == 0,
        )
        self._copying.add(segment_id)
        try:
            self._publish(tier, started)
            data = LogSegmentData(
                seg.log.path,
                seg.offset_index_file,
                seg.time_index_file,
                txn_index,
                snapshot,
                checkpoint_bytes(epoch_entries_in_range(epochs, -1, next_base)),
                log_size=seg.size,
            )
            try:
                self.store.copy_log_segment_data(started, data)
            except KafkaStorageError:
                self._delete_segment(tier, started)  # Kafka cleans a failed copy at once
                raise
            self._publish(
                tier,
                RemoteLogSegmentMetadataUpdate(
                    segment_id,
                    self._clock.milliseconds(),
                    _State.COPY_SEGMENT_FINISHED,
                    self._broker_id,
                ),
            )
        finally:
            self._copying.discard(segment_id)
        log.tiering.update_highest_offset(end_offset)
        logger.info("copied %s to remote storage as %s", seg.log.path.name, segment_id.id)

    # --- deletion ---------------------------------------------------------------------------

    def _delete_segment(self, tier: RemoteTier, metadata: RemoteLogSegmentMetadata) -> None:
        """Kafka's deleteRemoteLogSegment: DELETE_SEGMENT_STARTED, the objects,
        DELETE_SEGMENT_FINISHED."""
        segment_id = metadata.segment_id
        if metadata.state is not _State.DELETE_SEGMENT_STARTED:
            self._publish(
                tier,
                RemoteLogSegmentMetadataUpdate(
                    segment_id,
                    self._clock.milliseconds(),
                    _State.DELETE_SEGMENT_STARTED,
                    self._broker_id,
                    metadata.custom_metadata,
                ),
            )
        self.store.delete_log_segment_data(metadata)
        self._publish(
            tier,
            RemoteLogSegmentMetadataUpdate(
                segment_id,
                self._clock.milliseconds(),
                _State.DELETE_SEGMENT_FINISHED,
                self._broker_id,
                metadata.custom_metadata,
            ),
        )

    def expire(self, log: Log, tier: RemoteTier) -> int:
        """Kafka's RLMExpirationTask.cleanupExpiredRemoteLogSegments for one lineage: remote
        segments below the log start offset, then those breaching ``retention.ms`` or
        ``retention.bytes`` of the whole log, oldest first, stopping at the first that stays.
        The log start offset moves past them before their objects go."""
        segments = tier.segments()
        if not segments:
            return 0
        config = log.config
        now = self._clock.milliseconds()
        log_start = log.log_start_offset
        cleanup_until = now - config.retention_ms if config.retention_ms > -1 else -1
        remaining = 0
        if config.retention_bytes > -1:
            highest = log.tiering.highest_offset
            only_local = sum(s.size for s in log.segments if s.base_offset > highest)
            total = only_local + sum(s.segment_size_in_bytes for s in segments)
            remaining = max(0, total - config.retention_bytes)
        doomed: list[RemoteLogSegmentMetadata] = []
        for metadata in segments:
            if metadata.segment_id in self._copying:
                break
            if metadata.end_offset < log_start:
                doomed.append(metadata)
                continue
            if cleanup_until >= 0 and metadata.max_timestamp_ms < cleanup_until:
                remaining = max(0, remaining - metadata.segment_size_in_bytes)
            elif remaining > 0 and remaining - metadata.segment_size_in_bytes >= 0:
                remaining -= metadata.segment_size_in_bytes
            else:
                break
            doomed.append(metadata)
        if not doomed:
            return 0
        new_start = doomed[-1].end_offset + 1
        if new_start > log_start:
            log.maybe_increment_log_start_offset(min(new_start, log.high_watermark))
            # durable before any object goes: a restart must not start the log below them
            # (Kafka checkpoints the log start offset only every minute)
            self._logs.run_log_start_offset_checkpoint()
        for metadata in doomed:
            self._delete_segment(tier, metadata)
        logger.info(
            "deleted %d remote segment(s) of %s; log start offset %d",
            len(doomed),
            tier.topic_id_partition.topic,
            log.log_start_offset,
        )
        return len(doomed)

    def sweep(self) -> int:
        """Delete what a crash left half-way in every tier: copies that started and never
        finished (and are not being made now), deletions that started, and object sets no
        metadata names. Returns how many segments went."""
        with self._lock:
            return sum(self._sweep_tier(tier) for tier in list(self._tiers.values()))

    def _sweep_tier(self, tier: RemoteTier) -> int:
        swept = 0
        for metadata in tier.segments(None):
            unfinished = metadata.state is _State.COPY_SEGMENT_STARTED
            if unfinished and metadata.segment_id in self._copying:
                continue
            if unfinished or metadata.state is _State.DELETE_SEGMENT_STARTED:
                self._delete_segment(tier, metadata)
                swept += 1
        known = {m.segment_id.id for m in tier.segments(None)}
        for start, segment in self.store.object_sets(tier.topic_id_partition):
            if segment in known:
                continue
            orphan = RemoteLogSegmentMetadata(
                RemoteLogSegmentId(tier.topic_id_partition, segment),
                start, start, -1, self._broker_id, 0, 0, ((0, start),),
            )  # fmt: skip
            self.store.delete_log_segment_data(orphan)
            logger.info("deleted orphaned remote objects of segment %s", segment)
            swept += 1
        return swept


def _events(log: Log) -> Iterable[RemoteLogMetadata]:
    offset = log.log_start_offset
    while offset < log.high_watermark:
        records = log.read_records(offset)
        if not records:
            break
        for record in records:
            if record.value is not None:
                yield decode(record.value)
        offset = records[-1].offset + 1


def _topic_id_partition(event: RemoteLogMetadata) -> TopicIdPartition | None:
    if isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
        return event.segment_id.topic_id_partition
    return None
