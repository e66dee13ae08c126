"""The transaction coordinator of ``kafkalog serve`` without a socket: epochs and fencing, the
partition check on transactional produce, the two-phase end with its markers, timeouts, a
decision interrupted by a crash, transactional offset commits, and ``__transaction_state`` in
Kafka's format (read back by the loader and by ``dump-log --transaction-log-decoder``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkalog import Record
from kafkalog.coordinator.group_coordinator import GroupCoordinator
from kafkalog.coordinator.offsets_store import load_offsets, partition_for
from kafkalog.coordinator.txn_coordinator import TransactionCoordinator
from kafkalog.coordinator.txn_store import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    PREPARE_COMMIT,
    TransactionMetadata,
    append_transaction_record,
    load_transactions,
    transaction_key,
    transaction_value,
)
from kafkalog.protocol.wire import make
from kafkalog.records import MemoryRecords
from kafkalog.records.coordinator import decode
from kafkalog.types import OFFSETS_TOPIC, TRANSACTION_TOPIC
from server_helpers import as_request, broker_over, offset_commit_body, produce_body, request_module

pytestmark = pytest.mark.one_codec
MINUTE = 60_000


class Coordinators:
    """A broker's context with both coordinators started, as the transport starts them."""

    def __init__(self, path: Path, **props: Any) -> None:
        self.broker, self.manager = broker_over(path, **props)
        self.ctx = self.broker.context
        self.groups = GroupCoordinator(self.ctx, self._run)
        self.txns = TransactionCoordinator(self.ctx, self._run, self.groups)

    @staticmethod
    async def _run(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    async def start(self) -> None:
        await self.groups.start()
        await self.txns.start()
        self.ctx.transactions = self.txns

    async def stop(self) -> None:
        await self.txns.stop()
        await self.groups.stop()
        self.manager.close()

    def produce(
        self, txn: str | None, topic: str, partition: int, pid: int, epoch: int, seq: int = 0
    ) -> ErrorCode:
        data = transactional_batch(pid, epoch, seq)
        body = dataclasses.replace(produce_body(9, topic, partition, data), transactional_id=txn)
        response = self.broker.handle(as_request(0, 9, body))
        code: ErrorCode = response.responses[0].partition_responses[0].error_code
        return code


def transactional_batch(pid: int, epoch: int, seq: int) -> bytes:
    """One transactional record of the producer, value ``v<seq>``, at sequence ``seq``."""
    return bytes(
        MemoryRecords.build(
            [Record(b"v%d" % seq)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
    )


def run(path: Path, scenario: Callable[[Coordinators], Awaitable[None]], **props: Any) -> None:
    async def main() -> None:
        c = Coordinators(path, **props)
        await c.start()
        try:
            await scenario(c)
        finally:
            await c.stop()

    asyncio.run(main())


def markers(c: Coordinators, topic: str, partition: int) -> list[tuple[int, int, bool]]:
    """(producer id, epoch, is commit) of every control batch of the partition."""
    log = c.manager.get_log(topic, partition)
    out = []
    for b in MemoryRecords(log.read(0, 1 << 20).records.read()).batches():
        if b.is_control:
            key = next(iter(b)).key
            out.append((b.producer_id, b.producer_epoch, key is not None and key[3] == 1))
    return out


async def _end(c: Coordinators, *args: Any) -> ErrorCode:
    """EndTxn's error at transaction version 1 (its id and epoch are -1 there)."""
    code, _, _ = await c.txns.end_transaction(*args)
    return code


def test_each_init_bumps_the_epoch_and_fences_the_older_producer(tmp_path: Path) -> None:
    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        code, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert (code, epoch) == (ErrorCode.none, 0)
        code, pid2, epoch2 = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert (code, pid2, epoch2) == (ErrorCode.none, pid, 1)  # same id, the next epoch
        assert await c.txns.add_partitions("app", pid, 0, [("t", 0)]) == {
            ("t", 0): ErrorCode.producer_fenced
        }
        assert await _end(c, "app", pid, 0, True) == ErrorCode.producer_fenced
        assert await _end(c, "app", pid + 1, 1, True) == (ErrorCode.invalid_producer_id_mapping)
        assert c.produce("app", "t", 0, pid, 0) == ErrorCode.invalid_producer_epoch
        # a retry of the bump (KIP-360: the client names the epoch it had) is not a new bump
        assert await c.txns.init_producer_id("app", MINUTE, pid, 0) == (ErrorCode.none, pid, 1)
        assert (await c.txns.init_producer_id("app", MINUTE, pid, 7))[0] == (
            ErrorCode.producer_fenced
        )

    run(tmp_path, scenario)


def test_bad_timeouts_and_ids_are_refused(tmp_path: Path) -> None:
    async def scenario(c: Coordinators) -> None:
        assert (await c.txns.init_producer_id("app", 0, -1, -1))[0] == (
            ErrorCode.invalid_transaction_timeout
        )
        assert (await c.txns.init_producer_id("app", 900_001, -1, -1))[0] == (
            ErrorCode.invalid_transaction_timeout
        )
        assert (await c.txns.init_producer_id("", MINUTE, -1, -1))[0] == ErrorCode.invalid_request
        _, pid, _ = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert await c.txns.add_partitions("app", pid, 0, [("nope", 0), ("t", 0)]) == {
            ("nope", 0): ErrorCode.unknown_topic_or_partition,
            ("t", 0): ErrorCode.unknown_topic_or_partition,
        }
        assert await _end(c, "app", pid, 0, True) == ErrorCode.invalid_txn_state
        assert await _end(c, "ghost", 1, 0, True) == (ErrorCode.invalid_producer_id_mapping)

    run(tmp_path, scenario)


def test_produce_needs_the_partition_in_the_ongoing_transaction(tmp_path: Path) -> None:
    """KIP-890 part 1: a batch for a partition not added, or after the decision, is refused,
    so no batch can land after its transaction's marker."""

    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 2)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert c.produce("app", "t", 0, pid, epoch) == ErrorCode.invalid_txn_state
        assert c.produce(None, "t", 0, pid, epoch) == (
            ErrorCode.transactional_id_authorization_failed
        )
        await c.txns.add_partitions("app", pid, epoch, [("t", 0)])
        assert c.produce("app", "t", 0, pid, epoch) == ErrorCode.none
        assert c.produce("app", "t", 1, pid, epoch) == ErrorCode.invalid_txn_state
        assert c.produce("other", "t", 0, pid, epoch) == ErrorCode.invalid_producer_id_mapping
        assert await _end(c, "app", pid, epoch, True) == ErrorCode.none
        assert c.produce("app", "t", 0, pid, epoch, seq=1) == ErrorCode.invalid_txn_state
        assert c.manager.get_log("t", 1).log_end_offset == 0

    run(tmp_path, scenario)


def test_commit_and_abort_write_markers_and_the_state_log(tmp_path: Path) -> None:
    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 2)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        await c.txns.add_partitions("app", pid, epoch, [("t", 0), ("t", 1)])
        assert c.produce("app", "t", 0, pid, epoch) == ErrorCode.none
        assert c.manager.get_log("t", 0).last_stable_offset == 0  # undecided
        assert await _end(c, "app", pid, epoch, True) == ErrorCode.none
        assert await _end(c, "app", pid, epoch, True) == ErrorCode.none  # retry
        assert await _end(c, "app", pid, epoch, False) == (ErrorCode.invalid_txn_state)
        assert markers(c, "t", 0) == markers(c, "t", 1) == [(pid, epoch, True)]
        assert c.manager.get_log("t", 0).last_stable_offset == 2
        await c.txns.add_partitions("app", pid, epoch, [("t", 1)])
        assert c.produce("app", "t", 1, pid, epoch) == ErrorCode.none
        assert await _end(c, "app", pid, epoch, False) == ErrorCode.none
        assert markers(c, "t", 0) == [(pid, epoch, True)]
        assert markers(c, "t", 1) == [(pid, epoch, True), (pid, epoch, False)]
        meta = c.txns.transactions["app"]
        assert (meta.state, meta.partitions) == (COMPLETE_ABORT, set())
        logs = [lg for tp, lg in c.manager.logs().items() if tp.topic == TRANSACTION_TOPIC]
        loaded = load_transactions(logs)["app"]
        assert (loaded.producer_id, loaded.producer_epoch, loaded.state) == (
            pid,
            epoch,
            COMPLETE_ABORT,
        )
        states = [
            decode("transactions", r.key, r.value).value["transactionStatus"]  # type: ignore[index]
            for lg in logs
            for b in MemoryRecords(lg.read(0, 1 << 20).records.read()).batches()
            for r in b
        ]
        # Empty (init), Ongoing, PrepareCommit, CompleteCommit, Ongoing, PrepareAbort, CompleteAbort
        assert states == [0, 1, 2, 4, 1, 3, 5]

    run(tmp_path, scenario, **{"transaction.state.log.num.partitions": "1"})


def test_a_timed_out_transaction_is_aborted_with_a_bumped_epoch(tmp_path: Path) -> None:
    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        await c.txns.add_partitions("app", pid, epoch, [("t", 0)])
        assert c.produce("app", "t", 0, pid, epoch) == ErrorCode.none
        start = c.txns.transactions["app"].start_ms
        assert await c.txns.abort_timed_out(start + MINUTE - 1) == 0
        assert await c.txns.abort_timed_out(start + MINUTE) == 1
        assert markers(c, "t", 0) == [(pid, epoch + 1, False)]
        assert c.manager.get_log("t", 0).last_stable_offset == 2
        assert await _end(c, "app", pid, epoch, True) == ErrorCode.producer_fenced
        assert c.produce("app", "t", 0, pid, epoch, seq=1) == ErrorCode.invalid_producer_epoch
        assert (await c.txns.init_producer_id("app", MINUTE, -1, -1))[2] == epoch + 2

    run(tmp_path, scenario)


def test_init_of_a_new_instance_aborts_the_zombies_open_transaction(tmp_path: Path) -> None:
    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        await c.txns.add_partitions("app", pid, epoch, [("t", 0)])
        assert c.produce("app", "t", 0, pid, epoch) == ErrorCode.none
        code, pid2, epoch2 = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert (code, pid2, epoch2) == (ErrorCode.none, pid, epoch + 2)
        assert markers(c, "t", 0) == [(pid, epoch + 1, False)]
        assert c.txns.transactions["app"].state == 0  # Empty, ready for the new instance

    run(tmp_path, scenario)


def test_a_decision_a_crash_interrupted_is_finished_at_start(tmp_path: Path) -> None:
    """PrepareCommit is durable before the first marker: a broker that died between the two
    writes the markers when it starts again, and commits the transaction's offsets."""
    props = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}

    async def crashed(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        c.manager.create_topic(OFFSETS_TOPIC, 1)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        await c.txns.add_partitions("app", pid, epoch, [("t", 0), (OFFSETS_TOPIC, 0)])
        assert c.produce("app", "t", 0, pid, epoch) == ErrorCode.none
        await txn_offset_commit(c, "app", "grp", pid, epoch, offset=42)
        prepared = dataclasses.replace(c.txns.transactions["app"], state=PREPARE_COMMIT)
        append_transaction_record(c.manager, prepared, 1)  # and then the broker died

    async def restarted(c: Coordinators) -> None:
        meta = c.txns.transactions["app"]
        assert meta.state == COMPLETE_COMMIT
        assert [m[2] for m in markers(c, "t", 0)] == [True]
        assert [m[2] for m in markers(c, OFFSETS_TOPIC, 0)] == [True]
        assert c.groups.groups["grp"].offsets[("t", 0)].offset == 42

    run(tmp_path, crashed, **props)
    run(tmp_path, restarted, **props)


def test_markers_carry_the_transaction_log_partitions_leader_epoch(tmp_path: Path) -> None:
    """What a Kafka broker leaves after a restart: ``__transaction_state`` at leader epoch 2,
    and a partition whose last marker of the producer came from coordinator epoch 2. Our
    markers for the same transactional id carry 2 (Kafka's coordinator epoch is the leader
    epoch of the id's partition); with 0 the partition would refuse them as a zombie's."""
    from kafkalog.log.producer_batches import ProducerFields

    props = {"transaction.state.log.num.partitions": "1"}

    async def kafka_left(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        c.manager.create_topic(TRANSACTION_TOPIC, 1)
        meta = TransactionMetadata("app", 5, 0, MINUTE, COMPLETE_COMMIT)
        state = Record(transaction_value(meta), transaction_key("app"))
        c.manager.get_log(TRANSACTION_TOPIC, 0).append([state], leader_epoch=2)
        log = c.manager.get_log("t", 0)
        log.append([Record(b"kafka")], producer=ProducerFields(5, 0, 0, True), leader_epoch=2)
        log.append_end_txn_marker(5, 0, "COMMIT", 2)

    async def ours(c: Coordinators) -> None:
        code, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert (code, pid, epoch) == (ErrorCode.none, 5, 1)
        await c.txns.add_partitions("app", pid, epoch, [("t", 0)])
        assert c.produce("app", "t", 0, pid, epoch) == ErrorCode.none
        assert await _end(c, "app", pid, epoch, True) == ErrorCode.none
        assert c.txns.transactions["app"].state == COMPLETE_COMMIT
        log = c.manager.get_log("t", 0)
        last = list(MemoryRecords(log.read(0, 1 << 20).records.read()).batches())[-1]
        value = next(iter(last)).value
        assert last.is_control and value is not None
        assert (last.producer_epoch, int.from_bytes(value[2:6], "big")) == (1, 2)
        assert log.last_stable_offset == log.log_end_offset

    run(tmp_path, kafka_left, **props)
    run(tmp_path, ours, **props)


def test_ids_in_the_transaction_log_are_never_handed_out_again(tmp_path: Path) -> None:
    """A transactional id's producer id lives in ``__transaction_state`` even before its
    producer writes anything: the coordinator's start reserves past it, so a directory that
    lost its producer-id block file (or never had one: a Kafka broker's) repeats no id."""
    from kafkalog.server.producer_ids import BLOCK_SIZE, FILE_NAME

    props = {"transaction.state.log.num.partitions": "1"}
    first: list[int] = []

    async def before(c: Coordinators) -> None:
        _, pid, _ = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        first.append(pid)

    async def after(c: Coordinators) -> None:
        _, pid, _ = await c.txns.init_producer_id("other", MINUTE, -1, -1)
        assert pid == (first[0] // BLOCK_SIZE + 1) * BLOCK_SIZE

    run(tmp_path, before, **props)
    (tmp_path / FILE_NAME).unlink()
    run(tmp_path, after, **props)


async def txn_offset_commit(
    c: Coordinators, txn: str, group: str, pid: int, epoch: int, offset: int, version: int = 3
) -> ErrorCode:
    from kafkalog.server.txn_apis import txn_offset_commit as handle

    mod = request_module(28, version)
    body = make(
        mod,
        "TxnOffsetCommitRequest",
        transactional_id=txn,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            make(
                mod,
                "TxnOffsetCommitRequestTopic",
                name="t",
                partitions=(
                    make(
                        mod,
                        "TxnOffsetCommitRequestPartition",
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    response = await handle(c.groups, c.txns, c.ctx, as_request(28, version, body))
    code: ErrorCode = response.topics[0].partitions[0].error_code
    return code


def test_transactional_offsets_count_only_when_committed(tmp_path: Path) -> None:
    props = {"offsets.topic.num.partitions": "3"}

    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        c.manager.create_topic(OFFSETS_TOPIC, 3)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        # not added to the transaction yet: refused (AddOffsetsToTxn comes first)
        assert await txn_offset_commit(c, "app", "grp", pid, epoch, 5) == (
            ErrorCode.invalid_txn_state
        )
        tp = (OFFSETS_TOPIC, partition_for("grp", 3))

        def committed() -> int | None:
            entry = c.groups.group("grp").offsets.get(("t", 0))
            return None if entry is None else entry.offset

        expected = None
        for offset, commit in ((5, False), (7, True), (9, False)):
            await c.txns.add_partitions("app", pid, epoch, [tp])
            assert await txn_offset_commit(c, "app", "grp", pid, epoch, offset) == ErrorCode.none
            assert committed() == expected  # pending until the transaction ends
            await _end(c, "app", pid, epoch, commit)
            expected = offset if commit else expected
            assert committed() == expected
        assert c.groups.groups["grp"].offsets[("t", 0)].offset == 7
        logs = {p: c.manager.get_log(OFFSETS_TOPIC, p) for p in range(3)}
        loaded = load_offsets(logs)
        durable, open_rows = loaded.committed, loaded.open_transactions
        assert durable["grp"][("t", 0)].offset == 7 and open_rows == {}

    run(tmp_path, scenario, **props)


async def offset_commit(c: Coordinators, group: str, offset: int) -> ErrorCode:
    """A plain OffsetCommit of ``offset`` for partition t-0, by no member (a simple group)."""
    from kafkalog.server.group_offsets import offset_commit as handle

    body = offset_commit_body(group, offset)
    response = await handle(c.groups, c.ctx, as_request(8, 8, body))
    code: ErrorCode = response.topics[0].partitions[0].error_code
    return code


async def open_offsets_transaction(c: Coordinators) -> tuple[int, int]:
    """Topic t and a one-partition ``__consumer_offsets``; "app" with that partition added to
    its transaction. Its producer id and epoch."""
    c.manager.create_topic("t", 1)
    c.manager.create_topic(OFFSETS_TOPIC, 1)
    _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
    await c.txns.add_partitions("app", pid, epoch, [(OFFSETS_TOPIC, 0)])
    return pid, epoch


@pytest.mark.parametrize(
    ("plain_after", "expected"),
    [(False, 7), (True, 9)],
    ids=["transactional-commit-is-later", "plain-commit-is-later"],
)
def test_a_committed_transaction_replaces_only_an_older_offset_record(
    tmp_path: Path, plain_after: bool, expected: int
) -> None:
    """Kafka's OffsetMetadataManager.replayEndTransactionMarker: when a transaction's COMMIT
    arrives, its offset counts only over an offset whose record is older than its own. A
    plain commit written while the transaction was open, after its TxnOffsetCommit, stays,
    in the coordinator's memory and in what a restart (or a reader of the files) loads."""
    props = {"offsets.topic.num.partitions": "1"}

    async def scenario(c: Coordinators) -> None:
        pid, epoch = await open_offsets_transaction(c)
        if not plain_after:
            assert await offset_commit(c, "grp", 9) == ErrorCode.none
        assert await txn_offset_commit(c, "app", "grp", pid, epoch, 7) == ErrorCode.none
        if plain_after:
            assert await offset_commit(c, "grp", 9) == ErrorCode.none
        assert c.groups.group("grp").offsets[("t", 0)].offset == 9  # the transaction is open
        await _end(c, "app", pid, epoch, True)
        assert c.groups.group("grp").offsets[("t", 0)].offset == expected
        loaded = load_offsets({0: c.manager.get_log(OFFSETS_TOPIC, 0)})
        durable, open_offsets = loaded.committed, loaded.open_transactions
        assert durable["grp"][("t", 0)].offset == expected and open_offsets == {}

    async def restarted(c: Coordinators) -> None:
        assert c.groups.groups["grp"].offsets[("t", 0)].offset == expected

    run(tmp_path, scenario, **props)
    run(tmp_path, restarted, **props)


def test_deleting_a_groups_offsets_drops_them_from_its_open_transactions(tmp_path: Path) -> None:
    """DeleteGroups tombstones the offsets of the group's open transactions too (Kafka's
    OffsetMetadataManager.deleteAllOffsets), and a tombstone removes a pending offset (its
    replay): the transaction's later COMMIT brings no offset back, live or after a restart."""
    from kafkalog.server.group_offsets import delete_groups

    props = {"offsets.topic.num.partitions": "1"}

    async def scenario(c: Coordinators) -> None:
        pid, epoch = await open_offsets_transaction(c)
        assert await offset_commit(c, "other", 3) == ErrorCode.none  # another group: kept
        c.groups.group("grp")  # known to the coordinator, with no committed offset yet
        assert await txn_offset_commit(c, "app", "grp", pid, epoch, 7) == ErrorCode.none
        mod = request_module(42, 2)
        body = make(mod, "DeleteGroupsRequest", groups_names=("grp",))
        answer = await delete_groups(c.groups, c.ctx, as_request(42, 2, body))
        assert answer.results[0].error_code == ErrorCode.none
        await _end(c, "app", pid, epoch, True)
        assert ("t", 0) not in c.groups.group("grp").offsets
        durable = load_offsets({0: c.manager.get_log(OFFSETS_TOPIC, 0)}).committed
        assert "grp" not in durable or ("t", 0) not in durable["grp"]
        assert durable["other"][("t", 0)].offset == 3

    async def restarted(c: Coordinators) -> None:
        group = c.groups.groups.get("grp")
        assert group is None or ("t", 0) not in group.offsets
        assert c.groups.groups["other"].offsets[("t", 0)].offset == 3

    run(tmp_path, scenario, **props)
    run(tmp_path, restarted, **props)


def test_state_records_are_kafkas_transaction_log_format() -> None:
    """The bytes Kafka 4.3.1's TransactionLog.valueToBytes writes at value version 1 (a
    broker with transaction.version finalized): partitions grouped by topic, null while Empty,
    and the tagged previous/next producer ids and client transaction version when they are
    not their defaults. The vectors are Kafka's own (its generated TransactionLogValue
    serialized with MessageUtil.toVersionPrefixedBytes)."""
    meta = TransactionMetadata(
        "app", 1000, 3, MINUTE, ONGOING, {("b", 1), ("a", 0), ("b", 0)}, 111, 222,
        client_transaction_version=2,
    )  # fmt: skip
    assert transaction_key("app") == b"\x00\x00\x00\x03app"
    assert transaction_value(meta).hex() == (
        "000100000000000003e800030000ea600103026102000000000002620300000000000000010000"
        "000000000000de000000000000006f0102020002"
    )
    rotated = TransactionMetadata(
        "app", 1001, 0, MINUTE, COMPLETE_COMMIT, set(), 111, 222, previous_producer_id=1000,
        client_transaction_version=2,
    )  # fmt: skip
    assert transaction_value(rotated).hex() == (
        "000100000000000003e900000000ea60040100000000000000de000000000000006f0200080000"
        "0000000003e802020002"
    )
    decoded = decode("transactions", transaction_key("app"), transaction_value(meta))
    assert decoded.value_version == 1
    assert decoded.value["transactionPartitions"] == [
        {"topic": "a", "partitionIds": [0]},
        {"topic": "b", "partitionIds": [0, 1]},
    ]
    empty = dataclasses.replace(meta, state=0, partitions=set())
    assert transaction_value(empty)[2 + 8 + 2 + 4 + 1] == 0  # a null compact array
