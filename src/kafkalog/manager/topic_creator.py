"""The LogManager's creation of topics and partitions: a part of LogManager, apart for size.

Why: creating is the manager's one multi-step change of the topic map (an intent, partitions
placed and opened, a batch settled later) and reads best on its own. It uses the manager's
lock, logs, directories and topic configs; the checks, placement and durability it relies on
are ``topic_creation``'s and ``topic_intents``'. Refuses: deleting (the manager's), and
publishing part of a batch: the map is replaced whole, or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalog.errors import (
    InvalidArgumentError,
    KafkaLogError,
    UnknownTopicOrPartitionError,
)
from kafkalog.log.log import Log
from kafkalog.manager import topic_intents as intents_
from kafkalog.manager.log_dir import LogDirectory
from kafkalog.manager.manager_part import ManagerPart
from kafkalog.manager.topic_creation import (
    MAX_PARTITIONS,
    NewTopic,
    check_new_topic,
    new_topic,
    place_partitions,
    refuse_creating,
    sync_new_partitions,
)
from kafkalog.storage import filenames as fn
from kafkalog.storage.partition_metadata import write_partition_metadata
from kafkalog.types import TopicPartition, check_int

logger = logging.getLogger("kafkalog.manager")


class TopicCreator(ManagerPart):
    """CreateTopics and CreatePartitions for the LogManager (see the module docstring)."""

    _only: frozenset[TopicPartition] | None
    _unflushed: list[Path]  # the last created topics' partitions, not yet synced
    num_partitions: int

    if TYPE_CHECKING:  # LogManager's own

        def _check_whole(self, action: str) -> None: ...

        def _open_log(
            self, path: Path, tp: TopicPartition, recovery: int, start: int, clean: bool
        ) -> Log: ...

        def topic_id(self, topic: str) -> str | None: ...

    def create_topic(
        self,
        topic: str,
        partitions: int | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        topic_id: str | None = None,
    ) -> list[Log]:
        """Create ``partitions`` partition logs (``num.partitions`` if None); overrides are
        validated and persisted.

        Each partition directory gets a ``partition.metadata`` naming the topic ID (KIP-516): a
        fresh random one, or ``topic_id`` (a Kafka Uuid string) to match a broker's metadata."""
        count = self.num_partitions if partitions is None else partitions
        new = new_topic(topic, count, config, topic_id, self.default_config)
        created = self.create_topics([new])[topic]
        if isinstance(created, KafkaLogError):
            raise created
        return created

    def create_topics(
        self, topics: Sequence[NewTopic], *, settle: bool = True
    ) -> dict[str, list[Log] | KafkaLogError]:
        """Create several topics as one (Kafka's CreateTopics): one intent, one write of the
        topic configs and one round of fsyncs for them all. Each topic's logs, or why it was
        refused (it exists; a partial manager lacks its partitions). A topic that could never
        be created (``check_new_topic``) or a failure of the disk is raised, the second after
        rolling every topic of the batch back.

        ``settle=False`` (the broker's CreateTopics) returns once the intent naming the batch is
        synced and its partitions are made, as Kafka's controller answers once its metadata log
        has the topics: the batch is settled by ``flush_new_topics`` (a task due every 100 ms,
        and the next topic change), and a crash before that completes it at the next start."""
        names = [new.name for new in topics]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"a topic is named twice in {names}")
        for new in topics:
            check_new_topic(
                new,
                self.default_config,
                remote_storage_system_enable=self.config.remote.remote_log_storage_system_enable,
            )
        with self._lock:
            self._check_open()
            on_disk = [*self._logs, *self._unopened, *self._offline.partitions]
            refused, accepted = refuse_creating(topics, {tp.topic for tp in on_disk}, self._only)
            if not accepted:
                return {name: refused[name] for name in names}
            self._flush_new_topics()
            intent = intents_.TopicIntent.created(accepted)
            created: list[Log] = []
            try:
                intents_.record([d.path for d in self._dirs], intent)
                self._topic_configs.update((new.name, dict(new.overrides)) for new in accepted)
                wanted = [
                    (TopicPartition(new.name, p), new.topic_id)
                    for new in accepted
                    for p in range(new.partitions)
                ]
                pending = self._create_logs(wanted, created, sync=False)
            except BaseException:
                self._undo_create(intent, created)
                raise
            self._logs = {**self._logs, **pending}
            self._unflushed = [log.directory for log in created]
            if settle:
                try:
                    self._flush_new_topics()
                except BaseException:
                    self._undo_create(intent, created)
                    self._unflushed = []
                    raise
            made: dict[str, list[Log]] = {}
            for tp, (log, _) in pending.items():
                made.setdefault(tp.topic, []).append(log)
            return {name: made.get(name) or refused[name] for name in names}

    def create_partitions(self, topic: str, total: int) -> list[Log]:
        """Grow ``topic`` to ``total`` partitions (Kafka's CreatePartitions); the new ones carry
        the topic's ID. All of them or none, across a crash; a topic never shrinks."""
        check_int("total partitions", total, 1, MAX_PARTITIONS)
        with self._lock:
            self._check_open()
            self._check_whole(f"add partitions to topic {topic!r}")
            self._offline.check_topic(topic)
            current = sum(1 for tp in self._logs if tp.topic == topic)
            if current == 0:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            if total <= current:
                raise InvalidArgumentError(
                    f"Topic currently has {current} partitions, which is higher than or equal "
                    f"to the requested {total}."
                )
            topic_id = self.topic_id(topic)
            self._flush_new_topics()
            dirs = [d.path for d in self._dirs]
            intent = intents_.TopicIntent(intents_.ADD_PARTITIONS, (topic,), current)
            intents_.record(dirs, intent)
            created: list[Log] = []
            try:
                wanted = [(TopicPartition(topic, p), topic_id) for p in range(current, total)]
                pending = self._create_logs(wanted, created)
            except BaseException:
                self._undo_create(intent, created)
                raise
            self._logs = {**self._logs, **pending}
            intents_.clear(dirs)
            return created

    def _undo_create(self, intent: intents_.TopicIntent, created: list[Log]) -> None:
        """A creation (of topics, or of partitions) failed part-way (a full disk, no
        descriptors left): remove every trace of what it created."""
        self._logs = {tp: e for tp, e in self._logs.items() if e[0] not in created}
        for log in created:
            log.close_without_flush()
        if intent.op == intents_.CREATED:
            for topic in intent.topics:
                self._topic_configs.pop(topic, None)
        try:
            intents_.roll_back([d.path for d in self._dirs], intent)
            self._write_topic_configs()
            intents_.clear(d.path for d in self._dirs)
        except KafkaLogError:  # as a CreateTopics that timed out: the topics may yet exist
            then = "completes it" if intent.op == intents_.CREATED else "undoes it"
            logger.exception(
                "could not undo the %s of %s; the next start %s", intent.op, intent.topics, then
            )

    def _create_logs(
        self,
        wanted: Sequence[tuple[TopicPartition, str | None]],
        created: list[Log],
        *,
        sync: bool = True,
    ) -> dict[TopicPartition, tuple[Log, LogDirectory]]:
        """Open the ``wanted`` partitions (each with its topic ID), each put in ``created`` once
        made, then (``sync``) sync them all together; the caller publishes the map whole, so no
        reader sees part."""
        holding = [*(d for _, d in self._logs.values()), *self._unopened.values()]
        placed = place_partitions([tp for tp, _ in wanted], self._dirs, holding)
        pending: dict[TopicPartition, tuple[Log, LogDirectory]] = {}
        for (tp, topic_id), target in zip(wanted, placed, strict=True):
            log = self._open_log(target.path / fn.partition_dir_name(tp), tp, 0, 0, True)
            created.append(log)
            pending[tp] = (log, target)
            if topic_id is not None:
                write_partition_metadata(log.directory, topic_id, sync=False)
        if sync:
            sync_new_partitions([log.directory for log in created], [d.path for d in self._dirs])
        return pending

    def flush_new_topics(self, *, threads: int = 16) -> None:
        """Settle the last batch of created topics (Kafka's flush-metadata-file task, and more):
        their configs written, every new file and directory fsynced, ``threads`` at a time, the
        intent cleared. A no-op when there is none; a failure of the disk is raised and left
        for the next call, or for the next start to complete.

        The background task passes one thread: many threads returning from fsyncs at once each
        take the GIL back, and the event loop answering clients waits behind them (Metadata's
        median tripled while a 500-partition batch settled over 16 threads); a caller waiting
        for the batch wants the fsyncs' journal commits shared instead."""
        if not self._unflushed:  # the task's usual case, without the lock
            return
        with self._lock:
            self._flush_new_topics(threads)

    def _flush_new_topics(self, threads: int = 16) -> None:
        if not self._unflushed:
            return
        dirs = [d.path for d in self._dirs]
        self._write_topic_configs()
        sync_new_partitions(self._unflushed, dirs, threads=threads)
        intents_.clear(dirs)
        self._unflushed = []
