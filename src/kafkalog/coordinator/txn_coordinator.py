"""The transaction coordinator: transactional ids, their producer ids and epochs, and the
two-phase end of a transaction (Kafka's TransactionCoordinator, transaction versions 1 and 2).

Why: exactly-once needs one authority per transactional id that fences zombie producers (an
epoch bump on every InitProducerId), remembers which partitions a transaction touched, and turns
a commit or abort decision into markers in each of them. A decision is durable in
``__transaction_state`` (PrepareCommit / PrepareAbort) before the first marker is written, so a
crash between markers is finished at the next start, and the Complete state is written after
the last. Transactions left open longer than their ``transaction.timeout.ms`` are aborted with a
bumped epoch, so the abandoned producer is fenced. Every change runs under its id's lock, on the
event loop; file work goes to worker threads.

Transaction version 2 (KIP-890 part 2), which this broker finalizes: a client that ends its
transaction with EndTxn v5 gets the epoch bumped by every commit or abort, and the markers
carry the bumped epoch, so a late batch of the finished transaction is fenced in every
partition; when the bump exhausts the epochs a new producer id takes over once the markers
are written. Such a client adds partitions implicitly, by producing (Produce v12) or committing
offsets (TxnOffsetCommit v5). A client of version 1 (EndTxn up to v4, AddPartitionsToTxn) keeps
its epoch until InitProducerId; both kinds are served side by side, each id by its own rule.

Produce requests of a transactional producer are checked here first (Kafka's
``transaction.partition.verification.enable``, KIP-890 part 1): the partition must be in the
producer's ongoing transaction, under a lock the coordinator also takes when it decides, so no
batch can land after its transaction's marker and leave a hanging transaction.

Refuses: two-phase commit (KIP-939) and the expiry of idle transactional ids are not served.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.context import CoordinatorContext
from kafkalog.coordinator.group_member import wall_clock_ms
from kafkalog.coordinator.txn_store import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    NO_PRODUCER_ID,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TransactionMetadata,
    append_transaction_record,
    coordinator_epoch,
    load_transactions,
)
from kafkalog.errors import KafkaLogError, UnknownTopicOrPartitionError
from kafkalog.types import OFFSETS_TOPIC, TRANSACTION_TOPIC

if TYPE_CHECKING:
    from kafkalog.coordinator.group_coordinator import GroupCoordinator

logger = logging.getLogger("kafkalog.server")

RunInWorker = Callable[..., Awaitable[Any]]
EPOCH_EXHAUSTED = 2**15 - 2  # Kafka rotates the producer id at Short.MaxValue - 1
EPOCH_MAX = 2**15 - 1
TRANSACTION_VERSION_2 = 2
TopicPartition = tuple[str, int]


class TransactionCoordinator:
    """Every transactional id of this broker. ``start`` loads ``__transaction_state`` and
    finishes the decisions a crash interrupted; a task aborts timed-out transactions."""

    def __init__(self, ctx: CoordinatorContext, run: RunInWorker, groups: GroupCoordinator) -> None:
        self.ctx = ctx
        self.run = run
        self.groups = groups
        self.transactions: dict[str, TransactionMetadata] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._verify_locks: dict[str, threading.Lock] = {}
        self._verify_locks_lock = threading.Lock()
        self._timeouts: asyncio.Task[None] | None = None

    # --- start and stop ---------------------------------------------------------------------

    async def start(self) -> None:
        logs = [log for tp, log in self.ctx.manager.logs().items() if tp.topic == TRANSACTION_TOPIC]
        self.transactions = await self.run(load_transactions, logs)
        self.ctx.producer_ids.reserve_above(
            pid
            for m in self.transactions.values()
            for pid in (m.producer_id, m.next_producer_id)
            if pid != NO_PRODUCER_ID
        )
        if self.transactions:
            logger.info("loaded %d transactional ids", len(self.transactions))
        for meta in list(self.transactions.values()):
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                async with self._lock(meta.transactional_id):
                    await self._complete(meta, meta.state == PREPARE_COMMIT)
        self._timeouts = asyncio.create_task(self._abort_timed_out())

    async def stop(self) -> None:
        if self._timeouts is not None:
            self._timeouts.cancel()
            await asyncio.gather(self._timeouts, return_exceptions=True)

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    def _verify_lock(self, transactional_id: str) -> threading.Lock:
        with self._verify_locks_lock:
            return self._verify_locks.setdefault(transactional_id, threading.Lock())

    # --- produce verification (called from worker threads) ----------------------------------

    @contextlib.contextmanager
    def verified(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> Iterator[ErrorCode]:
        """Hold the id's decision lock while a transactional batch is appended; yields NONE if
        ``tp`` is in the producer's ongoing transaction, else the error to answer."""
        with self._verify_lock(transactional_id):
            meta = self.transactions.get(transactional_id)
            if meta is None or meta.producer_id != producer_id:
                yield ErrorCode.invalid_producer_id_mapping
            elif producer_epoch != meta.producer_epoch:
                yield ErrorCode.invalid_producer_epoch
            elif meta.state != ONGOING or tp not in meta.partitions:
                yield ErrorCode.invalid_txn_state
            else:
                yield ErrorCode.none

    # --- the state machine ------------------------------------------------------------------

    async def _persist(self, meta: TransactionMetadata) -> None:
        meta.last_update_ms = wall_clock_ms()
        await self.run(
            append_transaction_record,
            self.ctx.manager,
            meta,
            self.ctx.settings.transaction_partitions,
        )

    def _check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, ErrorCode]:
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return meta, ErrorCode.invalid_producer_id_mapping
        if producer_epoch != meta.producer_epoch:
            return meta, ErrorCode.producer_fenced
        return meta, ErrorCode.none

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional id."""
        if not transactional_id:
            return ErrorCode.invalid_request, -1, -1
        if not 0 < timeout_ms <= self.ctx.settings.transaction_max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        async with self._lock(transactional_id):
            meta = self.transactions.get(transactional_id)
            if meta is None:
                pid = await self.run(self.ctx.producer_ids.generate)
                meta = TransactionMetadata(transactional_id, pid, -1, timeout_ms)
            elif (
                producer_id >= 0
                and not (
                    producer_id == meta.producer_id
                    and producer_epoch in (meta.producer_epoch, meta.last_producer_epoch)
                )
                and not (  # the id a version 2 bump rotated away from, at its last epoch
                    producer_id == meta.previous_producer_id and producer_epoch >= EPOCH_EXHAUSTED
                )
            ):
                return ErrorCode.producer_fenced, -1, -1
            elif (
                producer_id >= 0
                and producer_epoch == meta.last_producer_epoch
                and meta.state == EMPTY
            ):
                return ErrorCode.none, meta.producer_id, meta.producer_epoch  # a retry
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                return ErrorCode.concurrent_transactions, -1, -1
            if meta.state == ONGOING:  # fence the old producer, abort what it left open
                code = await self._fence_and_abort(meta)
                meta = self.transactions[transactional_id]
                if code is not ErrorCode.none or meta.state != COMPLETE_ABORT:
                    return ErrorCode.concurrent_transactions, -1, -1  # the client retries
            bumped = dataclasses.replace(
                meta,
                state=EMPTY,
                partitions=set(),
                timeout_ms=timeout_ms,
                start_ms=-1,
                last_producer_epoch=meta.producer_epoch,
            )
            if meta.producer_epoch >= EPOCH_EXHAUSTED:
                bumped.previous_producer_id = meta.producer_id
                bumped.producer_id = await self.run(self.ctx.producer_ids.generate)
                bumped.producer_epoch, bumped.last_producer_epoch = 0, -1
            else:
                bumped.producer_epoch = meta.producer_epoch + 1
            try:
                await self._persist(bumped)
            except KafkaLogError as err:
                logger.warning("cannot record transactional id %s: %s", transactional_id, err)
                return ErrorCode.coordinator_not_available, -1, -1
            await self._set(bumped)
            return ErrorCode.none, bumped.producer_id, bumped.producer_epoch

    def _install(self, meta: TransactionMetadata) -> None:
        with self._verify_lock(meta.transactional_id):
            self.transactions[meta.transactional_id] = meta

    async def _set(self, meta: TransactionMetadata) -> None:
        """Install ``meta`` on a worker: the lock may be held by a produce's append."""
        await self.run(self._install, meta)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        client_transaction_version: int = 0,
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn and AddOffsetsToTxn (``client_transaction_version`` 0), and the
        implicit adds of a transaction version 2 client's Produce and TxnOffsetCommit (2):
        every partition's error."""
        known = self.ctx.manager.topics()
        unknown = [tp for tp in partitions if not 0 <= tp[1] < known.get(tp[0], 0)]
        if unknown:
            return {
                tp: ErrorCode.unknown_topic_or_partition
                if tp in unknown
                else ErrorCode.operation_not_attempted
                for tp in partitions
            }
        async with self._lock(transactional_id):
            meta, code = self._check_producer(transactional_id, producer_id, producer_epoch)
            if code is ErrorCode.none and meta is not None:
                if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    code = ErrorCode.concurrent_transactions
                elif meta.state != ONGOING or not set(partitions) <= meta.partitions:
                    code = await self._begin_or_extend(meta, partitions, client_transaction_version)
            return dict.fromkeys(partitions, code)

    async def _begin_or_extend(
        self, meta: TransactionMetadata, partitions: list[TopicPartition], version: int
    ) -> ErrorCode:
        added = dataclasses.replace(
            meta,
            state=ONGOING,
            partitions=meta.partitions | set(partitions),
            start_ms=meta.start_ms if meta.state == ONGOING else wall_clock_ms(),
            client_transaction_version=version,
        )
        try:
            await self._persist(added)
        except KafkaLogError as err:
            logger.warning("cannot record transaction %s: %s", meta.transactional_id, err)
            return ErrorCode.coordinator_not_available
        await self._set(added)
        return ErrorCode.none

    async def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_transaction_version: int = 0,
    ) -> tuple[ErrorCode, int, int]:
        """EndTxn: the error, and for a transaction version 2 client the producer id and epoch
        it goes on with (-1, -1 with an error, and always below version 2)."""
        async with self._lock(transactional_id):
            if client_transaction_version >= TRANSACTION_VERSION_2:
                return await self._end_v2(transactional_id, producer_id, producer_epoch, commit)
            meta, code = self._check_producer(transactional_id, producer_id, producer_epoch)
            if code is not ErrorCode.none or meta is None:
                return code, -1, -1
            done, pending = (
                (COMPLETE_COMMIT, PREPARE_COMMIT) if commit else (COMPLETE_ABORT, PREPARE_ABORT)
            )
            if meta.state == done:
                return ErrorCode.none, -1, -1  # a retry of the request that completed it
            if meta.state == pending:
                return ErrorCode.concurrent_transactions, -1, -1
            if meta.state != ONGOING:
                return ErrorCode.invalid_txn_state, -1, -1
            return await self._decide(meta, commit), -1, -1

    async def _end_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> tuple[ErrorCode, int, int]:
        """Kafka's endTransaction for a client of transaction version 2. The epoch a request
        names tells a retry from the next transaction's end: the id's epoch one above it is a
        retry of the end that bumped it (or, after the bump rotated the id, the previous id at
        the last epoch), and the same epoch ends the ongoing transaction, or aborts an empty
        one (the client may not know whether its produce added a partition)."""
        meta = self.transactions.get(transactional_id)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping, -1, -1
        retry_on_overflow = (
            meta.previous_producer_id == producer_id
            and producer_epoch == EPOCH_EXHAUSTED
            and meta.producer_epoch == 0
        )
        is_retry = meta.producer_epoch == producer_epoch + 1 or retry_on_overflow
        same = producer_epoch == meta.producer_epoch
        valid = (
            is_retry
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT)
            else (is_retry or same)
            if meta.state in (COMPLETE_COMMIT, COMPLETE_ABORT)
            else same
        )
        if meta.producer_id != producer_id and not retry_on_overflow:
            return ErrorCode.invalid_producer_id_mapping, -1, -1
        if not valid:
            return ErrorCode.producer_fenced, -1, -1
        current = ErrorCode.none, meta.producer_id, meta.producer_epoch
        refused = ErrorCode.invalid_txn_state, -1, -1
        if meta.state == ONGOING:
            return await self._end_and_answer(meta, commit)
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            retried = meta.state == (PREPARE_COMMIT if commit else PREPARE_ABORT)
            return (ErrorCode.concurrent_transactions, -1, -1) if retried else refused
        if meta.state == COMPLETE_COMMIT and commit:
            return current if is_retry else refused
        if meta.state == COMPLETE_ABORT and commit:
            return refused
        if meta.state in (COMPLETE_COMMIT, COMPLETE_ABORT) and is_retry:
            return current if meta.state == COMPLETE_ABORT else refused
        if meta.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and not commit:
            return await self._end_and_answer(meta, commit)  # an abort with nothing added
        return refused

    async def _end_and_answer(
        self, meta: TransactionMetadata, commit: bool
    ) -> tuple[ErrorCode, int, int]:
        """Decide with the epoch bump; the id and epoch the client goes on with are those of
        the Complete state, answered as soon as the decision is durable (as Kafka answers
        before its markers are written)."""
        code = await self._decide(meta, commit, bump=True)
        if code is not ErrorCode.none:
            return code, -1, -1
        now = self.transactions[meta.transactional_id]
        shown = now if now.state in (COMPLETE_COMMIT, COMPLETE_ABORT) else _completed(now, commit)
        return ErrorCode.none, shown.producer_id, shown.producer_epoch

    async def _decide(
        self, meta: TransactionMetadata, commit: bool, bump: bool = False
    ) -> ErrorCode:
        """Make the decision durable, then complete it. ``bump``: transaction version 2's
        prepare (Kafka's prepareAbortOrCommit), one epoch up, and a next producer id when
        that exhausts the epochs."""
        prepared = dataclasses.replace(meta, state=PREPARE_COMMIT if commit else PREPARE_ABORT)
        if bump:
            if meta.producer_epoch >= EPOCH_EXHAUSTED:
                try:
                    prepared.next_producer_id = await self.run(self.ctx.producer_ids.generate)
                except KafkaLogError as err:
                    logger.warning("no producer id for %s: %s", meta.transactional_id, err)
                    return ErrorCode.coordinator_not_available
            if not (meta.producer_epoch == EPOCH_MAX and not commit):
                prepared.producer_epoch = meta.producer_epoch + 1
            prepared.last_producer_epoch = meta.producer_epoch
            prepared.client_transaction_version = TRANSACTION_VERSION_2
            if meta.state != ONGOING:  # an abort with no partition: it starts and ends now
                prepared.start_ms = wall_clock_ms()
        try:
            await self._persist(prepared)
        except KafkaLogError as err:
            logger.warning("cannot record the end of %s: %s", meta.transactional_id, err)
            return ErrorCode.coordinator_not_available
        await self._set(prepared)  # from here no batch of it is let in
        return await self._complete(prepared, commit)

    async def _complete(self, meta: TransactionMetadata, commit: bool) -> ErrorCode:
        """Write the markers of a decided transaction, then its Complete state. A marker that
        cannot be written leaves the decision in place; the timeout task tries again."""
        try:
            offsets = await self.run(self._write_markers, meta, commit)
        except KafkaLogError as err:
            logger.warning("cannot finish transaction %s yet: %s", meta.transactional_id, err)
            return ErrorCode.none  # the decision is durable: the client's part is done
        for partition in offsets:
            self.groups.complete_transaction(meta.producer_id, partition, commit)
        completed = _completed(meta, commit)
        try:
            await self._persist(completed)
        except KafkaLogError as err:  # Prepare stays: finished again later, or at start
            logger.warning("cannot record the end of %s: %s", meta.transactional_id, err)
            return ErrorCode.none
        await self._set(completed)
        return ErrorCode.none

    def _write_markers(self, meta: TransactionMetadata, commit: bool) -> list[int]:
        """A marker in every partition of the transaction; returns the ``__consumer_offsets``
        partitions among them, whose pending offsets the group coordinator then settles."""
        marker = "COMMIT" if commit else "ABORT"
        epoch = coordinator_epoch(self.ctx.manager, meta.transactional_id)
        offsets = []
        for topic, partition in sorted(meta.partitions):
            try:
                log = self.ctx.manager.get_log(topic, partition)
            except UnknownTopicOrPartitionError:
                continue  # deleted since: Kafka's marker channel drops it too
            log.append_end_txn_marker(meta.producer_id, meta.producer_epoch, marker, epoch)
            if topic == OFFSETS_TOPIC:
                offsets.append(partition)
        if meta.partitions:
            self.ctx.on_append(meta.partitions)
        return offsets

    async def _fence_and_abort(self, meta: TransactionMetadata) -> ErrorCode:
        """Kafka's prepareFenceProducerEpoch and the abort that follows it, at this broker's
        transaction version (2): the abort's markers carry a bumped epoch, so the producer
        that left the transaction open is fenced in every partition."""
        return await self._decide(meta, False, bump=True)

    # --- timeouts ---------------------------------------------------------------------------

    async def abort_timed_out(self, now_ms: int) -> int:
        """Abort every transaction open longer than its timeout, and finish decided ones a
        failed marker left behind; returns how many were aborted."""
        aborted = 0
        for meta in list(self.transactions.values()):
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                async with self._lock(meta.transactional_id):
                    current = self.transactions.get(meta.transactional_id)
                    if current is not None and current.state == meta.state:
                        await self._complete(current, current.state == PREPARE_COMMIT)
            elif meta.state == ONGOING and meta.start_ms + meta.timeout_ms <= now_ms:
                async with self._lock(meta.transactional_id):
                    current = self.transactions.get(meta.transactional_id)
                    if current is None or current.state != ONGOING:
                        continue
                    logger.info(
                        "aborting transaction %s: open longer than its timeout (%d ms)",
                        current.transactional_id,
                        current.timeout_ms,
                    )
                    await self._fence_and_abort(current)
                    aborted += 1
        return aborted

    async def _abort_timed_out(self) -> None:
        interval = self.ctx.settings.transaction_abort_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.abort_timed_out(wall_clock_ms())
            except KafkaLogError:
                logger.exception("could not abort timed-out transactions; trying again later")


def _completed(meta: TransactionMetadata, commit: bool) -> TransactionMetadata:
    """The Complete state a decided transaction moves to once its markers are written (Kafka's
    prepareComplete): no partitions, and the next producer id with epoch 0 when a version 2
    bump exhausted the epochs of the current one."""
    completed = dataclasses.replace(
        meta,
        state=COMPLETE_COMMIT if commit else COMPLETE_ABORT,
        partitions=set(),
        next_producer_id=NO_PRODUCER_ID,
    )
    rotated = meta.client_transaction_version >= TRANSACTION_VERSION_2
    if rotated and meta.next_producer_id != NO_PRODUCER_ID:
        completed.producer_id, completed.producer_epoch = meta.next_producer_id, 0
        completed.previous_producer_id = meta.producer_id
    return completed
