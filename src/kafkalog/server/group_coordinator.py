"""The group coordinator's APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups and OffsetDelete (classic
protocol).

Why: consumers that ``subscribe()`` (and every tool that names a ``--group``) need a
coordinator: membership and rebalances live in ``group.Group``; this module parses each
request version, applies Kafka's checks (session timeout bounds, metadata size, unknown
partitions), makes committed offsets durable in ``__consumer_offsets`` before it answers, and
loads them back at start-up. It runs on the event loop; appends go to worker threads.

FindCoordinator answers for both coordinators (key type 0, groups; 1, transactional ids):
this one broker is both. Refuses: other key types (share groups, KIP-932) and KIP-848 member
epochs (OffsetCommit v9+ is not served).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.group import Group
from kafkalog.coordinator.group_member import GroupState, JoinRequest, wall_clock_ms
from kafkalog.coordinator.group_metadata import restore
from kafkalog.coordinator.offsets_retention import expired_offsets
from kafkalog.coordinator.offsets_store import (
    OFFSETS_TOPIC,
    GroupOffsets,
    StoredGroup,
    append_offset_records,
    drop_staged,
    group_metadata_key,
    group_metadata_value,
    load_offsets,
    offset_commit_key,
    settle,
)
from kafkalog.coordinator.txn_store import TRANSACTION_TOPIC
from kafkalog.errors import KafkaLogError
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.internal_topics import ensure_internal_topic

logger = logging.getLogger("kafkalog.server")

SESSION_CHECK_SECONDS = 0.5

RunInWorker = Callable[..., Awaitable[Any]]


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


class GroupCoordinator:
    """Every group of this broker. Lives on the event loop; ``start`` loads the committed
    offsets and starts the session-expiry check."""

    def __init__(self, ctx: BrokerContext, run: RunInWorker) -> None:
        self.ctx = ctx
        self.run = run
        self.groups: dict[str, Group] = {}
        self.commit_lock = asyncio.Lock()
        # TxnOffsetCommit offsets by (producer id, __consumer_offsets partition), till the marker
        self.pending_transactions: dict[tuple[int, int], GroupOffsets] = {}
        self._expiry: asyncio.Task[None] | None = None
        self._offsets_expiry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        logs = {
            tp.partition: log
            for tp, log in self.ctx.manager.logs().items()
            if tp.topic == OFFSETS_TOPIC
        }
        loaded = await self.run(load_offsets, logs)
        self.pending_transactions = loaded.open_transactions
        for group_id, stored in loaded.groups.items():
            if stored is not None:
                restore(self.group(group_id), stored)
        for group_id, offsets in loaded.committed.items():
            if offsets:  # all of a group's offsets tombstoned: nothing left to load
                self.group(group_id).offsets.update(offsets)
        if loaded.committed:
            logger.info("loaded the committed offsets of %d groups", len(loaded.committed))
        members = sum(len(g.members) for g in self.groups.values())
        if members:
            logger.info("loaded %d members of classic groups", members)
        self._expiry = asyncio.create_task(self._expire_sessions())
        self._offsets_expiry = asyncio.create_task(self._expire_offsets())

    async def stop(self) -> None:
        tasks = [t for t in (self._expiry, self._offsets_expiry) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(SESSION_CHECK_SECONDS)
            for group in list(self.groups.values()):
                for member_id in group.expire_sessions():
                    logger.info("member %s of group %s timed out", member_id, group.group_id)

    async def _expire_offsets(self) -> None:
        """Kafka's offsets-retention check, every ``offsets.retention.check.interval.ms``."""
        while True:
            await asyncio.sleep(self.ctx.settings.offsets_retention_check_interval_ms / 1000)
            try:
                count = await self.expire_offsets(wall_clock_ms())
            except KafkaLogError:
                logger.exception("could not expire old committed offsets; trying again later")
                continue
            if count:
                logger.info("removed %d expired committed offsets", count)

    def complete_transaction(self, producer_id: int, partition: int, commit: bool) -> None:
        """The marker of ``producer_id``'s transaction is in ``__consumer_offsets`` partition
        ``partition``: its offsets count now (COMMIT) or never (ABORT)."""
        staged = self.pending_transactions.pop((producer_id, partition), {})
        if commit:
            for group_id, offsets in staged.items():
                settle(self.group(group_id).offsets, offsets)

    def group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            loop = asyncio.get_running_loop()
            group = Group(
                group_id,
                loop.time,
                self.ctx.settings.initial_rebalance_delay_ms,
                lambda stored: self.store_group(group_id, stored),
            )
            self.groups[group_id] = group
        return group

    async def store_group(self, group_id: str, stored: StoredGroup) -> None:
        """Append ``group_id``'s GroupMetadata record to its ``__consumer_offsets`` partition,
        in order with the group's offset commits."""
        row = (group_metadata_key(group_id), group_metadata_value(stored))
        partitions = self.ctx.settings.offsets_partitions
        async with self.commit_lock:
            await self.run(append_offset_records, self.ctx.manager, group_id, [row], partitions)

    # --- the group's records in __consumer_offsets ---------------------------------------------

    def append_offsets(self, group_id: str, rows: list[tuple[bytes, bytes | None]]) -> int:
        """Write commit records (or tombstones) to the group's ``__consumer_offsets``
        partition (on a worker); the first one's offset."""
        return append_offset_records(
            self.ctx.manager, group_id, rows, self.ctx.settings.offsets_partitions
        )

    async def delete_offsets(
        self, group: Group, tps: list[tuple[str, int]], whole_group: bool = False
    ) -> None:
        """Tombstone ``tps`` of ``group`` in ``__consumer_offsets`` (and its GroupMetadata
        when ``whole_group``), then forget them: a deletion is durable before anyone is told
        (DeleteGroups, OffsetDelete, expiry)."""
        if not tps and not whole_group:
            return
        async with self.commit_lock:
            tombstones: list[tuple[bytes, bytes | None]] = [
                (offset_commit_key(group.group_id, *tp), None) for tp in tps
            ]
            if whole_group:
                tombstones.append((group_metadata_key(group.group_id), None))
            await self.run(self.append_offsets, group.group_id, tombstones)
            for tp in tps:
                group.offsets.pop(tp, None)
                drop_staged(self.pending_transactions.values(), group.group_id, tp)

    async def expire_offsets(self, now_ms: int) -> int:
        """Tombstone every expired offset in ``__consumer_offsets`` and forget it; a group left
        empty with no offsets is removed (Dead), its GroupMetadata tombstoned in the same batch
        (Kafka's GroupMetadataManager.cleanupGroupMetadata). Returns how many offsets expired."""
        retention = self.ctx.settings.offsets_retention_ms
        expired = 0
        for group_id, group in list(self.groups.items()):
            doomed = expired_offsets(group, now_ms, retention)
            dead = (
                not group.members
                and group.state is GroupState.EMPTY
                and set(group.offsets) <= set(doomed)
                and not any(group_id in staged for staged in self.pending_transactions.values())
            )
            await self.delete_offsets(group, doomed, whole_group=dead)
            expired += len(doomed)
            if dead:
                group.state = GroupState.DEAD
                self.groups.pop(group_id, None)
        return expired

    # --- coordinator discovery and membership ---------------------------------------------------

    async def find_coordinator(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        mod = payload_module(ApiKey.FIND_COORDINATOR, version, True)
        node, where = self.ctx.settings.node_id, self.ctx.advertised
        keys = list(body.coordinator_keys) if version >= 4 else [body.key]
        key_type = getattr(body, "key_type", 0)
        code = ErrorCode.none if key_type in (0, 1) else ErrorCode.invalid_request
        message = None if code is ErrorCode.none else f"unknown coordinator key type {key_type}"
        if code is ErrorCode.none:
            # the coordinator's topic is created at the first lookup, and the client asks
            # again meanwhile (Kafka's KafkaApis.getCoordinator)
            topic = OFFSETS_TOPIC if key_type == 0 else TRANSACTION_TOPIC
            if topic not in self.ctx.manager.topics():
                try:
                    await self.run(ensure_internal_topic, self.ctx, topic)
                except KafkaLogError:
                    logger.exception("could not create the internal topic %s", topic)
                code = ErrorCode.coordinator_not_available
        if code is not ErrorCode.none:  # Kafka's Node.noNode
            node, host, port = -1, "", -1
        else:
            host, port = where.host, where.port
        if version >= 4:
            return make(
                mod,
                "FindCoordinatorResponse",
                throttle_time=NO_THROTTLE,
                coordinators=tuple(
                    make(
                        mod,
                        "Coordinator",
                        key=k,
                        node_id=node,
                        host=host,
                        port=port,
                        error_code=code,
                        error_message=message,
                    )
                    for k in keys
                ),
            )
        return make(
            mod,
            "FindCoordinatorResponse",
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            node_id=node,
            host=host,
            port=port,
        )

    async def join_group(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        mod = payload_module(ApiKey.JOIN_GROUP, version, True)
        session = _ms(body.session_timeout)
        rebalance = _ms(body.rebalance_timeout) if version >= 1 else session
        settings = self.ctx.settings
        if not body.group_id:
            result_error: ErrorCode | None = ErrorCode.invalid_group_id
        elif not settings.min_session_timeout_ms <= session <= settings.max_session_timeout_ms:
            result_error = ErrorCode.invalid_session_timeout
        else:
            result_error = None
        if result_error is not None:
            return make(
                mod,
                "JoinGroupResponse",
                throttle_time=NO_THROTTLE,
                error_code=result_error,
                generation_id=-1,
                protocol_type=None,
                protocol_name=None if version >= 7 else "",  # nullable from v7, as Kafka
                leader="",
                member_id=body.member_id,
                members=(),
            )
        result = await self.group(body.group_id).join(
            JoinRequest(
                member_id=body.member_id,
                group_instance_id=getattr(body, "group_instance_id", None),
                client_id=request.client_id or "",
                client_host="/127.0.0.1",
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                protocol_type=body.protocol_type,
                protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
                require_known_member_id=version >= 4,
            )
        )
        return make(
            mod,
            "JoinGroupResponse",
            throttle_time=NO_THROTTLE,
            error_code=result.error,
            generation_id=result.generation,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
            leader=result.leader,
            skip_assignment=False,
            member_id=result.member_id,
            members=tuple(
                make(mod, "JoinGroupResponseMember", member_id=m, group_instance_id=i, metadata=md)
                for m, i, md in result.members
            ),
        )

    async def sync_group(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        mod = payload_module(ApiKey.SYNC_GROUP, version, True)
        group = self.groups.get(body.group_id)
        if group is None:
            return make(
                mod,
                "SyncGroupResponse",
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.unknown_member_id,
                assignment=b"",
            )
        result = await group.sync(
            body.member_id,
            body.generation_id,
            getattr(body, "group_instance_id", None),
            {a.member_id: bytes(a.assignment) for a in body.assignments},
        )
        return make(
            mod,
            "SyncGroupResponse",
            throttle_time=NO_THROTTLE,
            error_code=result.error,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            assignment=result.assignment,
        )

    async def heartbeat(self, request: Request) -> Any:
        body = request.body
        mod = payload_module(ApiKey.HEARTBEAT, request.api_version, True)
        group = self.groups.get(body.group_id)
        code = (
            ErrorCode.unknown_member_id
            if group is None
            else group.heartbeat(
                body.member_id, body.generation_id, getattr(body, "group_instance_id", None)
            )
        )
        return make(mod, "HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=code)

    async def leave_group(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        mod = payload_module(ApiKey.LEAVE_GROUP, version, True)
        leaving = (
            [(m.member_id, m.group_instance_id) for m in body.members]
            if version >= 3
            else [(body.member_id, None)]
        )
        group = self.groups.get(body.group_id)
        codes = [
            ErrorCode.unknown_member_id if group is None else group.leave(m, i) for m, i in leaving
        ]
        top = codes[0] if version < 3 and codes else ErrorCode.none
        return make(
            mod,
            "LeaveGroupResponse",
            throttle_time=NO_THROTTLE,
            error_code=top,
            members=tuple(
                make(mod, "MemberResponse", member_id=m, group_instance_id=i, error_code=c)
                for (m, i), c in zip(leaving, codes, strict=True)
            )
            if version >= 3
            else (),
        )
