"""Transaction version 2 (KIP-890 part 2) in the coordinator of ``kafkalog serve``, without a
socket: every EndTxn v5 bumps the epoch and its markers carry the bumped one, a retry is
told from the next transaction's end by its epoch, an abort with nothing added still bumps,
the last epoch hands over to a new producer id, partitions join by Produce v12 and
TxnOffsetCommit v5, a decision a crash interrupted completes with its bump, and version 1
clients go on beside version 2 ones. The Java client's own run of all this is in
test_server_transactions; the hand-over with Kafka in test_kafka_oracle_serve."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkalog.coordinator.offsets_store import partition_for
from kafkalog.coordinator.txn_coordinator import EPOCH_EXHAUSTED
from kafkalog.coordinator.txn_store import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    PREPARE_COMMIT,
    append_transaction_record,
    load_transactions,
)
from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import decode_request
from kafkalog.server.apis import SUPPORTED_VERSIONS, handle_api_versions
from kafkalog.server.produce import handle_produce
from kafkalog.server.txn_implicit import add_produced_partitions
from kafkalog.types import OFFSETS_TOPIC, TRANSACTION_TOPIC, IsolationLevel
from server_helpers import as_request, frame, produce_body, request_module
from test_server_txn_coordinator import (
    MINUTE,
    Coordinators,
    markers,
    run,
    transactional_batch,
    txn_offset_commit,
)

pytestmark = pytest.mark.one_codec
V2 = 2


async def produce(
    c: Coordinators, txn: str, topic: str, partition: int, pid: int, epoch: int, seq: int = 0
) -> ErrorCode:
    """A transactional Produce v12 as KafkaApis runs it: the implicit add, then the append."""
    data = transactional_batch(pid, epoch, seq)
    body = dataclasses.replace(produce_body(12, topic, partition, data), transactional_id=txn)
    request = as_request(0, 12, body)
    adds = await add_produced_partitions(c.txns, c.ctx, request)
    response = await asyncio.to_thread(handle_produce, c.ctx, request, adds)
    code: ErrorCode = response.responses[0].partition_responses[0].error_code
    return code


async def end(c: Coordinators, txn: str, pid: int, epoch: int, commit: bool) -> tuple[Any, ...]:
    return await c.txns.end_transaction(txn, pid, epoch, commit, V2)


def test_every_end_bumps_the_epoch_and_its_markers_carry_it(tmp_path: Path) -> None:
    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert await produce(c, "app", "t", 0, pid, epoch) == ErrorCode.none
        meta = c.txns.transactions["app"]
        assert (meta.state, meta.partitions, meta.client_transaction_version) == (
            ONGOING, {("t", 0)}, V2,
        )  # fmt: skip
        assert await end(c, "app", pid, epoch, True) == (ErrorCode.none, pid, epoch + 1)
        assert markers(c, "t", 0) == [(pid, epoch + 1, True)]
        # the answer was lost: the same request again is a retry, answered alike
        assert await end(c, "app", pid, epoch, True) == (ErrorCode.none, pid, epoch + 1)
        assert (await end(c, "app", pid, epoch, False))[0] == ErrorCode.invalid_txn_state
        # a late batch of the finished transaction is fenced by the bump
        assert await produce(c, "app", "t", 0, pid, epoch, seq=1) == (
            ErrorCode.invalid_producer_epoch
        )
        # the next transaction, at the epoch the commit answered
        assert await produce(c, "app", "t", 0, pid, epoch + 1) == ErrorCode.none
        assert await end(c, "app", pid, epoch + 1, False) == (ErrorCode.none, pid, epoch + 2)
        assert markers(c, "t", 0) == [(pid, epoch + 1, True), (pid, epoch + 2, False)]
        log = c.manager.get_log("t", 0)
        assert log.last_stable_offset == log.log_end_offset == 4
        committed = log.read(0, 1 << 20, isolation=IsolationLevel.READ_COMMITTED)
        assert [t.producer_id for t in committed.aborted_transactions or ()] == [pid]
        # a batch naming another producer id under this transactional id: refused, not added
        assert await produce(c, "app", "t", 0, pid + 1, 0) == (
            ErrorCode.invalid_producer_id_mapping
        )
        # an epoch from before the last end, not its retry: fenced
        assert (await end(c, "app", pid, epoch, True))[0] == ErrorCode.producer_fenced
        assert (await end(c, "ghost", pid, epoch, True))[0] == (
            ErrorCode.invalid_producer_id_mapping
        )

    run(tmp_path, scenario)


def test_an_abort_with_nothing_added_still_bumps_the_epoch(tmp_path: Path) -> None:
    """A version 2 client cannot know whether its produce reached the coordinator, so it ends
    every transaction it began; an abort of one with no partition moves the epoch on and
    writes no marker. A commit of nothing is an invalid transition, as in Kafka."""

    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert (await end(c, "app", pid, epoch, True))[0] == ErrorCode.invalid_txn_state
        assert await end(c, "app", pid, epoch, False) == (ErrorCode.none, pid, epoch + 1)
        assert c.txns.transactions["app"].state == COMPLETE_ABORT
        assert await end(c, "app", pid, epoch, False) == (ErrorCode.none, pid, epoch + 1)
        assert await end(c, "app", pid, epoch + 1, False) == (ErrorCode.none, pid, epoch + 2)
        assert c.manager.get_log("t", 0).log_end_offset == 0  # no marker

    run(tmp_path, scenario)


def _exhaust(c: Coordinators, transactional_id: str) -> int:
    """Put the id at the last epoch a client may use; the epoch."""
    meta = dataclasses.replace(
        c.txns.transactions[transactional_id], producer_epoch=EPOCH_EXHAUSTED
    )
    append_transaction_record(c.manager, meta, 1)
    c.txns.transactions[transactional_id] = meta
    return EPOCH_EXHAUSTED


def test_the_last_epoch_hands_over_to_a_new_producer_id(tmp_path: Path) -> None:
    """Kafka's overflow rule: the end at epoch Short.MaxValue - 1 writes its markers at
    Short.MaxValue and answers a new producer id at epoch 0; a retry from the old id at the
    old epoch is recognised; the new id produces from sequence 0. The hand-over survives a
    restart (the previous id is in the state record)."""
    props = {"transaction.state.log.num.partitions": "1"}

    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        _, pid, _ = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        epoch = _exhaust(c, "app")
        assert await produce(c, "app", "t", 0, pid, epoch) == ErrorCode.none
        code, new_pid, new_epoch = await end(c, "app", pid, epoch, True)
        assert code is ErrorCode.none and new_pid != pid and new_epoch == 0
        assert markers(c, "t", 0) == [(pid, epoch + 1, True)]
        assert await end(c, "app", pid, epoch, True) == (ErrorCode.none, new_pid, 0)
        assert await produce(c, "app", "t", 0, new_pid, 0) == ErrorCode.none
        assert await end(c, "app", new_pid, 0, True) == (ErrorCode.none, new_pid, 1)

    async def restarted(c: Coordinators) -> None:
        meta = c.txns.transactions["app"]
        assert (meta.state, meta.producer_epoch, meta.client_transaction_version) == (
            COMPLETE_COMMIT, 1, V2,
        )  # fmt: skip
        assert meta.previous_producer_id != meta.producer_id
        # an id handed out before the restart is never handed out again
        _, other, _ = await c.txns.init_producer_id("other", MINUTE, -1, -1)
        assert other > meta.producer_id

    run(tmp_path, scenario, **props)
    run(tmp_path, restarted, **props)


def test_a_decision_a_crash_interrupted_completes_with_its_bump(tmp_path: Path) -> None:
    """PrepareCommit at the bumped epoch, with a next producer id, is durable and then the
    broker dies before the markers: the next start writes them at the bumped epoch and moves
    the id over."""
    props = {"transaction.state.log.num.partitions": "1"}
    ids: dict[str, int] = {}

    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        _, pid, _ = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        epoch = _exhaust(c, "app")
        assert await produce(c, "app", "t", 0, pid, epoch) == ErrorCode.none
        prepared = dataclasses.replace(
            c.txns.transactions["app"],
            state=PREPARE_COMMIT,
            producer_epoch=epoch + 1,
            last_producer_epoch=epoch,
            next_producer_id=pid + 7,
        )
        append_transaction_record(c.manager, prepared, 1)  # and then the broker died
        ids.update(pid=pid, next=pid + 7)

    async def restarted(c: Coordinators) -> None:
        assert markers(c, "t", 0) == [(ids["pid"], EPOCH_EXHAUSTED + 1, True)]
        meta = c.txns.transactions["app"]
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (
            COMPLETE_COMMIT, ids["next"], 0,
        )  # fmt: skip
        _, fresh, _ = await c.txns.init_producer_id("other", MINUTE, -1, -1)
        assert fresh > ids["next"]  # the next id was reserved from the Prepare record

    run(tmp_path, scenario, **props)
    run(tmp_path, restarted, **props)


def test_txn_offset_commit_v5_adds_the_offsets_partition(tmp_path: Path) -> None:
    props = {"offsets.topic.num.partitions": "3"}

    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        c.manager.create_topic(OFFSETS_TOPIC, 3)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        # version 3 still needs AddOffsetsToTxn first
        assert await txn_offset_commit(c, "app", "grp", pid, epoch, 5) == (
            ErrorCode.invalid_txn_state
        )
        assert await txn_offset_commit(c, "app", "grp", pid, epoch, 5, 5) == ErrorCode.none
        tp = (OFFSETS_TOPIC, partition_for("grp", 3))
        assert c.txns.transactions["app"].partitions == {tp}
        assert ("t", 0) not in c.groups.group("grp").offsets  # pending until the commit
        assert (await end(c, "app", pid, epoch, True))[0] == ErrorCode.none
        assert c.groups.group("grp").offsets[("t", 0)].offset == 5
        # a fenced producer's offsets are refused, and do not open a transaction
        assert await txn_offset_commit(c, "app", "grp", pid, epoch, 6, 5) == (
            ErrorCode.producer_fenced
        )
        assert c.txns.transactions["app"].state == COMPLETE_COMMIT

    run(tmp_path, scenario, **props)


def test_version_1_and_version_2_clients_side_by_side(tmp_path: Path) -> None:
    """In one partition: a version 1 client (AddPartitionsToTxn, Produce v9, EndTxn v4) keeps
    its epoch across transactions, a version 2 client's moves on each end; each is fenced
    and retried by its own rule, and read_committed readers see both decisions."""

    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        _, old, old_epoch = await c.txns.init_producer_id("old", MINUTE, -1, -1)
        _, new, new_epoch = await c.txns.init_producer_id("new", MINUTE, -1, -1)
        for round_ in range(2):
            await c.txns.add_partitions("old", old, old_epoch, [("t", 0)])
            assert c.produce("old", "t", 0, old, old_epoch, seq=round_) == ErrorCode.none
            assert await produce(c, "new", "t", 0, new, new_epoch + round_) == ErrorCode.none
            assert await c.txns.end_transaction("old", old, old_epoch, True) == (
                ErrorCode.none, -1, -1,
            )  # fmt: skip
            assert await end(c, "new", new, new_epoch + round_, round_ == 0) == (
                ErrorCode.none, new, new_epoch + round_ + 1,
            )  # fmt: skip
        assert markers(c, "t", 0) == [
            (old, old_epoch, True), (new, new_epoch + 1, True),
            (old, old_epoch, True), (new, new_epoch + 2, False),
        ]  # fmt: skip
        # a version 1 end with the version 2 client's old epoch is simply fenced
        assert (await c.txns.end_transaction("new", new, new_epoch, True))[0] == (
            ErrorCode.producer_fenced
        )
        logs = [lg for tp, lg in c.manager.logs().items() if tp.topic == TRANSACTION_TOPIC]
        loaded = load_transactions(logs)
        assert loaded["old"].client_transaction_version == 0
        assert loaded["new"].client_transaction_version == V2

    run(tmp_path, scenario)


def test_api_versions_finalizes_transaction_version_2(tmp_path: Path) -> None:
    """What Kafka's producer turns transaction version 2 on from (ApiVersions v3+), and the
    versions such a client needs: Produce 12, EndTxn 5, TxnOffsetCommit 5."""

    async def scenario(c: Coordinators) -> None:
        mod = request_module(ApiKey.API_VERSIONS, 4)
        body = mod.ApiVersionsRequest(client_software_name="t", client_software_version="1")
        request = decode_request(frame(ApiKey.API_VERSIONS, 4, body)[4:], SUPPORTED_VERSIONS)
        answer = handle_api_versions(c.ctx, request)
        finalized = {f.name: (f.min_version_level, f.max_version_level)
                     for f in answer.finalized_features}  # fmt: skip
        assert finalized["transaction.version"] == (2, 2)
        assert answer.finalized_features_epoch >= 0
        supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
        assert supported["transaction.version"] == (0, 2)
        versions = {a.api_key: a.max_version for a in answer.api_keys}
        assert versions[ApiKey.PRODUCE] == 12
        assert versions[ApiKey.END_TXN] == versions[ApiKey.TXN_OFFSET_COMMIT] == 5
        old = handle_api_versions(c.ctx, dataclasses.replace(request, api_version=2))
        assert not hasattr(old, "finalized_features")

    run(tmp_path, scenario)


def test_a_full_disk_at_the_decision_leaves_the_epoch_for_the_retry(tmp_path: Path) -> None:
    """The PrepareCommit record cannot be written (the disk is full): the client is told
    COORDINATOR_NOT_AVAILABLE, nothing is bumped or installed, and its retry of the same
    end, once there is room, commits with the one bump."""

    async def scenario(c: Coordinators) -> None:
        c.manager.create_topic("t", 1)
        _, pid, epoch = await c.txns.init_producer_id("app", MINUTE, -1, -1)
        assert await produce(c, "app", "t", 0, pid, epoch) == ErrorCode.none
        real = c.txns._persist

        async def full(meta: Any) -> None:
            raise KafkaLogError("No space left on device")

        c.txns._persist = full  # type: ignore[method-assign]
        assert await end(c, "app", pid, epoch, True) == (
            ErrorCode.coordinator_not_available, -1, -1,
        )  # fmt: skip
        meta = c.txns.transactions["app"]
        assert (meta.state, meta.producer_epoch) == (ONGOING, epoch)
        assert c.manager.get_log("t", 0).log_end_offset == 1  # no marker
        c.txns._persist = real  # type: ignore[method-assign]
        assert await end(c, "app", pid, epoch, True) == (ErrorCode.none, pid, epoch + 1)
        assert markers(c, "t", 0) == [(pid, epoch + 1, True)]

    run(tmp_path, scenario)
