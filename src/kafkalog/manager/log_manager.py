"""LogManager: every partition log across the log directories (Kafka's kafka.log.LogManager).

Why: users manage topics, not single partitions. The manager locks each directory, loads every
partition in parallel at start (recovering after a crash from the directory's checkpoints),
places new partitions in the directory holding the fewest, keeps topic config overrides, runs
retention, flushing, checkpoints and producer expiry as periodic tasks on an injectable clock
(each also callable on demand), drives the log cleaner, deletes topics asynchronously, and shuts
down cleanly. Refuses: cleaning itself (``kafkalog.cleaner``) and replica movement between dirs.
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from kafkalog.cleaner.manager import CleaningResult, LogCleaner
from kafkalog.clock import SYSTEM_CLOCK, Clock
from kafkalog.errors import (
    InvalidConfigError,
    KafkaLogError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.manager import topic_intents as intents_
from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.dynamic_configs import DynamicConfigs, RunTimeConfigs
from kafkalog.manager.log_dir import LogDirectory, own_node, stored_configs
from kafkalog.manager.offline_dirs import OfflineLogDirs, load_directory
from kafkalog.manager.scheduler import Scheduler
from kafkalog.manager.server_config import ServerConfig, under_dynamic_broker_configs
from kafkalog.manager.shutdown import close_logs
from kafkalog.manager.tasks import ManagerTasks, schedule_tasks
from kafkalog.manager.topic_creation import (
    MAX_PARTITIONS,
    roll_forward,
)
from kafkalog.manager.topic_creator import TopicCreator
from kafkalog.storage.partition_metadata import (
    read_partition_metadata,
)
from kafkalog.types import (
    INT32_MAX,
    TopicPartition,
    check_int,
    is_internal_topic,
)

logger = logging.getLogger("kafkalog.manager")


class LogManager(RunTimeConfigs, TopicCreator):
    """Owns the logs of its directories. Thread-safe: the map and directory files are guarded by
    one lock; each Log guards itself."""

    def __init__(
        self,
        log_dirs: str | Path | Iterable[str | Path],
        default_config: LogConfig | None = None,
        clock: Clock | None = None,
        *,
        config: ManagerConfig | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        num_partitions: int = 1,
        coordinated_transactions: bool = False,
        node_id: int | None = None,
    ) -> None:
        """``partitions``: open only these (Kafka has no such mode). The directories are locked
        as always; the other partitions stay closed, keep their checkpoint entries, and are
        recovered at the next full load if the last shutdown was not clean. For a short job
        that touches a few partitions (the Spark sink's commit). Such a manager deletes no
        topic, and creates one only if every partition of it is among ``partitions`` and
        none is on disk (the sink's auto-creation). ``coordinated_transactions``: serve's
        coordinator times transactions out, so ``transaction.timeout.ms`` is off here.
        ``node_id``: the broker whose dynamic configs apply, when ``meta.properties`` names
        none (serve's ``node.id``)."""
        self._node_id = node_id
        self._coordinated_transactions = coordinated_transactions
        self._only = None if partitions is None else intents_.topic_partitions(partitions)
        self.num_partitions = check_int("num.partitions", num_partitions, 1, MAX_PARTITIONS)
        paths = (
            [Path(log_dirs)] if isinstance(log_dirs, str | Path) else [Path(d) for d in log_dirs]
        )
        if not paths:
            raise InvalidConfigError("log.dirs", "at least one log directory is needed")
        seen = [p.resolve() for p in paths]
        if len(set(seen)) != len(seen):
            raise InvalidConfigError("log.dirs", f"duplicate log directories in {paths}")
        self.default_config = default_config or LogConfig()
        self._static_default_config = self.default_config  # under no dynamic broker config
        self.clock = clock or SYSTEM_CLOCK
        self.config = config or ManagerConfig()
        self._lock = threading.RLock()
        self._dirs: list[LogDirectory] = []
        try:
            for p in paths:
                self._dirs.append(LogDirectory(p))
        except KafkaLogError:
            for d in self._dirs:
                d.release()
            raise
        # Copy-on-write: writers replace the whole map under the lock, readers take the current
        # one without it. The cleaner threads read it while holding their own lock, and the
        # manager holds its lock while calling into the cleaner; a locked read here would invert
        # that order and deadlock (seen in CI as a hang in close()).
        self._logs: dict[TopicPartition, tuple[Log, LogDirectory]] = {}
        self._close_lock = threading.Lock()
        self._topic_configs: dict[str, dict[str, str]] = {}
        self._pending_deletes: list[tuple[int, Path]] = []
        self._unflushed: list[Path] = []  # the last created topics' partitions, not yet synced
        self._unopened: dict[TopicPartition, LogDirectory] = {}  # a partial load's others
        self._offline = OfflineLogDirs()  # directories the disk failed while loading
        # derived views, rebuilt when the map they came from is replaced (Metadata, OffsetCommit
        # and FindCoordinator ask for them on every request)
        self._topics_of: tuple[object, Mapping[str, int]] = (None, MappingProxyType({}))
        self._topic_ids: dict[str, tuple[Log, str | None]] = {}
        # topic ID -> name, for the topics() snapshot it was built from
        self._names_by_id: tuple[object, Mapping[str, str]] = (None, MappingProxyType({}))
        self._closed = False
        try:
            self._load_logs()
            self.run_transaction_timeouts()  # a writer that crashed mid-transaction
        except BaseException:
            self._abandon()
            raise
        self.cleaner = LogCleaner(self.config.cleaner, self.logs, self.clock)
        self.scheduler = Scheduler(self.clock)
        self._schedule_tasks()

    @classmethod
    def from_server_config(
        cls,
        server: ServerConfig,
        clock: Clock | None = None,
        *,
        partitions: Iterable[TopicPartition] | None = None,
        coordinated_transactions: bool = False,
    ) -> LogManager:
        """The logs a ``server.properties`` describes: its ``log.dirs``, ``log.*`` defaults of
        every topic, manager and cleaner keys, and ``num.partitions`` of topics made uncounted."""
        return cls(
            server.log_dirs,
            server.log_defaults,
            clock,
            config=server.manager,
            partitions=partitions,
            num_partitions=server.broker.num_partitions,
            node_id=server.broker.node_id,
            coordinated_transactions=coordinated_transactions,
        )

    # --- start-up ---------------------------------------------------------------------------

    def _abandon(self) -> None:
        """A failed start: close what was opened, as after a crash, and unlock everything."""
        for log, _ in self._logs.values():
            log.close_without_flush()
        self._logs = {}
        for d in self._dirs:
            d.release()
        self._offline.release()
        self._closed = True

    def _load_logs(self) -> None:
        stored = stored_configs(
            [d.path for d in self._dirs], self.config.metadata_log_dir, self._node_id
        )
        self._topic_configs.update(stored.topics)
        # broker configs set at run time, through kafkalog or a Kafka broker before it
        self.dynamic_broker_configs = stored.broker_layers
        self._dynamic = DynamicConfigs(stored, self._write_dynamic_configs)
        self._own_level = str(own_node([d.path for d in self._dirs], self._node_id))
        self.metadata_log = stored  # what a KRaft broker's holds: its ACLs, quotas too
        self.default_config = under_dynamic_broker_configs(
            self.default_config, *stored.broker_layers
        )
        finished = intents_.finish_interrupted([d.path for d in self._dirs])
        before = {t: dict(c) for t, c in self._topic_configs.items()} if finished else {}
        for intent in finished:  # a crash's creation completed or rolled back, its deletion done
            if intent.op == intents_.CREATED:
                roll_forward(intent.new_topics, [d.path for d in self._dirs])
                self._topic_configs.update((t.name, dict(t.overrides)) for t in intent.new_topics)
            elif intent.op != intents_.ADD_PARTITIONS:
                for topic in intent.topics:
                    self._topic_configs.pop(topic, None)
        if finished:
            if self._topic_configs != before:
                self._write_topic_configs()
            intents_.clear(d.path for d in self._dirs)
        threads = self.config.num_recovery_threads_per_data_dir
        for d in list(self._dirs):
            load = load_directory(d, self._only, self._open_log, threads, self._offline)
            if load is None:
                self._dirs.remove(d)
                continue
            self._pending_deletes += [(self._delete_due(t.topic), p) for t, p in load.deleted]
            self._unopened.update((tp, d) for tp in load.unopened)
            for tp, _ in load.opened:
                if tp in self._logs:
                    other = self._logs[tp][1].path
                    raise KafkaLogError(f"partition {tp} is in both {other} and {d.path}")
            self._logs = {**self._logs, **{tp: (log, d) for tp, log in load.opened}}
        if not self._dirs:
            reasons = "; ".join(f"{p}: {why}" for p, why in self._offline.reasons.items())
            raise KafkaStorageError(f"every log directory is offline ({reasons})")
        logger.info("loaded %d logs from %d log dirs", len(self._logs), len(self._dirs))

    def _open_log(
        self, path: Path, tp: TopicPartition, recovery: int, start: int, clean: bool
    ) -> Log:
        return Log.open(
            path,
            self.topic_config(tp.topic),
            self.clock,
            recovery_point=recovery,
            log_start_offset=start,
            had_clean_shutdown=clean,
            producer_state_config=self.config.producer_state,
            log_dir_locked=True,
            # Kafka's UnifiedLog.remoteLogEnabled: never an internal topic
            remote_storage_system_enable=self.config.remote.remote_log_storage_system_enable
            and not is_internal_topic(tp.topic),
        )

    def _schedule_tasks(self) -> None:
        tasks = ManagerTasks(
            retention=self.run_retention,
            flush=self.run_flush,
            recovery_point_checkpoint=self.run_recovery_point_checkpoint,
            log_start_offset_checkpoint=self.run_log_start_offset_checkpoint,
            delete_logs=self.run_delete_logs,
            transaction_timeouts=self.run_transaction_timeouts,
            cleaner_tick=self._cleaner_tick,
            producer_expiration=self.run_producer_expiration,
            flush_new_topics=functools.partial(self.flush_new_topics, threads=1),
        )
        schedule_tasks(self.scheduler, self.config, tasks)

    # --- topics and partitions ----------------------------------------------------------------

    def _entry(self, topic: str, partition: int) -> tuple[Log, LogDirectory]:
        if not isinstance(topic, str):
            raise UnknownTopicOrPartitionError(f"no topic {topic!r}: a topic name is a str")
        check_int("partition", partition, 0, INT32_MAX)
        entry = self._logs.get(TopicPartition(topic, partition))
        if entry is None:
            offline = self._offline.error_for(TopicPartition(topic, partition))
            if offline is not None:
                raise offline
            if self._only is not None and TopicPartition(topic, partition) not in self._only:
                raise UnknownTopicOrPartitionError(
                    f"{topic}-{partition} was not opened: this log manager opened "
                    f"{len(self._only)} partitions only"
                )
            raise UnknownTopicOrPartitionError(f"no log for {topic}-{partition}")
        return entry

    def get_log(self, topic: str, partition: int = 0) -> Log:
        """The open Log of a partition; UnknownTopicOrPartitionError if there is none."""
        return self._entry(topic, partition)[0]

    def logs(self) -> dict[TopicPartition, Log]:
        """Every open Log by partition, in order (a consistent snapshot, no lock taken)."""
        current = self._logs  # one read of the reference: a consistent map without the lock
        return {tp: log for tp, (log, _) in sorted(current.items())}

    def topics(self) -> Mapping[str, int]:
        """Topic name -> number of partitions, in name order: a read-only view, the same object
        until a topic or partition comes or goes (every Metadata, OffsetCommit and
        FindCoordinator asks for it, and Metadata keeps answers while it is the same)."""
        current = self._logs
        source, counts = self._topics_of
        if source is not current:
            counted: dict[str, int] = {}
            for tp in [*current, *self._offline.partitions]:
                counted[tp.topic] = counted.get(tp.topic, 0) + 1
            counts = MappingProxyType(dict(sorted(counted.items())))
            self._topics_of = (current, counts)  # offline ones change only while loading
        return counts

    @property
    def offline_log_dirs(self) -> dict[Path, str]:
        """The log directories taken offline at load, each with the error that did it."""
        return self._offline.reasons

    def is_offline(self, topic: str, partition: int) -> bool:
        """Whether the partition's log directory is offline."""
        return TopicPartition(topic, partition) in self._offline.partitions

    def topic_names_by_id(self) -> Mapping[str, str]:
        """Every topic's name by its ID (topics without one left out): built once per
        ``topics()`` snapshot, so a request that names topics by ID costs no pass over them
        while no topic comes or goes."""
        known = self.topics()
        source, names = self._names_by_id
        if source is not known:
            found = {tid: t for t in known if (tid := self.topic_id(t)) is not None}
            names = MappingProxyType(found)
            self._names_by_id = (known, names)
        return names

    def topic_id(self, topic: str) -> str | None:
        """The topic's ID from its first partition's ``partition.metadata``; None for a topic
        written before kafkalog kept topic IDs."""
        offline = self._offline.partition_dir(TopicPartition(topic, 0))
        if offline is not None:
            meta = read_partition_metadata(offline)
            return None if meta is None else meta.topic_id
        log = self.get_log(topic, 0)
        cached = self._topic_ids.get(topic)
        if cached is not None and cached[0] is log:  # the file is written before the log opens
            return cached[1]
        meta = read_partition_metadata(log.directory)
        topic_id = None if meta is None else meta.topic_id
        self._topic_ids[topic] = (log, topic_id)
        return topic_id

    @property
    def log_dirs(self) -> list[Path]:
        return [d.path for d in self._dirs]

    def log_dir_of(self, topic: str, partition: int = 0) -> Path:
        """The log directory that holds the partition."""
        return self._entry(topic, partition)[1].path

    def delete_topic(self, topic: str) -> None:
        """Close the topic's logs and rename them ``<topic>-<p>.<uuid>-delete``; their files go
        after ``file.delete.delay.ms`` (``run_delete_logs``)."""
        with self._lock:
            self._check_open()
            self._check_whole(f"delete topic {topic!r}")
            self._offline.check_topic(topic)
            doomed = [tp for tp in self._logs if tp.topic == topic]
            if not doomed:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            due = self._delete_due(topic)
            self._flush_new_topics()
            dirs = [d.path for d in self._dirs]
            intents_.record(dirs, intents_.TopicIntent(intents_.DELETE, (topic,)))
            for tp in doomed:
                log, owner = self._logs[tp]
                self.cleaner.manager.abort_and_pause_cleaning(tp)
                self._logs = {k: v for k, v in self._logs.items() if k != tp}
                self.cleaner.manager.remove_partition(tp, owner.path)
                log.close()
                self._pending_deletes.append((due, intents_.mark_for_deletion(log.directory)))
            self._topic_configs.pop(topic, None)
            self._topic_ids.pop(topic, None)
            self._write_topic_configs()
            intents_.clear(dirs)
            self.run_checkpoints()

    def truncate_to(self, topic: str, partition: int, offset: int) -> bool:
        """Truncate a partition to ``offset`` as a follower would (Kafka's LogManager.truncateTo):
        any cleaning round on it is aborted first and its cleaner checkpoint clamped."""
        log, owner = self._entry(topic, partition)
        tp = TopicPartition(topic, partition)
        self.cleaner.manager.abort_and_pause_cleaning(tp)
        try:
            truncated = log.truncate_to(offset)
            self.cleaner.manager.maybe_truncate_checkpoint(owner.path, tp, log.log_end_offset)
        finally:
            self.cleaner.manager.resume_cleaning(tp)
        return truncated

    def _delete_due(self, topic: str) -> int:
        return self.clock.milliseconds() + self.topic_config(topic).file_delete_delay_ms

    def _write_topic_configs(self) -> None:
        for d in self._dirs:
            d.write_topic_configs(self._topic_configs)

    # --- background tasks, callable on demand -------------------------------------------------

    def run_retention(self) -> int:
        """Apply retention to every log whose policy has no compaction (compacted logs get theirs
        from the cleaner, as in Kafka); returns the number of segments deleted."""
        return sum(
            log.delete_old_segments() for log in self.logs().values() if not log.config.compact
        )

    def run_cleaner(self) -> list[CleaningResult]:
        """Compact every eligible log (filthiest first) until none is left eligible, then apply
        retention to compacted logs; returns what each cleaning round did."""
        self._check_open()
        return self.cleaner.run_once()

    def _cleaner_tick(self) -> None:
        if not self.cleaner.running:
            self.cleaner.run_once()

    def start(self) -> None:
        """Run the background tasks for real: the scheduler thread and the cleaner threads."""
        self._check_open()
        self.scheduler.start()
        self.cleaner.start()

    def run_flush(self) -> int:
        """Flush logs whose ``flush.ms`` has elapsed; returns how many were flushed."""
        return sum(1 for log in self.logs().values() if log.flush_if_due())

    def run_checkpoints(self) -> None:
        """Write each directory's recovery-point and log-start-offset checkpoints."""
        self._checkpoint(LogDirectory.checkpoint_logs)

    def run_recovery_point_checkpoint(self) -> None:
        """kafka-recovery-point-checkpoint: each directory's recovery points."""
        self._checkpoint(LogDirectory.checkpoint_recovery_points)

    def run_log_start_offset_checkpoint(self) -> None:
        """kafka-log-start-offset-checkpoint: each directory's log start offsets."""
        self._checkpoint(LogDirectory.checkpoint_log_start_offsets)

    def _checkpoint(
        self, write: Callable[[LogDirectory, list[tuple[TopicPartition, Log]]], None]
    ) -> None:
        with self._lock:
            for d in self._dirs:
                write(d, [(tp, log) for tp, (log, o) in self._logs.items() if o is d])

    def run_transaction_timeouts(self) -> int:
        """Abort transactions idle for ``transaction.timeout.ms``; returns how many."""
        timeout = self.config.transaction_timeout_ms
        logs = [] if self._coordinated_transactions else self.logs().values()
        return sum(len(log.abort_timed_out_transactions(timeout)) for log in logs)

    def run_producer_expiration(self) -> int:
        """Forget producers idle past ``producer.id.expiration.ms``; returns how many."""
        return sum(len(log.remove_expired_producers()) for log in self.logs().values())

    def run_delete_logs(self) -> int:
        """Remove the ``-delete`` directories whose delay has passed; returns how many."""
        now = self.clock.milliseconds()
        with self._lock:
            due = [p for t, p in self._pending_deletes if t <= now]
            self._pending_deletes = [(t, p) for t, p in self._pending_deletes if t > now]
        for path in due:
            shutil.rmtree(path, ignore_errors=True)
        return len(due)

    # --- shutdown -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaLogError("the log manager is closed")

    def _check_whole(self, action: str) -> None:
        if self._only is not None:
            raise KafkaLogError(f"cannot {action}: this log manager opened some partitions only")

    def close(self) -> None:
        """Stop the tasks, flush and close every log, write the checkpoints and the clean-shutdown
        marker of each directory, and release the locks."""
        with self._close_lock:
            if self._closed:
                return
            # The background threads take the manager lock (checkpoints, deletes), so they are
            # stopped before it is held: joining them under it could wait forever.
            self.scheduler.shutdown()
            self.cleaner.shutdown()
            with self._lock:
                try:
                    self._flush_new_topics()
                except KafkaLogError:  # the intent stays: the next start completes the creation
                    logger.exception("could not settle the topics created last")
                self._close_logs()

    def _close_logs(self) -> None:
        """Whatever fails (a full disk), every log is closed and every directory unlocked; the
        clean-shutdown marker is written only if everything before it succeeded."""
        try:
            close_logs(
                [log for log, _ in self._logs.values()],
                self._dirs,
                threads=self.config.num_recovery_threads_per_data_dir * max(1, len(self._dirs)),
                write_checkpoints=self.run_checkpoints,
                partial=self._only is not None,
            )
        finally:
            self._closed = True
            self._offline.release()  # no marker: the next open recovers them

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
