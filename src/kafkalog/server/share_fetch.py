"""ShareFetch and ShareAcknowledge (KIP-932): a share group member takes records under a lock
and settles them, on share sessions.

Why: a KafkaShareConsumer opens a share session with a ShareFetch of epoch 0 naming its
partitions, then sends the next epoch each time, adding and forgetting partitions and
carrying the acknowledgements of what it took (Kafka's ShareSessionCache and
SharePartitionManager); epoch -1 settles and closes. Acknowledgements are applied and made
durable before the fetch reads. A fetch reads each partition's log from the share-partition's
next offset to offer, acquires the available records of the batches found (whole batches,
up to ``max_records``), and answers with those batches and the acquired ranges: the client
delivers only what it acquired. Control batches, and with ``share.isolation.level``
read_committed aborted ones, are never acquired: they are gaps. With nothing to give, the
fetch waits up to ``max_wait_ms`` for an append or a record put back.

Refuses: a principal without READ on the group (GROUP_AUTHORIZATION_FAILED) or the topic
(TOPIC_AUTHORIZATION_FAILED); acknowledgements in the request that opens a session
(INVALID_REQUEST); a session epoch out of order (INVALID_SHARE_SESSION_EPOCH) or unknown
(SHARE_SESSION_NOT_FOUND); more than ``group.share.max.share.sessions`` sessions
(SHARE_SESSION_LIMIT_REACHED).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkalog.coordinator.share_partition import AcknowledgeType, AcquiredRecords
from kafkalog.coordinator.share_state import SharePartitionKey
from kafkalog.errors import KafkaLogError
from kafkalog.log.log import Log
from kafkalog.protocol.api_keys import ApiKey
from kafkalog.protocol.error_codes import error_code
from kafkalog.protocol.wire import Request, make, payload_module
from kafkalog.records.batch import decode_header
from kafkalog.server.authorizer import AclOperation, ResourceType
from kafkalog.server.consumer_group_apis import _topic_id, _wire_id, topic_names
from kafkalog.server.context import NO_THROTTLE, BrokerContext
from kafkalog.server.purgatory import AppendSignal, Watch
from kafkalog.types import IsolationLevel

if TYPE_CHECKING:
    from kafkalog.coordinator.share_partitions import SharePartitions

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
TopicPartition = tuple[str, int]  # (topic id, partition)


@dataclass(slots=True)
class ShareSession:
    epoch: int
    partitions: set[TopicPartition] = field(default_factory=set)
    connection_id: str = ""


class ShareSessionCache:
    """Share sessions by (group, member) (Kafka's ShareSessionCache), and by the connection
    that opened them: every connection's close asks, so it must not walk every session."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[str, set[tuple[str, str]]] = {}

    def open(self, key: tuple[str, str], session: ShareSession) -> None:
        self.remove(key)
        self.sessions[key] = session
        self._by_connection.setdefault(session.connection_id, set()).add(key)

    def remove(self, key: tuple[str, str]) -> None:
        session = self.sessions.pop(key, None)
        if session is not None:
            keys = self._by_connection.get(session.connection_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[session.connection_id]

    def member_gone(self, group_id: str, member_id: str) -> None:
        self.remove((group_id, member_id))

    def on_connection(self, connection_id: str) -> list[tuple[str, str]]:
        """The (group, member) of each session opened on the connection, removed."""
        gone = sorted(self._by_connection.pop(connection_id, ()))
        for key in gone:
            self.sessions.pop(key, None)
        return gone


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass
class _Read:
    """One partition's read: its bytes, where each batch lies in them (base offset, last
    offset, start, end), the (first, last) offsets of the batches that may be acquired, and
    an error."""

    code: ErrorCode = ErrorCode.none
    records: bytes = b""
    spans: list[tuple[int, int, int, int]] = field(default_factory=list)
    batches: list[tuple[int, int]] = field(default_factory=list)

    def covering(self, acquired: list[AcquiredRecords]) -> bytes:
        """The batches from the first acquired offset's to the last one's: a client is sent
        what it acquired, not the rest of the read (Kafka slices the same way)."""
        first, last = acquired[0].first_offset, acquired[-1].last_offset
        inside = [(s, e) for base, end, s, e in self.spans if end >= first and base <= last]
        return self.records[inside[0][0] : inside[-1][1]] if inside else b""


def _spans(data: bytes) -> list[tuple[int, int, int, int, bool, bool, int]]:
    """Each whole batch in ``data``: base offset, last offset, start, end, control,
    transactional, producer id."""
    out = []
    view = memoryview(data)
    position = 0
    while position + 61 <= len(data):
        header = decode_header(view, position)
        end = position + header.size_in_bytes
        if end > len(data):
            break
        out.append((header.base_offset, header.last_offset, position, end, header.is_control,
                    header.is_transactional, header.producer_id))  # fmt: skip
        position = end
    return out


def _acquirable(
    spans: list[tuple[int, int, int, int, bool, bool, int]],
    aborted: Iterable[tuple[int, int]] | None,
) -> list[tuple[int, int]]:
    """The (first, last) offsets of the data batches; with ``aborted`` (read committed:
    (producer id, first offset) of each aborted transaction in range) the aborted ones are
    left out, as a read_committed consumer leaves them out."""
    pending = sorted(aborted or (), key=lambda a: a[1])
    aborting: set[int] = set()
    out = []
    for base, last, _, _, control, transactional, producer_id in spans:
        while pending and pending[0][1] <= last:
            aborting.add(pending.pop(0)[0])
        if control:
            aborting.discard(producer_id)
            continue
        if transactional and producer_id in aborting:
            continue
        out.append((base, last))
    return out


def _read(log: Log, offset: int, max_bytes: int, isolation: IsolationLevel) -> _Read:
    try:
        info = log.read(offset, max_bytes, min_one_message=True, isolation=isolation)
    except KafkaLogError as err:
        return _Read(error_code(err))
    if info.records is None or not info.records.size:
        return _Read()
    data = info.records.read()
    aborted = None
    if isolation is IsolationLevel.READ_COMMITTED:
        aborted = [(t.producer_id, t.first_offset) for t in info.aborted_transactions or ()]
    spans = _spans(data)
    return _Read(records=data, spans=[s[:4] for s in spans], batches=_acquirable(spans, aborted))


@dataclass
class _PartitionAnswer:
    code: ErrorCode = ErrorCode.none
    ack_code: ErrorCode | None = None
    records: bytes = b""
    acquired: list[AcquiredRecords] = field(default_factory=list)


class ShareFetchHandler:
    """ShareFetch and ShareAcknowledge over the broker's share-partitions, on the loop."""

    def __init__(
        self,
        ctx: BrokerContext,
        partitions: SharePartitions,
        run: Callable[..., Any],
        signal: Callable[[], AppendSignal | None],
        max_sessions: int,
    ) -> None:
        self.ctx = ctx
        self.partitions = partitions
        self.run = run
        self.signal = signal
        self.cache = ShareSessionCache(max_sessions)
        partitions.groups.on_member_gone.append(self.cache.member_gone)

    def _names(self) -> Mapping[str, str]:
        return topic_names(self.ctx)

    def connection_closed(self, connection_id: str) -> None:
        """Sessions end with their connection; what their members hold goes back at once
        (Kafka's ShareSessionCache disconnect listener, then onMemberLeave)."""
        for group_id, member_id in self.cache.on_connection(connection_id):
            self.partitions.release_member(group_id, member_id)

    async def _close(self, group_id: str, member_id: str, session: ShareSession) -> None:
        """A final request's end: the member's acquired records in the session's partitions
        go back (Kafka's SharePartitionManager.releaseSession)."""
        keys = [(group_id, t, p) for t, p in session.partitions]
        await self.partitions.release(member_id, keys)

    def _session(
        self, group_id: str, member_id: str, epoch: int, topics: Any, forgotten: Any,
        connection_id: str = "",
    ) -> tuple[ErrorCode, ShareSession | None]:  # fmt: skip
        """The session this request continues (or opens, or closes)."""
        key = (group_id, member_id)
        asked = {(_topic_id(t.topic_id), p.partition_index) for t in topics for p in t.partitions}
        if epoch == INITIAL_EPOCH:
            sessions = self.cache.sessions
            if key not in sessions and len(sessions) >= self.cache.max_sessions:
                return ErrorCode.share_session_limit_reached, None
            opened = ShareSession(_next_epoch(epoch), asked, connection_id)
            self.cache.open(key, opened)
            return ErrorCode.none, opened
        session = self.cache.sessions.get(key)
        if session is None:
            return ErrorCode.share_session_not_found, None
        if epoch == FINAL_EPOCH:
            self.cache.remove(key)
            return ErrorCode.none, session
        if epoch != session.epoch:
            return ErrorCode.invalid_share_session_epoch, None
        session.epoch = _next_epoch(epoch)
        session.partitions |= asked
        for t in forgotten or ():
            session.partitions -= {(_topic_id(t.topic_id), p) for p in t.partitions}
        return ErrorCode.none, session

    async def _acknowledge(
        self, request: Request, group_id: str, member_id: str, topics: Any,
        names: Mapping[str, str], out: dict[TopicPartition, _PartitionAnswer],
    ) -> None:  # fmt: skip
        """Apply each partition's acknowledgements, then write the changed states; a state that
        cannot be written is rolled back and its partition answered with the error (the
        member still holds the records, and may acknowledge them again)."""
        changed: list[SharePartitionKey] = []
        saved: dict[SharePartitionKey, Any] = {}  # the states before, to roll back
        for t in topics:
            topic_id = _topic_id(t.topic_id)
            for p in t.partitions:
                if not p.acknowledgement_batches:
                    continue
                answer = out.setdefault((topic_id, p.partition_index), _PartitionAnswer())
                key = (group_id, topic_id, p.partition_index)
                share_partition = self.partitions.partitions.get(key)
                if topic_id not in names:
                    answer.ack_code = ErrorCode.unknown_topic_id
                    continue
                if not self.ctx.allowed(request, AclOperation.READ, ResourceType.TOPIC,
                                        names[topic_id]):  # fmt: skip
                    answer.ack_code = ErrorCode.topic_authorization_failed
                    continue
                if share_partition is None:
                    answer.ack_code = ErrorCode.invalid_record_state
                    continue
                batches = [
                    (
                        b.first_offset,
                        b.last_offset,
                        [AcknowledgeType(t) for t in b.acknowledge_types],
                    )
                    for b in p.acknowledgement_batches
                    if all(0 <= x <= 3 for x in b.acknowledge_types)
                ]
                if len(batches) != len(p.acknowledgement_batches):
                    answer.ack_code = ErrorCode.invalid_request
                    continue
                saved.setdefault(key, share_partition.save())
                answer.ack_code = share_partition.acknowledge(member_id, batches)
                if answer.ack_code is ErrorCode.none:
                    changed.append(key)
        for key in sorted(set(changed)):
            try:
                await self.partitions.persist(key)
            except KafkaLogError as err:
                self.partitions.partitions[key].restore(saved[key])
                out[(key[1], key[2])].ack_code = error_code(err)

    async def _acquire(
        self, group_id: str, member_id: str, wanted: list[TopicPartition],
        names: Mapping[str, str], max_bytes: int, max_records: int,
        out: dict[TopicPartition, _PartitionAnswer],
    ) -> int:  # fmt: skip
        """One pass over the session's partitions; how many records were acquired."""
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self.partitions.group_setting(group_id, "share.isolation.level") == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        got = 0
        for topic_id, index in wanted:
            answer = out.setdefault((topic_id, index), _PartitionAnswer())
            if answer.code is not ErrorCode.none:
                continue
            try:
                log = self.ctx.manager.get_log(names[topic_id], index)
            except KafkaLogError as err:
                answer.code = error_code(err)
                continue
            # every partition of the session has its state from the first fetch on
            share_partition = await self.partitions.get(
                (group_id, topic_id, index), names[topic_id], log
            )
            if got >= max_records or max_bytes <= 0:
                continue
            read = await self.run(
                _read, log, share_partition.next_fetch_offset(), max_bytes, isolation
            )
            if read.code is not ErrorCode.none:
                answer.code = read.code
                continue
            acquired = share_partition.acquire(
                member_id, read.batches, max_records - got, self.partitions.clock_ms()
            )
            if acquired:
                answer.records, answer.acquired = read.covering(acquired), acquired
                got += sum(a.last_offset - a.first_offset + 1 for a in acquired)
                max_bytes -= len(answer.records)
        return got

    async def share_fetch(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        mod = payload_module(ApiKey.SHARE_FETCH, version, True)
        group_id, member_id = body.group_id or "", body.member_id or ""

        def top(code: ErrorCode, message: str | None = None) -> Any:
            return self._fetch_response(mod, group_id, code, message, {})

        if not group_id or not member_id:
            return top(ErrorCode.invalid_request, "group id and member id must be set")
        if not self.ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, group_id):
            return top(ErrorCode.group_authorization_failed)
        epoch = body.share_session_epoch
        has_acks = any(p.acknowledgement_batches for t in body.topics for p in t.partitions)
        if epoch == INITIAL_EPOCH and has_acks:
            return top(
                ErrorCode.invalid_request, "Acknowledge data present in Initial Fetch Request"
            )
        code, session = self._session(
            group_id, member_id, epoch, body.topics, body.forgotten_topics_data,
            request.connection_id,
        )  # fmt: skip
        if session is None:
            return top(code)
        names = self._names()
        out: dict[TopicPartition, _PartitionAnswer] = {}
        await self._acknowledge(request, group_id, member_id, body.topics, names, out)
        if epoch == FINAL_EPOCH:
            await self._close(group_id, member_id, session)
            return self._fetch_response(mod, group_id, ErrorCode.none, None, out)
        wanted = []
        for topic_id, index in sorted(session.partitions):
            if topic_id not in names:
                out.setdefault(
                    (topic_id, index), _PartitionAnswer()
                ).code = ErrorCode.unknown_topic_id
            elif not self.ctx.allowed(request, AclOperation.READ, ResourceType.TOPIC,
                                      names[topic_id]):  # fmt: skip
                out.setdefault(
                    (topic_id, index), _PartitionAnswer()
                ).code = ErrorCode.topic_authorization_failed
            else:
                wanted.append((topic_id, index))
        max_records = body.max_records if version >= 1 and body.max_records > 0 else 500
        await self._fetch_or_wait(group_id, member_id, wanted, names, body, max_records, out)
        return self._fetch_response(mod, group_id, ErrorCode.none, None, out)

    async def _fetch_or_wait(
        self, group_id: str, member_id: str, wanted: list[TopicPartition],
        names: Mapping[str, str], body: Any, max_records: int,
        out: dict[TopicPartition, _PartitionAnswer],
    ) -> None:  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, int(body.max_wait.total_seconds() * 1000)) / 1000
        signal = self.signal()
        watch = Watch()
        if signal is not None:
            signal.watch(watch, [(names[t], p) for t, p in wanted])
        try:
            while True:
                if signal is not None:
                    signal.rearm(watch)
                released = self.partitions.released()
                got = await self._acquire(
                    group_id, member_id, wanted, names, body.max_bytes, max_records, out
                )
                remaining = deadline - loop.time()
                if got or remaining <= 0 or not wanted:
                    return
                waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(released.wait())]
                if signal is not None:
                    waits.append(signal.waiting(watch))
                try:
                    await asyncio.wait(
                        waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waits[0].cancel()
        finally:
            if signal is not None:
                signal.forget(watch)

    def _fetch_response(
        self, mod: Any, group_id: str, code: ErrorCode, message: str | None,
        out: dict[TopicPartition, _PartitionAnswer],
    ) -> Any:  # fmt: skip
        node = self.ctx.settings.node_id
        by_topic: dict[str, list[Any]] = {}
        for (topic_id, index), a in sorted(out.items()):
            by_topic.setdefault(topic_id, []).append(make(
                mod, "PartitionData", partition_index=index, error_code=a.code,
                error_message=None,
                acknowledge_error_code=(a.ack_code or ErrorCode.none).value,
                acknowledge_error_message=None,
                current_leader=make(mod, "LeaderIdAndEpoch", leader_id=node, leader_epoch=0),
                records=a.records,
                acquired_records=tuple(
                    make(mod, "AcquiredRecords", first_offset=r.first_offset,
                         last_offset=r.last_offset, delivery_count=r.delivery_count)
                    for r in a.acquired
                ),
            ))  # fmt: skip
        lock_ms = self.partitions.lock_duration_ms(group_id) if group_id else 0
        return make(
            mod, "ShareFetchResponse", throttle_time=NO_THROTTLE, error_code=code,
            error_message=message,
            acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
            responses=tuple(
                make(mod, "ShareFetchableTopicResponse", topic_id=_wire_id(t), partitions=tuple(ps))
                for t, ps in sorted(by_topic.items())
            ),
            node_endpoints=(),
        )  # fmt: skip

    async def share_acknowledge(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        mod = payload_module(ApiKey.SHARE_ACKNOWLEDGE, version, True)
        group_id, member_id = body.group_id or "", body.member_id or ""
        out: dict[TopicPartition, _PartitionAnswer] = {}
        code = ErrorCode.none
        if not group_id or not member_id:
            code = ErrorCode.invalid_request
        elif not self.ctx.allowed(request, AclOperation.READ, ResourceType.GROUP, group_id):
            code = ErrorCode.group_authorization_failed
        elif body.share_session_epoch == INITIAL_EPOCH:
            code = ErrorCode.invalid_share_session_epoch
        else:
            code, session = self._session(group_id, member_id, body.share_session_epoch, (), ())
            if session is not None:
                names = self._names()
                await self._acknowledge(request, group_id, member_id, body.topics, names, out)
                if body.share_session_epoch == FINAL_EPOCH:
                    await self._close(group_id, member_id, session)
        node = self.ctx.settings.node_id
        by_topic: dict[str, list[Any]] = {}
        for (topic_id, index), a in sorted(out.items()):
            by_topic.setdefault(topic_id, []).append(make(
                mod, "PartitionData", partition_index=index,
                error_code=a.ack_code or ErrorCode.none, error_message=None,
                current_leader=make(mod, "LeaderIdAndEpoch", leader_id=node, leader_epoch=0),
            ))  # fmt: skip
        extra: dict[str, Any] = {}
        if version >= 2:
            lock_ms = self.partitions.lock_duration_ms(group_id) if group_id else 0
            extra["acquisition_lock_timeout"] = datetime.timedelta(milliseconds=lock_ms)
        return make(
            mod, "ShareAcknowledgeResponse", throttle_time=NO_THROTTLE, error_code=code,
            error_message=None,
            responses=tuple(
                make(mod, "ShareAcknowledgeTopicResponse", topic_id=_wire_id(t),
                     partitions=tuple(ps))
                for t, ps in sorted(by_topic.items())
            ),
            node_endpoints=(), **extra,
        )  # fmt: skip
